package proxy

import (
	"context"
	stdtls "crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/chaperone-dev/chaperone/event"
)

const (
	// rejectMemory bounds how many (session, host) pairs the proxy
	// remembers as refusing its CA; the least recently used is forgotten.
	rejectMemory = 4096
	// silentWindow is how close together two silent closes must be for a
	// host to count as refusing the CA.
	silentWindow = time.Minute
	// alertSilentClose is the tls event's alert for a client that refused
	// the certificate by closing without a word (Node).
	alertSilentClose = "silent_close"
	// rejectPassReason is the reason of a passthrough of a client that
	// refuses the CA when no rule gave one.
	rejectPassReason = "the client rejects Chaperone's CA: passed through uninspected"
)

// rejectAlerts are the alerts with which a client refuses a certificate
// it does not trust, by value, with their names in RFC 8446.
var rejectAlerts = [...]struct {
	code uint8
	name string
}{
	{42, "bad_certificate"},
	{43, "unsupported_certificate"},
	{45, "certificate_expired"},
	{46, "certificate_unknown"},
	{48, "unknown_ca"},
}

// rejectAlertName is the name of alert code when it refuses a certificate,
// else "".
func rejectAlertName(code uint8) string {
	for _, a := range rejectAlerts {
		if a.code == code {
			return a.name
		}
	}
	return ""
}

// caRejections remembers, per session and host, the clients that refused
// Chaperone's certificate, and counts silent closes in a row. It is safe
// for concurrent use.
type caRejections struct {
	mu  sync.Mutex
	lru *simplelru.LRU[rejectKey, rejectState]
}

type rejectKey struct{ session, host string }

type rejectState struct {
	rejected bool
	silent   int       // silent closes in a row
	last     time.Time // when the last of them was
}

func newCARejections() *caRejections {
	l, err := simplelru.NewLRU[rejectKey, rejectState](rejectMemory, nil)
	if err != nil {
		panic("proxy: " + err.Error()) // only for a size below 1
	}
	return &caRejections{lru: l}
}

// rejects reports whether a client of session refused the CA for host.
func (r *caRejections) rejects(session, host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.lru.Get(rejectKey{session, host})
	return ok && s.rejected
}

// reject remembers that a client of session refused the CA for host.
func (r *caRejections) reject(session, host string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lru.Add(rejectKey{session, host}, rejectState{rejected: true})
}

// silentClose counts a client of session that closed its connection to
// host right after the handshake (or during it) without a word; true when
// it is the second in a row within silentWindow, and the host is from now
// on remembered as refusing the CA.
func (r *caRejections) silentClose(session, host string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := rejectKey{session, host}
	s, _ := r.lru.Get(k)
	if s.silent > 0 && now.Sub(s.last) <= silentWindow {
		s.silent++
	} else {
		s.silent = 1
	}
	s.last = now
	became := s.silent >= 2 && !s.rejected
	if became {
		s.rejected = true
	}
	r.lru.Add(k, s)
	return became
}

// served notes that a client of session spoke over an intercepted
// connection to host: silent closes are no longer in a row.
func (r *caRejections) served(session, host string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := rejectKey{session, host}
	if s, ok := r.lru.Peek(k); ok && s.silent > 0 {
		s.silent = 0
		r.lru.Add(k, s)
	}
}

// forget drops what is remembered of session.
func (r *caRejections) forget(session string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.lru.Keys() {
		if k.session == session {
			r.lru.Remove(k)
		}
	}
}

// clientWatch is the client's side of an intercepted connection as the
// TLS server reads it, watched until the client is known to have spoken.
// During the handshake it looks for an alert sent in the clear: a TLS 1.3
// client (OpenSSL) that refuses the certificate sends its alert
// unencrypted, which Go's server reports only as "bad record MAC". After
// the handshake it tells a client that sends an application_data record
// of its own from one that closes without a word: the record layer is
// read, since Go's server may have read the first request with the
// client's Finished.
type clientWatch struct {
	net.Conn
	sniff alertSniffer
	// After the handshake (set before the connection is handed on):
	// spoke is called once, with whether the client sent a record of
	// data or closed without one; handshakeData is how many
	// application_data records its handshake sent (TLS 1.3's Finished).
	handshook     bool
	handshakeData int
	spoke         func(bool)
}

func (w *clientWatch) Read(b []byte) (int, error) {
	n, err := w.Conn.Read(b)
	if w.handshook && w.spoke == nil {
		return n, err
	}
	w.sniff.feed(b[:n])
	if w.handshook {
		w.decide(err != nil && closedSilently(err))
	}
	return n, err
}

// decide calls spoke once the client is known to have sent data, or to
// have closed (closed) without.
func (w *clientWatch) decide(closed bool) {
	var spoke bool
	switch {
	case w.sniff.data > w.handshakeData:
		spoke = true
	case w.sniff.done && !w.sniff.found:
		spoke = true // not records: not a silent client either
	case !closed:
		return
	}
	f := w.spoke
	w.spoke = nil
	f(spoke)
}

// rejection tells why a client's handshake failed, err, when it refused
// the certificate: the name of the alert it refused it with. silent means
// it closed without a word, which is not enough on its own.
func rejection(err error, w *clientWatch) (alert string, silent bool) {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		// crypto/tls's alert type is its own; its text is AlertError's.
		for _, a := range rejectAlerts {
			if oe.Err.Error() == stdtls.AlertError(a.code).Error() {
				return a.name, false
			}
		}
		return "", false
	}
	if w.sniff.found {
		return rejectAlertName(w.sniff.desc), false
	}
	return "", closedSilently(err)
}

// closedSilently reports whether err says the client closed the
// connection, at a record boundary or not, or reset it.
func closedSilently(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// clientRejected publishes the tls event of a client that refused the
// certificate on the connection of e, the connection's tls event, with
// alert, remembers it, and decides it as later connections to the host
// will be: their fate is the policy's (allow: passed through uninspected;
// deny: refused).
func (p *Proxy) clientRejected(ctx context.Context, t *tunnel, e *event.Event, alert string) {
	p.rejections.reject(t.session, rejectHostOf(t))
	re := &event.Event{Time: p.now(), Kind: event.KindTLS, Session: t.session, Process: t.process, TLS: &event.TLS{
		ServerName: e.TLS.ServerName, ALPN: e.TLS.ALPN, Version: e.TLS.Version, Intercepted: true,
		ClientRejected: true, Alert: alert, ClientRejectsCA: true,
	}}
	if t.denied != nil {
		re.Verdict = *t.denied
	} else {
		re.Verdict = p.decide(ctx, re)
	}
	p.publish(re)
}

// handshakeFailed handles a client's failed handshake on an intercepted
// connection: a refusal of the certificate is a tls event, a silent close
// only the second in a row.
func (p *Proxy) handshakeFailed(ctx context.Context, t *tunnel, e *event.Event, w *clientWatch, err error) {
	alert, silent := rejection(err, w)
	if silent && p.rejections.silentClose(t.session, rejectHostOf(t), p.now()) {
		alert = alertSilentClose
	}
	if alert == "" {
		p.log.Debug("proxy: client handshake failed", "session", t.session, "host", t.host, "err", err)
		return
	}
	p.clientRejected(ctx, t, e, alert)
}

// watchClient arms w, whose handshake on conn is over, to tell whether
// the client speaks or closes without a word (Node, which does not trust
// the certificate, completes a TLS 1.2 handshake and closes).
func (p *Proxy) watchClient(ctx context.Context, t *tunnel, e *event.Event, w *clientWatch, conn *stdtls.Conn) {
	w.handshook = true
	if conn.ConnectionState().Version == stdtls.VersionTLS13 {
		w.handshakeData = 1
	}
	w.spoke = func(spoke bool) {
		if spoke {
			p.rejections.served(t.session, rejectHostOf(t))
		} else if p.rejections.silentClose(t.session, rejectHostOf(t), p.now()) {
			p.clientRejected(ctx, t, e, alertSilentClose)
		}
	}
	w.decide(false)
}

// rejectHostOf is the host a tunnel's refusals are remembered for: its
// name, else (TLS without SNI to an address) its destination address.
func rejectHostOf(t *tunnel) string {
	if t.host == "" && t.dst.IsValid() {
		return t.dst.Addr().Unmap().String()
	}
	return t.host
}
