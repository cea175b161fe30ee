package tlsfloor

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/bench/benchca"
)

// origin answers GET /hello, echoes a POST's body, answers HEAD and
// /empty without a body, /chunked with a chunked body and /last with
// Connection: close. It counts the connections it accepts.
func origin(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/empty":
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/last":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "last")
		case r.URL.Path == "/chunked":
			w.(http.Flusher).Flush()
			io.WriteString(w, "streamed")
		case r.Method == http.MethodPost:
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
		default:
			w.Header().Set("X-Origin", "yes")
			io.WriteString(w, "hello over "+r.Proto)
		}
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.StartTLS()
	t.Cleanup(up.Close)
	return up, &conns
}

// start serves a Proxy that trusts up, and returns its URL and a pool
// with its CA.
func start(t *testing.T, up *httptest.Server) (*url.URL, *x509.CertPool) {
	t.Helper()
	_, u, pool := startProxy(t, up)
	return u, pool
}

// startProxy is start, and the proxy it started.
func startProxy(t *testing.T, up *httptest.Server) (*Proxy, *url.URL, *x509.CertPool) {
	t.Helper()
	ca, caPEM, err := benchca.New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := New(ca, roots)
	go p.Serve(l)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return p, &url.URL{Scheme: "http", Host: l.Addr().String()}, pool
}

func client(proxy *url.URL, ca *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:             http.ProxyURL(proxy),
		TLSClientConfig:   &tls.Config{RootCAs: ca},
		ForceAttemptHTTP2: true, // offered, and refused: the proxy speaks HTTP/1.1
	}}
}

// TestForwards: requests of every framing the proxy handles reach the
// origin and come back whole, over one kept-alive connection each side,
// with an ECDSA leaf of the proxy's CA.
func TestForwards(t *testing.T) {
	up, conns := origin(t)
	proxy, ca := start(t, up)
	c := client(proxy, ca)
	var reused int
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused++
		}
	}}
	do := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, up.URL+path, strings.NewReader(body))
		if body == "" {
			req.Body = nil
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: body: %v", method, path, err)
		}
		return res, string(b)
	}
	res, body := do("GET", "/hello", "")
	if res.StatusCode != 200 || body != "hello over HTTP/1.1" || res.Header.Get("X-Origin") != "yes" || res.Proto != "HTTP/1.1" {
		t.Errorf("GET: %d %q %s, header %v", res.StatusCode, body, res.Proto, res.Header)
	}
	if res.TLS == nil || len(res.TLS.PeerCertificates) == 0 {
		t.Fatal("GET: no TLS state")
	}
	if _, ok := res.TLS.PeerCertificates[0].PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("leaf key %T, want ECDSA", res.TLS.PeerCertificates[0].PublicKey)
	}
	big := strings.Repeat("0123456789", 100_000)
	if res, body = do("POST", "/echo", big); res.StatusCode != 200 || body != big {
		t.Errorf("POST: %d, %d bytes back of %d", res.StatusCode, len(body), len(big))
	}
	if res, body = do("HEAD", "/hello", ""); res.StatusCode != 200 || body != "" {
		t.Errorf("HEAD: %d %q", res.StatusCode, body)
	}
	if res, body = do("GET", "/empty", ""); res.StatusCode != 204 || body != "" {
		t.Errorf("204: %d %q", res.StatusCode, body)
	}
	if res, body = do("GET", "/hello", ""); res.StatusCode != 200 || body != "hello over HTTP/1.1" {
		t.Errorf("GET again: %d %q", res.StatusCode, body)
	}
	if reused != 4 || conns.Load() != 1 {
		t.Errorf("%d of 5 requests on a reused connection, origin saw %d connections; want 4 and 1", reused, conns.Load())
	}
}

// TestConnectionClose: a client's Connection: close ends its connection
// but not the origin's, which the next client connection takes; an
// origin's ends both.
func TestConnectionClose(t *testing.T) {
	up, conns := origin(t)
	p, proxy, ca := startProxy(t, up)
	c := client(proxy, ca)
	c.Transport.(*http.Transport).DisableKeepAlives = true // Connection: close on every request
	// The proxy keeps the origin's connection once it has sent the
	// response on, which the client may have read before: the next request
	// waits for it to be kept.
	kept := func() {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			p.mu.Lock()
			n := len(p.idle[up.Listener.Addr().String()])
			p.mu.Unlock()
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the origin connection was not kept")
			}
		}
	}
	get := func(path, want string) {
		t.Helper()
		res, err := c.Get(up.URL + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != want {
			t.Fatalf("%s: %q, want %q", path, b, want)
		}
	}
	for range 3 {
		get("/hello", "hello over HTTP/1.1")
		kept()
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("three client connections took %d origin connections, want 1", n)
	}
	get("/last", "last")
	get("/hello", "hello over HTTP/1.1")
	if n := conns.Load(); n != 2 {
		t.Errorf("after the origin's Connection: close: %d origin connections, want 2", n)
	}
}

// TestUnframed: a chunked response ends the connection, and the proxy
// serves the next one.
func TestUnframed(t *testing.T) {
	up, _ := origin(t)
	proxy, ca := start(t, up)
	c := client(proxy, ca)
	if res, err := c.Get(up.URL + "/chunked"); err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("chunked: %d %q, want the connection closed", res.StatusCode, b)
	}
	res, err := c.Get(up.URL + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("after the chunked response: %d", res.StatusCode)
	}
}

// TestRefuses: a request that is not CONNECT gets 405, and a CONNECT to
// an address that is not loopback 403, without a dial.
func TestRefuses(t *testing.T) {
	up, _ := origin(t)
	proxy, _ := start(t, up)
	for req, want := range map[string]int{
		"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n":   405,
		"CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 10.0.0.1:443\r\n\r\n": 403,
		"CONNECT origin.test:443 HTTP/1.1\r\nHost: x\r\n\r\n":         403,
	} {
		c, err := net.Dial("tcp", proxy.Host)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, req)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || res.StatusCode != want {
			t.Errorf("%q: %v %v, want %d", req, res, err, want)
		}
	}
}

func TestBodyLength(t *testing.T) {
	for _, tc := range []struct {
		head    string
		request bool
		n       int64
		ok      bool
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true, 0, true},
		{"POST / HTTP/1.1\r\ncontent-length: 12\r\n\r\n", true, 12, true},
		{"HTTP/1.1 200 OK\r\nContent-Length:  7 \r\n\r\n", false, 7, true},
		{"HTTP/1.1 200 OK\r\n\r\n", false, 0, false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, 0, false},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", true, 0, false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", false, 0, false},
		{"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false, 0, false},
		{"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false, 0, false},
	} {
		n, ok := bodyLength([]byte(tc.head), tc.request)
		if n != tc.n || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.head, n, ok, tc.n, tc.ok)
		}
	}
	for head, want := range map[string]int{"HTTP/1.1 204 No Content\r\n": 204, "HTTP/1.1 2x4 X\r\n": 0, "HTTP/1.1\r\n": 0, "SSH-2.0-x 200 y\r\n": 0} {
		if got := statusCode([]byte(head)); got != want {
			t.Errorf("statusCode(%q) = %d, want %d", head, got, want)
		}
	}
}

func TestConnectionFields(t *testing.T) {
	for head, want := range map[string]bool{
		"GET / HTTP/1.1\r\nConnection: close\r\n\r\n":                        true,
		"GET / HTTP/1.1\r\nconnection: Keep-Alive, CLOSE\r\n\r\n":            true,
		"GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n":                   false,
		"GET / HTTP/1.1\r\nX-Connection: close\r\n\r\n":                      false,
		"Connection: close / HTTP/1.1\r\nHost: a\r\n\r\n":                    false,
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: closed\r\n\r\n": false,
	} {
		if got := connectionClose([]byte(head)); got != want {
			t.Errorf("connectionClose(%q) = %v, want %v", head, got, want)
		}
	}
	in := "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nAccept: */*\r\nconnection: te\r\n\r\n"
	if got, want := string(withoutConnection([]byte(in))), "GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n"; got != want {
		t.Errorf("withoutConnection: %q, want %q", got, want)
	}
}

func TestReadHeadBounded(t *testing.T) {
	r := bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\n" + strings.Repeat("X-A: b\r\n", maxHead/8+1) + "\r\n"))
	if _, err := readHead(r, nil); err == nil {
		t.Error("a head over the bound: no error")
	}
	r = bufio.NewReader(strings.NewReader("GET / HTTP/1.1\nHost: a\n\nrest"))
	head, err := readHead(r, nil)
	if err != nil || string(head) != "GET / HTTP/1.1\nHost: a\n\n" {
		t.Errorf("bare LFs: %q %v", head, err)
	}
}
