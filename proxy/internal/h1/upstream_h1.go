package h1

import (
	"bufio"
	"context"
	stdtls "crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/reqctx"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"
)

// Transport sends HTTP/1.1 requests upstream on the caller's goroutine:
// the handler writes the request and reads the response header itself, and
// whoever reads the body reads it from the connection. http.Transport hands
// every request to a writer goroutine and every response back from a reader
// goroutine, four goroutine switches a request that cost more than the rest
// of its work upstream; here a kept-alive request costs none. A request
// body of unknown or large length is still written by a goroutine of its
// own, so that an upstream answering (or echoing) before it has read the
// whole body cannot deadlock the exchange.
//
// Connections are pooled by scheme, authority and destination address, at
// most MaxIdlePerKey each, and closed after IdleTimeout unused. A pooled
// connection that the upstream closed meanwhile is found out before a
// request that cannot be replayed is sent on it (alive); a request that can
// be (no body, idempotent) is sent again instead, as http.Transport does.
// No goroutine watches an idle connection: a sweep every CheckEvery closes
// those the upstream closed (servers' keep-alive timeouts are often 5
// seconds), so that they do not hold a descriptor until IdleTimeout.
type Transport struct {
	Dial             func(ctx context.Context, network, addr string) (net.Conn, error)
	TLS              *stdtls.Config // cloned for each connection, with its ServerName
	HandshakeTimeout time.Duration  // for the TLS handshake; 10 s when zero
	HeaderTimeout    time.Duration  // for the response header, once the request is written
	MaxHeader        int            // bytes of response header, 1xx included
	IdleTimeout      time.Duration
	CheckEvery       time.Duration // how often idle connections are checked for the upstream's close
	MaxIdlePerKey    int
	MaxIdle          int
	Watch            *netx.Watch // keeps the response header timeouts
	// Route says where a request's connection goes (the tunnel's
	// destination and relays); nil for the request's authority alone.
	Route func(context.Context) Route

	mu     sync.Mutex
	idle   map[h1Key]*h1Idle // one lookup a get or put (h1Key's hash is not cheap)
	nIdle  int
	sweep  *time.Timer // closes connections idle for idleTimeout or closed upstream; nil when none are idle
	closed bool
}

// Route is where a request's connection goes beyond its authority.
type Route struct {
	Dst   netip.AddrPort // the tunnel's destination; pooled connections are kept apart by it
	Relay string         // the relays the tunnel goes through, as a pool key; "" for none
	// Forward: the relay is a forward proxy, sent requests in absolute
	// form with ProxyAuth as Proxy-Authorization.
	Forward   bool
	ProxyAuth []string
}

// handshakeTimeout is HandshakeTimeout or its default.
func (h *Transport) handshakeTimeout() time.Duration {
	if h.HandshakeTimeout > 0 {
		return h.HandshakeTimeout
	}
	return 10 * time.Second
}

// h1Idle is the idle connections of a key, most recently used last.
type h1Idle struct{ conns []*h1Conn }

// h1Key says which pooled connections a request may use: same scheme and
// authority, and same destination address for a tunnel that has one; for a
// relayed tunnel, the same relays reached the same way with the same
// credentials (Route.Relay), and never a connection made without them,
// nor theirs for a tunnel without: either would change where the bytes
// go.
type h1Key struct {
	https     bool
	authority string // host:port
	dst       netip.AddrPort
	relay     string
}

// inlineBodyMax is the largest request body written on the handler's
// goroutine before the response is read: it fits the socket buffers.
const inlineBodyMax = 64 << 10

// maxInformational bounds the 1xx responses passed on for one request.
const maxInformational = 16

// errHeaderTooLarge is a response header over maxHeader.
type errHeaderTooLarge int

func (e errHeaderTooLarge) Error() string {
	return "response header over " + strconv.Itoa(int(e)) + " bytes"
}

// headerTimeoutError is an upstream that sent no response header in time.
type headerTimeoutError time.Duration

func (e headerTimeoutError) Error() string {
	return "timeout awaiting the response header (" + time.Duration(e).String() + ")"
}
func (headerTimeoutError) Timeout() bool   { return true }
func (headerTimeoutError) Temporary() bool { return true }

// h1Conn is one upstream connection. Reads go through it so that the
// response header is bounded and a retry knows whether any answer came.
type h1Conn struct {
	raw    net.Conn        // the TCP connection
	batch  *netx.BatchConn // beneath TLS; nil for plain HTTP
	c      net.Conn        // raw, or TLS over it
	br     *bufio.Reader
	bw     *bufio.Writer
	key    h1Key
	limit  int   // bytes the response header may still take; < 0 when unbounded
	nread  int64 // bytes read since the request was written
	idleAt time.Time
	watch  *netx.Watch
	// header is the wait for the response header; headerAfterBody while
	// the request body is being written.
	header netx.Deadline
	// proxy is set on a connection to a relay that is a forward proxy:
	// requests are written in absolute form, with the client's
	// credentials for the relay.
	proxy     bool
	proxyAuth []string
}

// writeRequest writes req on the connection (see writeRequest).
func (pc *h1Conn) WriteRequest(req *http.Request, flushHead bool) error {
	if pc.proxy {
		return writeProxyRequest(pc.bw, req, pc.proxyAuth)
	}
	return WriteRequest(pc.bw, req, flushHead)
}

// writeProxyRequest writes req in absolute form, as a forward proxy takes
// it, with auth as its Proxy-Authorization.
func writeProxyRequest(bw *bufio.Writer, req *http.Request, auth []string) error {
	out := *req
	out.Header = req.Header.Clone()
	if out.Header == nil {
		out.Header = http.Header{}
	}
	delete(out.Header, "Proxy-Authorization")
	if len(auth) > 0 {
		out.Header["Proxy-Authorization"] = auth
	}
	return out.WriteProxy(bw)
}

// headerAfterBody is the state of h1Conn.header while the wait for the
// response header has not started: it starts once the body is written.
const headerAfterBody = -2

func (pc *h1Conn) Read(b []byte) (int, error) {
	if pc.limit >= 0 {
		if pc.limit == 0 {
			return 0, errHeaderTooLarge(0)
		}
		b = b[:min(len(b), pc.limit)]
	}
	n, err := pc.c.Read(b)
	if pc.limit >= 0 {
		pc.limit -= n
	}
	pc.nread += int64(n)
	return n, err
}

// buffered reports whether bytes the connection received are buffered:
// after a response, bytes no request asked for.
func (pc *h1Conn) buffered() bool {
	return pc.br.Buffered() > 0 || pc.batch != nil && pc.batch.Buffered()
}

// alive reports whether an idle connection is still open and quiet.
func (pc *h1Conn) alive() bool { return !pc.buffered() && netx.Alive(pc.raw) }

// cancelled closes the connection: its request's context is cancelled.
func (pc *h1Conn) Cancelled() { pc.close() }

// close closes the connection. It does not wait for a write in progress.
func (pc *h1Conn) close() {
	pc.watch.Remove(&pc.header)
	pc.raw.Close()
}

// RoundTrip sends req and returns the response, whose body must be read to
// its end or closed: a body read to its end gives the connection back to
// the pool. Informational responses go to the request's client trace.
func (h *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var got1xx func(int, textproto.MIMEHeader) error
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil {
		got1xx = trace.Got1xxResponse
	}
	return h.Send(req, got1xx)
}

// Send is RoundTrip with got1xx, when not nil, called for each
// informational response.
func (h *Transport) Send(req *http.Request, got1xx func(int, textproto.MIMEHeader) error) (*http.Response, error) {
	ctx := req.Context()
	key := h1Key{https: req.URL.Scheme == "https", authority: canonicalAddr(req.URL)}
	var rt Route
	if h.Route != nil {
		rt = h.Route(ctx)
		key.dst, key.relay = rt.Dst, rt.Relay
	}
	replayable := req.Body == nil && isIdempotent(req)
	for try := 0; ; try++ {
		pc, reused, err := h.get(ctx, key, rt, replayable)
		if err != nil {
			return nil, err
		}
		res, err := h.exchange(ctx, pc, req, got1xx)
		if err == nil {
			return res, nil
		}
		pc.close()
		// A kept-alive connection that the upstream had closed: nothing
		// came back, and the request may be sent again, on the next pooled
		// connection (the upstream may have closed several at once) or a
		// new one, whose failure is final. Each try uses up a pooled
		// connection, so this ends.
		if !reused || !replayable || pc.nread > 0 || ctx.Err() != nil || try > h.MaxIdle {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	}
}

// exchange writes req on pc and reads the response header.
func (h *Transport) exchange(ctx context.Context, pc *h1Conn, req *http.Request,
	got1xx func(int, textproto.MIMEHeader) error) (*http.Response, error) {
	pc.nread = 0
	stop := reqctx.OnCancel(ctx, pc)
	var written chan error
	if req.Body == nil || (req.ContentLength > 0 && req.ContentLength <= inlineBodyMax) {
		err := pc.WriteRequest(req, false)
		if err == nil {
			err = pc.bw.Flush()
		}
		if err != nil {
			stop.Stop()
			return nil, err
		}
		h.Watch.Arm(&pc.header, h.HeaderTimeout)
	} else {
		pc.header.Due.Store(headerAfterBody)
		written = make(chan error, 1)
		go h.writeBody(pc, req, written)
	}
	res, err := h.readHeader(ctx, pc, req, got1xx)
	if err != nil {
		stop.Stop()
		if written != nil {
			<-written // pc is closed by now: the writer ends
		}
		return nil, err
	}
	var b *h1Body
	if lb, ok := res.Body.(*lengthBody); ok && lb.wrap != nil {
		b = lb.wrap // allocated with the response
	} else {
		b = new(h1Body)
	}
	*b = h1Body{h: h, pc: pc, rc: res.Body, stop: stop, written: written,
		keep: !res.Close && !req.Close && res.StatusCode != http.StatusSwitchingProtocols}
	if res.Body == http.NoBody {
		b.end(b.keep)
		return res, nil
	}
	res.Body = b
	return res, nil
}

// writeBody writes a request with a large or streamed body, then starts
// the wait for the response header, unless it already came.
func (h *Transport) writeBody(pc *h1Conn, req *http.Request, written chan<- error) {
	err := pc.WriteRequest(req, true)
	if err == nil {
		err = pc.bw.Flush()
	}
	if err == nil {
		pc.header.Due.CompareAndSwap(headerAfterBody, h.Watch.At(h.HeaderTimeout))
	}
	written <- err
}

// readHeader reads the response header, passing 1xx responses to got1xx,
// within maxHeader bytes.
func (h *Transport) readHeader(ctx context.Context, pc *h1Conn, req *http.Request,
	got1xx func(int, textproto.MIMEHeader) error) (*http.Response, error) {
	pc.limit = h.MaxHeader
	defer func() { pc.limit = -1 }()
	for n := 0; ; n++ {
		res, err := ReadResponse(pc.br, req)
		if err == nil && res.StatusCode >= 200 && pc.header.Disarm() {
			err = os.ErrDeadlineExceeded // the header came as the wait expired
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case netx.IsTimeout(err):
				return nil, headerTimeoutError(h.HeaderTimeout)
			case pc.limit == 0:
				return nil, errHeaderTooLarge(h.MaxHeader)
			}
			return nil, err
		}
		if res.StatusCode >= 200 {
			return res, nil
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			pc.header.Disarm()
			return res, nil
		}
		if n == maxInformational {
			return nil, errors.New("too many informational responses")
		}
		if got1xx != nil {
			if err := got1xx(res.StatusCode, textproto.MIMEHeader(res.Header)); err != nil {
				return nil, err
			}
		}
	}
}

// h1Body is a response body read from a pooled connection.
type h1Body struct {
	h       *Transport
	pc      *h1Conn
	rc      io.ReadCloser
	stop    reqctx.Watch // of the request's context
	written chan error   // the body writer's result, when there is one
	keep    bool         // the connection may serve another request
	done    bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.end(err == io.EOF && b.keep)
	}
	return n, err
}

// Ready reports whether bytes of the body are already here: buffered, or
// a whole TLS record of them beneath.
func (b *h1Body) Ready() bool {
	return !b.done && (b.pc.br.Buffered() > 0 || b.pc.batch != nil && b.pc.batch.RecordReady())
}

// Close gives up on the rest of the body: the connection is closed.
func (b *h1Body) Close() error {
	if !b.done {
		b.end(false)
	}
	return nil
}

// end releases the connection: back to the pool if keep, the request was
// wholly written and the context watch did not fire, else closed.
func (b *h1Body) end(keep bool) {
	b.done = true
	if !b.stop.Stop() {
		keep = false
	}
	if b.written != nil {
		select {
		case err := <-b.written:
			keep = keep && err == nil
		default:
			keep = false
		}
	}
	if !keep || b.pc.buffered() {
		b.pc.close() // a body writer still running fails and ends; its result channel has room
		return
	}
	b.h.put(b.pc)
}

// get returns a pooled connection for key, or a new one.
func (h *Transport) get(ctx context.Context, key h1Key, rt Route, replayable bool) (pc *h1Conn, reused bool, err error) {
	now := time.Now()
	h.mu.Lock()
	for {
		il := h.idle[key]
		if il == nil || len(il.conns) == 0 {
			break
		}
		l := il.conns
		pc = l[len(l)-1]
		l[len(l)-1] = nil
		il.conns = l[:len(l)-1]
		h.nIdle--
		h.mu.Unlock()
		if now.Sub(pc.idleAt) < h.IdleTimeout && (replayable || pc.alive()) {
			return pc, true, nil
		}
		pc.close()
		h.mu.Lock()
	}
	h.mu.Unlock()
	pc, err = h.dialConn(ctx, key, rt)
	return pc, false, err
}

func (h *Transport) dialConn(ctx context.Context, key h1Key, rt Route) (*h1Conn, error) {
	raw, err := h.Dial(ctx, "tcp", key.authority)
	if err != nil {
		return nil, err
	}
	pc := &h1Conn{raw: raw, c: raw, key: key, limit: -1, watch: h.Watch}
	if key.relay != "" && rt.Forward {
		pc.proxy, pc.proxyAuth = true, rt.ProxyAuth
	}
	pc.header.Conn = raw
	h.Watch.Add(&pc.header)
	if key.https {
		conf := h.TLS.Clone()
		conf.ServerName, _, _ = net.SplitHostPort(key.authority)
		conf.ServerName = netx.NormalizeHost(conf.ServerName)
		pc.batch = &netx.BatchConn{Conn: raw}
		tc := stdtls.Client(pc.batch, conf)
		hctx, cancel := context.WithTimeout(ctx, h.handshakeTimeout())
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			pc.close()
			return nil, err
		}
		pc.c = tc
	}
	pc.br = bufio.NewReader(pc)
	pc.bw = bufio.NewWriter(pc.c)
	return pc, nil
}

// put returns pc to the pool, or closes it when the pool is full or
// closed.
func (h *Transport) put(pc *h1Conn) {
	pc.idleAt = time.Now()
	h.mu.Lock()
	il := h.idle[pc.key]
	if h.closed || il != nil && len(il.conns) >= h.MaxIdlePerKey || h.nIdle >= h.MaxIdle {
		h.mu.Unlock()
		pc.close()
		return
	}
	if il == nil {
		if h.idle == nil {
			h.idle = make(map[h1Key]*h1Idle)
		}
		il = &h1Idle{}
		h.idle[pc.key] = il
	}
	il.conns = append(il.conns, pc)
	h.nIdle++
	if h.sweep == nil {
		h.sweep = time.AfterFunc(h.sweepAfter(), h.prune)
	}
	h.mu.Unlock()
}

// sweepAfter is the longest wait before the next sweep.
func (h *Transport) sweepAfter() time.Duration {
	if h.CheckEvery > 0 {
		return min(h.IdleTimeout, h.CheckEvery)
	}
	return h.IdleTimeout
}

// prune closes the connections idle for idleTimeout or closed by the
// upstream, and comes back while any remain. The liveness check is one
// non-blocking peek per idle connection, under the pool's lock so that no
// request takes a connection while it is checked.
func (h *Transport) prune() {
	now := time.Now()
	var doomed []*h1Conn
	h.mu.Lock()
	next := h.sweepAfter()
	for k, il := range h.idle {
		l := il.conns
		kept := l[:0]
		for _, pc := range l {
			if age := now.Sub(pc.idleAt); age >= h.IdleTimeout || !pc.alive() {
				doomed = append(doomed, pc)
			} else {
				kept = append(kept, pc)
				next = min(next, h.IdleTimeout-age)
			}
		}
		clear(l[len(kept):])
		h.nIdle -= len(l) - len(kept)
		if len(kept) == 0 {
			delete(h.idle, k)
		} else {
			il.conns = kept
		}
	}
	h.sweep = nil
	if h.nIdle > 0 && !h.closed {
		h.sweep = time.AfterFunc(next, h.prune)
	}
	h.mu.Unlock()
	for _, pc := range doomed {
		pc.close()
	}
}

// CloseIdleConnections closes every pooled connection.
func (h *Transport) CloseIdleConnections() {
	h.mu.Lock()
	idle := h.idle
	h.idle = nil
	h.nIdle = 0
	if h.sweep != nil {
		h.sweep.Stop()
		h.sweep = nil
	}
	h.mu.Unlock()
	for _, il := range idle {
		for _, pc := range il.conns {
			pc.close()
		}
	}
}

// close closes the pool: connections given back later are closed.
func (h *Transport) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.CloseIdleConnections()
}

// canonicalAddr is u's host and port, the scheme's default port when it
// names none.
func canonicalAddr(u *url.URL) string {
	// Most often Host is that already: a name or IPv4 address and a port.
	if i := strings.LastIndexByte(u.Host, ':'); i > 0 && i < len(u.Host)-1 &&
		!strings.ContainsAny(u.Host[:i], ":[]%") && isDigits(u.Host[i+1:]) {
		return u.Host
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// isIdempotent reports whether req may be sent twice (RFC 9110 section
// 9.2.2), as http.Transport judges it.
func isIdempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
