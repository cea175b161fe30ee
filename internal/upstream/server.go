package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

// MaxRecordedBody is how much of each request body a Server records.
const MaxRecordedBody = 1 << 20

// Options configure a Server.
type Options struct {
	// Name is the host name the server answers for, e.g.
	// "api.example.test". Its certificate carries Name and the listen IP as
	// SANs, and URL uses it. Empty means the listen IP.
	Name string
	// Addr is the listen address, an IP literal and a port. It must be a
	// loopback address; default "127.0.0.1:0".
	Addr string
	// CA signs the server's certificate. Nil means plain HTTP.
	CA *CA
	// AnyName makes the server answer TLS for whatever name the client's
	// SNI asks, with a certificate the CA mints for that name on first
	// use: one server standing in for every host a program may contact.
	// Without SNI it presents Name's certificate.
	AnyName bool
	// HTTP1Only stops the server offering HTTP/2: over TLS, h2 is left out of
	// ALPN; over plain HTTP, prior-knowledge h2c is refused.
	HTTP1Only bool
	// Handler serves the requests. Nil means DefaultHandler(Name).
	Handler http.Handler
	// Logger receives the HTTP server's own errors (TLS handshake failures
	// and the like). Nil discards them.
	Logger *slog.Logger
}

// Request is what a Server received, recorded before its handler ran.
type Request struct {
	Method   string
	Path     string // URL path, decoded
	RawQuery string
	Host     string // Host header, or :authority in HTTP/2
	Proto    string // "HTTP/1.1", "HTTP/2.0"
	Header   http.Header
	// Body holds the first MaxRecordedBody bytes of the body;
	// BodyTruncated says the body went on beyond them.
	Body          []byte
	BodyTruncated bool
	ServerName    string // SNI the client sent; empty over plain HTTP or without SNI
	ALPN          string // negotiated protocol; empty over plain HTTP
	RemoteAddr    string
}

// Server is a running upstream server. Its exported fields are set by Start
// and must not be changed.
type Server struct {
	Name string         // the host name it answers for
	Addr netip.AddrPort // where it listens
	URL  string         // "https://NAME:PORT" or "http://NAME:PORT"; NAME resolves only through Dial

	ca    *CA
	srv   *http.Server
	serve chan struct{} // closed when Serve returns

	mu       sync.Mutex
	reqs     []Request
	changed  chan struct{} // closed and replaced on every new request
	hijacked map[net.Conn]struct{}
	closed   bool
}

// Start listens on opts.Addr and serves until Close. A non-loopback or
// non-literal address is an error: the servers stand in for the internet
// and must never be reachable from it.
func Start(opts Options) (*Server, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("upstream: start: address %q is not an IP literal and port: %w", addr, err)
	}
	if !ap.Addr().Unmap().IsLoopback() {
		return nil, fmt.Errorf("upstream: start: address %s is not loopback", ap)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	ipStr := ap.Addr().String()
	name := opts.Name
	if name == "" {
		name = ipStr
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	handler := opts.Handler
	if handler == nil {
		handler = DefaultHandler(name)
	}

	var protos http.Protocols
	protos.SetHTTP1(true)
	var tlsConf *tls.Config
	if opts.CA != nil {
		hosts := []string{name}
		if name != ipStr {
			hosts = append(hosts, ipStr)
		}
		cert, err := opts.CA.Leaf(hosts...)
		if err != nil {
			return nil, fmt.Errorf("upstream: start %s: %w", name, err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if opts.AnyName {
			tlsConf.GetCertificate = leavesByName(opts.CA, &cert)
		}
		protos.SetHTTP2(!opts.HTTP1Only)
	} else {
		protos.SetUnencryptedHTTP2(!opts.HTTP1Only)
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(ipStr, strconv.Itoa(int(ap.Port()))))
	if err != nil {
		return nil, fmt.Errorf("upstream: start %s: %w", name, err)
	}
	bound, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("upstream: start %s: listener address: %w", name, err)
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	s := &Server{
		Name:     name,
		Addr:     bound,
		URL:      scheme + "://" + net.JoinHostPort(name, strconv.Itoa(int(bound.Port()))),
		ca:       opts.CA,
		serve:    make(chan struct{}),
		changed:  make(chan struct{}),
		hijacked: make(map[net.Conn]struct{}),
	}
	s.srv = &http.Server{
		Handler:   s.record(handler),
		TLSConfig: tlsConf,
		Protocols: &protos,
		ErrorLog:  slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		ConnState: s.trackHijacked,
	}
	go func() {
		defer close(s.serve)
		if tlsConf != nil {
			_ = s.srv.ServeTLS(ln, "", "") // returns ErrServerClosed after Close
		} else {
			_ = s.srv.Serve(ln)
		}
	}()
	return s, nil
}

// leavesByName returns a GetCertificate that mints a leaf for each SNI
// name on first use, and def without SNI.
func leavesByName(ca *CA, def *tls.Certificate) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var mu sync.Mutex
	leaves := map[string]*tls.Certificate{}
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := strings.ToLower(hello.ServerName)
		if name == "" {
			return def, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if c, ok := leaves[name]; ok {
			return c, nil
		}
		c, err := ca.Leaf(name)
		if err != nil {
			return nil, fmt.Errorf("upstream: certificate for %s: %w", name, err)
		}
		leaves[name] = &c
		return &c, nil
	}
}

// record wraps next so that every request is recorded before next runs.
func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := Request{
			Method:     r.Method,
			Path:       r.URL.Path,
			RawQuery:   r.URL.RawQuery,
			Host:       r.Host,
			Proto:      r.Proto,
			Header:     r.Header.Clone(),
			RemoteAddr: r.RemoteAddr,
		}
		if r.TLS != nil {
			rec.ServerName = r.TLS.ServerName
			rec.ALPN = r.TLS.NegotiatedProtocol
		}
		if r.Body != nil && r.Body != http.NoBody {
			// Read one byte past the limit to learn whether the body goes on,
			// then hand the handler everything read plus the rest.
			head, _ := io.ReadAll(io.LimitReader(r.Body, MaxRecordedBody+1))
			if len(head) > 0 { // an empty body stays nil
				rec.Body = bytes.Clone(head[:min(len(head), MaxRecordedBody)])
			}
			rec.BodyTruncated = len(head) > MaxRecordedBody
			r.Body = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, rec)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

type readCloser struct {
	io.Reader
	io.Closer
}

// trackHijacked remembers hijacked connections, which http.Server.Close
// does not close, so that Close can.
func (s *Server) trackHijacked(c net.Conn, state http.ConnState) {
	if state != http.StateHijacked {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return
	}
	s.hijacked[c] = struct{}{}
}

// Requests returns a copy of the requests received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.copyLocked()
}

func (s *Server) copyLocked() []Request {
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		r.Header = r.Header.Clone()
		r.Body = bytes.Clone(r.Body)
		out[i] = r
	}
	return out
}

// WaitRequests waits until the server has received at least n requests and
// returns them all, as Requests does. If ctx ends first it returns those
// received so far and an error wrapping ctx's.
func (s *Server) WaitRequests(ctx context.Context, n int) ([]Request, error) {
	for {
		s.mu.Lock()
		if len(s.reqs) >= n {
			out := s.copyLocked()
			s.mu.Unlock()
			return out, nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			got := s.Requests()
			return got, fmt.Errorf("upstream: %s: waiting for %d requests, have %d: %w", s.Name, n, len(got), ctx.Err())
		}
	}
}

// Close stops the server and closes all its connections, hijacked ones
// included. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.hijacked
	s.hijacked = map[net.Conn]struct{}{}
	s.mu.Unlock()
	err := s.srv.Close()
	for c := range conns {
		c.Close()
	}
	<-s.serve
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("upstream: close %s: %w", s.Name, err)
	}
	return nil
}

// Dial returns a dial function that connects to the given servers by name,
// as a DialContext for an http.Transport or a proxy's upstream dialer: an
// address "NAME:PORT" (or "IP:PORT") of one of the servers goes to that
// server's Addr, and any other address is an error. It never uses DNS.
func Dial(servers ...*Server) func(ctx context.Context, network, addr string) (net.Conn, error) {
	routes := make(map[string]netip.AddrPort, 2*len(servers))
	for _, s := range servers {
		port := strconv.Itoa(int(s.Addr.Port()))
		routes[net.JoinHostPort(s.Name, port)] = s.Addr
		routes[s.Addr.String()] = s.Addr
	}
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to, ok := routes[addr]
		if !ok {
			return nil, fmt.Errorf("upstream: dial %s: not a known upstream server", addr)
		}
		return d.DialContext(ctx, network, to.String())
	}
}

// Client returns an HTTP client that trusts the server's CA, offers HTTP/2
// and dials the server by name through Dial, never through DNS. Other
// servers can be made reachable by the same client by passing them.
func (s *Server) Client(others ...*Server) *http.Client {
	tr := &http.Transport{
		DialContext:       Dial(append([]*Server{s}, others...)...),
		ForceAttemptHTTP2: true,
	}
	if s.ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: s.ca.Pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}
}
