package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/chaperone-dev/chaperone/event"
)

// OriginFinder recovers, for a connection the kernel redirected to a
// transparent listener, where the client was going and who it is: the
// session, the original destination and the process. An error means the
// connection was not redirected from a managed session; the Tunnel may
// then still name the session and process it came from (a session
// process that connected to the listener itself), for the event.
type OriginFinder interface {
	Origin(client netip.AddrPort) (Tunnel, error)
}

// OriginFinderFunc adapts a function to OriginFinder.
type OriginFinderFunc func(client netip.AddrPort) (Tunnel, error)

// Origin calls f.
func (f OriginFinderFunc) Origin(client netip.AddrPort) (Tunnel, error) { return f(client) }

// ruleNoOrigin names the refusal of a redirected connection whose origin
// is unknown: it did not come from a managed session.
const ruleNoOrigin = "unknown_origin"

// ServeTransparent accepts connections that the kernel redirected to l and
// serves each as a tunnel to its original destination, once its connect
// event is decided: allowed, it is inspected as an explicit CONNECT tunnel
// is; denied, nothing is dialled and HTTP(S) requests in it get the 403
// that names the rule. A connection without an origin is closed, with an
// event. ServeTransparent returns nil after Close.
//
// A redirected connection has no CONNECT line to name its host: its first
// bytes do. The connect event is decided once they are seen (nothing is
// dialled before), with the host the connection names itself: its
// ClientHello's SNI, or the Host of a plain HTTP/1 request when that is a
// name the session's resolver answered with the address (Names). Only a
// connection that names nothing (TLS without SNI, other protocols) is
// decided with the name its process looked the address up as (the
// origin's Host), a hint, as an address answers for many names.
func (p *Proxy) ServeTransparent(l net.Listener, origins OriginFinder) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return nil
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("proxy: transparent accept: %w", err)
		}
		go p.serveTransparent(netx.RawIO(c), origins)
	}
}

func (p *Proxy) serveTransparent(c net.Conn, origins OriginFinder) {
	t, err := p.transparentTunnel(origins, addrPortOf(c.RemoteAddr()), event.TCP)
	if err != nil {
		c.Close()
		return
	}
	p.serveTunnel(context.Background(), c, t) // returns once an HTTP server has the connection
}

// transparentTunnel makes the tunnel of a connection (over transport) that
// the kernel redirected from client: its connect event is left to be
// decided once the first bytes (or the ClientHello) name the connection,
// or is published refused at once when its destination is unspecified. A
// connection without an origin gets a refused connect event and an error.
func (p *Proxy) transparentTunnel(origins OriginFinder, client netip.AddrPort, transport event.Transport) (*tunnel, error) {
	o, err := origins.Origin(client)
	if err != nil {
		reason := "not from a managed session: " + err.Error()
		if o.Session != "" {
			reason = "not redirected by the session's hooks (a connection to the proxy's listener itself): " + err.Error()
		}
		p.publish(&event.Event{
			Time: p.now(), Kind: event.KindConnect, Session: o.Session, Process: o.Process,
			Verdict: proxyVerdict(ruleNoOrigin, reason),
			Connect: &event.Connect{Transport: transport, Via: "transparent"},
		})
		return nil, errors.New(reason)
	}
	port := o.Port
	if port == 0 {
		port = o.Dst.Port()
	}
	e := &event.Event{
		Time: p.now(), Kind: event.KindConnect, Session: o.Session, Process: o.Process,
		Connect: &event.Connect{Dst: o.Dst, Host: netx.NormalizeHost(o.Host), Port: port, Transport: transport, Via: "transparent"},
	}
	t := &tunnel{session: o.Session, process: o.Process, port: port, dst: o.Dst, via: "transparent"}
	if o.Dst.Addr().Unmap().IsUnspecified() {
		// 0.0.0.0 and :: reach this machine's listeners, the proxy's
		// own among them: refuse rather than loop.
		e.Verdict = proxyVerdict(ruleNoOrigin, "unspecified destination address "+o.Dst.String())
		p.publish(e)
		t.denied = &e.Verdict
	} else {
		t.connect = e // decided once the first bytes name the connection
	}
	return t, nil
}

// decideConnect decides and publishes the connect event of a transparent
// tunnel whose first bytes say it carries proto, named as
// ServeTransparent says, and names the tunnel: by its SNI (intercept), or
// by its first request's Host when that is a name resolved to the address.
func (p *Proxy) decideConnect(ctx context.Context, tc *tunnelConn, proto protocol) {
	t := tc.t
	e := t.connect
	t.connect = nil
	switch proto {
	case protoTLS:
		if hello, err := p.sniffHello(tc); err == nil && hello.ServerName != "" {
			e.Connect.Host = netx.NormalizeHost(hello.ServerName)
		}
	case protoHTTP:
		if host, ok := p.requestHost(tc); ok {
			if _, err := netip.ParseAddr(host); err == nil {
				e.Connect.Host = "" // the address itself: no name
			} else {
				e.Connect.Host, t.host = host, host
			}
		}
	}
	e.Verdict = p.decide(ctx, e)
	p.publish(e)
	if !e.Verdict.Allowed() {
		t.denied = &e.Verdict
	}
}

// requestHost returns the host (without its port) of the tunnel's first
// request, a plain HTTP/1.1 one in origin form, when it stands for the
// tunnel's address (hostMatches): the address itself, or a name the
// session's resolver answered with it. It waits at most PeekTimeout for
// the rest of a header that is still arriving; false when there is no
// such request, or its host is another.
func (p *Proxy) requestHost(tc *tunnelConn) (string, bool) {
	r := tc.r
	tc.Conn.SetReadDeadline(time.Now().Add(p.peekTimeout))
	defer tc.Conn.SetReadDeadline(time.Time{})
	for r.Buffered() < r.Size() {
		b, _ := r.Peek(r.Buffered())
		if bytes.Contains(b, []byte("\r\n\r\n")) {
			break
		}
		if _, err := r.Peek(len(b) + 1); err != nil {
			break
		}
	}
	req, _ := h1.ParsePlainRequest(r, context.Background())
	if req == nil || req.URL.Host != "" || req.Host == "" || !p.hostMatches(tc.t, req.Host) {
		return "", false
	}
	host, _ := splitHostPortLoose(req.Host)
	return netx.NormalizeHost(host), true
}
