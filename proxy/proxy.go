package proxy

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"
	"github.com/chaperone-dev/chaperone/proxy/internal/h2"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	stdtls "crypto/tls"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy/internal/h3"
	chtls "github.com/chaperone-dev/chaperone/tls"
)

// ProcessFinder says which process owns a client connection: client is its
// remote address, proxy the local address it reached, session the session
// the client named ("" when it named none: a request refused with 407).
type ProcessFinder interface {
	ProcessForConn(client, proxy netip.AddrPort, session string) (*event.Process, error)
}

// ProcessFinderFunc adapts a function to ProcessFinder.
type ProcessFinderFunc func(client, proxy netip.AddrPort, session string) (*event.Process, error)

// ProcessForConn calls f.
func (f ProcessFinderFunc) ProcessForConn(client, proxy netip.AddrPort, session string) (*event.Process, error) {
	return f(client, proxy, session)
}

// ResolverMemory says whether a session's resolver answered a name with an
// address (for any process of the session, whatever it answered with the
// address since). A request on a tunnel to an address that has no name (a
// transparent connection to an IP, no SNI) may name that address in its
// Host, or a name the resolver answered with it, and nothing else.
type ResolverMemory interface {
	Resolved(session, host string, addr netip.Addr) bool
}

// ResolverMemoryFunc adapts a function to ResolverMemory.
type ResolverMemoryFunc func(session, host string, addr netip.Addr) bool

// Resolved calls f.
func (f ResolverMemoryFunc) Resolved(session, host string, addr netip.Addr) bool {
	return f(session, host, addr)
}

// Options configure a Proxy.
type Options struct {
	Logger *slog.Logger // nil discards
	// Decider decides every connect, tls and http event, synchronously on
	// the request's path. Required.
	Decider event.Decider
	// Publish receives every decided event (bus.Publish); nil discards.
	// Events must not be modified after Publish.
	Publish func(*event.Event)
	// Certs supplies the leaves presented to intercepted clients. Required.
	Certs chtls.CertSource
	// UpstreamRoots verifies upstream servers; nil means the system roots.
	UpstreamRoots *x509.CertPool
	// Resolve maps a host to an address before DNS is consulted (the
	// --resolve overrides); nil or false means DNS.
	Resolve func(host string, port uint16) (netip.Addr, bool)
	// Names says which names a session's resolver answered with an
	// address (see ResolverMemory); nil knows none, and a request to an
	// address without a name must then name the address itself (or a
	// Resolve override of it).
	Names ResolverMemory
	// Processes finds the process behind a client connection; optional.
	Processes ProcessFinder
	// Now is the clock for event times; nil means time.Now.
	Now func() time.Time
	// PeekTimeout is how long a tunnel waits for the client's first bytes
	// before treating the protocol as server-first and passing it through;
	// 300ms when zero.
	PeekTimeout time.Duration
	// Passthrough says which TLS servers are not intercepted: their
	// connections are passed through, still decided on their connect and
	// tls events, for clients that pin certificates. It gets the SNI (or
	// the tunnel's host when there is none) and the destination address.
	// Nil intercepts everything.
	Passthrough func(host string, dst netip.Addr) bool
	// Rewrites returns what to change in a session's requests (secrets
	// redacted, credentials injected, identity headers, LLM calls parsed);
	// nil, or a nil result, changes nothing.
	Rewrites func(session string) *Rewrites

	// ReadHeaderTimeout is how long a client has to send a request's
	// header, on the explicit-proxy port and inside tunnels; a client that
	// trickles its header (slowloris) is disconnected after it. 30s when
	// zero.
	ReadHeaderTimeout time.Duration
	// HandshakeTimeout is how long a tunnel's client has to send its
	// ClientHello and finish the TLS handshake with the proxy; 10s when
	// zero.
	HandshakeTimeout time.Duration
	// UpstreamHeaderTimeout is how long an upstream has, once a request is
	// sent, to answer with a response header before the client gets 504.
	// It bounds waiting for a silent upstream, not a response that is
	// streaming; it is long because a non-streaming LLM call sends its
	// header only once the whole answer is written. 10 minutes when zero.
	UpstreamHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request header from a client (a larger one
	// gets 431, with an http event refusing it by rule header_too_large)
	// and a response header from an upstream (a larger one gets the client
	// a 502). A request header is measured as HTTP/1.1 sends it: request
	// line and header fields, for HTTP/2 requests too. 1 MiB when zero.
	MaxHeaderBytes int
	// QUICClients says that transparent-mode clients' QUIC (UDP to port
	// 443) comes to the proxy (ServeQUIC): an origin's Alt-Svc then
	// reaches them as it came, h3 included. Unset (QUIC refused, or let
	// through unmediated), its h3 alternatives are removed for them as
	// for explicit-mode clients: a client told of HTTP/3 would try QUIC
	// that is refused, or that goes around the proxy.
	QUICClients bool
}

// Tunnel describes a client connection whose connect event was allowed:
// an explicit CONNECT, or a connection redirected in transparent mode.
type Tunnel struct {
	Session string
	// Host is the name the client asked for; may be empty. In
	// transparent mode it is only the name the process looked the
	// destination address up as: the connection's own ClientHello (SNI)
	// or HTTP Host names it when it can (see ServeTransparent).
	Host    string
	Dst     netip.AddrPort // where the client was going, when known
	Port    uint16         // the destination port; Dst's when zero
	Process *event.Process
	Via     string // "connect", "transparent"
}

// innerIdleTimeout closes a tunnel's connection that has sent no new
// request for this long, and one whose socket takes no bytes of a
// response for as long.
const innerIdleTimeout = 2 * time.Minute

const (
	defaultPeekTimeout           = 300 * time.Millisecond
	defaultReadHeaderTimeout     = 30 * time.Second
	defaultHandshakeTimeout      = 10 * time.Second
	defaultUpstreamHeaderTimeout = 10 * time.Minute
	defaultMaxHeaderBytes        = 1 << 20
	upstreamHandshakeTimeout     = 10 * time.Second
	// upstreamCheckEvery is how often pooled HTTP/1 connections are
	// checked for an upstream that closed them.
	upstreamCheckEvery = 5 * time.Second
	dialTimeout        = 10 * time.Second
	// maxH2Workers bounds the goroutines kept to run HTTP/2 handlers:
	// beyond it, a request runs on its own goroutine.
	maxH2Workers = 256
)

// Proxy is Chaperone's intercepting proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	log         *slog.Logger
	decider     event.Decider
	publishFn   func(*event.Event)
	resolve     func(string, uint16) (netip.Addr, bool)
	names       ResolverMemory
	procs       ProcessFinder
	now         func() time.Time
	peekTimeout time.Duration
	// handshakeTimeout bounds a tunnel client's ClientHello and TLS
	// handshake.
	handshakeTimeout time.Duration
	noIntercept      func(string, netip.Addr) bool
	// rejections remembers the hosts whose clients refused the CA, per
	// session (reject.go).
	rejections *caRejections
	rewrites   func(string) *Rewrites
	// readHeaderTimeout and maxHeaderBytes are the limits on a client's
	// request header; the servers enforce the first, the handlers the
	// second (the servers' limit is headerHardLimit).
	readHeaderTimeout time.Duration
	maxHeaderBytes    int

	mitmTLS   *stdtls.Config
	quicTLS   *stdtls.Config // QUIC connections' (ServeQUIC): decides at the ClientHello
	dialer    net.Dialer
	sniffBufs sync.Pool  // *bufio.Reader of chtls.SniffBufferSize
	bufs      bufferPool // body copy buffers
	exchanges sync.Pool  // of *exchange, for newExchange

	// Upstream requests go over HTTP/1.1 (upstreamH1), from HTTP/1 and
	// HTTP/2 clients alike: it costs the proxy (and the upstream) less per
	// request than HTTP/2, and keeps one client's requests from sharing
	// flow control with others'. gRPC needs HTTP/2 end to end: an HTTP/2
	// client's gRPC requests (needsH2) go through transport, which speaks
	// HTTP/2 when the upstream offers it.
	transport   *http.Transport // HTTP/2 when offered, else HTTP/1.1: gRPC
	transportH1 *http.Transport // HTTP/1.1 only: protocol switches
	// newRelayTransport makes a relayed tunnel's own transports, as
	// transport and transportH1 are made (see tunnelTransport).
	newRelayTransport func(h1Only bool) *http.Transport
	upstreamH1        *h1.Transport // HTTP/1.1 only: every other request
	// h3Client sends requests over HTTP/3 to origins that offer it
	// (altSvc) or that the client reached over QUIC.
	h3Client *h3.Client
	altSvc   *h3.AltCache
	// quicClients: transparent clients' QUIC comes to the proxy
	// (Options.QUICClients), so Alt-Svc's h3 passes to them.
	quicClients bool
	rp          *httputil.ReverseProxy // protocol switches only; roundTrip serves the rest

	front *http.Server // explicit-proxy requests; a tunnel's are served by h1 and h2
	h1    *h1.Server
	h2    *h2.Server

	clientWatch *netx.Watch // the idle, header and stall timeouts of tunnels' connections
	h2Workers   *h2.Workers

	sessions atomic.Pointer[sessionTable]
	sessMu   sync.Mutex // serialises writers of sessions

	mu        sync.Mutex
	closed    bool
	tunnels   map[*tunnel]struct{}
	listeners map[net.Listener]struct{} // transparent listeners
	// quicServers are ServeQUIC's servers and their packet connections.
	quicServers map[*h3.Server]net.PacketConn
}

// New returns a Proxy. It starts nothing: Serve and ServeTunnel do.
func New(opts Options) (*Proxy, error) {
	if opts.Decider == nil {
		return nil, errors.New("proxy: options: Decider is required")
	}
	if opts.Certs == nil {
		return nil, errors.New("proxy: options: Certs is required")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PeekTimeout", opts.PeekTimeout},
		{"ReadHeaderTimeout", opts.ReadHeaderTimeout},
		{"HandshakeTimeout", opts.HandshakeTimeout},
		{"UpstreamHeaderTimeout", opts.UpstreamHeaderTimeout},
	} {
		if d.v < 0 {
			return nil, fmt.Errorf("proxy: options: negative %s %v", d.name, d.v)
		}
	}
	if opts.MaxHeaderBytes < 0 {
		return nil, fmt.Errorf("proxy: options: negative MaxHeaderBytes %d", opts.MaxHeaderBytes)
	}
	readHeaderTimeout := cmp.Or(opts.ReadHeaderTimeout, defaultReadHeaderTimeout)
	maxHeaderBytes := cmp.Or(opts.MaxHeaderBytes, defaultMaxHeaderBytes)
	upstreamHeaderTimeout := cmp.Or(opts.UpstreamHeaderTimeout, defaultUpstreamHeaderTimeout)
	p := &Proxy{
		quicClients:       opts.QUICClients,
		log:               opts.Logger,
		decider:           opts.Decider,
		publishFn:         opts.Publish,
		resolve:           opts.Resolve,
		names:             opts.Names,
		procs:             opts.Processes,
		now:               opts.Now,
		peekTimeout:       opts.PeekTimeout,
		noIntercept:       opts.Passthrough,
		rejections:        newCARejections(),
		handshakeTimeout:  cmp.Or(opts.HandshakeTimeout, defaultHandshakeTimeout),
		rewrites:          opts.Rewrites,
		readHeaderTimeout: readHeaderTimeout,
		maxHeaderBytes:    maxHeaderBytes,
		dialer:            net.Dialer{Timeout: dialTimeout},
		tunnels:           make(map[*tunnel]struct{}),
		listeners:         make(map[net.Listener]struct{}),
		quicServers:       make(map[*h3.Server]net.PacketConn),
		clientWatch:       netx.NewWatch(min(readHeaderTimeout, innerIdleTimeout)),
		bufs:              newBufferPool(64),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.h1 = &h1.Server{
		Handler:           http.HandlerFunc(p.serveInner),
		Watch:             p.clientWatch,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       innerIdleTimeout,
		StallTimeout:      innerIdleTimeout,
		MaxHeaderBytes:    headerHardLimit(maxHeaderBytes),
		Log:               p.log,
	}
	p.h2Workers = h2.NewWorkers(maxH2Workers, p.log)
	p.h2 = &h2.Server{
		Handler:   http.HandlerFunc(p.serveInner),
		MaxHeader: headerHardLimit(maxHeaderBytes),
		Idle:      innerIdleTimeout,
		Stall:     innerIdleTimeout,
		Preface:   readHeaderTimeout,
		Watch:     p.clientWatch,
		Spawn:     p.h2Workers.Start,
		Log:       p.log,
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.peekTimeout == 0 {
		p.peekTimeout = defaultPeekTimeout
	}
	p.sessions.Store(&sessionTable{})
	p.mitmTLS = chtls.ServerConfig(tunnelCerts{opts.Certs})
	p.quicTLS = &stdtls.Config{
		GetCertificate:     tunnelCerts{opts.Certs}.GetCertificate,
		GetConfigForClient: p.helloQUIC,
		NextProtos:         []string{h3.NextProto},
		MinVersion:         stdtls.VersionTLS13,
	}
	p.transport = p.newTransport(opts.UpstreamRoots, false, upstreamHeaderTimeout, maxHeaderBytes)
	p.transportH1 = p.newTransport(opts.UpstreamRoots, true, upstreamHeaderTimeout, maxHeaderBytes)
	p.newRelayTransport = func(h1Only bool) *http.Transport {
		return p.newTransport(opts.UpstreamRoots, h1Only, upstreamHeaderTimeout, maxHeaderBytes)
	}
	p.upstreamH1 = &h1.Transport{
		Dial:             p.dialUpstream,
		TLS:              p.transportH1.TLSClientConfig,
		HeaderTimeout:    upstreamHeaderTimeout,
		MaxHeader:        maxHeaderBytes,
		IdleTimeout:      p.transportH1.IdleConnTimeout,
		CheckEvery:       upstreamCheckEvery,
		MaxIdlePerKey:    p.transportH1.MaxIdleConnsPerHost,
		MaxIdle:          p.transportH1.MaxIdleConns,
		Watch:            netx.NewWatch(upstreamHeaderTimeout),
		HandshakeTimeout: upstreamHandshakeTimeout,
		Route:            routeOf,
	}
	p.h3Client = &h3.Client{
		TLS:                    &stdtls.Config{RootCAs: opts.UpstreamRoots, MinVersion: stdtls.VersionTLS13},
		HeaderTimeout:          upstreamHeaderTimeout,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	p.altSvc = &h3.AltCache{Now: p.now}
	errLog := slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	p.rp = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     tunnelTransport{p: p, h1Only: true}, // upgrades are HTTP/1.1
		FlushInterval: -1,                                  // stream as it comes: SSE and LLM token streams
		ErrorHandler:  p.upstreamError,
		BufferPool:    p.bufs,
		ErrorLog:      errLog,
	}
	frontProtos := new(http.Protocols)
	frontProtos.SetHTTP1(true)
	p.front = &http.Server{
		Handler:           http.HandlerFunc(p.serveFront),
		ConnContext:       p.frontConnContext,
		ConnState:         p.frontConnState,
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    headerHardLimit(maxHeaderBytes),
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          errLog,
		Protocols:         frontProtos,
	}
	return p, nil
}

// newTransport returns an upstream transport: keep-alive, no environment
// proxy, upstreams verified against roots, HTTP/2 when offered unless
// h1Only, a response header awaited at most headerTimeout and read up to
// maxHeader bytes.
func (p *Proxy) newTransport(roots *x509.CertPool, h1Only bool, headerTimeout time.Duration, maxHeader int) *http.Transport {
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetHTTP2(!h1Only)
	tlsConf := &stdtls.Config{RootCAs: roots, MinVersion: stdtls.VersionTLS12}
	if h1Only {
		tlsConf.NextProtos = []string{"http/1.1"} // as an HTTP/1 client offers it
	}
	return &http.Transport{
		Proxy:                  nil, // never an environment proxy: Chaperone is the last hop
		DialContext:            p.dialUpstream,
		TLSClientConfig:        tlsConf,
		Protocols:              protos,
		DisableCompression:     true, // pass the client's Accept-Encoding through untouched
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    upstreamHandshakeTimeout,
		ResponseHeaderTimeout:  headerTimeout,
		MaxResponseHeaderBytes: int64(maxHeader),
		ExpectContinueTimeout:  time.Second,
	}
}

// AddSession lets clients presenting token act for session id, replacing
// the session's previous token. An empty token is ignored: it would match
// a client that sends none.
func (p *Proxy) AddSession(id, token string) {
	if id == "" || token == "" {
		p.log.Warn("proxy: session not added: empty id or token", "session", id)
		return
	}
	p.sessMu.Lock()
	defer p.sessMu.Unlock()
	p.sessions.Store(p.sessions.Load().with(id, token))
}

// RemoveSession forgets session id and closes its tunnels: a session that
// ended keeps no network access.
func (p *Proxy) RemoveSession(id string) {
	p.sessMu.Lock()
	p.sessions.Store(p.sessions.Load().without(id))
	p.sessMu.Unlock()
	p.rejections.forget(id)
	var doomed []*tunnel
	p.mu.Lock()
	for t := range p.tunnels {
		if t.session == id {
			doomed = append(doomed, t)
		}
	}
	p.mu.Unlock()
	for _, t := range doomed {
		t.close()
	}
}

// Serve accepts explicit-proxy connections on l until Close, after which
// it returns nil. l is closed when Serve returns.
func (p *Proxy) Serve(l net.Listener) error {
	err := p.front.Serve(frontListener{l})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("proxy: serve: %w", err)
}

// ServeTunnel runs the tunnel logic on c, a client connection whose connect
// event the caller has already decided and allowed, and returns when the
// tunnel is over; c is closed by then. Cancelling ctx closes the tunnel. A
// tunnel for a session the Proxy does not know is closed at once.
func (p *Proxy) ServeTunnel(ctx context.Context, c net.Conn, t Tunnel) {
	if !p.sessions.Load().has(t.Session) {
		p.log.Debug("proxy: tunnel refused: unknown session", "session", t.Session)
		c.Close()
		return
	}
	port := t.Port
	if port == 0 {
		port = t.Dst.Port()
	}
	via := t.Via
	if via == "" {
		via = "transparent"
	}
	tc, handedOff := p.serveTunnel(ctx, netx.RawIO(c), &tunnel{
		session: t.Session,
		process: t.Process,
		host:    netx.NormalizeHost(t.Host),
		port:    port,
		dst:     t.Dst,
		via:     via,
	})
	if handedOff {
		<-tc.done
	}
}

// Close stops the Proxy: listeners, tunnels and upstream connections are
// closed, and Serve returns. It is safe to call more than once and before
// anything started.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	tunnels := make([]*tunnel, 0, len(p.tunnels))
	for t := range p.tunnels {
		tunnels = append(tunnels, t)
	}
	listeners := make([]net.Listener, 0, len(p.listeners))
	for l := range p.listeners {
		listeners = append(listeners, l)
	}
	quics := make(map[*h3.Server]net.PacketConn, len(p.quicServers))
	maps.Copy(quics, p.quicServers)
	p.mu.Unlock()

	err := p.front.Close()
	for _, l := range listeners {
		l.Close()
	}
	for srv, pc := range quics {
		srv.Close()
		pc.Close()
	}
	p.h2Workers.Stop()
	for _, t := range tunnels {
		t.close()
	}
	p.transport.CloseIdleConnections()
	p.transportH1.CloseIdleConnections()
	p.upstreamH1.Close()
	p.h3Client.Close()
	if err != nil {
		return fmt.Errorf("proxy: close: %w", err)
	}
	return nil
}

// track registers t so that Close and RemoveSession can end it; false
// means the Proxy is closed.
func (p *Proxy) track(t *tunnel) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.tunnels[t] = struct{}{}
	return true
}

func (p *Proxy) untrack(t *tunnel) {
	p.mu.Lock()
	delete(p.tunnels, t)
	p.mu.Unlock()
}

func (p *Proxy) publish(e *event.Event) {
	if p.publishFn != nil {
		p.publishFn(e)
	}
}

// decide asks the Decider and returns the verdict the proxy applies: only
// allow and rewrite let anything through, asking is not available on this
// path yet, and a Decider that panics denies.
func (p *Proxy) decide(ctx context.Context, e *event.Event) (v event.Verdict) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("proxy: decider panicked; denying", "kind", e.Kind, "session", e.Session, "panic", r)
			v = event.Verdict{Action: event.Deny, Reason: "the policy failed to decide", DecidedBy: event.DecidedByDefault}
		}
	}()
	return p.decider.Decide(ctx, e).Enforced()
}

// denyMessage is the body of a refusal: it names the rule and the reason,
// never anything secret (rules and reasons never are).
func denyMessage(v event.Verdict) string {
	reason := v.Reason
	if reason == "" {
		reason = "no reason given"
	}
	if v.Rule != "" {
		return "chaperone: denied by rule " + v.Rule + ": " + reason + "\n"
	}
	return "chaperone: denied by " + v.DecidedBy.String() + ": " + reason + "\n"
}

// proxyVerdict is a refusal the proxy makes by itself, as a built-in rule.
func proxyVerdict(rule, reason string) event.Verdict {
	return event.Verdict{Action: event.Deny, Rule: rule, Reason: reason, DecidedBy: event.DecidedByRule}
}

// RuleProxyAuth is the rule of a 407: a request to the explicit proxy
// without a session's token. Its event belongs to no session; libcurl
// sends one on purpose (proxy auth "anyauth": ask first, then send the
// credentials the challenge asks for), so a 407 followed by the client's
// request with the token is a challenge answered, not a refusal.
const RuleProxyAuth = "proxy_auth"

// Rules the proxy applies by itself.
const (
	ruleDomainFronting  = "domain_fronting"
	ruleMalformedHello  = "malformed_client_hello"
	ruleUnknownSession  = "unknown_session"
	ruleNestedConnect   = "nested_connect"
	ruleNotProxyRequest = "not_a_proxy_request"
	ruleHeaderTooLarge  = "header_too_large"
	ruleHeaderTimeout   = "header_timeout"
	// A request line or relay request that cannot be read.
	ruleMalformedRequest = "malformed_request"
	// What a relay is asked that the proxy does not relay: a SOCKS
	// command other than CONNECT, a scheme other than http in absolute
	// form, an unspecified address.
	ruleRelayUnsupported = "relay_unsupported"
	// A relay asked through more than maxRelayDepth relays.
	ruleRelayDepth = "relay_depth"
)

func writeText(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write([]byte(body))
}
