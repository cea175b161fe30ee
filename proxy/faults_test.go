package proxy

import (
	"bufio"
	"bytes"
	stdtls "crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// The fault tests each start a real proxy, put one connection or request
// in trouble and check three things: the faulty one gets a clear answer
// (an error status or a closed connection, never a hang or a silent
// success), an event says what happened, and a normal request through the
// same proxy succeeds while the fault is in progress.

// faultWait bounds how long a test waits for a fault to be dealt with: a
// guard against a hang, not a measurement.
const faultWait = 20 * time.Second

// healthy starts an upstream that answers normally, on its own address.
func (e *env) healthy() *upstream.Server {
	e.t.Helper()
	return e.upstream(upstream.Options{Name: "ok.example.test", CA: e.upCA, Addr: "127.0.0.3:0"})
}

// serves does one HTTPS GET to up through the proxy on a new connection and
// returns an error unless it succeeds: the proxy still serves others.
func (e *env) serves(up *upstream.Server) error {
	tr := &http.Transport{
		Proxy:           http.ProxyURL(e.proxyURL(proxyUser, testToken)),
		TLSClientConfig: &stdtls.Config{RootCAs: e.caPool, NextProtos: []string{"http/1.1"}},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: faultWait}
	resp, err := c.Get(up.URL + "/healthy")
	if err != nil {
		return fmt.Errorf("normal request during the fault: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if want := "hello from " + up.Name + " via HTTP/1.1\n"; err != nil || resp.StatusCode != 200 || string(body) != want {
		return fmt.Errorf("normal request during the fault: %d %q (%v), want 200 %q", resp.StatusCode, body, err, want)
	}
	return nil
}

func (e *env) mustServe(t *testing.T, up *upstream.Server) {
	t.Helper()
	if err := e.serves(up); err != nil {
		t.Fatal(err)
	}
}

// httpEvent waits for the http event of the request whose URL ends in path.
func (e *env) httpEvent(t *testing.T, path string) *event.Event {
	t.Helper()
	return e.rec.wait(t, "http "+path, func(ev *event.Event) bool {
		return ev.Kind == event.KindHTTP && strings.HasSuffix(ev.HTTP.URL, path)
	})
}

// waitClosed waits until the peer closes c (or resets it) and returns
// whatever it read meanwhile; it fails if that takes longer than faultWait.
func waitClosed(t *testing.T, r io.Reader, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(faultWait))
	got, err := io.ReadAll(r)
	if netx.IsTimeout(err) {
		t.Fatalf("connection still open after %v (read %q)", faultWait, got)
	}
	return got
}

// rawConn returns the TCP connection under a hijacked upstream connection.
func rawConn(c net.Conn) *net.TCPConn {
	if tc, ok := c.(*stdtls.Conn); ok {
		c = tc.NetConn()
	}
	return c.(*net.TCPConn)
}

// TestFaultUpstreamResetMidResponse: the upstream sends the header and part
// of the body, then resets the connection. The client must see the
// response fail, never a complete (short) body.
func TestFaultUpstreamResetMidResponse(t *testing.T) {
	framings := []struct{ name, head string }{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst ten."},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nfirst ten.\r\n"},
	}
	for _, f := range framings {
		for _, cp := range clientProtos {
			t.Run(f.name+"/"+cp.name, func(t *testing.T) {
				e := newEnv(t, envOptions{})
				ok := e.healthy()
				reset := make(chan struct{})
				up := e.upstream(upstream.Options{Name: "reset.example.test", CA: e.upCA, HTTP1Only: true,
					Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						conn, brw, err := http.NewResponseController(w).Hijack()
						if err != nil {
							return
						}
						defer conn.Close()
						brw.WriteString(f.head)
						brw.Flush()
						select {
						case <-reset:
						case <-t.Context().Done():
						}
						rawConn(conn).SetLinger(0) // Close sends RST
					})})
				c, _ := e.client(cp.h2)
				start := time.Now()
				resp, err := c.Get(up.URL + "/reset")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				first := make([]byte, 10)
				if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first ten." {
					t.Fatalf("first bytes %q, %v", first, err)
				}
				// The response is half sent and its upstream still open.
				e.mustServe(t, ok)
				for _, ev := range e.rec.kinds(event.KindHTTP) {
					if strings.HasSuffix(ev.HTTP.URL, "/reset") {
						t.Errorf("event published before the response ended: status %d error %q", ev.HTTP.Status, ev.HTTP.Error)
					}
				}
				resetAt := time.Now()
				close(reset)
				rest, err := io.ReadAll(resp.Body)
				if err == nil {
					t.Errorf("read %q more and no error: the reset response looked complete", rest)
				}
				ev := e.httpEvent(t, "/reset")
				if !ev.Verdict.Allowed() || ev.HTTP.Status != 200 {
					t.Errorf("event verdict %s status %d, want allowed with the status the upstream sent", ev.Verdict, ev.HTTP.Status)
				}
				if !strings.HasPrefix(ev.HTTP.Error, "upstream ") || !strings.HasSuffix(ev.HTTP.Error, " after 10 bytes of the body") {
					t.Errorf("event error %q, want the upstream's failure after 10 bytes of the body", ev.HTTP.Error)
				}
				if !ev.Time.After(start) || ev.Time.After(resetAt) {
					t.Errorf("event time %v, want the request's (between %v and the reset at %v)", ev.Time, start, resetAt)
				}
			})
		}
	}
}

// TestFaultClientGoneMidResponse: the client goes away while the response
// body streams. The upstream request is cancelled, and the event says the
// client closed, after how much of the body.
func TestFaultClientGoneMidResponse(t *testing.T) {
	for _, cp := range clientProtos {
		t.Run(cp.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			ok := e.healthy()
			cancelled := make(chan struct{})
			up := e.upstream(upstream.Options{Name: "gone.example.test", CA: e.upCA,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.WriteString(w, "first ten.")
					http.NewResponseController(w).Flush()
					select {
					case <-r.Context().Done():
						close(cancelled)
					case <-time.After(faultWait):
					}
				})})
			c, tr := e.client(cp.h2)
			resp, err := c.Get(up.URL + "/gone")
			if err != nil {
				t.Fatal(err)
			}
			first := make([]byte, 10)
			if _, err := io.ReadFull(resp.Body, first); err != nil {
				t.Fatalf("first bytes %q, %v", first, err)
			}
			resp.Body.Close() // before the end: the connection (h1) or stream (h2) is dropped
			tr.CloseIdleConnections()
			select {
			case <-cancelled:
			case <-time.After(faultWait):
				t.Fatal("the upstream request outlived its client")
			}
			ev := e.httpEvent(t, "/gone")
			want := "client closed the connection after 10 bytes of the body"
			if cp.h2 {
				want = "client closed the stream after 10 bytes of the body"
			}
			if !ev.Verdict.Allowed() || ev.HTTP.Status != 200 || ev.HTTP.Error != want {
				t.Errorf("event verdict %s status %d error %q, want allowed 200 %q", ev.Verdict, ev.HTTP.Status, ev.HTTP.Error, want)
			}
			e.mustServe(t, ok)
		})
	}
}

// TestFaultSlowUpstream: an upstream that sends no response header within
// UpstreamHeaderTimeout gets the client a 504; a slow one within it works.
func TestFaultSlowUpstream(t *testing.T) {
	for _, cp := range clientProtos {
		t.Run(cp.name, func(t *testing.T) {
			e := newEnv(t, envOptions{tune: func(o *Options) { o.UpstreamHeaderTimeout = time.Second }})
			ok := e.healthy()
			entered := make(chan struct{}, 1)
			up := e.upstream(upstream.Options{Name: "slow.example.test", CA: e.upCA,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/slow" {
						time.Sleep(100 * time.Millisecond) // a tenth of the limit
						io.WriteString(w, "late but fine")
						return
					}
					entered <- struct{}{}
					<-r.Context().Done() // silent until the proxy gives up
				})})
			c, _ := e.client(cp.h2)

			type result struct {
				status int
				body   string
				err    error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := c.Get(up.URL + "/silent")
				if err != nil {
					done <- result{err: err}
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				done <- result{status: resp.StatusCode, body: string(body)}
			}()
			<-entered
			e.mustServe(t, ok)
			var res result
			select {
			case res = <-done:
			case <-time.After(faultWait):
				t.Fatal("no answer for a silent upstream")
			}
			if res.err != nil || res.status != http.StatusGatewayTimeout || !strings.Contains(res.body, "timeout") {
				t.Errorf("silent upstream: %d %q %v, want 504 saying timeout", res.status, res.body, res.err)
			}
			ev := e.httpEvent(t, "/silent")
			if !ev.Verdict.Allowed() || ev.HTTP.Status != http.StatusGatewayTimeout || !strings.HasPrefix(ev.HTTP.Error, "upstream: ") ||
				!strings.Contains(ev.HTTP.Error, "timeout") {
				t.Errorf("event verdict %s status %d error %q, want allowed 504 with the upstream's timeout", ev.Verdict, ev.HTTP.Status, ev.HTTP.Error)
			}

			resp, err := c.Get(up.URL + "/slow")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "late but fine" {
				t.Errorf("slow upstream within the limit: %d %q", resp.StatusCode, body)
			}
		})
	}
}

// clientConns are the ways a client reaches the proxy's HTTP servers with
// HTTP/1: open returns the connection and the reader of what comes back.
// target is the CONNECT authority (ignored on the proxy port).
var clientConns = []struct {
	name   string
	tunnel bool
	tls    bool
	open   func(t *testing.T, e *env, target, serverName string) (net.Conn, io.Reader)
}{
	{"proxy port", false, false, func(t *testing.T, e *env, target, serverName string) (net.Conn, io.Reader) {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, c
	}},
	{"plain http in tunnel", true, false, func(t *testing.T, e *env, target, serverName string) (net.Conn, io.Reader) {
		c, br, resp := e.connect(target, basicAuth(proxyUser, testToken))
		if resp != nil {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		return c, br
	}},
	{"intercepted tls tunnel", true, true, func(t *testing.T, e *env, target, serverName string) (net.Conn, io.Reader) {
		c, _, resp := e.connect(target, basicAuth(proxyUser, testToken))
		if resp != nil {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: serverName, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return tc, tc
	}},
}

// TestFaultSlowlorisClient: a client that sends its request header one byte
// at a time is disconnected after ReadHeaderTimeout, on the proxy port and
// inside tunnels, with an http event that says so, while other clients are
// served.
func TestFaultSlowlorisClient(t *testing.T) {
	for _, cc := range clientConns {
		t.Run(cc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{tune: func(o *Options) { o.ReadHeaderTimeout = time.Second }})
			ok := e.healthy()
			c, r := cc.open(t, e, hostPort(ok), ok.Name)
			head := "GET " + ok.URL + "/slowloris HTTP/1.1\r\nHost: " + hostPort(ok) +
				"\r\nProxy-Authorization: " + basicAuth(proxyUser, testToken) + "\r\nX-Slow: " + strings.Repeat("s", 40) + "\r\n\r\n"
			stop := make(chan struct{})
			sent := make(chan int, 1)
			go func() { // one byte every 100ms: the header needs 15s or more
				n := 0
				defer func() { sent <- n }()
				for i := range len(head) {
					if _, err := c.Write([]byte{head[i]}); err != nil {
						return
					}
					n++
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}()
			e.mustServe(t, ok)
			got := waitClosed(t, r, c)
			close(stop)
			n := <-sent
			// net/http may say 400 before it closes; anything else means the
			// header was read.
			if n == len(head) || len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 400 ") {
				t.Errorf("after %d of %d bytes the proxy answered %q, want the connection closed (with a 400 at most)", n, len(head), got)
			}
			for _, ev := range e.rec.kinds(event.KindHTTP) {
				if strings.HasSuffix(ev.HTTP.URL, "/slowloris") {
					t.Errorf("a trickled request was read and decided: %s", ev.Verdict)
				}
			}
			ev := e.rec.wait(t, "header timeout", func(ev *event.Event) bool {
				return ev.Kind == event.KindHTTP && ev.Verdict.Rule == ruleHeaderTimeout
			})
			const msg = "client sent no complete request header within 1s"
			if ev.Verdict.Allowed() || ev.HTTP.Error != msg || ev.Verdict.Reason != msg {
				t.Errorf("event verdict %s error %q, want a %s refusal with error %q", ev.Verdict, ev.HTTP.Error, ruleHeaderTimeout, msg)
			}
			// On the proxy port no request authenticated: outside any session.
			wantSession, wantHost := "", ""
			if cc.tunnel {
				wantSession, wantHost = testSession, hostPort(ok)
			}
			if ev.Session != wantSession || ev.HTTP.Host != wantHost || ev.HTTP.URL != "" {
				t.Errorf("event session %q host %q url %q, want session %q host %q and no URL", ev.Session, ev.HTTP.Host, ev.HTTP.URL, wantSession, wantHost)
			}
			if n := len(e.rec.kinds(event.KindHTTP)); n != 2 { // the fault's and the healthy request's
				t.Errorf("%d http events, want 2:%s", n, describe(e.rec.all()))
			}
			e.mustServe(t, ok)
		})
	}
}

// TestFaultIdleKeepAlive: a keep-alive connection that served a request
// and then stays idle until the server closes it (IdleTimeout), or that
// the client closes, is no fault: the request's event is the only one.
func TestFaultIdleKeepAlive(t *testing.T) {
	for _, cc := range clientConns {
		for _, closer := range []string{"server", "client"} {
			t.Run(cc.name+"/"+closer+" closes", func(t *testing.T) {
				e := newEnv(t, envOptions{
					tune: func(o *Options) { o.ReadHeaderTimeout = time.Second },
					servers: func(p *Proxy) {
						p.front.IdleTimeout = 300 * time.Millisecond
						p.h1.IdleTimeout = 300 * time.Millisecond
						p.h2.Idle = 300 * time.Millisecond
					},
				})
				up := e.healthy()
				if !cc.tls {
					up = e.upstream(upstream.Options{Name: "plain.example.test"})
				}
				c, r := cc.open(t, e, hostPort(up), up.Name)
				br := bufio.NewReader(r)
				line := "GET /idle HTTP/1.1"
				if !cc.tunnel {
					line = "GET " + up.URL + "/idle HTTP/1.1"
				}
				io.WriteString(c, line+"\r\nHost: "+hostPort(up)+"\r\nProxy-Authorization: "+basicAuth(proxyUser, testToken)+"\r\n\r\n")
				c.SetReadDeadline(time.Now().Add(faultWait))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no response: %v", err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				e.httpEvent(t, "/idle")
				if closer == "server" {
					waitClosed(t, br, c)
				} else {
					c.Close()
				}
				// A fault would be published as the server closes the
				// connection: give it the time a healthy request takes.
				e.mustServe(t, up)
				time.Sleep(100 * time.Millisecond)
				for _, ev := range e.rec.kinds(event.KindHTTP) {
					if ev.Verdict.Rule == ruleHeaderTimeout || ev.Verdict.Rule == ruleHeaderTooLarge {
						t.Errorf("an idle connection made a fault event: %s (%s)", ev.Verdict, ev.HTTP.Error)
					}
				}
			})
		}
	}
}

// TestFaultHugeHeaders: a request header over MaxHeaderBytes gets 431 on
// the proxy port and inside tunnels (HTTP/1.1 and HTTP/2), with an http
// event refusing it; a response header over it gets 502.
func TestFaultHugeHeaders(t *testing.T) {
	const limit = 4 << 10
	big := strings.Repeat("b", 4*limit) // beyond the limit and net/http's slack
	newHugeEnv := func(t *testing.T) (*env, *upstream.Server) {
		e := newEnv(t, envOptions{tune: func(o *Options) { o.MaxHeaderBytes = limit }})
		return e, e.healthy()
	}
	// tooLarge checks the event of a refused header: with the request
	// when the proxy read it, without when the header was too large even
	// to read (beyond the servers' hard limit).
	tooLarge := func(t *testing.T, e *env, path, session string, read bool) {
		t.Helper()
		ev := e.rec.wait(t, "header too large", func(ev *event.Event) bool {
			return ev.Kind == event.KindHTTP && ev.Verdict.Rule == ruleHeaderTooLarge
		})
		if ev.Verdict.Allowed() || ev.HTTP.Status != http.StatusRequestHeaderFieldsTooLarge || ev.HTTP.Error != "" {
			t.Errorf("event verdict %s status %d error %q, want a %s refusal with 431", ev.Verdict, ev.HTTP.Status, ev.HTTP.Error, ruleHeaderTooLarge)
		}
		if gotPath := strings.HasSuffix(ev.HTTP.URL, path); gotPath != read || ev.Session != session {
			t.Errorf("event url %q session %q, want the url ending in %s: %v, session %q", ev.HTTP.URL, ev.Session, path, read, session)
		}
	}
	sizes := []struct {
		name string
		n    int
		read bool // under the servers' hard limit: the handler refuses it
	}{
		{"over the limit", limit + limit/2, true},
		{"beyond the hard limit", 4 * limit, false},
	}
	for _, sz := range sizes {
		t.Run("request on the proxy port/"+sz.name, func(t *testing.T) {
			e, ok := newHugeEnv(t)
			plain := e.upstream(upstream.Options{Name: "plain.example.test"})
			c, _ := e.client(false)
			req, _ := http.NewRequest("GET", "http://"+hostPort(plain)+"/huge", nil)
			req.Header.Set("X-Huge", strings.Repeat("b", sz.n))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("status %d, want 431", resp.StatusCode)
			}
			e.mustServe(t, ok)
			if n := len(plain.Requests()); n != 0 {
				t.Errorf("upstream got %d requests", n)
			}
			// Unread, the header authenticated no session.
			session := ""
			if sz.read {
				session = testSession
			}
			tooLarge(t, e, "/huge", session, sz.read)
		})
		t.Run("request in a tls tunnel/"+sz.name, func(t *testing.T) {
			e, ok := newHugeEnv(t)
			c, _ := e.client(false)
			req, _ := http.NewRequest("GET", ok.URL+"/huge", nil)
			req.Header.Set("X-Huge", strings.Repeat("b", sz.n))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("status %d, want 431", resp.StatusCode)
			}
			e.mustServe(t, ok)
			tooLarge(t, e, "/huge", testSession, sz.read)
		})
	}
	for _, sz := range []struct {
		name   string
		fields int // of limit/3 bytes each
		read   bool
	}{{"over the limit", 4, true}, {"beyond the hard limit", 10, false}} {
		t.Run("request in an h2 tunnel/"+sz.name, func(t *testing.T) {
			// Go's HTTP/2 client refuses to send a header list over the peer's
			// limit, so the frames are written by hand.
			e, ok := newHugeEnv(t)
			c, _, resp := e.connect(hostPort(ok), basicAuth(proxyUser, testToken))
			if resp != nil {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
			tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: ok.Name, NextProtos: []string{"h2"}})
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
				t.Fatalf("negotiated %q, want h2", p)
			}
			var block bytes.Buffer
			enc := hpack.NewEncoder(&block)
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", hostPort(ok)}, {":path", "/huge"}} {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			// Several fields, each under the limit, that add up to more than
			// it, in one frame: the server reads them and answers 431.
			for i := range sz.fields {
				enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-huge-%d", i), Value: strings.Repeat("h", limit/3)})
			}
			io.WriteString(tc, http2.ClientPreface)
			fr := http2.NewFramer(tc, tc)
			fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			tc.SetReadDeadline(time.Now().Add(faultWait))
			status := ""
			for status == "" {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("no response to the huge header: %v", err)
				}
				switch f := f.(type) {
				case *http2.MetaHeadersFrame:
					status = f.PseudoValue("status")
				case *http2.GoAwayFrame:
					t.Fatalf("GOAWAY %v, want a 431 response", f.ErrCode)
				case *http2.RSTStreamFrame:
					t.Fatalf("RST_STREAM %v, want a 431 response", f.ErrCode)
				}
			}
			if status != "431" {
				t.Errorf("status %s, want 431", status)
			}
			e.mustServe(t, ok)
			tooLarge(t, e, "/huge", testSession, sz.read)
		})
	}
	t.Run("response", func(t *testing.T) {
		for _, cp := range clientProtos {
			t.Run(cp.name, func(t *testing.T) {
				e, ok := newHugeEnv(t)
				up := e.upstream(upstream.Options{Name: "huge.example.test", CA: e.upCA,
					Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						w.Header().Set("X-Huge", big)
						io.WriteString(w, "never seen")
					})})
				c, _ := e.client(cp.h2)
				resp, err := c.Get(up.URL + "/huge-response")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(body), "never seen") {
					t.Errorf("got %d %q, want 502", resp.StatusCode, body)
				}
				ev := e.httpEvent(t, "/huge-response")
				if !ev.Verdict.Allowed() || ev.HTTP.Status != http.StatusBadGateway {
					t.Errorf("event verdict %s status %d, want allowed 502", ev.Verdict, ev.HTTP.Status)
				}
				e.mustServe(t, ok)
			})
		}
	})
}

// TestFaultMalformedClientHello sends broken ClientHellos through CONNECT
// and to the transparent listener: the connection is closed, with a tls
// event that says why, and nothing reaches the upstream.
func TestFaultMalformedClientHello(t *testing.T) {
	tests := []struct {
		name  string
		bytes []byte
		// closeWrite half-closes after the bytes; otherwise the client
		// stalls and HandshakeTimeout ends it.
		closeWrite bool
		reason     string // in the event's reason
	}{
		{"truncated record then stall", []byte{0x16, 3, 1, 0x02, 0x00, 1, 0, 1, 0xfc, 3, 3}, false, "timeout"},
		{"truncated record then end", []byte{0x16, 3, 1, 0x02, 0x00, 1, 0, 1, 0xfc, 3, 3}, true, "truncated"},
		{"garbage handshake in a valid record", []byte{0x16, 3, 1, 0, 8, 1, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef}, false, "malformed"},
		{"random bytes after a handshake record type", append([]byte{0x16}, randomBytes(64)...), false, "not a TLS ClientHello"},
		// An SSL 2.0-compatible hello: length 46, CLIENT-HELLO, version
		// 3.1, cipher specs 21 bytes, no session id, a 16-byte challenge.
		{"sslv2 hello", append([]byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10}, randomBytes(37)...), false, "SSL 2.0"},
	}
	for _, tt := range tests {
		for _, mode := range []string{"connect", "transparent"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				o := envOptions{tune: func(o *Options) { o.HandshakeTimeout = time.Second }}
				var e *env
				var c net.Conn
				var r io.Reader
				var up *upstream.Server
				if mode == "transparent" {
					te := newTransparentEnv(t, o)
					e = te.env
					up = e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
					c = te.dial(t, up.Addr, true)
					r = c
				} else {
					e = newEnv(t, o)
					up = e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
					var br *bufio.Reader
					var resp *http.Response
					c, br, resp = e.connect(hostPort(up), basicAuth(proxyUser, testToken))
					if resp != nil {
						t.Fatalf("CONNECT: %s", resp.Status)
					}
					r = br
				}
				ok := e.healthy()
				if _, err := c.Write(tt.bytes); err != nil {
					t.Fatal(err)
				}
				if tt.closeWrite {
					c.(*net.TCPConn).CloseWrite()
				}
				e.mustServe(t, ok)
				if got := waitClosed(t, r, c); len(got) > 0 {
					t.Errorf("proxy answered %q, want the connection closed", got)
				}
				ev := e.rec.wait(t, "tls", func(ev *event.Event) bool { return ev.Kind == event.KindTLS && ev.TLS.ServerName == "" })
				if ev.Verdict.Allowed() || ev.Verdict.Rule != ruleMalformedHello || !strings.Contains(ev.Verdict.Reason, tt.reason) {
					t.Errorf("tls event verdict %s, want a %s refusal saying %q", ev.Verdict, ruleMalformedHello, tt.reason)
				}
				if ev.Session != testSession {
					t.Errorf("tls event session %q, want %q", ev.Session, testSession)
				}
				if n := len(up.Requests()); n != 0 {
					t.Errorf("upstream got %d requests", n)
				}
			})
		}
	}
}

// TestFaultRandomBytesPassThrough: bytes that are neither TLS nor HTTP are
// another protocol, passed through as the connect event allowed; a TLS
// upstream that cannot read them closes, and so does the tunnel.
func TestFaultRandomBytesPassThrough(t *testing.T) {
	e := newEnv(t, envOptions{})
	ok := e.healthy()
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	c, br, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	c.Write(append([]byte{0x01}, randomBytes(63)...))
	e.mustServe(t, ok)
	waitClosed(t, br, c)
	for _, ev := range e.rec.kinds(event.KindTLS) {
		if ev.TLS.Intercepted && ev.TLS.ServerName == "" {
			t.Errorf("random bytes were intercepted as TLS: %s", ev.Verdict)
		}
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("upstream got %d requests", n)
	}
}

func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestFaultTLSToPlainUpstream: an intercepted client's upstream does not
// speak TLS. The client's handshake with the proxy succeeds; its requests
// get 502 naming the TLS failure.
func TestFaultTLSToPlainUpstream(t *testing.T) {
	for _, kind := range []string{"plain http", "garbage"} {
		for _, cp := range clientProtos {
			t.Run(kind+"/"+cp.name, func(t *testing.T) {
				e := newEnv(t, envOptions{})
				ok := e.healthy()
				name := "notls.example.test"
				var port uint16
				if kind == "plain http" {
					port = e.upstream(upstream.Options{Name: name}).Addr.Port()
				} else {
					port = garbageServer(t, e, name)
				}
				c, _ := e.client(cp.h2)
				resp, err := c.Get(fmt.Sprintf("https://%s:%d/notls", name, port))
				if err != nil {
					t.Fatal(err) // the handshake with the proxy must succeed
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "tls") {
					t.Errorf("got %d %q, want 502 naming the TLS failure", resp.StatusCode, body)
				}
				e.mustServe(t, ok)
				ev := e.httpEvent(t, "/notls")
				if !ev.Verdict.Allowed() || ev.HTTP.Status != http.StatusBadGateway {
					t.Errorf("event verdict %s status %d, want allowed 502", ev.Verdict, ev.HTTP.Status)
				}
				tev := e.rec.wait(t, "tls", func(ev *event.Event) bool { return ev.Kind == event.KindTLS })
				if !tev.TLS.Intercepted {
					t.Errorf("tls event %+v, want intercepted", *tev.TLS)
				}
			})
		}
	}
}

// garbageServer listens on 127.0.0.2 for name: it greets every connection
// with a line that is not TLS, then echoes.
func garbageServer(t *testing.T, e *env, name string) uint16 {
	t.Helper()
	ap := upstream.ServeTCP(t, "127.0.0.2:0", func(c net.Conn) {
		io.WriteString(c, "garbage, not a server hello\r\n")
		io.Copy(c, c)
	})
	e.namesMu.Lock()
	e.names[name] = ap.Addr()
	e.namesMu.Unlock()
	return ap.Port()
}

// TestFaultPlainHTTPToTLSPort: a client speaks plain HTTP inside a CONNECT
// tunnel to a TLS port. The request is forwarded as plain HTTP, and what
// the upstream makes of it (Go's 400, or a closed connection: 502) comes
// back with an event; nothing hangs.
func TestFaultPlainHTTPToTLSPort(t *testing.T) {
	tests := []struct {
		name   string
		start  func(t *testing.T, e *env) string // the host:port to CONNECT to
		status int
	}{
		{"go https server", func(t *testing.T, e *env) string {
			return hostPort(e.upstream(upstream.Options{Name: "tls.example.test", CA: e.upCA}))
		}, http.StatusBadRequest},
		{"bare tls server", func(t *testing.T, e *env) string {
			cert, err := e.upCA.Leaf("tls.example.test")
			if err != nil {
				t.Fatal(err)
			}
			conf := &stdtls.Config{Certificates: []stdtls.Certificate{cert}}
			ap := upstream.ServeTCP(t, "127.0.0.2:0", func(c net.Conn) {
				stdtls.Server(c, conf).Handshake() // fails on plain HTTP
			})
			e.namesMu.Lock()
			e.names["tls.example.test"] = ap.Addr()
			e.namesMu.Unlock()
			return fmt.Sprintf("tls.example.test:%d", ap.Port())
		}, http.StatusBadGateway},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			ok := e.healthy()
			target := tt.start(t, e)
			c, br, resp := e.connect(target, basicAuth(proxyUser, testToken))
			if resp != nil {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
			io.WriteString(c, "GET /plain HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(faultWait))
			r, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			r.Body.Close()
			if r.StatusCode != tt.status {
				t.Errorf("status %d, want %d", r.StatusCode, tt.status)
			}
			e.mustServe(t, ok)
			ev := e.httpEvent(t, "/plain")
			if !ev.Verdict.Allowed() || ev.HTTP.Status != tt.status || !strings.HasPrefix(ev.HTTP.URL, "http://") {
				t.Errorf("event %s %s status %d, want allowed plain http with status %d", ev.Verdict, ev.HTTP.URL, ev.HTTP.Status, tt.status)
			}
		})
	}
}

// TestFaultClientStopsReading: a client that stops reading a response
// while the proxy is writing it loses its connection once its socket has
// taken nothing for the stall limit; the upstream's request ends, the
// event says the client went, and the proxy serves others meanwhile.
func TestFaultClientStopsReading(t *testing.T) {
	for _, cp := range clientProtos {
		t.Run(cp.name, func(t *testing.T) {
			e := newEnv(t, envOptions{servers: func(p *Proxy) {
				p.h1.StallTimeout = 300 * time.Millisecond
				p.h2.Stall = 300 * time.Millisecond
			}})
			ok := e.healthy()
			ended := make(chan struct{})
			up := e.upstream(upstream.Options{Name: "flood.example.test", CA: e.upCA,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer close(ended)
					chunk := make([]byte, 1<<20)
					for r.Context().Err() == nil {
						if _, err := w.Write(chunk); err != nil {
							return
						}
					}
				})})
			c, _, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
			if resp != nil {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
			protos := []string{"http/1.1"}
			if cp.h2 {
				protos = []string{"h2"}
			}
			tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: up.Name, NextProtos: protos})
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			if cp.h2 {
				io.WriteString(tc, http2.ClientPreface)
				fr := http2.NewFramer(tc, tc)
				fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
				fr.WriteWindowUpdate(0, 1<<31-1-65535)
				var block bytes.Buffer
				enc := hpack.NewEncoder(&block)
				for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", hostPort(up)}, {":path", "/flood"}} {
					enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
			} else {
				io.WriteString(tc, "GET /flood HTTP/1.1\r\nHost: "+hostPort(up)+"\r\n\r\n")
			}
			// Nothing more is read.
			select {
			case <-ended:
			case <-time.After(faultWait):
				t.Fatal("the upstream's request did not end")
			}
			ev := e.httpEvent(t, "/flood")
			if ev.HTTP.Status != http.StatusOK || !strings.Contains(ev.HTTP.Error, "client closed") {
				t.Errorf("event status %d error %q, want 200 and the client gone", ev.HTTP.Status, ev.HTTP.Error)
			}
			e.mustServe(t, ok)
		})
	}
}
