package proxy

import (
	"bufio"
	"context"
	stdtls "crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gorilla/websocket"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
)

func TestNewRequiresDeciderAndCerts(t *testing.T) {
	dec := event.DeciderFunc(func(context.Context, *event.Event) event.Verdict { return event.Verdict{} })
	tests := []struct {
		name string
		opts Options
	}{
		{"no decider", Options{Certs: tunnelCerts{}}},
		{"no certs", Options{Decider: dec}},
		{"negative peek timeout", Options{Decider: dec, Certs: tunnelCerts{}, PeekTimeout: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := New(tt.opts); err == nil {
				p.Close()
				t.Fatal("New succeeded")
			}
		})
	}
	p, err := New(Options{Decider: dec, Certs: tunnelCerts{}})
	if err != nil {
		t.Fatal(err)
	}
	// Close before anything started, twice.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Serve(ln); err != nil {
		t.Errorf("Serve after Close = %v, want nil", err)
	}
}

func TestHTTPSThroughConnect(t *testing.T) {
	tests := []struct {
		name          string
		clientH2      bool
		upstreamH1    bool
		wantClient    string
		wantUpstream  string
		wantALPNOffer []string
	}{
		{"h2 client, upstream offers h2", true, false, "HTTP/2.0", "HTTP/1.1", []string{"h2", "http/1.1"}}, // upstream requests go over HTTP/1.1, gRPC aside
		{"h1 client, upstream offers h2", false, false, "HTTP/1.1", "HTTP/1.1", []string{"http/1.1"}},
		{"h1 both legs", false, true, "HTTP/1.1", "HTTP/1.1", []string{"http/1.1"}},
		{"h2 client, h1 upstream", true, true, "HTTP/2.0", "HTTP/1.1", []string{"h2", "http/1.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA, HTTP1Only: tt.upstreamH1})
			c, _ := e.client(tt.clientH2)
			for i := range 3 { // keep-alive: one tunnel, several requests
				resp, err := c.Get(up.URL + "/?q=" + string(rune('a'+i)) + "&token=hunter2")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Proto != tt.wantClient {
					t.Fatalf("got %s %s, want 200 %s", resp.Status, resp.Proto, tt.wantClient)
				}
				if want := "hello from api.example.test via " + tt.wantUpstream + "\n"; string(body) != want {
					t.Errorf("body %q, want %q", body, want)
				}
			}
			reqs := up.Requests()
			if len(reqs) != 3 {
				t.Fatalf("upstream got %d requests, want 3", len(reqs))
			}
			for _, r := range reqs {
				if r.Proto != tt.wantUpstream {
					t.Errorf("upstream saw %s, want %s", r.Proto, tt.wantUpstream)
				}
				for k := range r.Header {
					if strings.HasPrefix(strings.ToLower(k), "proxy-") {
						t.Errorf("upstream received %s", k)
					}
				}
				if r.Host != hostPort(up) {
					t.Errorf("upstream Host %q, want %q", r.Host, hostPort(up))
				}
			}

			conns := e.rec.kinds(event.KindConnect)
			if len(conns) != 1 {
				t.Fatalf("%d connect events for one keep-alive tunnel:%s", len(conns), describe(e.rec.all()))
			}
			allow := event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault, Reason: "allowed by default"}
			wantConnect := &event.Event{
				Time: conns[0].Time, Kind: event.KindConnect, Session: testSession, Verdict: allow,
				Connect: &event.Connect{Host: "api.example.test", Port: up.Addr.Port(), Dst: up.Addr, Transport: event.TCP, Via: "connect"},
			}
			if diff := cmp.Diff(wantConnect, conns[0], cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("connect event (-want +got):\n%s", diff)
			}
			tlsEv := e.rec.wait(t, "tls", func(e *event.Event) bool { return e.Kind == event.KindTLS })
			wantTLS := &event.Event{
				Time: tlsEv.Time, Kind: event.KindTLS, Session: testSession, Verdict: allow,
				TLS: &event.TLS{ServerName: "api.example.test", ALPN: tt.wantALPNOffer, Version: "1.3", Intercepted: true},
			}
			if diff := cmp.Diff(wantTLS, tlsEv); diff != "" {
				t.Errorf("tls event (-want +got):\n%s", diff)
			}
			var https []*event.Event
			deadline := time.Now().Add(5 * time.Second)
			for len(https) < 3 && time.Now().Before(deadline) {
				https = e.rec.kinds(event.KindHTTP)
				time.Sleep(5 * time.Millisecond)
			}
			if len(https) != 3 {
				t.Fatalf("%d http events, want 3", len(https))
			}
			h := https[0]
			if h.Session != testSession || h.Verdict != allow || h.HTTP.Status != 200 || h.HTTP.Proto != tt.wantClient || h.HTTP.Method != "GET" {
				t.Errorf("http event %+v %+v", h, h.HTTP)
			}
			if want := "https://" + hostPort(up) + "/?q=a&token=" + Redacted; h.HTTP.URL != want {
				t.Errorf("http event URL %q, want %q", h.HTTP.URL, want)
			}
		})
	}
}

func TestDenyHosts(t *testing.T) {
	e := newEnv(t, envOptions{deny: []string{"evil.test"}})
	evil := e.upstream(upstream.Options{Name: "evil.test", CA: e.upCA})
	plainEvil := e.upstream(upstream.Options{Name: "evil.test", Addr: "127.0.0.3:0"})
	const want = "chaperone: denied by rule deny_hosts: evil.test is listed in deny_hosts\n"

	t.Run("connect", func(t *testing.T) {
		status, body := e.deniedInTunnel(hostPort(evil), "evil.test")
		if status != http.StatusForbidden || body != want {
			t.Fatalf("request in a denied tunnel got %d %q, want 403 %q", status, body, want)
		}
		ev := e.rec.wait(t, "denied connect", func(ev *event.Event) bool {
			return ev.Kind == event.KindConnect && ev.Connect.Via == "connect" && !ev.Verdict.Allowed()
		})
		if ev.Session != testSession || ev.Verdict.Rule != policy.RuleDenyHosts {
			t.Errorf("event %+v", ev)
		}
		e.rec.wait(t, "denied http", func(ev *event.Event) bool {
			return ev.Kind == event.KindHTTP && ev.HTTP.Status == http.StatusForbidden && ev.Verdict.Rule == policy.RuleDenyHosts
		})
	})
	t.Run("go client", func(t *testing.T) {
		for _, h2 := range []bool{false, true} {
			c, _ := e.client(h2)
			resp, err := c.Get(evil.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || string(body) != want {
				t.Errorf("h2=%v: got %d %q, want 403 %q", h2, resp.StatusCode, body, want)
			}
		}
	})
	t.Run("not http", func(t *testing.T) {
		// A denied tunnel carrying neither TLS nor HTTP is closed: nothing
		// to answer in, nothing passed through.
		c, br, resp := e.connect(hostPort(evil), basicAuth(proxyUser, testToken))
		if resp != nil {
			t.Fatalf("CONNECT answered %d, want 200", resp.StatusCode)
		}
		c.Write([]byte("\x00\x01binary protocol\n"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := br.Read(make([]byte, 16)); err == nil {
			t.Errorf("denied tunnel answered %d bytes", n)
		}
	})
	t.Run("absolute uri", func(t *testing.T) {
		c, _ := e.client(false)
		resp, err := c.Get("http://" + hostPort(plainEvil) + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || string(body) != want {
			t.Errorf("got %d %q, want 403 %q", resp.StatusCode, body, want)
		}
	})
	if n := len(evil.Requests()) + len(plainEvil.Requests()); n != 0 {
		t.Errorf("denied upstreams received %d requests", n)
	}
}

// TestDenyRequestInTunnel denies at the http event only: the tunnel is
// allowed, the request is not, and the upstream sees nothing.
func TestDenyRequestInTunnel(t *testing.T) {
	b, err := policy.NewBuiltin([]string{"api.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	dec := event.DeciderFunc(func(ctx context.Context, ev *event.Event) event.Verdict {
		if ev.Kind == event.KindHTTP {
			return b.Decide(ctx, ev)
		}
		return event.Verdict{Action: event.Allow}
	})
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			e := newEnv(t, envOptions{decider: dec})
			up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
			c, _ := e.client(h2)
			resp, err := c.Get(up.URL + "/secret")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := "chaperone: denied by rule deny_hosts: api.example.test is listed in deny_hosts\n"; resp.StatusCode != 403 || string(body) != want {
				t.Errorf("got %d %q, want 403 %q", resp.StatusCode, body, want)
			}
			ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
			if ev.Verdict.Allowed() || ev.HTTP.Status != 403 || ev.Verdict.Rule != "deny_hosts" || ev.Session != testSession {
				t.Errorf("event %+v %+v", ev, ev.HTTP)
			}
			if n := len(up.Requests()); n != 0 {
				t.Errorf("upstream received %d requests", n)
			}
		})
	}
}

func TestProxyAuthRequired(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	plain := e.upstream(upstream.Options{Name: "plain.example.test", Addr: "127.0.0.3:0"})
	tests := []struct {
		name, header string
	}{
		{"none", ""},
		{"wrong token", basicAuth(proxyUser, "not-the-token")},
		{"wrong user", basicAuth("admin", testToken)},
		{"token as user", basicAuth(testToken, "")},
		{"bearer scheme", "Bearer " + testToken},
		{"not base64", "Basic !!!"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/connect", func(t *testing.T) {
			_, _, resp := e.connect(hostPort(up), tt.header)
			if resp == nil || resp.StatusCode != http.StatusProxyAuthRequired {
				t.Fatalf("got %v, want 407", resp)
			}
			if got := resp.Header.Get("Proxy-Authenticate"); got != `Basic realm="chaperone"` {
				t.Errorf("Proxy-Authenticate %q", got)
			}
		})
		t.Run(tt.name+"/absolute", func(t *testing.T) {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req, _ := http.NewRequest("GET", "http://"+hostPort(plain)+"/", nil)
			if tt.header != "" {
				req.Header.Set("Proxy-Authorization", tt.header)
			}
			req.WriteProxy(c)
			resp, err := http.ReadResponse(bufio.NewReader(c), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusProxyAuthRequired {
				t.Fatalf("got %d, want 407", resp.StatusCode)
			}
		})
	}
	if n := len(up.Requests()) + len(plain.Requests()); n != 0 {
		t.Errorf("upstreams received %d requests without a session", n)
	}
	for _, ev := range e.rec.all() {
		if ev.Session != "" || ev.Verdict.Allowed() || ev.Verdict.Rule != RuleProxyAuth {
			t.Errorf("unexpected event %+v", ev)
		}
	}
	// The token never appears in what is published.
	if strings.Contains(describe(e.rec.all()), testToken) {
		t.Error("an event carries the token")
	}
}

func TestRemoveSession(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	c, _ := e.client(false)
	resp, err := c.Get(up.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	e.p.RemoveSession(testSession)
	// The keep-alive tunnel is gone and a new CONNECT needs a session.
	resp, err = c.Get(up.URL + "/")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("request after RemoveSession answered %s", resp.Status)
	}
	if len(up.Requests()) != 1 {
		t.Errorf("upstream got %d requests, want 1", len(up.Requests()))
	}
	// ServeTunnel refuses an unknown session.
	c1, c2 := net.Pipe()
	done := make(chan struct{})
	go func() {
		e.p.ServeTunnel(context.Background(), c1, Tunnel{Session: testSession, Host: "api.example.test", Port: 443})
		close(done)
	}()
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Error("tunnel for a removed session stayed open")
	}
	<-done
}

func TestUntrustedUpstream(t *testing.T) {
	e := newEnv(t, envOptions{})
	other, err := upstream.NewCA("stranger")
	if err != nil {
		t.Fatal(err)
	}
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: other})
	for _, h2 := range []bool{false, true} {
		c, _ := e.client(h2)
		resp, err := c.Get(up.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "certificate") {
			t.Errorf("got %d %q, want 502 naming the certificate problem", resp.StatusCode, body)
		}
	}
	ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
	if ev.HTTP.Status != http.StatusBadGateway || !ev.Verdict.Allowed() {
		t.Errorf("event status %d verdict %s", ev.HTTP.Status, ev.Verdict)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("untrusted upstream received %d requests", n)
	}
}

func TestWebSocketThroughMITM(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "ws.example.test", CA: e.upCA})
	d := websocket.Dialer{
		Proxy:            http.ProxyURL(e.proxyURL(proxyUser, testToken)),
		TLSClientConfig:  &stdtls.Config{RootCAs: e.caPool},
		HandshakeTimeout: 10 * time.Second,
	}
	conn, resp, err := d.Dial("wss://"+hostPort(up)+"/ws", nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer conn.Close()
	for _, msg := range []string{"hello", strings.Repeat("x", 70000)} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := conn.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != msg {
			t.Errorf("echo of %d bytes came back as %d bytes", len(msg), len(got))
		}
	}
	ev := e.rec.wait(t, "websocket", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
	if ev.HTTP.Upgrade != "websocket" || ev.HTTP.Status != http.StatusSwitchingProtocols || ev.Session != testSession {
		t.Errorf("event upgrade %q status %d session %q", ev.HTTP.Upgrade, ev.HTTP.Status, ev.Session)
	}
	if v := ev.HTTP.Header["Sec-Websocket-Key"]; len(v) != 1 || v[0] != Redacted {
		t.Errorf("Sec-WebSocket-Key in event: %q", v)
	}
}

// startTCP runs a line server on 127.0.0.2: banner first if set, then
// "echo: " + each line, and "bye" once the client half-closes.
func startTCP(t *testing.T, banner string) netip.AddrPort {
	return upstream.ServeTCP(t, "127.0.0.2:0", func(c net.Conn) {
		if banner != "" {
			io.WriteString(c, banner)
		}
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			io.WriteString(c, "echo: "+sc.Text()+"\n")
		}
		io.WriteString(c, "bye\n")
	})
}

func TestPassthrough(t *testing.T) {
	tests := []struct {
		name   string
		banner string
		first  string // what the client sends first
	}{
		{"client first", "", "PING\r\n"},
		{"client first binary", "", "\x00\x01hello\n"},
		{"server first", "SSH-2.0-test\r\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{peekTimeout: 50 * time.Millisecond})
			addr := startTCP(t, tt.banner)
			e.namesMu.Lock()
			e.names["tcp.example.test"] = addr.Addr()
			e.namesMu.Unlock()
			c, br, resp := e.connect(net.JoinHostPort("tcp.example.test", itoa(addr.Port())), basicAuth(proxyUser, testToken))
			if resp != nil {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			var want string
			if tt.banner != "" {
				line, err := br.ReadString('\n')
				if err != nil || line != tt.banner {
					t.Fatalf("banner %q, %v", line, err)
				}
			}
			if tt.first != "" {
				io.WriteString(c, tt.first)
				want += "echo: " + strings.TrimRight(tt.first, "\r\n") + "\n"
			}
			io.WriteString(c, "second\n")
			want += "echo: second\n"
			c.(*net.TCPConn).CloseWrite() // half-close: the server answers "bye" and closes
			want += "bye\n"
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			if string(rest) != want {
				t.Errorf("read %q, want %q", rest, want)
			}
			if n := len(e.rec.kinds(event.KindTLS)) + len(e.rec.kinds(event.KindHTTP)); n != 0 {
				t.Errorf("%d tls/http events for a passthrough", n)
			}
		})
	}
}

// TestLateTLSIsIntercepted waits out PeekTimeout before the ClientHello:
// the tunnel must still be intercepted, not passed through.
func TestLateTLSIsIntercepted(t *testing.T) {
	e := newEnv(t, envOptions{peekTimeout: 20 * time.Millisecond})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	c, br, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	time.Sleep(200 * time.Millisecond)
	tc := stdtls.Client(&readerConn{Conn: c, r: br}, &stdtls.Config{ServerName: "api.example.test", RootCAs: e.caPool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake with Chaperone's certificate: %v", err)
	}
	req, _ := http.NewRequest("GET", "https://"+hostPort(up)+"/late", nil)
	req.Write(tc)
	r, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Errorf("status %d", r.StatusCode)
	}
	e.rec.wait(t, "http /late", func(ev *event.Event) bool {
		return ev.Kind == event.KindHTTP && strings.HasSuffix(ev.HTTP.URL, "/late")
	})
}

type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func TestMalformedClientHello(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	c, br, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	c.Write([]byte{0x16, 3, 1, 0, 5, 2, 0, 0, 1, 0}) // a ServerHello header, not a ClientHello
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes, want the connection closed", n)
	}
	ev := e.rec.wait(t, "tls", func(ev *event.Event) bool { return ev.Kind == event.KindTLS })
	if ev.Verdict.Allowed() || ev.Verdict.Rule != ruleMalformedHello {
		t.Errorf("verdict %s", ev.Verdict)
	}
	if len(up.Requests()) != 0 {
		t.Error("upstream reached")
	}
}

func TestPlainHTTP(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "plain.example.test"})
	t.Run("absolute uri", func(t *testing.T) {
		c, _ := e.client(false)
		for range 2 {
			resp, err := c.Post("http://user:pw@"+hostPort(up)+"/echo?sig=abc&x=1", "text/plain", strings.NewReader("payload"))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "payload" {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
		}
		ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
		if want := "http://" + hostPort(up) + "/echo?sig=" + Redacted + "&x=1"; ev.HTTP.URL != want || ev.HTTP.Status != 200 {
			t.Errorf("event URL %q status %d, want %q 200", ev.HTTP.URL, ev.HTTP.Status, want)
		}
		if v := ev.HTTP.Header["Authorization"]; len(v) != 1 || v[0] != Redacted {
			t.Errorf("Authorization in event: %q", v)
		}
		var connects int
		for _, c := range e.rec.kinds(event.KindConnect) {
			if c.Connect.Via == "http" {
				connects++
			}
		}
		if connects != 1 {
			t.Errorf("%d connect events for two requests to one destination over one connection", connects)
		}
	})
	t.Run("in tunnel", func(t *testing.T) {
		c, br, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
		if resp != nil {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		io.WriteString(c, "GET /tunnelled HTTP/1.1\r\nHost: "+hostPort(up)+"\r\n\r\n")
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		if r.StatusCode != 200 || !strings.Contains(string(body), "hello from plain.example.test") {
			t.Errorf("got %d %q", r.StatusCode, body)
		}
	})
	for _, r := range up.Requests() {
		if r.Header.Get("Proxy-Authorization") != "" || r.Header.Get("Proxy-Connection") != "" {
			t.Errorf("upstream received proxy headers: %v", r.Header)
		}
	}
}

func TestDomainFronting(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	other := e.upstream(upstream.Options{Name: "other.example.test", CA: e.upCA, Addr: "127.0.0.3:0"})
	for _, h2 := range []bool{false, true} {
		c, _ := e.client(h2)
		for _, host := range []string{hostPort(other), "other.example.test", "api.example.test:1"} {
			req, _ := http.NewRequest("GET", up.URL+"/", nil)
			req.Host = host
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), ruleDomainFronting) {
				t.Errorf("h2=%v Host %s: got %d %q, want 421", h2, host, resp.StatusCode, body)
			}
		}
		// Case and a trailing dot do not matter.
		req, _ := http.NewRequest("GET", up.URL+"/", nil)
		req.Host = "API.example.test.:" + itoa(up.Addr.Port())
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("h2=%v same host in other case: %d", h2, resp.StatusCode)
		}
	}
	if n := len(other.Requests()); n != 0 {
		t.Errorf("fronted host received %d requests", n)
	}
	ev := e.rec.wait(t, "421", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP && ev.HTTP.Status == 421 })
	if ev.Verdict.Rule != ruleDomainFronting || ev.Session != testSession {
		t.Errorf("event %+v", ev)
	}
}

func TestProcessAttribution(t *testing.T) {
	calls := make(chan [2]netip.AddrPort, 10)
	proc := &event.Process{PID: 4242, Exe: "/usr/bin/agent"}
	e := newEnv(t, envOptions{processes: ProcessFinderFunc(func(client, proxy netip.AddrPort, session string) (*event.Process, error) {
		if session != testSession {
			return nil, errors.New("unknown session")
		}
		calls <- [2]netip.AddrPort{client, proxy}
		return proc, nil
	})})
	up := e.upstream(upstream.Options{Name: "plain.example.test"})
	c, _ := e.client(false)
	for range 3 {
		resp, err := c.Get("http://" + hostPort(up) + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if len(calls) != 1 {
		t.Errorf("ProcessForConn called %d times for one client connection", len(calls))
	}
	got := <-calls
	if got[1].String() != e.addr || !got[0].Addr().IsLoopback() {
		t.Errorf("ProcessForConn(%v, %v)", got[0], got[1])
	}
	for _, ev := range e.rec.all() {
		if ev.Process != proc {
			t.Errorf("%s event without the process", ev.Kind)
		}
	}
}

func TestDeciderPanicDenies(t *testing.T) {
	e := newEnv(t, envOptions{decider: event.DeciderFunc(func(context.Context, *event.Event) event.Verdict { panic("boom") })})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	if status, body := e.deniedInTunnel(hostPort(up), "api.example.test"); status != http.StatusForbidden || !strings.Contains(body, "failed to decide") {
		t.Fatalf("got %d %q, want 403", status, body)
	}
}

func TestAskDenies(t *testing.T) {
	e := newEnv(t, envOptions{decider: event.DeciderFunc(func(context.Context, *event.Event) event.Verdict {
		return event.Verdict{Action: event.Ask, Rule: "confirm", Reason: "needs a human", DecidedBy: event.DecidedByRule}
	})})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	if status, body := e.deniedInTunnel(hostPort(up), "api.example.test"); status != http.StatusForbidden || !strings.Contains(body, "confirm") {
		t.Fatalf("got %d %q, want 403 naming the rule", status, body)
	}
	ev := e.rec.wait(t, "connect", func(ev *event.Event) bool { return ev.Kind == event.KindConnect })
	if ev.Verdict.Action != event.Deny || ev.Verdict.Rule != "confirm" {
		t.Errorf("published verdict %s, want the deny that was applied", ev.Verdict)
	}
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }

// TestH2CInTunnel speaks HTTP/2 with prior knowledge inside a CONNECT
// tunnel: the inner server recognises the preface.
func TestH2CInTunnel(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "plain.example.test"})
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: protos,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, br, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
			if resp != nil {
				return nil, errors.New(resp.Status)
			}
			return &readerConn{Conn: c, r: br}, nil
		},
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + hostPort(up) + "/h2c")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" {
		t.Errorf("got %d %s, want 200 HTTP/2.0", resp.StatusCode, resp.Proto)
	}
	ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
	if ev.HTTP.Proto != "HTTP/2.0" || ev.HTTP.URL != "http://"+hostPort(up)+"/h2c" {
		t.Errorf("event %s %s", ev.HTTP.Proto, ev.HTTP.URL)
	}
}
