package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"
)

// TestClientConnReadFirstByte: the byte that ended the idle wait comes
// back with what followed it in one read, so that the fast path sees the
// whole request.
func TestClientConnReadFirstByte(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	const req = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"
	go b.Write([]byte(req[1:]))
	cc := &clientConn{c: a, limit: -1, has1: true}
	cc.first[0] = req[0]
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := cc.Read(buf)
	if err != nil || string(buf[:n]) != req {
		t.Fatalf("read %q, %v; want %q", buf[:n], err, req)
	}
	// A one-byte read still gets the first byte alone.
	cc.has1, cc.first[0] = true, 'x'
	if n, err := cc.Read(buf[:1]); n != 1 || err != nil || buf[0] != 'x' {
		t.Fatalf("one-byte read: %d %v %q", n, err, buf[:1])
	}
}

// serve runs a Server with h on one end of a loopback TCP connection and
// returns the other end; faults gets what the server reports.
func serve(t *testing.T, s *Server) (client net.Conn, faults chan netx.Fault) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	faults = make(chan netx.Fault, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ServeConn(netx.ClientConn{C: c, Raw: c, Context: context.Background(), Fault: func(f netx.Fault) { faults <- f }})
		c.Close()
	}()
	t.Cleanup(func() { client.Close(); <-done })
	return client, faults
}

func newServer(h http.HandlerFunc) *Server {
	return &Server{Handler: h, Watch: netx.NewWatch(50 * time.Millisecond), ReadHeaderTimeout: 200 * time.Millisecond,
		IdleTimeout: time.Minute, StallTimeout: time.Minute, MaxHeaderBytes: 1024}
}

// TestServerKeepAlive: the handler answers each request of a kept-alive
// connection, in order, with the body it read, framed by length or in
// chunks.
func TestServerKeepAlive(t *testing.T) {
	s := newServer(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/chunked" {
			w.Write([]byte(r.Method + " " + string(b)))
			w.(http.Flusher).Flush()
			return
		}
		w.Header().Set("Content-Length", "0")
	})
	c, _ := serve(t, s)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "POST /chunked HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhelloGET /empty HTTP/1.1\r\nHost: a.test\r\n\r\n")
	br := bufio.NewReader(c)
	for _, want := range []string{"POST hello", ""} {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil || string(b) != want || res.StatusCode != http.StatusOK {
			t.Fatalf("response %d %q, %v; want 200 %q", res.StatusCode, b, err, want)
		}
	}
}

// TestServerFaults: a header over the hard limit gets 431 and
// FaultHeaderTooLarge; one that does not come in time closes the
// connection with FaultHeaderTimeout. No handler runs for either.
func TestServerFaults(t *testing.T) {
	s := newServer(func(http.ResponseWriter, *http.Request) { t.Error("a handler ran") })
	t.Run("too large", func(t *testing.T) {
		c, faults := serve(t, s)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\nX-Big: "+strings.Repeat("x", 8192)+"\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("response %v, %v; want 431", res, err)
		}
		if f := waitFault(t, faults); f != netx.FaultHeaderTooLarge {
			t.Errorf("fault %d, want FaultHeaderTooLarge", f)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		c, faults := serve(t, s)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\n")
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("read %d, %v; want the connection closed", n, err)
		}
		if f := waitFault(t, faults); f != netx.FaultHeaderTimeout {
			t.Errorf("fault %d, want FaultHeaderTimeout", f)
		}
	})
}

func waitFault(t *testing.T, faults chan netx.Fault) netx.Fault {
	t.Helper()
	select {
	case f := <-faults:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no fault reported")
		return netx.FaultNone
	}
}
