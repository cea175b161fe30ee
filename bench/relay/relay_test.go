package relay

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// echoServer copies back what it reads on each connection, then closes it.
func echoServer(t *testing.T) string {
	l := listen(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

func startRelay(t *testing.T) string {
	l := listen(t)
	done := make(chan error, 1)
	go func() { done <- Serve(l) }()
	t.Cleanup(func() {
		l.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String()
}

// TestRelay: a CONNECT to a loopback address is relayed both ways, bytes
// sent with the request included, until each side half-closes; anything
// else is refused before a connection is opened.
func TestRelay(t *testing.T) {
	echo := echoServer(t)
	cl := listen(t)
	closed := cl.Addr().String()
	cl.Close() // nothing listens there now
	relayAddr := startRelay(t)
	tests := []struct {
		name, request string
		status        int
		echoed        string // sent after the request, in the same write
	}{
		{"connect", "CONNECT " + echo + " HTTP/1.1\r\nHost: " + echo + "\r\n\r\n", 200, "hello through the tunnel"},
		{"not connect", "GET http://" + echo + "/ HTTP/1.1\r\nHost: " + echo + "\r\n\r\n", 405, ""},
		{"a name", "CONNECT localhost:443 HTTP/1.1\r\nHost: localhost:443\r\n\r\n", 403, ""},
		{"not loopback", "CONNECT 192.0.2.1:443 HTTP/1.1\r\nHost: 192.0.2.1:443\r\n\r\n", 403, ""},
		{"nobody listening", "CONNECT " + closed + " HTTP/1.1\r\nHost: " + closed + "\r\n\r\n", 502, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", relayAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tt.request+tt.echoed); err != nil {
				t.Fatal(err)
			}
			c.(*net.TCPConn).CloseWrite()
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
			}
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			if string(rest) != tt.echoed {
				t.Errorf("read back %q, want %q", rest, tt.echoed)
			}
		})
	}
}

// TestRelayLarge: a body larger than any buffer comes back whole.
func TestRelayLarge(t *testing.T) {
	echo := echoServer(t)
	c, err := net.Dial("tcp", startRelay(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT "+echo+" HTTP/1.1\r\nHost: "+echo+"\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", res, err)
	}
	want := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	go func() {
		io.WriteString(c, want)
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("read back %d bytes, want %d", len(got), len(want))
	}
}
