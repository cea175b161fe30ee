package proxy

import (
	"context"
	stdtls "crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy/internal/h3"
	chtls "github.com/chaperone-dev/chaperone/tls"
)

// ruleQUICPassthrough refuses a QUIC connection to a server whose TLS is
// not intercepted (tls_passthrough, or a client that refuses the CA): QUIC
// is not passed through, and the client falls back to TCP, where it is.
const ruleQUICPassthrough = "quic_passthrough"

// ServeQUIC serves QUIC connections that the kernel redirected to pc
// (transparent mode): each one's origin (session, original destination,
// process) comes from origins.Origin(client address), as for TCP, or
// OriginQUIC(client address, first Initial's destination connection ID)
// when origins is a QUICOriginFinder, and
// each is a tunnel to that destination whose connect event (transport
// udp, via transparent) is decided when its ClientHello names the host
// (the SNI), then its tls event. Allowed, TLS is terminated with a leaf
// minted for the SNI (ALPN h3) and each HTTP/3 request goes through the
// same request path as over TCP (decided, rewritten, forwarded, its http
// event with proto HTTP/3.0). Refused (a connection without an origin
// included), the connection is closed: with a CONNECTION_CLOSE whose
// reason phrase names the rule once the handshake is done, so a client
// that trusts the CA can read it. ServeQUIC closes pc when it returns, and
// returns nil after Close.
func (p *Proxy) ServeQUIC(pc net.PacketConn, origins OriginFinder) error {
	srv := &h3.Server{
		TLS: p.quicTLS,
		Start: func(ctx context.Context, client netip.AddrPort, dcid []byte) (context.Context, error) {
			return p.startQUIC(ctx, client, dcid, origins)
		},
		Admit:            p.admitQUIC,
		Handler:          http.HandlerFunc(p.serveInner),
		HandshakeTimeout: p.handshakeTimeout,
		IdleTimeout:      p.h1.IdleTimeout,
		MaxHeaderBytes:   headerHardLimit(p.maxHeaderBytes),
		Logger:           p.log,
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.Close()
		return nil
	}
	p.quicServers[srv] = pc
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.quicServers, srv)
		p.mu.Unlock()
		srv.Close()
		pc.Close()
	}()
	if err := srv.Serve(pc); err != nil {
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed || errors.Is(err, net.ErrClosed) {
			return nil
		}
		return fmt.Errorf("proxy: quic: %w", err)
	}
	return nil
}

// QUICOriginFinder is an OriginFinder that also tells apart QUIC
// connections started at once from one client address, by the
// destination connection ID of each one's first Initial.
type QUICOriginFinder interface {
	OriginFinder
	OriginQUIC(client netip.AddrPort, dcid []byte) (Tunnel, error)
}

// startQUIC makes the tunnel of a QUIC connection from client, at its
// first Initial (whose destination connection ID is dcid), and returns the
// connection's context carrying it. An error refuses the connection.
func (p *Proxy) startQUIC(ctx context.Context, client netip.AddrPort, dcid []byte, origins OriginFinder) (context.Context, error) {
	if q, ok := origins.(QUICOriginFinder); ok {
		origins = OriginFinderFunc(func(c netip.AddrPort) (Tunnel, error) { return q.OriginQUIC(c, dcid) })
	}
	t, err := p.transparentTunnel(origins, client, event.UDP)
	if err != nil {
		return nil, fmt.Errorf("proxy: quic: %w", err)
	}
	if !p.sessions.Load().has(t.session) {
		p.log.Debug("proxy: quic connection refused: unknown session", "session", t.session)
		return nil, errors.New("proxy: quic: unknown session")
	}
	t.quic = true
	if !p.track(t) {
		return nil, errors.New("proxy: quic: closed")
	}
	context.AfterFunc(ctx, func() { p.untrack(t) }) // the context ends with the connection
	return context.WithValue(ctx, tunnelKey{}, t), nil
}

// helloQUIC decides a QUIC connection's connect event, named by its
// ClientHello, and its tls event, as intercept does for TCP. A refusal is
// kept in the tunnel: admitQUIC closes the connection with it once the
// handshake is done (the only time its reason can travel).
func (p *Proxy) helloQUIC(hello *stdtls.ClientHelloInfo) (*stdtls.Config, error) {
	ctx := hello.Context()
	t := tunnelFrom(ctx)
	if t == nil {
		return nil, errors.New("proxy: quic: connection without a tunnel")
	}
	if e := t.connect; e != nil {
		t.connect = nil
		if hello.ServerName != "" {
			e.Connect.Host = netx.NormalizeHost(hello.ServerName)
		}
		e.Verdict = p.decide(ctx, e)
		p.publish(e)
		if !e.Verdict.Allowed() {
			t.denied = &e.Verdict
		}
	}
	e := &event.Event{Time: p.now(), Kind: event.KindTLS, Session: t.session, Process: t.process, TLS: &event.TLS{
		ServerName: hello.ServerName,
		ALPN:       hello.SupportedProtos,
		Version:    (&chtls.ClientHello{SupportedVersions: withoutGREASE(hello.SupportedVersions)}).MaxVersion(),
	}}
	if t.host == "" {
		t.host = netx.NormalizeHost(hello.ServerName)
	}
	if t.denied != nil {
		e.Verdict = *t.denied
		e.TLS.Intercepted = true // terminated only to say why
		p.publish(e)
	} else {
		listed := p.noIntercept != nil && p.noIntercept(t.host, t.dst.Addr())
		rejects := !listed && p.rejections.rejects(t.session, rejectHostOf(t))
		e.TLS.ClientRejectsCA = rejects
		e.Verdict = p.decide(ctx, e)
		if e.Verdict.Allowed() && (listed || rejects) {
			e.Verdict = proxyVerdict(ruleQUICPassthrough, "the server is not intercepted and QUIC cannot be passed through: the client falls back to TCP")
		} else {
			e.TLS.Intercepted = e.Verdict.Allowed()
		}
		p.publish(e)
		if !e.Verdict.Allowed() {
			t.denied = &e.Verdict
		}
	}
	t.setScheme("https")
	return nil, nil
}

// withoutGREASE drops the GREASE values (RFC 8701) of a version list.
func withoutGREASE(vs []uint16) []uint16 {
	out := vs[:0:0]
	for _, v := range vs {
		if !chtls.IsGREASE(v) {
			out = append(out, v)
		}
	}
	return out
}

// admitQUIC lets a QUIC connection's requests in once its handshake is
// done, or refuses it with the reason of its connect or tls event.
func (p *Proxy) admitQUIC(ctx context.Context, closeConn h3.Closer) error {
	t := tunnelFrom(ctx)
	if t == nil {
		return errors.New("chaperone: connection without a tunnel")
	}
	t.mu.Lock()
	closed := t.closed
	if !closed {
		t.end = closeConn
	}
	t.mu.Unlock()
	if closed {
		return errors.New("chaperone: the session has ended")
	}
	if t.denied != nil {
		return errors.New(strings.TrimSuffix(denyMessage(*t.denied), "\n"))
	}
	return nil
}
