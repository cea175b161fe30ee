package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/proxy/internal/netx"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func newTestH1(headerTimeout, idleTimeout time.Duration) *Transport {
	var d net.Dialer
	h := &Transport{
		Dial:          d.DialContext,
		HeaderTimeout: headerTimeout,
		MaxHeader:     4096,
		IdleTimeout:   idleTimeout,
		MaxIdlePerKey: 4,
		MaxIdle:       16,
		Watch:         netx.NewWatch(headerTimeout),
	}
	return h
}

// countingServer is an HTTP server on 127.0.0.1 that counts the
// connections it accepted.
// onState, when not nil, sees every connection state change too.
func countingServer(t *testing.T, h http.Handler, onState func(net.Conn, http.ConnState)) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
		if onState != nil {
			onState(c, st)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &n
}

func h1Do(t *testing.T, h *Transport, req *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := h.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: body: %v", req.Method, req.URL, err)
	}
	return res, string(b)
}

// TestH1UpstreamReuse: requests share one kept-alive connection, unless
// the upstream or the request says close, or a body is left unread.
func TestH1UpstreamReuse(t *testing.T) {
	tests := []struct {
		name      string
		header    http.Header // of the request
		respClose bool
		unread    bool // close the body before its end
		wantConns int32
	}{
		{"kept alive", nil, false, false, 1},
		{"request says close", http.Header{"Connection": {"close"}}, false, false, 5},
		{"response says close", nil, true, false, 5},
		{"body left unread", nil, false, true, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.respClose {
					w.Header().Set("Connection", "close")
				}
				io.WriteString(w, strings.Repeat("x", 64<<10))
			}), nil)
			h := newTestH1(time.Second, time.Minute)
			defer h.Close()
			for range 5 {
				req, _ := http.NewRequest(http.MethodGet, s.URL+"/", nil)
				for k, v := range tt.header {
					req.Header[k] = v
				}
				req.Close = tt.header.Get("Connection") == "close"
				if tt.unread {
					res, err := h.RoundTrip(req)
					if err != nil {
						t.Fatal(err)
					}
					res.Body.Read(make([]byte, 10))
					res.Body.Close()
					continue
				}
				if _, body := h1Do(t, h, req); len(body) != 64<<10 {
					t.Fatalf("body of %d bytes, want %d", len(body), 64<<10)
				}
			}
			if got := conns.Load(); got != tt.wantConns {
				t.Errorf("upstream accepted %d connections, want %d", got, tt.wantConns)
			}
		})
	}
}

// TestH1UpstreamClosedWhileIdle: the upstream closes a kept-alive
// connection while it sits in the pool. A GET is sent again on a new
// connection; a POST, which may not be sent twice, is never sent on it.
func TestH1UpstreamClosedWhileIdle(t *testing.T) {
	var mu sync.Mutex
	var got []string
	closed := make(chan struct{}, 10)
	var slow sync.WaitGroup
	slow.Add(3)
	s, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" { // the three arrive together, on three connections
			slow.Done()
			slow.Wait()
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+string(b))
		mu.Unlock()
		io.WriteString(w, "ok")
	}), func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateIdle:
			c.Close() // as an upstream's idle timeout would
		case http.StateClosed:
			closed <- struct{}{}
		}
	})
	h := newTestH1(time.Second, time.Minute)
	defer h.Close()
	send := func(method, body string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, s.URL+"/", rd)
		if _, b := h1Do(t, h, req); b != "ok" {
			t.Fatalf("%s: body %q", method, b)
		}
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the upstream did not close its idle connection")
		}
		time.Sleep(20 * time.Millisecond) // the FIN reaches the pooled side
	}
	send(http.MethodGet, "")
	send(http.MethodGet, "")
	send(http.MethodPost, "payload")
	// Three connections pooled at once, all closed by the upstream: a GET
	// tries each before a new one.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, s.URL+"/slow", nil)
			h1Do(t, h, req)
		})
	}
	wg.Wait()
	for range 3 {
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the upstream did not close its idle connections")
		}
	}
	time.Sleep(20 * time.Millisecond)
	send(http.MethodGet, "")
	mu.Lock()
	defer mu.Unlock()
	if want := "GET |GET |POST payload|GET |GET |GET |GET "; strings.Join(got, "|") != want {
		t.Errorf("upstream served %q, want %q", strings.Join(got, "|"), want)
	}
	if n := conns.Load(); n < 7 {
		t.Errorf("upstream accepted %d connections, want one per request (7)", n)
	}
}

// rawServer answers each connection with fn on 127.0.0.1.
func rawServer(t *testing.T, fn func(c net.Conn, br *bufio.Reader)) string {
	ap := upstream.ServeTCP(t, "127.0.0.1:0", func(c net.Conn) { fn(c, bufio.NewReader(c)) })
	return "http://" + ap.String()
}

// TestH1UpstreamResponseHeader: the response header is awaited at most
// headerTimeout and read up to maxHeader bytes; 1xx responses go to the
// trace; a body slower than headerTimeout is not cut.
func TestH1UpstreamResponseHeader(t *testing.T) {
	const timeout = 150 * time.Millisecond
	tests := []struct {
		name    string
		answer  func(c net.Conn)
		check   func(t *testing.T, err error)
		want1xx []int
		body    string
	}{
		{"silent upstream", func(c net.Conn) { time.Sleep(10 * timeout) }, func(t *testing.T, err error) {
			if !netx.IsTimeout(err) || !strings.Contains(err.Error(), "timeout") {
				t.Errorf("error %v, want a timeout", err)
			}
		}, nil, ""},
		{"header over maxHeader", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", 8000)+"\r\nContent-Length: 0\r\n\r\n")
		}, func(t *testing.T, err error) {
			var tl errHeaderTooLarge
			if !errors.As(err, &tl) {
				t.Errorf("error %v, want the header refused as too large", err)
			}
		}, nil, ""},
		{"early hints then the response", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}, nil, []int{103}, "ok"},
		{"body slower than the header timeout", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nsl")
			time.Sleep(3 * timeout)
			io.WriteString(c, "ow")
		}, nil, nil, "slow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err == nil {
					tt.answer(c)
				}
			})
			h := newTestH1(timeout, time.Minute)
			defer h.Close()
			var got1xx []int
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
					got1xx = append(got1xx, code)
					return nil
				},
			})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
			start := time.Now()
			res, err := h.RoundTrip(req)
			if tt.check != nil {
				if err == nil {
					res.Body.Close()
				}
				tt.check(t, err)
				if d := time.Since(start); d > 5*timeout {
					t.Errorf("failed after %v, want within a few times %v", d, timeout)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			if err != nil || string(b) != tt.body {
				t.Errorf("body %q, %v; want %q", b, err, tt.body)
			}
			if diff := cmp.Diff(tt.want1xx, got1xx, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("1xx responses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestH1UpstreamFullDuplex: a large request body of unknown length that
// the upstream echoes as it reads it is sent and received whole.
func TestH1UpstreamFullDuplex(t *testing.T) {
	s, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		io.Copy(w, r.Body)
	}), nil)
	h := newTestH1(5*time.Second, time.Minute)
	defer h.Close()
	payload := make([]byte, 4<<20)
	rand.Read(payload)
	pr, pw := io.Pipe()
	go func() {
		for b := payload; len(b) > 0; b = b[min(len(b), 32<<10):] {
			if _, err := pw.Write(b[:min(len(b), 32<<10)]); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/echo", pr)
	done := make(chan struct{})
	var body string
	go func() {
		defer close(done)
		_, body = h1Do(t, h, req)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("echo of 4 MiB did not complete: the exchange deadlocked")
	}
	if !bytes.Equal([]byte(body), payload) {
		t.Errorf("echoed %d bytes, not the %d sent", len(body), len(payload))
	}
}

// TestH1UpstreamCancel: cancelling the request's context ends a body read
// that waits on the upstream, and the connection is not pooled.
func TestH1UpstreamCancel(t *testing.T) {
	url := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
			br.ReadByte() // until the client goes
		}
	})
	h := newTestH1(time.Second, time.Minute)
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
	res, err := h.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 5)
	if _, err := io.ReadFull(res.Body, first); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if _, err := res.Body.Read(make([]byte, 10)); err == nil {
		t.Error("read after cancel succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("read returned %v after cancel", d)
	}
	res.Body.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nIdle != 0 {
		t.Errorf("%d connections pooled after a cancelled body, want 0", h.nIdle)
	}
}

// TestH1UpstreamIdleTimeout: pooled connections are closed after
// idleTimeout unused.
func TestH1UpstreamIdleTimeout(t *testing.T) {
	closed := make(chan struct{}, 1)
	s, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed <- struct{}{}
			}
		})
	h := newTestH1(time.Second, 50*time.Millisecond)
	defer h.Close()
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/", nil)
	h1Do(t, h, req)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("idle connection still open after 100 times idleTimeout")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nIdle != 0 || h.sweep != nil {
		t.Errorf("pool holds %d connections (sweep armed %v) after the idle timeout", h.nIdle, h.sweep != nil)
	}
}

// TestH1UpstreamSweepsClosed: a pooled connection the upstream closed is
// closed by the next sweep, long before the idle timeout; one the upstream
// keeps stays pooled through the sweeps and is used again.
func TestH1UpstreamSweepsClosed(t *testing.T) {
	closing, _ := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		func(c net.Conn, st http.ConnState) {
			if st == http.StateIdle {
				c.Close() // as an upstream's keep-alive timeout would
			}
		})
	keeping, accepted := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), nil)
	h := newTestH1(time.Second, time.Minute)
	h.CheckEvery = 10 * time.Millisecond
	defer h.Close()
	idle := func(s *httptest.Server) int {
		h.mu.Lock()
		defer h.mu.Unlock()
		for k, il := range h.idle {
			if k.authority == s.Listener.Addr().String() {
				return len(il.conns)
			}
		}
		return 0
	}
	for _, s := range []*httptest.Server{closing, keeping} {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/", nil)
		h1Do(t, h, req)
		if n := idle(s); n != 1 {
			t.Fatalf("%d connections pooled after a request, want 1", n)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); idle(closing) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a pooled connection the upstream closed is still pooled after 500 sweeps")
		}
	}
	time.Sleep(50 * time.Millisecond) // a few more sweeps
	if n := idle(keeping); n != 1 {
		t.Fatalf("the open connection was swept too: %d pooled", n)
	}
	req, _ := http.NewRequest(http.MethodGet, keeping.URL+"/", nil)
	h1Do(t, h, req)
	if n := accepted.Load(); n != 1 {
		t.Errorf("the upstream that keeps connections accepted %d, want 1 (the pooled one reused)", n)
	}
}

// TestH1BodyReady: a body reports itself ready while bytes of it are
// buffered (then the proxy arms no timer to flush a held header), and not
// while they have yet to arrive or once it has ended.
func TestH1BodyReady(t *testing.T) {
	release := make(chan struct{})
	url := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/together" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody")
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
			<-release
			io.WriteString(c, "body")
		}
	})
	h := newTestH1(time.Second, time.Minute)
	defer h.Close()
	for _, tt := range []struct {
		path string
		want bool
	}{{"/together", true}, {"/apart", false}} {
		t.Run(tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, url+tt.path, nil)
			res, err := h.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			rb, ok := res.Body.(interface{ Ready() bool })
			if !ok {
				t.Fatalf("body %T cannot tell whether it is ready", res.Body)
			}
			if got := rb.Ready(); got != tt.want {
				t.Errorf("ready before the first read = %v, want %v", got, tt.want)
			}
			if !tt.want {
				release <- struct{}{}
			}
			if b, err := io.ReadAll(res.Body); err != nil || string(b) != "body" {
				t.Fatalf("body %q, %v", b, err)
			}
			if rb.Ready() {
				t.Error("ready after the body ended")
			}
		})
	}
}

// TestCanonicalAddr: the shortcut for a Host that already has a port gives
// what the long way (Hostname, Port, JoinHostPort) gives.
func TestCanonicalAddr(t *testing.T) {
	long := func(u *url.URL) string {
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		return net.JoinHostPort(u.Hostname(), port)
	}
	for _, host := range []string{"a.test:443", "a.test", "A.Test:8443", "127.0.0.1:1", "[::1]:443", "[::1]",
		"a.test:", "a.test:4x3", ":443", "[fe80::1%en0]:443", "a:b:443", "[::1]:", "a.test:0443"} {
		for _, scheme := range []string{"http", "https"} {
			u := &url.URL{Scheme: scheme, Host: host}
			if got, want := canonicalAddr(u), long(u); got != want {
				t.Errorf("%s://%s: %q, want %q", scheme, host, got, want)
			}
		}
	}
}
