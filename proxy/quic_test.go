package proxy

import (
	"bytes"
	"context"
	stdtls "crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// quicEnv serves ServeQUIC on 127.0.42.1, every client's origin being
// the Tunnel the test sets: what the kernel's redirection would report.
type quicEnv struct {
	*env
	pc     net.PacketConn
	mu     sync.Mutex
	origin Tunnel
	err    error // the OriginFinder's answer when set
	done   chan error
}

func newQUICEnv(t testing.TB, o envOptions) *quicEnv {
	t.Helper()
	e := &quicEnv{env: newEnv(t, o), done: make(chan error, 1)}
	pc, err := net.ListenPacket("udp", "127.0.42.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.pc = pc
	go func() {
		e.done <- e.p.ServeQUIC(pc, OriginFinderFunc(func(netip.AddrPort) (Tunnel, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.origin, e.err
		}))
	}()
	t.Cleanup(func() {
		e.p.Close()
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("ServeQUIC returned %v after Close", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeQUIC did not return after Close")
		}
	})
	return e
}

// redirect makes every client connection's origin dst (named name by the
// process's own lookup, as the kernel's record would say).
func (e *quicEnv) redirect(dst netip.AddrPort) {
	e.mu.Lock()
	e.origin = Tunnel{Session: testSession, Dst: dst, Process: &event.Process{PID: 4242}}
	e.mu.Unlock()
}

// client returns an HTTP/3 client whose every connection goes to the
// proxy's QUIC listener (as the kernel would send it) and trusts
// Chaperone's CA.
func (e *quicEnv) client(t testing.TB) *http.Client {
	t.Helper()
	proxy := e.pc.LocalAddr().String()
	tr := &http3.Transport{
		TLSClientConfig: &stdtls.Config{RootCAs: e.caPool},
		Dial: func(ctx context.Context, _ string, tc *stdtls.Config, qc *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, proxy, tc, qc)
		},
	}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string, error) {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, string(b), err
}

// An HTTP/3 request through ServeQUIC reaches the origin the connection
// was redirected from, and is recorded as over TCP: connect (udp,
// transparent), tls, then http with proto HTTP/3.0.
func TestQUICAllowed(t *testing.T) {
	e := newQUICEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", Addr: "127.0.42.2:0", CA: e.upCA})
	startH3Origin(t, e.env, "api.example.test", up.Addr.String(), nil)
	e.redirect(up.Addr)
	res, body, err := get(t, e.client(t), "https://"+hostPort(up)+"/hello")
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Proto != "HTTP/3.0" || body != "hello from api.example.test via HTTP/3.0\n" {
		t.Fatalf("got %d %s %q, want 200 over HTTP/3.0 from the origin", res.StatusCode, res.Proto, body)
	}
	h := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
	if h.HTTP.Proto != "HTTP/3.0" || h.HTTP.Status != 200 || !h.Verdict.Allowed() || h.Session != testSession {
		t.Errorf("http event: proto %q status %d verdict %s session %q", h.HTTP.Proto, h.HTTP.Status, h.Verdict, h.Session)
	}
	c := e.rec.wait(t, "connect", func(ev *event.Event) bool { return ev.Kind == event.KindConnect })
	want := event.Connect{Dst: up.Addr, Host: "api.example.test", Port: up.Addr.Port(), Transport: event.UDP, Via: "transparent"}
	if *c.Connect != want || !c.Verdict.Allowed() {
		t.Errorf("connect event %+v %s, want %+v allowed", *c.Connect, c.Verdict, want)
	}
	tl := e.rec.wait(t, "tls", func(ev *event.Event) bool { return ev.Kind == event.KindTLS })
	if tl.TLS.ServerName != "api.example.test" || !tl.TLS.Intercepted || tl.TLS.Version != "1.3" {
		t.Errorf("tls event %+v", *tl.TLS)
	}
}

// A connection whose host the policy denies is closed once its handshake
// is done, and the client's error carries the rule and reason.
func TestQUICDeniedHost(t *testing.T) {
	e := newQUICEnv(t, envOptions{deny: []string{"denied.example.test"}})
	e.redirect(netip.MustParseAddrPort("127.0.42.3:443"))
	_, _, err := get(t, e.client(t), "https://denied.example.test/")
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || !ae.Remote || !strings.Contains(ae.ErrorMessage, "chaperone: denied by rule") || !strings.Contains(ae.ErrorMessage, "denied.example.test") {
		t.Fatalf("error %v, want a CONNECTION_CLOSE naming the rule and the host", err)
	}
	c := e.rec.wait(t, "connect", func(ev *event.Event) bool { return ev.Kind == event.KindConnect })
	if c.Verdict.Allowed() || c.Connect.Host != "denied.example.test" || c.Connect.Transport != event.UDP {
		t.Errorf("connect event %+v %s, want denied.example.test over udp denied", *c.Connect, c.Verdict)
	}
}

// A client without an origin (not redirected by a session's hooks) is
// refused, with a connect event that says so.
func TestQUICUnknownOrigin(t *testing.T) {
	e := newQUICEnv(t, envOptions{})
	e.mu.Lock()
	e.err = errors.New("no redirect record")
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := quic.DialAddr(ctx, e.pc.LocalAddr().String(), &stdtls.Config{RootCAs: e.caPool, ServerName: "x.test", NextProtos: []string{"h3"}}, nil)
	if err == nil {
		t.Fatal("handshake succeeded without an origin")
	}
	c := e.rec.wait(t, "connect", func(ev *event.Event) bool { return ev.Kind == event.KindConnect })
	if c.Verdict.Rule != ruleNoOrigin || c.Connect.Transport != event.UDP {
		t.Errorf("connect event %+v %s, want rule %s over udp", *c.Connect, c.Verdict, ruleNoOrigin)
	}
}

// h3Origin is an HTTP/3 origin for name on a UDP address of 127.0.42.0/24,
// with a certificate of the upstream CA; it records the protocol of each
// request.
type h3Origin struct {
	addr   netip.AddrPort
	pc     net.PacketConn
	srv    *http3.Server
	mu     sync.Mutex
	protos []string
}

func startH3Origin(t testing.TB, e *env, name, addr string, h http.Handler) *h3Origin {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	o := &h3Origin{addr: pc.LocalAddr().(*net.UDPAddr).AddrPort(), pc: pc}
	leaf, err := e.upCA.Leaf(name, o.addr.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = upstream.DefaultHandler(name)
	}
	o.srv = &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&stdtls.Config{Certificates: []stdtls.Certificate{leaf}}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			o.mu.Lock()
			o.protos = append(o.protos, r.Proto)
			o.mu.Unlock()
			h.ServeHTTP(w, r)
		}),
	}
	go o.srv.Serve(pc)
	t.Cleanup(o.stop)
	return o
}

// stop closes the origin and its socket: nothing answers on its port.
func (o *h3Origin) stop() {
	o.srv.Close()
	o.pc.Close()
}

func (o *h3Origin) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.protos...)
}

// A client that came over QUIC has its requests sent upstream over
// HTTP/3 to the connection's destination; when QUIC cannot reach the
// origin there (nothing answers on UDP: blocked, or no HTTP/3), they go
// over TCP instead.
func TestQUICUpstream(t *testing.T) {
	e := newQUICEnv(t, envOptions{})
	e.p.h3Client.HandshakeTimeout = 500 * time.Millisecond
	withH3 := e.upstream(upstream.Options{Name: "api.example.test", Addr: "127.0.42.4:0", CA: e.upCA, HTTP1Only: true})
	origin := startH3Origin(t, e.env, "api.example.test", withH3.Addr.String(), nil) // the same port, over UDP
	tcpOnly := e.upstream(upstream.Options{Name: "tcp.example.test", Addr: "127.0.42.4:0", CA: e.upCA, HTTP1Only: true})
	for _, tt := range []struct {
		name       string
		up         *upstream.Server
		wantOrigin string // the protocol the origin saw
	}{
		{name: "h3 origin", up: withH3, wantOrigin: "HTTP/3.0"},
		{name: "nothing on UDP", up: tcpOnly, wantOrigin: "HTTP/1.1"},
		{name: "nothing on UDP, again", up: tcpOnly, wantOrigin: "HTTP/1.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e.redirect(tt.up.Addr)
			res, body, err := get(t, e.client(t), "https://"+hostPort(tt.up)+"/")
			if err != nil {
				t.Fatal(err)
			}
			if want := "hello from " + tt.up.Name + " via " + tt.wantOrigin + "\n"; res.StatusCode != 200 || body != want {
				t.Fatalf("got %d %q, want 200 %q", res.StatusCode, body, want)
			}
		})
	}
	if got := origin.seen(); !slices.Equal(got, []string{"HTTP/3.0"}) {
		t.Errorf("the HTTP/3 origin saw %v, want one request over HTTP/3", got)
	}
	if !e.p.altSvc.Broken(net.JoinHostPort(tcpOnly.Name, strconv.Itoa(int(tcpOnly.Addr.Port())))) {
		t.Error("the origin without HTTP/3 is not remembered as such: every request would wait for QUIC first")
	}
}

// An origin reached over TCP that advertises HTTP/3 (Alt-Svc) gets the
// next requests over HTTP/3, on the port it named, at the address the
// client went to. An explicit-proxy client is not told of HTTP/3 (it
// would go around the proxy over UDP); other alternatives reach it.
func TestQUICAltSvcUpgrade(t *testing.T) {
	e := newEnv(t, envOptions{})
	var altSvc string
	h3o := startH3Origin(t, e, "alt.example.test", "127.0.42.5:0", nil)
	tcp := e.upstream(upstream.Options{Name: "alt.example.test", Addr: "127.0.42.5:0", CA: e.upCA,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Alt-Svc", altSvc)
			io.WriteString(w, "tcp "+r.Proto)
		})})
	altSvc = `h3=":` + strconv.Itoa(int(h3o.addr.Port())) + `"; ma=3600, h2=":443"`
	c, _ := e.client(true)
	res, body, err := get(t, c, "https://"+hostPort(tcp)+"/")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body, "tcp ") {
		t.Fatalf("first request: %q, want it over TCP", body)
	}
	if got, want := res.Header.Values("Alt-Svc"), []string{`h2=":443"`}; !slices.Equal(got, want) {
		t.Errorf("explicit-mode client got Alt-Svc %q, want %q", got, want)
	}
	_, body, err = get(t, c, "https://"+hostPort(tcp)+"/")
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello from alt.example.test via HTTP/3.0\n"; body != want {
		t.Errorf("second request: %q, want %q (upstream over HTTP/3)", body, want)
	}
	if got := h3o.seen(); !slices.Equal(got, []string{"HTTP/3.0"}) {
		t.Errorf("HTTP/3 origin saw %v", got)
	}
}

// An explicit-mode HTTP/1.1 client is not told of HTTP/3 either, though
// its response's header could otherwise be sent on as it was received.
func TestAltSvcH3RemovedForHTTP1Client(t *testing.T) {
	e := newEnv(t, envOptions{})
	tcp := e.upstream(upstream.Options{Name: "alt.example.test", Addr: "127.0.45.15:0", CA: e.upCA,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Alt-Svc", `h3=":443"; ma=60, h2=":443"`)
			io.WriteString(w, "ok")
		})})
	c, _ := e.client(false)
	res, _, err := get(t, c, "https://"+hostPort(tcp)+"/")
	if err != nil {
		t.Fatal(err)
	}
	if res.ProtoMajor != 1 {
		t.Fatalf("client spoke %s to the proxy, want HTTP/1.1", res.Proto)
	}
	if diff := cmp.Diff([]string{`h2=":443"`}, res.Header.Values("Alt-Svc")); diff != "" {
		t.Errorf("client's Alt-Svc (-want +got):\n%s", diff)
	}
}

// A request the policy refuses inside an allowed QUIC connection gets a
// 403 naming the rule, as over TCP; the connection goes on.
func TestQUICRequestDenied(t *testing.T) {
	pol := []byte(`
intent: test
default: allow
rules:
  - name: no-admin
    on: http
    when: http.url.contains("/admin")
    action: deny
    reason: admin pages are off limits
`)
	eng, _ := policyRewrites(t, pol)
	e := newQUICEnv(t, envOptions{decider: eng})
	up := e.upstream(upstream.Options{Name: "api.example.test", Addr: "127.0.42.6:0", CA: e.upCA})
	startH3Origin(t, e.env, "api.example.test", up.Addr.String(), nil)
	e.redirect(up.Addr)
	c := e.client(t)
	res, body, err := get(t, c, "https://"+hostPort(up)+"/admin/x")
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 403 || !strings.Contains(body, "denied by rule no-admin: admin pages are off limits") {
		t.Fatalf("got %d %q, want 403 naming the rule", res.StatusCode, body)
	}
	if res, _, err := get(t, c, "https://"+hostPort(up)+"/ok"); err != nil || res.StatusCode != 200 {
		t.Fatalf("next request on the connection: %v %v", res, err)
	}
	h := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP && ev.HTTP.Status == 403 })
	if h.Verdict.Rule != "no-admin" || h.HTTP.Proto != "HTTP/3.0" {
		t.Errorf("http event rule %q proto %q", h.Verdict.Rule, h.HTTP.Proto)
	}
}

// An LLM call over HTTP/3 is rewritten as over TCP: the secret in its
// prompt never reaches the API (itself reached over HTTP/3), and the
// streamed answer that quotes it gets the real value back.
func TestQUICRedactLLM(t *testing.T) {
	eng, rw := policyRewrites(t, policy.DefaultPolicyYAML())
	e := newQUICEnv(t, envOptions{decider: eng, rewrites: rw})
	var mu sync.Mutex
	var sent []byte
	llm := upstream.LLMHandler(3)
	origin := startH3Origin(t, e.env, "api.anthropic.com", "127.0.42.8:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sent = b
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		llm.ServeHTTP(w, r)
	}))
	e.redirect(origin.addr)
	tok := fakeToken(t)
	url := "https://api.anthropic.com:" + strconv.Itoa(int(origin.addr.Port())) + "/v1/messages"
	res, err := e.client(t).Post(url, "application/json", bytes.NewReader(anthropicBody(t, true, "deploy with token "+tok+" please")))
	if err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("status %d, %v: %s", res.StatusCode, err, answer)
	}
	mu.Lock()
	defer mu.Unlock()
	if bytes.Contains(sent, []byte(tok)) || !bytes.Contains(sent, []byte("[REDACTED:github-pat:")) {
		t.Errorf("the API got %.300s, want the secret replaced by its placeholder", sent)
	}
	if got := origin.seen(); !slices.Equal(got, []string{"HTTP/3.0"}) {
		t.Errorf("the API saw %v, want one request over HTTP/3", got)
	}
	if joined := strings.ReplaceAll(string(answer), `"`, ""); !strings.Contains(string(answer), tok) && !strings.Contains(joined, tok) || strings.Contains(string(answer), "[REDACTED:") {
		t.Errorf("the answer did not get the secret back:\n%.600s", answer)
	}
	ev := e.rec.wait(t, "llm", func(ev *event.Event) bool { return ev.Kind == event.KindLLM })
	if ev.Verdict.Action != event.Rewrite || ev.LLM.Restored != 1 || strings.Contains(ev.LLM.Prompt, tok) {
		t.Errorf("llm event: verdict %s restored %d", ev.Verdict, ev.LLM.Restored)
	}
}

// A QUIC connection cannot move to another client address: a probe of a
// new path gets no answer, while the connection goes on from its own.
func TestQUICNoMigration(t *testing.T) {
	e := newQUICEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", Addr: "127.0.42.11:0", CA: e.upCA})
	startH3Origin(t, e.env, "api.example.test", up.Addr.String(), nil)
	e.redirect(up.Addr)
	socket := func() *quic.Transport {
		pc, err := net.ListenPacket("udp", "127.0.42.10:0")
		if err != nil {
			t.Fatal(err)
		}
		tr := &quic.Transport{Conn: pc}
		t.Cleanup(func() { tr.Close(); pc.Close() })
		return tr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	proxyAddr := e.pc.LocalAddr()
	qc, err := socket().Dial(ctx, proxyAddr, &stdtls.Config{RootCAs: e.caPool, ServerName: "api.example.test", NextProtos: []string{http3.NextProtoH3}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cc := (&http3.Transport{}).NewClientConn(qc)
	url := "https://" + hostPort(up) + "/"
	roundTrip := func() error {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		res, err := cc.RoundTrip(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return errors.New(res.Status)
		}
		return nil
	}
	if err := roundTrip(); err != nil {
		t.Fatal(err)
	}
	path, err := qc.AddPath(socket())
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if err := path.Probe(pctx); err == nil {
		t.Fatal("the proxy answered a probe from a new client address: the connection could migrate")
	}
	if err := roundTrip(); err != nil {
		t.Fatalf("the connection from its own address: %v", err)
	}
}

// A session that ends takes its QUIC connections with it, and a host
// whose TLS is passed through over TCP is refused over QUIC (the client
// falls back to TCP, where it is passed through).
func TestQUICSessionEndAndPassthrough(t *testing.T) {
	e := newQUICEnv(t, envOptions{passthrough: func(host string, _ netip.Addr) bool { return host == "pinned.example.test" }})
	up := e.upstream(upstream.Options{Name: "api.example.test", Addr: "127.0.42.12:0", CA: e.upCA})
	startH3Origin(t, e.env, "api.example.test", up.Addr.String(), nil)
	e.redirect(up.Addr)

	t.Run("passthrough host", func(t *testing.T) {
		_, _, err := get(t, e.client(t), "https://pinned.example.test:"+strconv.Itoa(int(up.Addr.Port()))+"/")
		var ae *quic.ApplicationError
		if !errors.As(err, &ae) || !strings.Contains(ae.ErrorMessage, ruleQUICPassthrough) {
			t.Fatalf("error %v, want a CONNECTION_CLOSE naming rule %s", err, ruleQUICPassthrough)
		}
		tl := e.rec.wait(t, "tls", func(ev *event.Event) bool {
			return ev.Kind == event.KindTLS && ev.TLS.ServerName == "pinned.example.test"
		})
		if tl.Verdict.Rule != ruleQUICPassthrough || tl.TLS.Intercepted {
			t.Errorf("tls event: %s intercepted %v", tl.Verdict, tl.TLS.Intercepted)
		}
	})

	t.Run("session ends", func(t *testing.T) {
		c := e.client(t)
		if _, _, err := get(t, c, "https://"+hostPort(up)+"/"); err != nil {
			t.Fatal(err)
		}
		e.p.RemoveSession(testSession)
		_, _, err := get(t, c, "https://"+hostPort(up)+"/")
		if err == nil {
			t.Fatal("a request went through after the session ended")
		}
		// The connection is gone, and a new one is refused: the session
		// is unknown.
		if _, _, err := get(t, e.client(t), "https://"+hostPort(up)+"/"); err == nil {
			t.Fatal("a new connection of the ended session was served")
		}
	})
}

// Close ends ServeQUIC, its connections and the upstream HTTP/3
// connections, and leaves no goroutine behind.
func TestQUICCloseLeavesNothing(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Run("serve", func(t *testing.T) {
		e := newQUICEnv(t, envOptions{})
		up := e.upstream(upstream.Options{Name: "api.example.test", Addr: "127.0.42.13:0", CA: e.upCA})
		startH3Origin(t, e.env, "api.example.test", up.Addr.String(), nil)
		e.redirect(up.Addr)
		if _, body, err := get(t, e.client(t), "https://"+hostPort(up)+"/"); err != nil || !strings.Contains(body, "HTTP/3.0") {
			t.Fatalf("%q, %v", body, err)
		}
	}) // its cleanups close the proxy (ServeQUIC must return nil), the client and the origin
	waitGoroutines(t, base)
}

// In transparent mode an origin's Alt-Svc reaches the client as it came,
// h3 included: the client's QUIC comes to the proxy too.
func TestQUICAltSvcPassedThrough(t *testing.T) {
	e := newQUICEnv(t, envOptions{})
	const altSvc = `h3=":443"; ma=60, h2=":443"`
	origin := startH3Origin(t, e.env, "api.example.test", "127.0.42.14:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", altSvc)
		io.WriteString(w, "ok")
	}))
	e.redirect(origin.addr)
	res, _, err := get(t, e.client(t), "https://api.example.test:"+strconv.Itoa(int(origin.addr.Port()))+"/")
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Header.Values("Alt-Svc"); !slices.Equal(got, []string{altSvc}) {
		t.Errorf("client got Alt-Svc %q, want %q", got, altSvc)
	}
}
