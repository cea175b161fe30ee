package proxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"github.com/chaperone-dev/chaperone/proxy/internal/reqctx"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/rewrite"
)

// serveInner handles every request decrypted from (or read in plain from)
// a tunnel.
func (p *Proxy) serveInner(w http.ResponseWriter, r *http.Request) {
	t := tunnelFrom(r.Context())
	if t == nil { // cannot happen: every tunnel's connection carries it
		writeText(w, http.StatusInternalServerError, "chaperone: request without a tunnel\n")
		return
	}
	p.forward(w, r, t)
}

// exchange is one request's event, the writer that publishes it once the
// status is known, and the parts of the outgoing request and response
// copy. The event is an allocation of its own, since it outlives the
// request (the sinks hold it); the rest, most of the bytes, goes back to
// Proxy.exchanges after a plain exchange (recycle).
type exchange struct {
	ev   *event.Event // its HTTP is http
	http *event.HTTP
	sw   statusWriter

	out http.Request // the outgoing request, to h1.Transport
	url url.URL      // the outgoing request's
	// pathSecret: the URL's path holds a secret; events show it as
	// redactedPath.
	pathSecret bool
	octx       reqctx.Values // the outgoing request's context, over a reqctx.Context, to http.Transport
	body       guardedBody
	trace      httptrace.ClientTrace
	fw         flushWriter

	mu     sync.Mutex // orders 1xx responses before RoundTrip's return
	rtDone bool

	// The rewrite stage's, for sessions with rewrites.
	rw      *Rewrites
	llm     *llmCall         // the request is an LLM API call
	plain   []byte           // the request body, decoded, when read whole
	enc     rewrite.Encoding // its Content-Encoding
	sendLen int64            // when the body was read: the length of what is sent (-1: unknown); else 0
	ch      *event.Changes   // what was changed
	found   []secretAt       // the secrets found in the request, and where
	stream  *bodyScan        // the body, too large to hold, checked as it is sent
	socket  socketHandler    // an upgrade to WebSocket whose messages are inspected

	sharedHeader bool // the request's header map is the event's
	plain1       bool // sent by roundTrip on an HTTP/1.1 upstream connection
	headChanged  bool // the upstream's response header was changed: not sent verbatim
}

// forward decides a request and, if allowed, sends it upstream. Its frame,
// and roundTrip's, stay small: on HTTP/2 each request runs on a new
// goroutine, whose stack is copied each time it has to grow, and the
// transport's calls below them are deep.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, t *tunnel) {
	x := p.newExchange(r, t)
	if !p.admit(w, r, t, x) {
		return
	}
	x.sw = statusWriter{ResponseWriter: w, p: p, ev: x.ev}
	abort := false
	if _, ok := r.Header["Upgrade"]; ok {
		if x.socket != nil { // a WebSocket, whose messages are inspected
			abort = p.serveSocket(x, r, x.socket)
		} else {
			// Other protocol switches are rare and long:
			// ReverseProxy's upgrade handling serves them.
			p.serveUpgrade(x, r)
		}
	} else {
		abort = p.roundTrip(x, r)
	}
	p.finish(x, r)
	if abort {
		// The status is sent: all that is left is to abort the response
		// so the client sees it truncated.
		panic(http.ErrAbortHandler)
	}
	p.recycle(x)
}

// serveUpgrade serves a request that asks to switch protocols. Its event
// is published at the switch (101), or once the response has ended.
func (p *Proxy) serveUpgrade(x *exchange, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			// ReverseProxy aborts a response whose body copy failed.
			if x.http.Error == "" {
				if x.sw.clientGone || r.Context().Err() != nil {
					x.http.Error = clientClosed(r)
				} else {
					x.http.Error = "upstream body failed"
				}
			}
			p.finish(x, r)
			panic(v)
		}
	}()
	p.rp.ServeHTTP(&x.sw, r)
}

// finish publishes the http event of an exchange whose response has ended
// (unless published at a protocol switch), then its llm event.
func (p *Proxy) finish(x *exchange, r *http.Request) {
	sw := &x.sw
	if x.stream != nil {
		x.settleStream()
	}
	if !sw.published {
		if sw.status == 0 { // the handler ended without a status
			sw.status = http.StatusBadGateway
			if x.http.Error == "" && r.Context().Err() != nil {
				x.http.Error = clientClosed(r)
			}
		}
		sw.publish()
	}
	sw.ResponseWriter = nil // the event may outlive the request; the writer must not
	if x.llm != nil {
		p.finishLLM(x, sw.status)
	}
}

// clientClosed is the error of an exchange whose client went away.
func clientClosed(r *http.Request) string {
	if r.ProtoMajor == 2 {
		return "client closed the stream"
	}
	return "client closed the connection"
}

// httpEvent is an http event and its HTTP part, in one allocation.
type httpEvent struct {
	ev   event.Event
	http event.HTTP
}

// newExchange starts the exchange of r and its http event.
func (p *Proxy) newExchange(r *http.Request, t *tunnel) *exchange {
	x, _ := p.exchanges.Get().(*exchange)
	if x == nil {
		x = new(exchange)
	}
	he := &httpEvent{}
	x.ev, x.http = &he.ev, &he.http
	e := x.ev
	e.Time = p.now()
	e.Kind = event.KindHTTP
	e.Session = t.session
	e.Process = t.process
	e.HTTP = x.http
	x.url = *r.URL
	if x.url.Host == "" {
		x.url.Scheme, x.url.Host = t.scheme, t.authority
	}
	h := x.http
	h.Method = r.Method
	h.URL = RedactURL(&x.url)
	h.Host = r.Host
	h.Proto = r.Proto
	h.Upgrade = upgradeOf(r.Header)
	if h.Upgrade != "" && r.ProtoMajor == 2 {
		h.Method = http.MethodConnect // RFC 8441's extended CONNECT
	}
	h.Header, x.sharedHeader = policyHeader(r.Header)
	return x
}

// recycle puts x back in p.exchanges once forward is done with it, if
// nothing can still reach it: a request without a body (no goroutine
// writing it upstream, nothing scanned as it streams) sent on an HTTP/1.1
// upstream connection (no http.Transport holding the outgoing request),
// no LLM call or WebSocket (their events and relays refer to x), and no
// timer armed to flush the response's header. Its event is not x's: the
// sinks keep it.
func (p *Proxy) recycle(x *exchange) {
	if !x.plain1 || x.out.Body != nil || x.stream != nil || x.llm != nil || x.socket != nil || x.fw.t != nil {
		return
	}
	*x = exchange{}
	p.exchanges.Put(x)
}

// ownHeader gives r a header of its own before it is changed, if it shares
// its map with the event (which must show the header as it came).
func (x *exchange) ownHeader(r *http.Request) {
	if x.sharedHeader {
		r.Header = r.Header.Clone()
		x.sharedHeader = false
	}
}

// admit decides the events of r (its llm event first, when it is an LLM
// API call, then its http event) and answers a refusal; true means the
// request goes upstream, with the session's rewrites made.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, t *tunnel, x *exchange) bool {
	e := x.ev
	switch size := headerSize(r); {
	case size > p.maxHeaderBytes:
		p.refuseHeaderTooLarge(w, e, size)
		return false
	case t.denied != nil:
		p.refuse(w, e, http.StatusForbidden, *t.denied)
		return false
	case r.Method == http.MethodConnect:
		p.refuse(w, e, http.StatusMethodNotAllowed, proxyVerdict(ruleNestedConnect, "CONNECT inside a tunnel"))
		return false
	case p.relays(t, r):
		// In absolute form for another host: decided and sent as a
		// request through the relay at the tunnel's far end.
		p.forwardRelayed(w, r, t)
		return false
	case !p.hostMatches(t, r.Host):
		p.refuse(w, e, http.StatusMisdirectedRequest, proxyVerdict(ruleDomainFronting,
			"request for "+r.Host+" inside a tunnel to "+t.authority))
		return false
	case !p.sessions.Load().has(t.session):
		p.refuse(w, e, http.StatusForbidden, proxyVerdict(ruleUnknownSession, "the session has ended"))
		return false
	}
	if p.rewrites != nil {
		if rw := p.rewrites(t.session); rw != nil && r.Header["Upgrade"] != nil {
			// A protocol switch's header and query are searched. One to an
			// LLM API over WebSocket is rewritten as an LLM call is, and
			// its messages inspected (websocket_llm.go); any other
			// WebSocket's messages are decided and recorded
			// (websocket_msg.go); no other protocol's are read.
			x.rw = rw
			api, isLLM := p.llmSocketFor(x, r)
			x.scanHead(r, api, isLLM)
			x.http.Secrets = x.secretIDs()
			if !isLLM {
				x.rw = nil
				if isWebSocket(r.Header) {
					p.msgSocketFor(x, r, rw)
				}
			}
		} else if x.rw = rw; rw != nil && !p.prepare(w, r, x) {
			return false
		}
	}
	if x.socket == nil && isWebSocket(r.Header) {
		// Every other WebSocket's messages are decided and recorded too
		// (websocket_msg.go).
		p.msgSocketFor(x, r, nil)
	}
	e.Verdict = p.decide(r.Context(), e)
	if !e.Verdict.Allowed() {
		// Say where the request's secrets are, whichever rule refused it.
		e.Verdict.Reason = withPlaces(e.Verdict.Reason, x.found)
		p.refuse(w, e, http.StatusForbidden, e.Verdict)
		if x.llm != nil {
			x.llm.ev.Verdict = e.Verdict
			p.finishLLM(x, http.StatusForbidden)
		}
		return false
	}
	if x.rw != nil {
		return p.applyRewrites(w, r, x)
	}
	return true
}

// refuse answers status with the verdict's rule and reason and publishes e.
func (p *Proxy) refuse(w http.ResponseWriter, e *event.Event, status int, v event.Verdict) {
	e.Verdict = v
	e.HTTP.Status = status
	p.publish(e)
	writeText(w, status, denyMessage(v))
}

// rewrite points an outgoing protocol-switch request (ReverseProxy's) at
// the tunnel's destination and strips what must never leave: the session
// token. roundTrip does the same for every other request.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	if t := tunnelFrom(pr.In.Context()); t != nil {
		pr.Out.URL.Scheme = t.scheme
		pr.Out.URL.Host = t.authority
		if t.host != "" {
			pr.Out.Host = "" // from URL: the host the tunnel was allowed for
		}
	}
	pr.Out.Header.Del("Proxy-Authorization")
	pr.Out.Header.Del("Proxy-Connection")
}

// upstreamError answers 504 when the upstream did not answer in time and
// 502 for any other failure, with the reason, which names addresses and
// certificate problems but never a URL's query or a header.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	p.log.Debug("proxy: upstream error", "host", r.Host, "err", err)
	if sw, ok := w.(*statusWriter); ok {
		if r.Context().Err() != nil {
			sw.ev.HTTP.Error = clientClosed(r) + " before the response"
		} else {
			sw.ev.HTTP.Error = "upstream: " + err.Error()
		}
	}
	writeText(w, upstreamErrorStatus(err), "chaperone: upstream error: "+err.Error()+"\n")
}

// upstreamErrorStatus is the status a failed upstream round trip gets:
// 504 for a timeout (dial, handshake or response header), else 502.
func upstreamErrorStatus(err error) int {
	if netx.IsTimeout(err) {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// statusWriter notes the response status for the exchange's event, and
// whether writing to the client failed. The event is published once the
// response has ended (finish), or at the switch for a protocol switch,
// which may last for hours.
type statusWriter struct {
	http.ResponseWriter
	p          *Proxy
	ev         *event.Event
	status     int
	published  bool
	clientGone bool // a write to the client failed
}

func (w *statusWriter) publish() {
	w.published = true
	w.ev.HTTP.Status = w.status
	w.p.publish(w.ev)
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
		if code == http.StatusSwitchingProtocols {
			w.publish()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	if err != nil {
		w.clientGone = true
	}
	return n, err
}

// Hijack is reached only when the upstream switched protocols (101).
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !w.published {
		w.status = http.StatusSwitchingProtocols
		w.publish()
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// upgradeOf returns the protocol a request asks to switch to, lowercased.
func upgradeOf(h http.Header) string {
	up := h["Upgrade"]
	if len(up) == 0 {
		return ""
	}
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return strings.ToLower(strings.TrimSpace(up[0]))
			}
		}
	}
	return ""
}
