package proxy

import (
	"bufio"
	"context"
	stdtls "crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"
	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/chaperone-dev/chaperone/event"
	chtls "github.com/chaperone-dev/chaperone/tls"
)

// tunnel is one client connection whose destination was allowed, and what
// the proxy learned about it. Fields other than mu/upstream/closed are set
// by the tunnel's goroutine before the connection is handed to its HTTP
// server, and only read afterwards.
type tunnel struct {
	session string
	process *event.Process
	host    string // normalized name the client asked for; empty when unknown
	port    uint16
	dst     netip.AddrPort // dial here when valid (transparent mode)
	via     string
	// quic is set on a QUIC connection's tunnel (ServeQUIC); end closes
	// that connection, once admitted.
	quic bool
	end  func(reason string)
	// denied is set on a tunnel whose destination was denied: it is
	// opened only to answer each HTTP(S) request with a 403 that names the
	// rule, so the agent reads why; nothing is ever dialled for it.
	denied *event.Verdict
	// connect is a transparent tunnel's connect event until it is decided:
	// its first bytes name it (decideConnect).
	connect *event.Event

	scheme    string // "https" or "http" once the protocol is known
	authority string // URL host of forwarded requests

	conn *tunnelConn

	// relay is set on a tunnel to a destination asked of a relay: every
	// upstream connection goes through it, never straight to the
	// destination.
	relay *relayHop

	mu       sync.Mutex
	closed   bool
	upstream net.Conn // passthrough only
	// pending is a relayed tunnel's connection that the relay opened
	// before the client was answered, until the first dial takes it.
	pending net.Conn
	// child is the relayed tunnel the client's connection went on to (a
	// CONNECT or SOCKS request to the relay at the far end of this one);
	// forward is the last destination allowed for its requests in
	// absolute form. Closing the tunnel closes the child.
	child   *tunnel
	forward *tunnel
	// transports are a relayed tunnel's own http.Transports (HTTP/2 and
	// HTTP/1.1), made on first use: they pool connections by address
	// alone, so no other tunnel may use them.
	transports [2]*http.Transport
}

// setScheme fixes the scheme of the tunnel's requests and the authority
// they are forwarded to: the tunnel's host and port, or its destination
// address when no name is known (so a pooled upstream connection is never
// shared by name with a destination the name does not stand for).
func (t *tunnel) setScheme(scheme string) {
	t.scheme = scheme
	host := t.host
	if host == "" && t.dst.IsValid() {
		host = t.dst.Addr().String()
	}
	if strings.IndexByte(host, ':') >= 0 {
		host = "[" + host + "]"
	}
	if (scheme == "https" && t.port != 443) || (scheme == "http" && t.port != 80) {
		host += ":" + strconv.Itoa(int(t.port))
	}
	t.authority = host
}

// setUpstream records the passthrough connection so close reaches it;
// false means the tunnel is already closed.
func (t *tunnel) setUpstream(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.upstream = c
	return true
}

// close ends the tunnel: the client connection and any passthrough
// upstream. Safe to call more than once, from any goroutine.
func (t *tunnel) close() {
	t.mu.Lock()
	t.closed = true
	up, pending, child, trs, end := t.upstream, t.pending, t.child, t.transports, t.end
	t.pending = nil
	t.end = nil
	t.mu.Unlock()
	if end != nil {
		end("chaperone: the connection was closed (the session ended)")
	}
	for _, c := range []net.Conn{up, pending} {
		if c != nil {
			c.Close()
		}
	}
	for _, tr := range trs {
		if tr != nil {
			tr.CloseIdleConnections()
		}
	}
	if child != nil {
		child.close()
	}
	if t.conn != nil {
		t.conn.Close()
	}
}

// setChild records the relayed tunnel that the client's connection went
// on to; false means the tunnel is already closed.
func (t *tunnel) setChild(c *tunnel) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.child = c
	return true
}

// takePending returns the connection the relay opened for the tunnel, if
// no dial took it yet.
func (t *tunnel) takePending() net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.pending
	t.pending = nil
	return c
}

// setPending keeps c for the tunnel's first dial; false means the tunnel
// is already closed.
func (t *tunnel) setPending(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.pending = c
	return true
}

// hostMatches reports whether a request's Host (or :authority) names the
// tunnel's destination. An empty Host is the tunnel's. With a port, it must
// be the tunnel's. For a tunnel to a name (a CONNECT's, the SNI, a
// transparent plain HTTP connection's first Host), the same name (case and
// a trailing dot aside) or, for a name that is an address, the same
// address. For a tunnel to an address without a name (transparent mode, no
// SNI), the address itself or a name that the session's resolver (or a
// Resolve override) answered with it: any other would be recorded and
// decided as a host the request does not go to.
func (p *Proxy) hostMatches(t *tunnel, hostport string) bool {
	if hostport == "" {
		return true
	}
	host, port := splitHostPortLoose(hostport)
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || uint16(n) != t.port {
			return false
		}
	}
	host = strings.TrimSuffix(host, ".")
	if t.host == "" {
		return p.addrAgrees(t, host)
	}
	if host == t.host { // t.host is normalized: the same text is the same host
		return true
	}
	if len(host) > 0 && (host[0] < 'a' || host[0] > 'z') {
		if a, err := netip.ParseAddr(host); err == nil {
			b, err := netip.ParseAddr(t.host)
			return err == nil && a.Unmap() == b
		}
	}
	return strings.EqualFold(host, t.host)
}

// addrAgrees reports whether host, a request's host without its port,
// stands for the destination address of t, a tunnel without a name.
func (p *Proxy) addrAgrees(t *tunnel, host string) bool {
	if !t.dst.IsValid() {
		return false
	}
	addr := t.dst.Addr().Unmap()
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap() == addr
	}
	name := strings.ToLower(host)
	if p.names != nil && p.names.Resolved(t.session, name, addr) {
		return true
	}
	if p.resolve != nil {
		if a, ok := p.resolve(name, t.port); ok && a.Unmap() == addr {
			return true
		}
	}
	return false
}

// splitHostPortLoose splits "host", "host:port", "[v6]" and "[v6]:port".
func splitHostPortLoose(s string) (host, port string) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return s, ""
		}
		host, rest := s[1:end], s[end+1:]
		if strings.HasPrefix(rest, ":") {
			return host, rest[1:]
		}
		return host, rest // anything else after ']' makes the port invalid
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s, ':') == i {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// tunnelConn is a tunnel's client connection as the TLS server and the
// HTTP servers see it: reads drain the sniffing buffer first, then go
// straight to the connection; the first Close ends the tunnel (release)
// and releases whoever waits on done.
type tunnelConn struct {
	net.Conn
	t *tunnel
	p *Proxy
	r *bufio.Reader // the sniffing buffer until drained; read by one goroutine at a time
	// pre is read before r: a request line the proxy rewrote for net/http
	// (serveRequestLine).
	pre     []byte
	release func() // set before the tunnel is tracked
	once    sync.Once
	done    chan struct{}
	// g keeps writes between Gather(true) and Gather(false).
	g netx.Gathering
	// hello is the ClientHello at the head of r, once sniffHello read it.
	hello    *chtls.ClientHello
	helloErr error
	sniffed  bool
}

func (c *tunnelConn) Read(b []byte) (int, error) {
	if c.r != nil {
		if len(c.pre) > 0 {
			n := copy(b, c.pre)
			c.pre = c.pre[n:]
			return n, nil
		}
		if c.r.Buffered() > 0 {
			return c.r.Read(b)
		}
		c.p.putSniffReader(c.r)
		c.r = nil
	}
	return c.Conn.Read(b)
}

func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.release != nil {
			c.release()
		}
		close(c.done)
	})
	return err
}

func (c *tunnelConn) Write(b []byte) (int, error) { return c.g.Write(c.Conn, b) }

// Gather(true) starts keeping writes; Gather(false) sends what was kept,
// in one write.
func (c *tunnelConn) Gather(on bool) error { return c.g.Gather(c.Conn, on) }

// CloseWrite half-closes the client connection when it supports it.
func (c *tunnelConn) CloseWrite() error { return netx.CloseWrite(c.Conn) }

func (p *Proxy) getSniffReader(c net.Conn) *bufio.Reader {
	if r, ok := p.sniffBufs.Get().(*bufio.Reader); ok {
		r.Reset(c)
		return r
	}
	return bufio.NewReaderSize(c, chtls.SniffBufferSize)
}

func (p *Proxy) putSniffReader(r *bufio.Reader) {
	r.Reset(nil)
	p.sniffBufs.Put(r)
}

// prefixConn replays bytes a client sent before its CONNECT was answered.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *prefixConn) CloseWrite() error { return netx.CloseWrite(c.Conn) }

// tunnelKey is the context key of a request's *tunnel.
type tunnelKey struct{}

func tunnelFrom(ctx context.Context) *tunnel {
	t, _ := ctx.Value(tunnelKey{}).(*tunnel)
	return t
}

// routeOf is where the HTTP/1 upstream sends a request of ctx's tunnel:
// its destination, and its relays.
func routeOf(ctx context.Context) h1.Route {
	t := tunnelFrom(ctx)
	if t == nil {
		return h1.Route{}
	}
	rt := h1.Route{Dst: t.dst}
	if t.relay != nil {
		rt.Relay = t.relay.key
		if t.relay.forward {
			rt.Forward, rt.ProxyAuth = true, t.relay.proxyAuth
		}
	}
	return rt
}

// tunnelCerts asks for the certificate of the tunnel's host when the
// client sent no SNI (an explicit CONNECT to a name, a client speaking to
// an IP address).
type tunnelCerts struct{ src chtls.CertSource }

// tunnelConnOf is the tunnel connection under c, the TLS server's.
func tunnelConnOf(c net.Conn) (*tunnelConn, bool) {
	if w, ok := c.(*clientWatch); ok {
		c = w.Conn
	}
	tc, ok := c.(*tunnelConn)
	return tc, ok
}

func (c tunnelCerts) GetCertificate(h *stdtls.ClientHelloInfo) (*stdtls.Certificate, error) {
	if h.ServerName == "" {
		t := tunnelFrom(h.Context()) // a QUIC connection's
		if tc, ok := tunnelConnOf(h.Conn); ok {
			t = tc.t
		}
		if t != nil {
			// The tunnel's host, else its destination address: the proxy's
			// own address (the connection's local one) is not what the
			// client believes it reached.
			name := t.host
			if name == "" && t.dst.IsValid() {
				name = t.dst.Addr().Unmap().String()
			}
			if name != "" {
				named := *h
				named.ServerName = name
				return c.src.GetCertificate(&named)
			}
		}
	}
	return c.src.GetCertificate(h)
}

// bufferPool recycles body copy buffers without allocating.
type bufferPool chan []byte

func newBufferPool(n int) bufferPool { return make(bufferPool, n) }

func (bp bufferPool) Get() []byte {
	select {
	case b := <-bp:
		return b
	default:
		return make([]byte, 64<<10)
	}
}

func (bp bufferPool) Put(b []byte) {
	select {
	case bp <- b:
	default:
	}
}

// addrPortOf returns a net.Addr as an AddrPort, or the zero value.
func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case nil:
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
