package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	stdtls "crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/certs"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
)

const (
	testSession = "s-test"
	testToken   = "tok-3f9a1c0d5e7b"
)

// recorder collects published events.
type recorder struct {
	mu  sync.Mutex
	evs []*event.Event
}

func (r *recorder) publish(e *event.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) all() []*event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*event.Event(nil), r.evs...)
}

// wait returns the first event matching pred, waiting up to 10s for it.
func (r *recorder) wait(t testing.TB, what string, pred func(*event.Event) bool) *event.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, e := range r.all() {
			if pred(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event; got %s", what, describe(r.all()))
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *recorder) kinds(k event.Kind) []*event.Event {
	var out []*event.Event
	for _, e := range r.all() {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func describe(evs []*event.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %s session=%q verdict=%s", e.Kind, e.Session, e.Verdict)
		switch {
		case e.Connect != nil:
			fmt.Fprintf(&b, " %+v", *e.Connect)
		case e.TLS != nil:
			fmt.Fprintf(&b, " %+v", *e.TLS)
		case e.HTTP != nil:
			fmt.Fprintf(&b, " %s %s host=%s status=%d", e.HTTP.Method, e.HTTP.URL, e.HTTP.Host, e.HTTP.Status)
		}
	}
	return b.String()
}

// env is a proxy listening on 127.0.0.1 with upstream servers on
// 127.0.0.2 reached through Resolve, never DNS.
type env struct {
	t        testing.TB
	p        *Proxy
	addr     string // the proxy's listen address
	rec      *recorder
	caPool   *x509.CertPool // trusts Chaperone's CA
	caPEM    []byte         // Chaperone's CA certificate
	upCA     *upstream.CA
	namesMu  sync.Mutex
	names    map[string]netip.Addr
	serveErr chan error
}

type envOptions struct {
	deny        []string
	decider     event.Decider // overrides the builtin policy
	peekTimeout time.Duration
	roots       *x509.CertPool // upstream roots; the upstream CA when nil
	processes   ProcessFinder
	passthrough func(string, netip.Addr) bool
	rewrites    *Rewrites // the test session's
	tune        func(*Options)
	// servers changes the proxy's HTTP servers before they start.
	servers func(p *Proxy)
	// listener wraps the proxy's listener.
	listener func(net.Listener) net.Listener
	// addr is the proxy's listen address; 127.0.0.1:0 when empty.
	addr string
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	ca, _, err := certs.LoadOrCreate(t.TempDir(), time.Now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	upCA, err := upstream.NewCA("upstream")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, rec: &recorder{}, upCA: upCA, names: map[string]netip.Addr{}, caPool: x509.NewCertPool(), serveErr: make(chan error, 1)}
	e.caPool.AddCert(ca.Certificate())
	e.caPEM = ca.PEM()
	dec := o.decider
	if dec == nil {
		b, err := policy.NewBuiltin(o.deny)
		if err != nil {
			t.Fatal(err)
		}
		dec = b
	}
	roots := o.roots
	if roots == nil {
		roots = upCA.Pool
	}
	opts := Options{
		Decider:       dec,
		Publish:       e.rec.publish,
		Certs:         certs.NewLeaves(ca, certs.LeafOptions{}),
		UpstreamRoots: roots,
		Resolve: func(host string, _ uint16) (netip.Addr, bool) {
			e.namesMu.Lock()
			defer e.namesMu.Unlock()
			a, ok := e.names[host]
			return a, ok
		},
		Processes:   o.processes,
		Passthrough: o.passthrough,
		PeekTimeout: o.peekTimeout,
	}
	if o.tune != nil {
		o.tune(&opts)
	}
	if o.rewrites != nil {
		opts.Rewrites = func(s string) *Rewrites {
			if s == testSession {
				return o.rewrites
			}
			return nil
		}
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	if o.servers != nil {
		o.servers(p)
	}
	p.AddSession(testSession, testToken)
	addr := o.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	if o.listener != nil {
		ln = o.listener(ln)
	}
	// The labels let a CPU profile tell the proxy's goroutines (and the
	// ones they start: tunnels, the inner server, the transport's) from
	// the client's and the upstream's: go tool pprof -tagfocus side=proxy.
	pprof.Do(context.Background(), pprof.Labels("side", "proxy"), func(context.Context) {
		go func() { e.serveErr <- p.Serve(ln) }()
	})
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-e.serveErr:
			if err != nil {
				t.Errorf("Serve returned %v after Close, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return e
}

// upstream starts an upstream server for name on 127.0.0.2 and makes the
// name resolve to it.
func (e *env) upstream(o upstream.Options) *upstream.Server {
	e.t.Helper()
	if o.Addr == "" {
		o.Addr = "127.0.0.2:0"
	}
	var s *upstream.Server
	var err error
	pprof.Do(context.Background(), pprof.Labels("side", "upstream"), func(context.Context) {
		s, err = upstream.Start(o)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close() })
	e.namesMu.Lock()
	e.names[o.Name] = s.Addr.Addr()
	e.namesMu.Unlock()
	return s
}

// hostPort is the name:port the client asks for.
func hostPort(s *upstream.Server) string {
	return net.JoinHostPort(s.Name, fmt.Sprint(s.Addr.Port()))
}

func (e *env) proxyURL(user, token string) *url.URL {
	u := &url.URL{Scheme: "http", Host: e.addr}
	if user != "" {
		u.User = url.UserPassword(user, token)
	}
	return u
}

// client returns an HTTP client that goes through the proxy with the
// session's token and trusts Chaperone's CA. protos are the ALPN offers.
func (e *env) client(h2 bool) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		Proxy:             http.ProxyURL(e.proxyURL(proxyUser, testToken)),
		TLSClientConfig:   &stdtls.Config{RootCAs: e.caPool},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}, tr
}

// connect opens a raw CONNECT tunnel through the proxy and returns the
// connection (positioned after the 200) or the refusal response.
func (e *env) connect(target, authHeader string) (net.Conn, *bufio.Reader, *http.Response) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if authHeader != "" {
		req += "Proxy-Authorization: " + authHeader + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		e.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return c, br, resp
	}
	return c, br, nil
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// waitGoroutines waits until at most n goroutines run, or fails with a dump.
func waitGoroutines(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), n, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deniedInTunnel opens a CONNECT tunnel to target, which the proxy accepts
// only to refuse what is inside, does TLS with Chaperone's CA for name and
// returns the status and body of one GET.
func (e *env) deniedInTunnel(target, name string) (int, string) {
	e.t.Helper()
	c, br, resp := e.connect(target, basicAuth(proxyUser, testToken))
	if resp != nil {
		e.t.Fatalf("CONNECT %s answered %d, want 200 and a 403 inside", target, resp.StatusCode)
	}
	if br.Buffered() > 0 {
		e.t.Fatalf("proxy sent bytes after its CONNECT response")
	}
	tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: name, NextProtos: []string{"http/1.1"}})
	req, _ := http.NewRequest("GET", "https://"+target+"/", nil)
	req.Host = target
	if err := req.Write(tc); err != nil {
		e.t.Fatal(err)
	}
	r, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(body)
}
