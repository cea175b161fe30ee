package proxy

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/chaperone-dev/chaperone/event"
)

// frontConn is one client connection of the explicit front, and what the
// front knows about it. net/http runs one request at a time per HTTP/1
// connection, so the fields after watchedConn need no lock.
type frontConn struct {
	watchedConn
	client, local netip.AddrPort

	procSession string // the session proc was looked up for
	procLooked  bool
	proc        *event.Process

	dest *tunnel // the last destination allowed for absolute-URI requests
}

type frontConnKey struct{}

// frontListener makes each accepted connection a frontConn.
type frontListener struct{ net.Listener }

func (l frontListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newFrontConn(netx.RawIO(c)), nil
}

func newFrontConn(c net.Conn) *frontConn {
	return &frontConn{watchedConn: watchedConn{Conn: c}, client: addrPortOf(c.RemoteAddr()), local: addrPortOf(c.LocalAddr())}
}

func (p *Proxy) frontConnContext(ctx context.Context, c net.Conn) context.Context {
	fc, ok := c.(*frontConn)
	if !ok { // not accepted through Serve's listener: unwatched
		fc = newFrontConn(c)
	}
	return context.WithValue(ctx, frontConnKey{}, fc)
}

// process attributes the client connection once per session.
func (fc *frontConn) process(p *Proxy, session string) *event.Process {
	if fc.procLooked && fc.procSession == session {
		return fc.proc
	}
	fc.procLooked, fc.procSession, fc.proc = true, session, nil
	if p.procs == nil {
		return nil
	}
	proc, err := p.procs.ProcessForConn(fc.client, fc.local, session)
	if err != nil {
		p.log.Debug("proxy: no process for connection", "client", fc.client, "session", session, "err", err)
		return nil
	}
	fc.proc = proc
	return proc
}

// serveFront handles every request to the explicit-proxy listener.
func (p *Proxy) serveFront(w http.ResponseWriter, r *http.Request) {
	fc, _ := r.Context().Value(frontConnKey{}).(*frontConn)
	if fc == nil {
		writeText(w, http.StatusInternalServerError, "chaperone: no connection state\n")
		return
	}
	fc.served()
	session, ok := p.authenticate(r.Header["Proxy-Authorization"])
	if size := headerSize(r); size > p.maxHeaderBytes {
		var proc *event.Process
		if ok {
			proc = fc.process(p, session)
		}
		e := &event.Event{
			Time: p.now(), Kind: event.KindHTTP, Session: session, Process: proc,
			HTTP: &event.HTTP{Method: r.Method, Host: r.Host, Proto: r.Proto},
		}
		if r.Method != http.MethodConnect {
			e.HTTP.URL = RedactURL(r.URL)
		}
		p.refuseHeaderTooLarge(w, e, size)
		return
	}
	if !ok {
		p.refuseAuth(w, r, fc)
		return
	}
	if r.Method == http.MethodConnect {
		p.serveConnect(w, r, fc, session)
		return
	}
	p.serveAbsolute(w, r, fc, session)
}

func (p *Proxy) authenticate(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	user, token, ok := parseProxyAuthorization(values[0])
	if !ok || user != proxyUser {
		return "", false
	}
	return p.sessions.Load().lookup(token)
}

// refuseAuth answers 407 and records the refusal as an event outside any
// session, with the client's process when the ProcessFinder knows it
// (asked for session ""): a session's program that asks without its
// credentials first (libcurl does) is named.
func (p *Proxy) refuseAuth(w http.ResponseWriter, r *http.Request, fc *frontConn) {
	host, port, _ := targetOf(r)
	via := "http"
	if r.Method == http.MethodConnect {
		via = "connect"
	}
	reason := "no valid session token in Proxy-Authorization"
	if len(r.Header["Proxy-Authorization"]) == 0 {
		reason = "no Proxy-Authorization: the client is asked for the session's credentials"
	}
	p.publish(&event.Event{
		Time: p.now(), Kind: event.KindConnect, Process: fc.process(p, ""),
		Verdict: proxyVerdict(RuleProxyAuth, reason),
		Connect: &event.Connect{Host: host, Port: port, Transport: event.TCP, Via: via},
	})
	w.Header().Set("Proxy-Authenticate", `Basic realm="chaperone"`)
	writeText(w, http.StatusProxyAuthRequired, "chaperone: proxy authentication required\n")
}

// targetOf returns the destination of a proxy request: the CONNECT
// authority or the absolute URI's host.
func targetOf(r *http.Request) (host string, port uint16, ok bool) {
	hostport, def := r.Host, uint16(0)
	if r.Method != http.MethodConnect {
		if r.URL.Scheme != "http" || r.URL.Host == "" {
			return "", 0, false
		}
		hostport, def = r.URL.Host, 80
	}
	h, ps := splitHostPortLoose(hostport)
	if ps == "" {
		if def == 0 {
			return netx.NormalizeHost(h), 0, false
		}
		return netx.NormalizeHost(h), def, h != ""
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 || h == "" {
		return netx.NormalizeHost(h), 0, false
	}
	return netx.NormalizeHost(h), uint16(n), true
}

// connectEvent decides and publishes the connect event for a destination.
func (p *Proxy) connectEvent(ctx context.Context, session string, proc *event.Process, host string, port uint16, via string) (*event.Event, bool) {
	e := &event.Event{
		Time: p.now(), Kind: event.KindConnect, Session: session, Process: proc,
		Connect: &event.Connect{Host: host, Port: port, Transport: event.TCP, Via: via},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		e.Connect.Dst = netip.AddrPortFrom(a, port)
	} else if p.resolve != nil {
		if a, ok := p.resolve(host, port); ok {
			e.Connect.Dst = netip.AddrPortFrom(a, port)
		}
	}
	e.Verdict = p.decide(ctx, e)
	p.publish(e)
	return e, e.Verdict.Allowed()
}

// serveConnect handles CONNECT: decide, then tunnel in this goroutine
// until the tunnel's connection is handed to its HTTP server (or is over). The handler
// then returns, so that net/http lets go of the hijacked connection's
// buffers and goroutine while the tunnel lives on.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request, fc *frontConn, session string) {
	host, port, ok := targetOf(r)
	if !ok {
		writeText(w, http.StatusBadRequest, "chaperone: CONNECT needs host:port\n")
		return
	}
	proc := fc.process(p, session)
	e, allowed := p.connectEvent(r.Context(), session, proc, host, port, "connect")
	t := &tunnel{session: session, process: proc, host: host, port: port, dst: e.Connect.Dst, via: "connect"}
	if !allowed {
		if e.Verdict.Action != event.Deny {
			// Ask (or anything not allow/deny) denies, but says so only in
			// the event: answer the CONNECT itself.
			writeText(w, http.StatusForbidden, denyMessage(e.Verdict))
			return
		}
		// Most clients hide a CONNECT response's body. Accept the tunnel
		// and answer the requests inside it with the 403 instead, so an
		// agent reads which rule stopped it; nothing is dialled.
		t.denied = &e.Verdict
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.log.Debug("proxy: hijack failed", "err", err)
		return
	}
	if c, ok := conn.(*frontConn); ok {
		// The tunnel watches for itself, and passthrough splices from the
		// TCP connection itself.
		conn = c.Conn
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		conn = &prefixConn{Conn: conn, prefix: bytes.Clone(b)}
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		return
	}
	// r's context ends when this handler returns; the tunnel outlives it.
	p.serveTunnel(context.WithoutCancel(r.Context()), conn, t)
}

// serveAbsolute handles an explicit plain-HTTP request (GET http://...).
func (p *Proxy) serveAbsolute(w http.ResponseWriter, r *http.Request, fc *frontConn, session string) {
	host, port, ok := targetOf(r)
	if !ok {
		p.publish(&event.Event{
			Time: p.now(), Kind: event.KindHTTP, Session: session, Process: fc.process(p, session),
			Verdict: proxyVerdict(ruleNotProxyRequest, "not an absolute http:// request or CONNECT"),
			HTTP:    &event.HTTP{Method: r.Method, URL: RedactURL(r.URL), Host: r.Host, Proto: r.Proto, Status: http.StatusBadRequest},
		})
		writeText(w, http.StatusBadRequest, "chaperone: this is a proxy: send CONNECT host:port or an absolute http:// URL\n")
		return
	}
	t := fc.dest
	if t == nil || t.session != session || t.host != host || t.port != port {
		proc := fc.process(p, session)
		e, allowed := p.connectEvent(r.Context(), session, proc, host, port, "http")
		if !allowed {
			writeText(w, http.StatusForbidden, denyMessage(e.Verdict))
			return
		}
		// No dst: explicit requests are dialled by name, like CONNECT.
		t = &tunnel{session: session, process: proc, host: host, port: port, via: "http"}
		t.setScheme("http")
		fc.dest = t
	}
	p.forward(w, r, t)
}
