package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	stdtls "crypto/tls"

	"github.com/chaperone-dev/chaperone/event"
	chtls "github.com/chaperone-dev/chaperone/tls"
)

// protocol is what a tunnel's first bytes say it carries.
type protocol int

const (
	protoClosed protocol = iota // the client went away (or the tunnel was closed)
	protoTLS
	protoHTTP
	protoOther  // client-first, neither TLS nor HTTP: passed through
	protoSilent // no bytes within PeekTimeout: server-first, passed through
	protoSSLv2  // an SSL 2.0-compatible ClientHello: it cannot be inspected, so refused
	// protoRequestLine is an HTTP/1 request line that the proxy reads
	// itself: a CONNECT (to a relay), or a line net/http reads otherwise
	// than a permissive proxy does.
	protoRequestLine
	protoSOCKS4 // a SOCKS4 or SOCKS4a request (to a relay)
	protoSOCKS5 // a SOCKS5 greeting (to a relay)
)

// inspected reports whether the proxy reads a protocol itself, rather than
// passing its bytes through.
func (proto protocol) inspected() bool {
	return proto != protoClosed && proto != protoOther && proto != protoSilent
}

// serveTunnel runs the tunnel logic on c. It returns when the tunnel is
// over, with c closed, or as soon as the connection is handed to an HTTP
// server, serveH1 or serveH2 (handedOff): no goroutine waits on an idle
// kept-alive tunnel, and the server's close of the connection ends the
// tunnel (untracks it, releases done). Cancelling ctx closes the tunnel either way.
func (p *Proxy) serveTunnel(ctx context.Context, c net.Conn, t *tunnel) (tc *tunnelConn, handedOff bool) {
	tc = &tunnelConn{Conn: c, t: t, p: p, done: make(chan struct{})}
	t.conn = tc
	stop := context.AfterFunc(ctx, t.close)
	tc.release = func() {
		stop()
		p.untrack(t)
	}
	if !p.track(t) || !p.sessions.Load().has(t.session) { // closed, or the session removed while the tunnel was set up
		if t.connect != nil {
			p.decideConnect(ctx, tc, protoClosed)
		}
		t.close()
		return tc, false
	}
	tc.r = p.getSniffReader(c)
	proto := p.classify(tc, p.peekTimeout)
	if t.connect != nil {
		p.decideConnect(ctx, tc, proto)
	}
	if p.serveProtocol(ctx, tc, proto) {
		return tc, true
	}
	t.close()
	return tc, false
}

// serveProtocol serves the tunnel's protocol; true means the connection was
// handed to an HTTP server, which now owns it.
func (p *Proxy) serveProtocol(ctx context.Context, tc *tunnelConn, proto protocol) (handedOff bool) {
	switch proto {
	case protoTLS:
		return p.intercept(ctx, tc)
	case protoHTTP:
		tc.t.setScheme("http")
		return p.serveInnerConn(tc, tc)
	case protoRequestLine:
		return p.serveRequestLine(ctx, tc)
	case protoSOCKS4, protoSOCKS5:
		return p.serveSOCKS(ctx, tc, proto)
	case protoSSLv2:
		p.publish(&event.Event{
			Time: p.now(), Kind: event.KindTLS, Session: tc.t.session, Process: tc.t.process, TLS: &event.TLS{},
			Verdict: proxyVerdict(ruleMalformedHello, "SSL 2.0-compatible ClientHello: it names no server and is not supported"),
		})
	case protoOther, protoSilent:
		if tc.t.denied != nil {
			return false // nothing to answer in: close
		}
		return p.passthrough(ctx, tc, proto == protoSilent)
	}
	return false
}

// classify peeks at the client's first bytes. firstWait bounds the wait
// for the first byte (zero: no bound). A TLS record is known by its first
// byte, at no further cost; anything else is looked at more closely
// (classifyMore).
func (p *Proxy) classify(tc *tunnelConn, firstWait time.Duration) protocol {
	c := tc.Conn
	if firstWait > 0 {
		c.SetReadDeadline(time.Now().Add(firstWait))
	}
	defer c.SetReadDeadline(time.Time{})
	b, err := tc.r.Peek(1)
	if err != nil {
		if netx.IsTimeout(err) {
			return protoSilent
		}
		return protoClosed
	}
	if b[0] == 0x16 {
		return protoTLS // no text protocol starts with 0x16; Sniff decides the rest
	}
	return p.classifyMore(tc, b[0])
}

// classifyMore classifies a tunnel whose first byte, first, is not a TLS
// record's: a SOCKS request, an SSL 2.0 hello, an HTTP/1 request line
// (requestStart), or anything else. An ambiguous start waits at most
// PeekTimeout more and then counts as what it may become (a request line,
// a SOCKS request), so that stalling cannot turn inspection off.
func (p *Proxy) classifyMore(tc *tunnelConn, first byte) protocol {
	tc.Conn.SetReadDeadline(time.Now().Add(p.peekTimeout))
	switch {
	case first == socksVersion4 || first == socksVersion5:
		return classifySOCKS(tc.r)
	case first&0x80 != 0:
		// Neither text nor a TLS record: perhaps a TLS hello in the
		// SSL 2.0 format, which names no server.
		if b, _ := tc.r.Peek(5); chtls.LooksLikeSSLv2Hello(b) {
			return protoSSLv2
		}
		return protoOther
	}
	for {
		b, _ := tc.r.Peek(tc.r.Buffered())
		switch h1.RequestStart(b) {
		case h1.Yes:
			return requestKind(b)
		case h1.No:
			return protoOther
		}
		if _, err := tc.r.Peek(len(b) + 1); err != nil {
			return protoRequestLine // fail closed: the proxy reads it, and refuses what is not a request
		}
	}
}

// classifySOCKS tells a SOCKS4 request (version 4, command CONNECT or
// BIND) or SOCKS5 greeting (version 5, at least one method) from other
// bytes. A client that stops after the version byte is taken at its word.
func classifySOCKS(r *bufio.Reader) protocol {
	b, err := r.Peek(2)
	switch {
	case err != nil && len(b) == 1 && b[0] == socksVersion4:
		return protoSOCKS4
	case err != nil && len(b) == 1:
		return protoSOCKS5
	case err != nil:
		return protoClosed
	case b[0] == socksVersion4 && (b[1] == socksCmdConnect || b[1] == socksCmdBind):
		return protoSOCKS4
	case b[0] == socksVersion5 && b[1] != 0:
		return protoSOCKS5
	}
	return protoOther
}

// requestKind says whether the request line at the start of b (as
// requestStart recognised it) goes to net/http as it is, or is read by the
// proxy: a CONNECT (which may be asked of a relay), or a line that net/http
// would read otherwise than a permissive proxy (leading blank lines, runs
// of white space, no version). With the line not all there yet, its start
// decides: what follows may yet make net/http refuse it, which is safe.
func requestKind(b []byte) protocol {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		if rl, err := h1.ParseRequestLine(b[:i+1]); err == nil && rl.Canonical {
			return protoHTTP
		}
		return protoRequestLine
	}
	m := 0
	for m < len(b) && h1.IsTchar(b[m]) {
		m++
	}
	if m == 0 || m+1 >= len(b) || b[m] != ' ' || h1.IsLeadSpace(b[m+1]) || h1.IsConnectMethod(b[:m]) {
		return protoRequestLine
	}
	return protoHTTP
}

// intercept sniffs the ClientHello, decides the tls event and, if allowed,
// terminates TLS and hands the connection to an HTTP server.
func (p *Proxy) intercept(ctx context.Context, tc *tunnelConn) (handedOff bool) {
	t := tc.t
	tc.Conn.SetDeadline(time.Now().Add(p.handshakeTimeout))
	hello, err := p.sniffHello(tc)
	e := &event.Event{Time: p.now(), Kind: event.KindTLS, Session: t.session, Process: t.process, TLS: &event.TLS{}}
	if err != nil {
		e.Verdict = proxyVerdict(ruleMalformedHello, "ClientHello could not be read: "+err.Error())
		p.publish(e)
		p.log.Debug("proxy: bad ClientHello", "session", t.session, "host", t.host, "err", err)
		return false
	}
	e.TLS.ServerName = hello.ServerName
	e.TLS.ALPN = hello.ALPN
	e.TLS.Version = hello.MaxVersion()
	if t.host == "" {
		t.host = netx.NormalizeHost(hello.ServerName)
	}
	if t.denied != nil {
		// Terminate TLS only to answer with the connect's 403.
		e.Verdict = *t.denied
		e.TLS.Intercepted = true
		p.publish(e)
	} else {
		// A host listed in tls_passthrough is passed through whatever its
		// clients did; one whose client refused the CA before, as the
		// policy says (allow: passed through, deny: refused).
		listed := p.noIntercept != nil && p.noIntercept(t.host, t.dst.Addr())
		e.TLS.ClientRejectsCA = !listed && p.rejections.rejects(t.session, rejectHostOf(t))
		e.Verdict = p.decide(ctx, e)
		pass := e.Verdict.Allowed() && (listed || e.TLS.ClientRejectsCA)
		e.TLS.Intercepted = e.Verdict.Allowed() && !pass
		if pass && !listed && (e.Verdict.Reason == "" || e.Verdict.DecidedBy == event.DecidedByDefault) {
			e.Verdict.Reason = rejectPassReason
		}
		p.publish(e)
		if !e.Verdict.Allowed() {
			return false
		}
		if pass {
			tc.Conn.SetDeadline(time.Time{})
			return p.passthrough(ctx, tc, false)
		}
	}
	t.setScheme("https")
	w := &clientWatch{Conn: tc}
	conn := stdtls.Server(w, p.mitmTLS)
	if err := conn.HandshakeContext(ctx); err != nil {
		p.handshakeFailed(ctx, t, e, w, err)
		return false
	}
	tc.Conn.SetDeadline(time.Time{})
	p.watchClient(ctx, t, e, w, conn)
	return p.serveInnerConn(conn, tc)
}

// sniffHello reads the ClientHello at the head of the tunnel, once: the
// connect event of a transparent tunnel is named by it before intercept
// decides it. The deadline to read it is the handshake's.
func (p *Proxy) sniffHello(tc *tunnelConn) (*chtls.ClientHello, error) {
	if !tc.sniffed {
		tc.Conn.SetReadDeadline(time.Now().Add(p.handshakeTimeout))
		tc.hello, tc.helloErr = chtls.Sniff(tc.r)
		tc.sniffed = true
	}
	return tc.hello, tc.helloErr
}

// serveInnerConn serves c (tc, or TLS over it) on a goroutine of its own:
// HTTP/2 and h2c by serveH2, HTTP/1 by serveH1. It reports true: the
// connection is taken.
func (p *Proxy) serveInnerConn(c net.Conn, tc *tunnelConn) bool {
	if tlsc, ok := c.(*stdtls.Conn); ok && tlsc.ConnectionState().NegotiatedProtocol == "h2" || !ok && isH2CPreface(tc.r) {
		go p.serveH2(c, tc)
		return true
	}
	go p.serveH1(c, tc)
	return true
}

// isH2CPreface reports whether a plain tunnel starts with the HTTP/2
// connection preface (h2c with prior knowledge).
func isH2CPreface(r *bufio.Reader) bool {
	if r == nil {
		return false
	}
	b, _ := r.Peek(len("PRI * HTTP/2"))
	return string(b) == "PRI * HTTP/2"
}

// passthrough copies bytes both ways between the client and the tunnel's
// destination, half-closing each direction as it ends. When the client has
// not spoken (serverFirst), the server may speak first; if the client
// instead speaks first after all and starts TLS or HTTP before the server
// sent anything, the upstream connection is dropped and the tunnel is
// intercepted as usual, so waiting out PeekTimeout does not buy an
// uninspected tunnel (handedOff when it went to an HTTP server).
func (p *Proxy) passthrough(ctx context.Context, tc *tunnelConn, serverFirst bool) (handedOff bool) {
	t := tc.t
	up, err := p.dialTunnel(ctx, t)
	if err != nil {
		p.log.Debug("proxy: passthrough dial failed", "session", t.session, "host", t.host, "port", t.port, "err", err)
		return false
	}
	if !t.setUpstream(up) {
		up.Close()
		return false
	}
	// gate decides who spoke first: 0 nobody yet, 1 the server, 2 the client
	// with TLS or HTTP (intercepted), 3 the client with anything else.
	var gate atomic.Int32
	downDone := make(chan struct{})
	go func() {
		defer close(downDone)
		p.copyDown(tc, up, serverFirst, &gate)
	}()
	if serverFirst {
		proto := p.classify(tc, 0)
		switch {
		case proto == protoClosed:
			up.Close()
			<-downDone
			return false
		case proto.inspected() && gate.CompareAndSwap(0, 2):
			t.mu.Lock()
			t.upstream = nil
			t.mu.Unlock()
			up.Close()
			<-downDone
			return p.serveProtocol(ctx, tc, proto)
		}
		gate.CompareAndSwap(0, 3)
	}
	// Client to upstream: the sniffed bytes, then the connection itself so
	// that the kernel can splice.
	var uerr error
	if n := tc.r.Buffered(); n > 0 {
		b, _ := tc.r.Peek(n)
		_, uerr = up.Write(b)
	}
	p.putSniffReader(tc.r)
	tc.r = nil
	if uerr == nil {
		_, uerr = io.Copy(up, tc.Conn)
	}
	if uerr != nil {
		t.close()
	} else {
		netx.CloseWrite(up)
	}
	<-downDone
	return false
}

// copyDown copies upstream to client. With serverFirst it consults gate
// before its first write and drops the bytes if the client is being
// intercepted instead.
func (p *Proxy) copyDown(tc *tunnelConn, up net.Conn, serverFirst bool, gate *atomic.Int32) {
	if serverFirst {
		buf := make([]byte, 4096)
		n, err := up.Read(buf)
		if !gate.CompareAndSwap(0, 1) && gate.Load() == 2 {
			return
		}
		if n > 0 {
			if _, werr := tc.Conn.Write(buf[:n]); werr != nil {
				tc.t.close()
				return
			}
		}
		if err != nil {
			p.endDown(tc, err)
			return
		}
	}
	_, err := io.Copy(tc.Conn, up)
	p.endDown(tc, err)
}

func (p *Proxy) endDown(tc *tunnelConn, err error) {
	if err != nil && !errors.Is(err, io.EOF) {
		tc.t.close()
		return
	}
	tc.CloseWrite()
}

// dialTunnel connects to a tunnel's destination: for passthrough, and to
// reach a relay at the far end of it. A relayed tunnel's destination is
// reached through its relay, on the connection the relay opened for the
// client if no dial took it yet.
func (p *Proxy) dialTunnel(ctx context.Context, t *tunnel) (net.Conn, error) {
	if t.relay != nil {
		if c := t.takePending(); c != nil {
			return c, nil
		}
		return p.dialRelay(ctx, t.relay)
	}
	if t.dst.IsValid() {
		return p.dial(ctx, t.dst.String())
	}
	return p.dialHost(ctx, t.host, t.port)
}

// dialHost connects to host:port through a Resolve override, else DNS.
func (p *Proxy) dialHost(ctx context.Context, host string, port uint16) (net.Conn, error) {
	if host == "" {
		return nil, errors.New("proxy: dial: no destination")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return p.dial(ctx, netip.AddrPortFrom(a, port).String())
	}
	if p.resolve != nil {
		if a, ok := p.resolve(host, port); ok {
			return p.dial(ctx, netip.AddrPortFrom(a, port).String())
		}
	}
	return p.dial(ctx, net.JoinHostPort(host, strconv.Itoa(int(port))))
}

// dialUpstream is the upstream transports' dialer. A request from a tunnel
// with a known destination (transparent mode) goes there; anything else
// goes through Resolve, then DNS.
func (p *Proxy) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, err
	}
	host = netx.NormalizeHost(host)
	t := tunnelFrom(ctx)
	switch {
	case t == nil:
	case t.relay != nil:
		// Through the relay, and only to the tunnel's destination.
		if host != t.host || uint16(port) != t.port {
			return nil, fmt.Errorf("proxy: dial %s: not the destination of a tunnel through relay %s", addr, t.relay.url)
		}
		return p.dialTunnel(ctx, t)
	case t.dst.IsValid() && uint16(port) == t.port && (host == t.host || host == t.dst.Addr().String()):
		return p.dial(ctx, t.dst.String())
	}
	return p.dialHost(ctx, host, uint16(port))
}

// dial connects to addr, a TCP address.
func (p *Proxy) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return netx.RawIO(c), nil
}

// serveH1 serves c, an HTTP/1 connection of tc's tunnel, until it closes.
func (p *Proxy) serveH1(c net.Conn, tc *tunnelConn) {
	p.h1.ServeConn(p.clientConn(c, tc, "HTTP/1.1"))
}

// clientConn is c, a connection of tc's tunnel (tc, or TLS over it), as
// the HTTP servers take it: requests carry the tunnel, and a fault is an
// event of the tunnel's session and process.
func (p *Proxy) clientConn(c net.Conn, tc *tunnelConn, proto string) netx.ClientConn {
	t := tc.t
	return netx.ClientConn{
		C: c, Raw: tc.Conn, Gatherer: tc,
		Context: context.WithValue(context.Background(), tunnelKey{}, t),
		Fault:   func(f netx.Fault) { p.publishConnFault(f, t.session, t.process, t.authority, proto) },
	}
}

// serveH2 serves c, an HTTP/2 connection of tc's tunnel, until it closes.
func (p *Proxy) serveH2(c net.Conn, tc *tunnelConn) {
	p.h2.ServeConn(p.clientConn(c, tc, "HTTP/2.0"))
}
