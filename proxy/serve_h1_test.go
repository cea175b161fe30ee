package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
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
