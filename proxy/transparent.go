package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

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
		go p.serveTransparent(rawIO(c), origins)
	}
}

func (p *Proxy) serveTransparent(c net.Conn, origins OriginFinder) {
	client := addrPortOf(c.RemoteAddr())
	t, err := origins.Origin(client)
	if err != nil {
		reason := "not from a managed session: " + err.Error()
		if t.Session != "" {
			reason = "not redirected by the session's hooks (a connection to the proxy's listener itself): " + err.Error()
		}
		p.publish(&event.Event{
			Time: p.now(), Kind: event.KindConnect, Session: t.Session, Process: t.Process,
			Verdict: proxyVerdict(ruleNoOrigin, reason),
			Connect: &event.Connect{Transport: event.TCP, Via: "transparent"},
		})
		c.Close()
		return
	}
	port := t.Port
	if port == 0 {
		port = t.Dst.Port()
	}
	e := &event.Event{
		Time: p.now(), Kind: event.KindConnect, Session: t.Session, Process: t.Process,
		Connect: &event.Connect{Dst: t.Dst, Host: t.Host, Port: port, Transport: event.TCP, Via: "transparent"},
	}
	if t.Dst.Addr().Unmap().IsUnspecified() {
		// 0.0.0.0 and :: reach this machine's listeners, the proxy's
		// own among them: refuse rather than loop.
		e.Verdict = proxyVerdict(ruleNoOrigin, "unspecified destination address "+t.Dst.String())
	} else {
		e.Verdict = p.decide(context.Background(), e)
	}
	p.publish(e)
	tun := &tunnel{
		session: t.Session,
		process: t.Process,
		host:    normalizeHost(t.Host),
		port:    port,
		dst:     t.Dst,
		via:     "transparent",
	}
	if !e.Verdict.Allowed() {
		tun.denied = &e.Verdict
	}
	p.serveTunnel(context.Background(), c, tun) // returns once an HTTP server has the connection
}
