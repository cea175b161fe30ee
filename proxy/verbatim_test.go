package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestServeH1ResponseHead: a plain response's fields reach an HTTP/1
// client as the header map would write them, less hop-by-hop fields, with
// a Date when the upstream sent none; when every field is written as the
// map would write it, in the order received (passed on as they are).
func TestServeH1ResponseHead(t *testing.T) {
	tests := []struct {
		name    string
		fields  string // the upstream's, after Content-Length: 2
		proto   string // the client's request line's
		want    []string
		ordered bool // want is in order, Date last if not among them
	}{
		{"as received, in order", "Content-Type: text/plain\r\nX-B: 1\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-A: 2\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n", "HTTP/1.1",
			[]string{"Content-Length: 2", "Content-Type: text/plain", "X-B: 1", "Set-Cookie: a=1", "Set-Cookie: b=2", "X-A: 2", "Date: Mon, 01 Jan 2024 00:00:00 GMT"}, true},
		{"a Date added", "X-B: 1\r\nX-A: 2\r\nX-Empty: \r\n", "HTTP/1.1",
			[]string{"Content-Length: 2", "X-B: 1", "X-A: 2", "X-Empty: ", "Date"}, true},
		{"HTTP/1.0 client: closed after", "X-B: 1\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n", "HTTP/1.0",
			[]string{"Content-Length: 2", "X-B: 1", "Date: Mon, 01 Jan 2024 00:00:00 GMT", "Connection: close"}, true},
		{"names made canonical", "content-type: text/plain\r\nx-a: 1\r\n", "HTTP/1.1",
			[]string{"Content-Length: 2", "Content-Type: text/plain", "X-A: 1", "Date"}, false},
		{"white space trimmed", "X-A:   spaced  \r\nX-B:\ttab\r\nX-C:none\r\n", "HTTP/1.1",
			[]string{"Content-Length: 2", "X-A: spaced", "X-B: tab", "X-C: none", "Date"}, false},
		{"hop-by-hop fields removed", "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\n", "HTTP/1.1",
			[]string{"Content-Length: 2", "X-A: 1", "Date"}, false},
	}
	e := newEnv(t, envOptions{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.38.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"+tt.fields+"\r\nok")
					}
				}
			}()
			addr := ln.Addr().(*net.TCPAddr).AddrPort()
			name := fmt.Sprintf("head-%d.test", i)
			e.namesMu.Lock()
			e.names[name] = addr.Addr()
			e.namesMu.Unlock()
			host := net.JoinHostPort(name, fmt.Sprint(addr.Port()))
			c, br, resp := e.connect(host, basicAuth(proxyUser, testToken))
			if resp != nil {
				t.Fatalf("CONNECT: %s", resp.Status)
			}
			for n := range 2 { // a fresh upstream connection, then a pooled one
				io.WriteString(c, "GET /x "+tt.proto+"\r\nHost: "+host+"\r\n\r\n")
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				status, err := br.ReadString('\n')
				if err != nil || status != "HTTP/1.1 200 OK\r\n" {
					t.Fatalf("request %d: status line %q, %v", n, status, err)
				}
				var got []string
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("request %d: %v after %q", n, err, got)
					}
					if line == "\r\n" {
						break
					}
					line = strings.TrimSuffix(line, "\r\n")
					if strings.HasPrefix(line, "Date: ") && !slices.Contains(tt.want, line) {
						line = "Date" // the proxy's own
					}
					got = append(got, line)
				}
				if body := make([]byte, 2); func() bool { _, err := io.ReadFull(br, body); return err != nil || string(body) != "ok" }() {
					t.Fatalf("request %d: body %q", n, body)
				}
				want := tt.want
				if !tt.ordered {
					got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("request %d: fields (-want +got):\n%s", n, diff)
				}
				if tt.proto == "HTTP/1.0" {
					break
				}
			}
		})
	}
}
