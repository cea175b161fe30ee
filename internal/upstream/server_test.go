package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gorilla/websocket"
)

// testClient is an HTTP client built independently of Server.Client: it
// trusts ca and dials each "host:port" in routes at the mapped address,
// refusing any other, so no test ever resolves a name.
func testClient(t *testing.T, ca *CA, serverName string, routes map[string]netip.AddrPort) *http.Client {
	t.Helper()
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to, ok := routes[addr]
			if !ok {
				return nil, fmt.Errorf("test dial: no route for %s", addr)
			}
			return d.DialContext(ctx, network, to.String())
		},
		ForceAttemptHTTP2: true,
	}
	if ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool, ServerName: serverName}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func routeTo(s *Server) map[string]netip.AddrPort {
	return map[string]netip.AddrPort{
		net.JoinHostPort(s.Name, fmt.Sprint(s.Addr.Port())): s.Addr,
		s.Addr.String(): s.Addr,
	}
}

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func get(t *testing.T, c *http.Client, url string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestProtocolsRecorded(t *testing.T) {
	ca := newCA(t)
	tests := []struct {
		name      string
		opts      Options
		wantURL   string
		wantProto string
		wantALPN  string
	}{
		{
			name:      "h2 over TLS",
			opts:      Options{Name: "api.example.test", Addr: "127.0.0.2:0", CA: ca},
			wantURL:   "https://api.example.test:",
			wantProto: "HTTP/2.0",
			wantALPN:  "h2",
		},
		{
			name:      "HTTP1Only over TLS",
			opts:      Options{Name: "h1.example.test", Addr: "127.0.0.3:0", CA: ca, HTTP1Only: true},
			wantURL:   "https://h1.example.test:",
			wantProto: "HTTP/1.1",
			wantALPN:  "http/1.1",
		},
		{
			name:      "plain HTTP",
			opts:      Options{Name: "plain.example.test", Addr: "127.0.0.4:0"},
			wantURL:   "http://plain.example.test:",
			wantProto: "HTTP/1.1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, tt.opts)
			if !strings.HasPrefix(s.URL, tt.wantURL) {
				t.Errorf("URL = %q, want prefix %q", s.URL, tt.wantURL)
			}
			if want := netip.MustParseAddrPort(tt.opts.Addr).Addr(); s.Addr.Addr() != want || s.Addr.Port() == 0 {
				t.Errorf("Addr = %v, want %v with a port", s.Addr, want)
			}
			c := testClient(t, tt.opts.CA, "", routeTo(s))
			resp, body := get(t, c, s.URL+"/some/path?q=1", http.Header{"User-Agent": {"upstream-test"}, "X-Test": {"yes"}})
			if resp.StatusCode != http.StatusOK || resp.Proto != tt.wantProto {
				t.Errorf("response %s %s, want 200 %s", resp.Proto, resp.Status, tt.wantProto)
			}
			if want := fmt.Sprintf("hello from %s via %s\n", tt.opts.Name, tt.wantProto); string(body) != want {
				t.Errorf("body = %q, want %q", body, want)
			}

			got := s.Requests()
			if len(got) == 1 && !strings.HasPrefix(got[0].RemoteAddr, "127.") {
				t.Errorf("RemoteAddr = %q, want a 127.0.0.0/8 address", got[0].RemoteAddr)
			}
			serverName := ""
			if tt.opts.CA != nil {
				serverName = tt.opts.Name
			}
			want := []Request{{
				Method:     http.MethodGet,
				Path:       "/some/path",
				RawQuery:   "q=1",
				Host:       strings.TrimPrefix(s.URL, tt.wantURL[:strings.Index(tt.wantURL, "//")+2]),
				Proto:      tt.wantProto,
				Header:     http.Header{"User-Agent": {"upstream-test"}, "X-Test": {"yes"}, "Accept-Encoding": {"gzip"}},
				ServerName: serverName,
				ALPN:       tt.wantALPN,
			}}
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Request{}, "RemoteAddr")); diff != "" {
				t.Errorf("Requests() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSNI(t *testing.T) {
	ca := newCA(t)
	s := start(t, Options{Name: "sni.example.test", Addr: "127.0.0.5:0", CA: ca})
	tests := []struct {
		name           string
		url            string
		serverName     string
		wantServerName string
	}{
		// The certificate carries the IP too, so a client may dial by IP,
		// in which case it sends no SNI.
		{"by name", s.URL, "", "sni.example.test"},
		{"by IP", "https://" + s.Addr.String(), "", ""},
		{"by IP with explicit SNI", "https://" + s.Addr.String(), "sni.example.test", "sni.example.test"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testClient(t, ca, tt.serverName, routeTo(s))
			resp, _ := get(t, c, tt.url+"/", nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %s", resp.Status)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			reqs, err := s.WaitRequests(ctx, i+1)
			if err != nil {
				t.Fatal(err)
			}
			if got := reqs[i].ServerName; got != tt.wantServerName {
				t.Errorf("ServerName = %q, want %q", got, tt.wantServerName)
			}
		})
	}
}

func TestStartRejectsAddress(t *testing.T) {
	tests := []string{
		"0.0.0.0:0",
		"[::]:0",
		"10.0.0.1:0",
		"192.0.2.1:443",
		"localhost:0", // never resolved, so never accepted
		"api.example.test:443",
		"127.0.0.1", // no port
		":0",
		"[::ffff:192.0.2.1]:0",
	}
	for _, addr := range tests {
		t.Run(addr, func(t *testing.T) {
			s, err := Start(Options{Addr: addr})
			if err == nil {
				s.Close()
				t.Fatalf("Start(Addr: %q) succeeded, want error", addr)
			}
		})
	}
}

func TestStartIPv6Loopback(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	ln.Close()
	ca := newCA(t)
	s := start(t, Options{Addr: "[::1]:0", CA: ca})
	if s.Name != "::1" || !strings.HasPrefix(s.URL, "https://[::1]:") {
		t.Errorf("Name = %q, URL = %q; want the IP in both", s.Name, s.URL)
	}
	resp, _ := get(t, s.Client(), s.URL+"/", nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %s", resp.Status)
	}
}

func TestDefaultHandlerPaths(t *testing.T) {
	ca := newCA(t)
	s := start(t, Options{Name: "paths.example.test", Addr: "127.0.0.6:0", CA: ca})
	c := testClient(t, ca, "", routeTo(s))
	tests := []struct {
		path       string
		wantStatus int
		wantLen    int64 // -1: don't check
	}{
		{"/bytes?n=0", 200, 0},
		{"/bytes?n=1", 200, 1},
		{"/bytes?n=100000", 200, 100000},
		{"/bytes?n=3145731", 200, 3<<20 + 3},
		{"/bytes?n=-1", 400, -1},
		{"/bytes?n=x", 400, -1},
		{"/bytes", 400, -1},
		{fmt.Sprintf("/bytes?n=%d", MaxBytes+1), 400, -1},
		{"/status/204", 204, 0},
		{"/status/418", 418, -1},
		{"/status/599", 599, -1},
		{"/status/600", 400, -1},
		{"/status/199", 400, -1},
		{"/status/abc", 400, -1},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, body := get(t, c, s.URL+tt.path, nil)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if tt.wantLen >= 0 && int64(len(body)) != tt.wantLen {
				t.Errorf("body length = %d, want %d", len(body), tt.wantLen)
			}
			if tt.wantLen > 0 && resp.ContentLength != tt.wantLen {
				t.Errorf("Content-Length = %d, want %d", resp.ContentLength, tt.wantLen)
			}
		})
	}
}

func TestHeadersJSON(t *testing.T) {
	s := start(t, Options{Name: "hdr.example.test", Addr: "127.0.0.7:0"})
	_, body := get(t, testClient(t, nil, "", routeTo(s)), s.URL+"/headers", http.Header{"X-Agent": {"a", "b"}, "User-Agent": {"t"}})
	var got http.Header
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	want := http.Header{"X-Agent": {"a", "b"}, "User-Agent": {"t"}, "Accept-Encoding": {"gzip"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/headers mismatch (-want +got):\n%s", diff)
	}
}

func TestEchoAndBodyRecording(t *testing.T) {
	ca := newCA(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), (MaxRecordedBody+4096)/16)
	tests := []struct {
		name          string
		http1Only     bool
		body          []byte
		wantRecorded  []byte
		wantTruncated bool
	}{
		{"h2 small", false, []byte("ping"), []byte("ping"), false},
		{"h1 small", true, []byte("ping"), []byte("ping"), false},
		{"h2 over limit", false, big, big[:MaxRecordedBody], true},
		{"h1 over limit", true, big, big[:MaxRecordedBody], true},
		{"h1 exactly limit", true, big[:MaxRecordedBody], big[:MaxRecordedBody], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{Name: "echo.example.test", Addr: "127.0.0.8:0", CA: ca, HTTP1Only: tt.http1Only})
			c := testClient(t, ca, "", routeTo(s))
			resp, err := c.Post(s.URL+"/echo", "text/x-test", bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.body) {
				t.Errorf("echo returned %d bytes, want the %d sent", len(got), len(tt.body))
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/x-test" {
				t.Errorf("Content-Type = %q, want text/x-test", ct)
			}
			reqs := s.Requests()
			if len(reqs) != 1 {
				t.Fatalf("recorded %d requests, want 1", len(reqs))
			}
			if !bytes.Equal(reqs[0].Body, tt.wantRecorded) || reqs[0].BodyTruncated != tt.wantTruncated {
				t.Errorf("recorded body of %d bytes, truncated %v; want %d bytes, truncated %v",
					len(reqs[0].Body), reqs[0].BodyTruncated, len(tt.wantRecorded), tt.wantTruncated)
			}
		})
	}
}

func TestWebSocketEcho(t *testing.T) {
	ca := newCA(t)
	tests := []struct {
		name string
		ca   *CA
	}{
		{"wss", ca},
		{"ws", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{Name: "ws.example.test", Addr: "127.0.0.9:0", CA: tt.ca})
			d := websocket.Dialer{NetDialContext: Dial(s), HandshakeTimeout: 10 * time.Second}
			if tt.ca != nil {
				d.TLSClientConfig = &tls.Config{RootCAs: tt.ca.Pool}
			}
			url := "ws" + strings.TrimPrefix(s.URL, "http") + "/ws"
			conn, resp, err := d.Dial(url, nil)
			if err != nil {
				t.Fatalf("dial %s: %v", url, err)
			}
			defer conn.Close()
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Errorf("status %s, want 101", resp.Status)
			}
			msgs := []struct {
				typ  int
				data []byte
			}{
				{websocket.TextMessage, []byte("hello")},
				{websocket.BinaryMessage, []byte{0, 1, 2, 255}},
				{websocket.TextMessage, bytes.Repeat([]byte("x"), 100000)},
			}
			for _, m := range msgs {
				if err := conn.WriteMessage(m.typ, m.data); err != nil {
					t.Fatal(err)
				}
				typ, data, err := conn.ReadMessage()
				if err != nil {
					t.Fatal(err)
				}
				if typ != m.typ || !bytes.Equal(data, m.data) {
					t.Errorf("echo of type %d, %d bytes = type %d, %d bytes", m.typ, len(m.data), typ, len(data))
				}
			}
			reqs := s.Requests()
			if len(reqs) != 1 || reqs[0].Path != "/ws" || reqs[0].Header.Get("Upgrade") != "websocket" {
				t.Errorf("recorded %+v, want one upgrade request to /ws", reqs)
			}

			// Close must also end hijacked connections.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, _, err := conn.ReadMessage(); err == nil {
				t.Error("read after server Close succeeded, want error")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Error("connection stayed open after server Close")
			}
		})
	}
}

func TestWaitRequests(t *testing.T) {
	s := start(t, Options{Name: "wait.example.test", Addr: "127.0.0.10:0"})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	got, err := s.WaitRequests(ctx, 1)
	if !errors.Is(err, context.DeadlineExceeded) || len(got) != 0 {
		t.Errorf("WaitRequests with no requests = %d, %v; want 0, deadline exceeded", len(got), err)
	}

	c := s.Client()
	done := make(chan error, 1)
	go func() {
		for i := range 3 {
			resp, err := c.Get(fmt.Sprintf("%s/%d", s.URL, i))
			if err != nil {
				done <- err
				return
			}
			resp.Body.Close()
		}
		done <- nil
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err = s.WaitRequests(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range got {
		paths = append(paths, r.Path)
	}
	if diff := cmp.Diff([]string{"/0", "/1", "/2"}, paths); diff != "" {
		t.Errorf("paths in arrival order (-want +got):\n%s", diff)
	}

	// The result is a copy: changing it does not change the record.
	got[0].Header.Set("X-Changed", "1")
	got[0].Path = "/changed"
	if again := s.Requests(); again[0].Path != "/0" || again[0].Header.Get("X-Changed") != "" {
		t.Errorf("Requests() reflects a caller's change: %+v", again[0])
	}
}

func TestDialAndClient(t *testing.T) {
	ca := newCA(t)
	a := start(t, Options{Name: "a.example.test", Addr: "127.0.0.11:0", CA: ca})
	b := start(t, Options{Name: "b.example.test", Addr: "127.0.0.12:0", CA: ca})
	c := a.Client(b)
	for _, s := range []*Server{a, b} {
		t.Run(s.Name, func(t *testing.T) {
			resp, body := get(t, c, s.URL+"/", nil)
			if want := "hello from " + s.Name + " via HTTP/2.0\n"; string(body) != want || resp.StatusCode != 200 {
				t.Errorf("got %s %q, want 200 %q", resp.Status, body, want)
			}
		})
	}
	t.Run("unknown host", func(t *testing.T) {
		if _, err := Dial(a)(context.Background(), "tcp", "c.example.test:443"); err == nil {
			t.Error("dial of an unknown host succeeded")
		}
		if _, err := a.Client().Get(b.URL); err == nil {
			t.Error("client reached a server it was not given")
		}
	})
}

func TestCloseTwice(t *testing.T) {
	s, err := Start(Options{Addr: "127.0.0.13:0"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Errorf("Close #%d: %v", i+1, err)
		}
	}
	if conn, err := net.Dial("tcp", s.Addr.String()); err == nil {
		conn.Close()
		t.Error("listener still accepts after Close")
	}
}

func TestH2CPriorKnowledge(t *testing.T) {
	tests := []struct {
		name      string
		http1Only bool
		wantProto string // "" means the request must fail
	}{
		{"offered", false, "HTTP/2.0"},
		{"HTTP1Only", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{Name: "h2c.example.test", Addr: "127.0.0.14:0", HTTP1Only: tt.http1Only})
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			tr := &http.Transport{DialContext: Dial(s), Protocols: &p}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(s.URL + "/")
			if tt.wantProto == "" {
				if err == nil {
					resp.Body.Close()
					t.Errorf("h2c request succeeded with %s, want failure", resp.Proto)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.Proto != tt.wantProto {
				t.Errorf("Proto = %s, want %s", resp.Proto, tt.wantProto)
			}
		})
	}
}

func TestStartDefaults(t *testing.T) {
	s := start(t, Options{})
	if s.Addr.Addr() != netip.MustParseAddr("127.0.0.1") || s.Name != "127.0.0.1" {
		t.Errorf("Addr = %v, Name = %q; want 127.0.0.1 for both", s.Addr, s.Name)
	}
	if want := fmt.Sprintf("http://127.0.0.1:%d", s.Addr.Port()); s.URL != want {
		t.Errorf("URL = %q, want %q", s.URL, want)
	}
	_, body := get(t, s.Client(), s.URL+"/", nil)
	if want := "hello from 127.0.0.1 via HTTP/1.1\n"; string(body) != want {
		t.Errorf("body = %q, want %q", body, want)
	}
}

// A server for any name presents a certificate for each name a client asks
// by SNI, and its own without SNI.
func TestAnyName(t *testing.T) {
	ca := newCA(t)
	s := start(t, Options{Name: "elsewhere.example.test", Addr: "127.0.30.5:0", CA: ca, AnyName: true})
	for _, tt := range []struct{ sni, wantCN string }{
		{"telemetry.example.com", "telemetry.example.com"},
		{"Updates.Example.NET", "updates.example.net"},
		{"telemetry.example.com", "telemetry.example.com"},
		{"", "elsewhere.example.test"},
	} {
		conf := &tls.Config{RootCAs: ca.Pool, ServerName: tt.sni}
		if tt.sni == "" {
			conf.ServerName = s.Addr.Addr().String()
		}
		c, err := tls.Dial("tcp", s.Addr.String(), conf)
		if err != nil {
			t.Fatalf("sni %q: %v", tt.sni, err)
		}
		if cn := c.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != tt.wantCN {
			t.Errorf("sni %q: certificate for %q, want %q", tt.sni, cn, tt.wantCN)
		}
		c.Close()
	}
}
