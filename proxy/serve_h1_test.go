package proxy

import (
	"bufio"
	"bytes"
	"context"
	stdtls "crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// TestServeH1 speaks raw HTTP/1 inside a plain tunnel to the default
// upstream handler and checks what the serving loop answers, and whether
// the connection is kept for one more request afterwards.
func TestServeH1(t *testing.T) {
	type answer struct {
		status int
		body   string
		header map[string]string // "" means absent
	}
	tests := []struct {
		name string
		// send writes the requests; host is the tunnel's host:port.
		send func(t *testing.T, c net.Conn, br *bufio.Reader, host string)
		want []answer
		kept bool
	}{
		{"pipelined requests are answered in order", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "GET /one HTTP/1.1\r\nHost: "+host+"\r\n\r\nGET /two HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		}, []answer{{200, "hello from plain.example.test via HTTP/1.1\n", nil}, {200, "hello from plain.example.test via HTTP/1.1\n", nil}}, true},
		{"HTTP/1.0 gets one response and the close", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "GET /old HTTP/1.0\r\nHost: "+host+"\r\n\r\n")
		}, []answer{{200, "hello from plain.example.test via HTTP/1.1\n", nil}}, false},
		{"HTTP/1.0 asking for keep-alive still gets the close", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "GET /old HTTP/1.0\r\nHost: "+host+"\r\nConnection: keep-alive\r\n\r\n")
		}, []answer{{200, "hello from plain.example.test via HTTP/1.1\n", nil}}, false},
		{"Expect: 100-continue", func(t *testing.T, c net.Conn, br *bufio.Reader, host string) {
			io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: "+host+"\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := br.ReadString('\n')
			if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
				t.Fatalf("got %q, %v; want 100 Continue before the body", line, err)
			}
			if blank, _ := br.ReadString('\n'); blank != "\r\n" {
				t.Fatalf("100 Continue followed by %q", blank)
			}
			io.WriteString(c, "hello")
		}, []answer{{200, "hello", nil}}, true},
		{"HEAD has a length and no body", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "HEAD /bytes?n=100 HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		}, []answer{{200, "", map[string]string{"Content-Length": "100"}}}, true},
		{"chunked request body", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: "+host+"\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
		}, []answer{{200, "abcde", nil}}, true},
		{"204 has no body", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "GET /status/204 HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		}, []answer{{204, "", map[string]string{"Content-Length": "", "Transfer-Encoding": ""}}}, true},
		{"missing Host", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "GET / HTTP/1.1\r\n\r\n")
		}, []answer{{400, "400 Bad Request: missing required Host header", nil}}, false},
		{"malformed header line", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\nNo colon here\r\n\r\n")
		}, []answer{{400, "400 Bad Request: Bad Request", nil}}, false},
		{"unknown expectation", func(t *testing.T, c net.Conn, _ *bufio.Reader, host string) {
			io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: "+host+"\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\nx")
		}, []answer{{417, "417 Expectation Failed: Expectation Failed", nil}}, false},
	}
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "plain.example.test"})
	host := hostPort(up)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, br, resp := e.connect(host, basicAuth(proxyUser, testToken))
			if resp != nil {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
			tt.send(t, c, br, host)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for i, want := range tt.want {
				req := &http.Request{Method: http.MethodGet}
				if strings.HasPrefix(tt.name, "HEAD") {
					req.Method = http.MethodHead
				}
				res, err := http.ReadResponse(br, req)
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				body, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || res.StatusCode != want.status || string(body) != want.body {
					t.Errorf("response %d: %d %q (%v), want %d %q", i, res.StatusCode, body, err, want.status, want.body)
				}
				if res.Header.Get("Date") == "" && res.StatusCode < 400 {
					t.Errorf("response %d has no Date", i)
				}
				for k, v := range want.header {
					if got := res.Header.Get(k); got != v {
						t.Errorf("response %d: %s %q, want %q", i, k, got, v)
					}
				}
			}
			io.WriteString(c, "GET /again HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			res, err := http.ReadResponse(br, nil)
			switch {
			case tt.kept && err != nil:
				t.Errorf("connection not kept: %v", err)
			case tt.kept:
				io.Copy(io.Discard, res.Body)
				if res.StatusCode != 200 {
					t.Errorf("next request: %s", res.Status)
				}
			case err == nil:
				t.Errorf("connection kept after it should have closed: %s", res.Status)
			}
		})
	}
}

// TestServeH1HeaderLimit: a request header beyond twice MaxHeaderBytes is
// refused with 431 by the loop itself, with a header_too_large event
// naming the tunnel's host.
func TestServeH1HeaderLimit(t *testing.T) {
	e := newEnv(t, envOptions{tune: func(o *Options) { o.MaxHeaderBytes = 1024 }})
	up := e.upstream(upstream.Options{Name: "plain.example.test"})
	c, br, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	go io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+hostPort(up)+"\r\nX-Big: "+strings.Repeat("b", 16<<10)+"\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("got %v, %v; want 431", res, err)
	}
	ev := e.rec.wait(t, "header too large", func(ev *event.Event) bool {
		return ev.Kind == event.KindHTTP && ev.Verdict.Rule == ruleHeaderTooLarge
	})
	if ev.Session != testSession || ev.HTTP.Host != hostPort(up) || ev.HTTP.Status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("event session %q host %q status %d, want %q %q 431", ev.Session, ev.HTTP.Host, ev.HTTP.Status, testSession, hostPort(up))
	}
}

// FuzzServeH1 feeds arbitrary bytes to the HTTP/1 loop of a tunnel whose
// destination is denied (so nothing is dialled: every request is answered
// by the proxy). The loop must end once the client has sent all and
// closed its side, and what it wrote must start with a well-formed
// response, if it wrote anything.
func FuzzServeH1(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc",
		"POST /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a.test\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz",
		"HEAD / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"GET / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET / HTTP/9.9\r\nHost: a.test\r\n\r\n",
		"\r\n\r\nGET",
	} {
		f.Add([]byte(seed))
	}
	e := newEnv(f, envOptions{})
	denied := proxyVerdict("fuzz", "denied for the fuzz target")
	f.Fuzz(func(t *testing.T, data []byte) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		tn := &tunnel{session: testSession, host: "a.test", port: 80, denied: &denied}
		tn.setScheme("http")
		tc := &tunnelConn{Conn: server, t: tn, p: e.p, done: make(chan struct{})}
		tn.conn = tc
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			e.p.serveH1(tc, tc)
		}()
		go func() {
			client.Write(data)
			client.(*net.TCPConn).CloseWrite()
		}()
		client.SetReadDeadline(time.Now().Add(10 * time.Second))
		out, err := io.ReadAll(client)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("reading the answers: %v (after %q)", err, out)
		}
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("the loop did not end after the client closed (input %q)", data)
		}
		if len(out) == 0 {
			return
		}
		if _, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil); err != nil {
			t.Fatalf("answer %q does not start with a response: %v", out, err)
		}
	})
}

// TestServeH1ResponseBeforeBookkeeping: a response of known length reaches
// the client as soon as its body is complete, before the request's event
// is published (which here waits for the client to have the response),
// and a stream's does not wait for it either.
func TestServeH1ResponseBeforeBookkeeping(t *testing.T) {
	clientGot := make(chan struct{})
	var waitedOut atomic.Bool
	e := newEnv(t, envOptions{tune: func(o *Options) {
		publish := o.Publish
		o.Publish = func(ev *event.Event) {
			if ev.HTTP != nil && strings.HasSuffix(ev.HTTP.URL, "/early") {
				select {
				case <-clientGot:
				case <-time.After(5 * time.Second):
					waitedOut.Store(true)
				}
			}
			publish(ev)
		}
	}})
	up := e.upstream(upstream.Options{Name: "early.example.test", CA: e.upCA,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		})})
	c, _, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: up.Name, NextProtos: []string{"http/1.1"}})
	defer tc.Close()
	br := bufio.NewReader(tc)
	for i := range 2 {
		io.WriteString(tc, "GET /early HTTP/1.1\r\nHost: "+hostPort(up)+"\r\n\r\n")
		tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil || string(b) != "hello" {
			t.Fatalf("request %d: body %q, %v", i, b, err)
		}
		if i == 0 {
			close(clientGot)
		}
	}
	if waitedOut.Load() {
		t.Error("the response reached the client only after its event was published")
	}
	e.rec.wait(t, "the two requests' events", func(*event.Event) bool {
		n := 0
		for _, ev := range e.rec.kinds(event.KindHTTP) {
			if strings.HasSuffix(ev.HTTP.URL, "/early") && ev.HTTP.Status == http.StatusOK {
				n++
			}
		}
		return n == 2
	})
}

// TestServeH1Smuggling sends requests whose framing a proxy and a server
// might read differently, with a request the policy denies hidden where
// one reading would see a body and another a request. Whatever the
// framing, the upstream must receive only requests the policy saw and
// allowed, each framed one way only (never Content-Length together with
// Transfer-Encoding), and an ambiguous request gets 400 or 501 and goes
// nowhere.
func TestServeH1Smuggling(t *testing.T) {
	dec := event.DeciderFunc(func(_ context.Context, ev *event.Event) event.Verdict {
		if ev.Kind == event.KindHTTP && strings.Contains(ev.HTTP.URL, "/admin") {
			return event.Verdict{Action: event.Deny, Rule: "no-admin"}
		}
		return event.Verdict{Action: event.Allow}
	})
	const hidden = "GET /admin HTTP/1.1\r\nHost: H\r\n\r\n"
	tests := []struct {
		name, head string // head: the first request's header fields after Host
		body       string
		want       []int // the statuses answered
	}{
		{"length then chunked", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n" + hidden, []int{200, 403}},
		{"chunked then length", "Transfer-Encoding: chunked\r\nContent-Length: 40\r\n", "0\r\n\r\n" + hidden, []int{200, 403}},
		{"chunked hides nothing", "Transfer-Encoding: chunked\r\n", "CHUNK", []int{200}},
		{"two lengths", "Content-Length: 0\r\nContent-Length: 33\r\n", hidden, []int{400}},
		{"length list", "Content-Length: 0, 33\r\n", hidden, []int{400}},
		{"space before colon", "Content-Length : 33\r\n", hidden, []int{400}},
		{"space before colon of chunked", "Transfer-Encoding : chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n" + hidden, []int{400}},
		{"chunked not last", "Transfer-Encoding: chunked, identity\r\n", "0\r\n\r\n" + hidden, []int{400}},
		{"signed length", "Content-Length: +33\r\n", hidden, []int{400}},
	}
	e := newEnv(t, envOptions{decider: dec})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("smuggle-%d.test", i)
			up := startRawUpstream(t)
			e.namesMu.Lock()
			e.names[name] = up.addr.Addr()
			e.namesMu.Unlock()
			host := net.JoinHostPort(name, fmt.Sprint(up.addr.Port()))
			c, br, resp := e.connect(host, basicAuth(proxyUser, testToken))
			if resp != nil {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
			body := strings.ReplaceAll(tt.body, "Host: H", "Host: "+host)
			if body == "CHUNK" { // the hidden request as the body's one chunk
				hidden := strings.ReplaceAll(hidden, "Host: H", "Host: "+host)
				body = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(hidden), hidden)
			}
			raw := "POST /a HTTP/1.1\r\nHost: " + host + "\r\n" + tt.head + "\r\n" + body
			io.WriteString(c, raw)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var statuses []int
			for len(statuses) < len(tt.want) {
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				io.Copy(io.Discard, res.Body)
				statuses = append(statuses, res.StatusCode)
			}
			if !slices.Equal(statuses, tt.want) {
				t.Errorf("answered %v, want %v", statuses, tt.want)
			}
			c.Close()
			got := up.received()
			for _, r := range got {
				if strings.Contains(r.target, "admin") {
					t.Errorf("the upstream received the hidden request: %+v", r)
				}
				if r.length && r.chunked {
					t.Errorf("the upstream received both Content-Length and Transfer-Encoding: %+v", r)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tt.want[0] == 200]; len(got) != want {
				t.Errorf("the upstream received %d requests, want %d: %+v", len(got), want, got)
			}
		})
	}
}

// rawUpstream is a plain HTTP/1.1 server that notes each request's target
// and framing fields as they arrived, answering each with "ok".
type rawUpstream struct {
	addr netip.AddrPort
	mu   sync.Mutex
	reqs []rawRequest
}

type rawRequest struct {
	target          string
	length, chunked bool // a Content-Length, a Transfer-Encoding field
}

func startRawUpstream(t *testing.T) *rawUpstream {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &rawUpstream{addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go u.serve(c)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		tp := textproto.NewReader(br)
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		parts := strings.Fields(line)
		r := rawRequest{length: h["Content-Length"] != nil, chunked: h["Transfer-Encoding"] != nil}
		if len(parts) > 1 {
			r.target = parts[1]
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, r)
		u.mu.Unlock()
		// The body as the fields frame it, as a strict server reads it.
		req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader(line+"\r\n"+headerText(h)+"\r\n"), br)))
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
}

func headerText(h textproto.MIMEHeader) string {
	var b strings.Builder
	for k, vv := range h {
		for _, v := range vv {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	return b.String()
}

func (u *rawUpstream) received() []rawRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]rawRequest(nil), u.reqs...)
}
