package proxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
)

// serveInner handles every request decrypted from (or read in plain from)
// a tunnel.
func (p *Proxy) serveInner(w http.ResponseWriter, r *http.Request) {
	t := tunnelFrom(r.Context())
	if t == nil { // cannot happen: every inner connection has a tunnel
		writeText(w, http.StatusInternalServerError, "chaperone: request without a tunnel\n")
		return
	}
	p.forward(w, r, t)
}

// exchange is one request's event and the writer that publishes it once
// the status is known, in one allocation.
type exchange struct {
	ev   event.Event
	http event.HTTP
	sw   statusWriter
}

// forward decides a request and, if allowed, sends it upstream through the
// shared transport.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, t *tunnel) {
	x := &exchange{}
	e := &x.ev
	*e = event.Event{Time: p.now(), Kind: event.KindHTTP, Session: t.session, Process: t.process, HTTP: &x.http}
	u := *r.URL
	if u.Host == "" {
		u.Scheme, u.Host = t.scheme, t.authority
	}
	x.http = event.HTTP{
		Method:  r.Method,
		URL:     RedactURL(&u),
		Host:    r.Host,
		Proto:   r.Proto,
		Upgrade: upgradeOf(r.Header),
		Header:  policyHeader(r.Header),
	}
	switch {
	case t.denied != nil:
		p.refuse(w, e, http.StatusForbidden, *t.denied)
		return
	case r.Method == http.MethodConnect:
		p.refuse(w, e, http.StatusMethodNotAllowed, proxyVerdict(ruleNestedConnect, "CONNECT inside a tunnel"))
		return
	case !t.hostMatches(r.Host):
		p.refuse(w, e, http.StatusMisdirectedRequest, proxyVerdict(ruleDomainFronting,
			"request for "+r.Host+" inside a tunnel to "+t.authority))
		return
	case !p.sessions.Load().has(t.session):
		p.refuse(w, e, http.StatusForbidden, proxyVerdict(ruleUnknownSession, "the session has ended"))
		return
	}
	e.Verdict = p.decide(r.Context(), e)
	if !e.Verdict.Allowed() {
		p.refuse(w, e, http.StatusForbidden, e.Verdict)
		return
	}
	x.sw = statusWriter{ResponseWriter: w, p: p, ev: e}
	p.rp.ServeHTTP(&x.sw, r)
	if !x.sw.published { // the handler ended without a status (client gone mid-request)
		x.sw.publish(http.StatusBadGateway)
	}
	x.sw.ResponseWriter = nil // the event may outlive the request; the writer must not
}

// refuse answers status with the verdict's rule and reason and publishes e.
func (p *Proxy) refuse(w http.ResponseWriter, e *event.Event, status int, v event.Verdict) {
	e.Verdict = v
	e.HTTP.Status = status
	p.publish(e)
	writeText(w, status, denyMessage(v))
}

// rewrite points the outgoing request at the tunnel's destination and
// strips what must never leave: the session token.
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

// upstreamError answers 502 with the reason, which names addresses and
// certificate problems but never a URL's query or a header.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	p.log.Debug("proxy: upstream error", "host", r.Host, "err", err)
	writeText(w, http.StatusBadGateway, "chaperone: upstream error: "+err.Error()+"\n")
}

// statusWriter publishes the exchange's event when the response status is
// known: at WriteHeader (or the first Write), or at Hijack for a protocol
// switch.
type statusWriter struct {
	http.ResponseWriter
	p         *Proxy
	ev        *event.Event
	published bool
}

func (w *statusWriter) publish(status int) {
	w.published = true
	w.ev.HTTP.Status = status
	w.p.publish(w.ev)
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.published && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.publish(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.published {
		w.publish(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Hijack is reached only when the upstream switched protocols (101).
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !w.published {
		w.publish(http.StatusSwitchingProtocols)
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
