package proxy

import (
	"bufio"
	"context"
	stdtls "crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/gorilla/websocket"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// TestCloseDuringActiveTunnels closes the proxy under every kind of live
// tunnel: Close returns, clients see their connections end, and no
// goroutine is left behind.
func TestCloseDuringActiveTunnels(t *testing.T) {
	base := runtime.NumGoroutine()
	e := newEnv(t, envOptions{peekTimeout: 50 * time.Millisecond})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	plain := e.upstream(upstream.Options{Name: "plain.example.test", Addr: "127.0.0.3:0"})
	banner := startTCP(t, "220 banner\r\n")
	e.namesMu.Lock()
	e.names["tcp.example.test"] = banner.Addr()
	e.namesMu.Unlock()

	get := func(c *http.Client, u string) {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	c1, tr1 := e.client(false)
	get(c1, up.URL+"/") // idle h1 MITM tunnel
	c2, tr2 := e.client(true)
	get(c2, up.URL+"/")                    // idle h2 MITM tunnel
	get(c2, "http://"+hostPort(plain)+"/") // idle front connection
	// A request in flight: a stream the upstream is still sending.
	streamResp, err := c2.Get(up.URL + "/bytes?n=100000000")
	if err != nil {
		t.Fatal(err)
	}
	d := websocket.Dialer{Proxy: http.ProxyURL(e.proxyURL(proxyUser, testToken)), TLSClientConfig: &stdtls.Config{RootCAs: e.caPool}}
	ws, _, err := d.Dial("wss://"+hostPort(up)+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	pass, pbr, resp := e.connect("tcp.example.test:"+itoa(banner.Port()), basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatal(resp.Status)
	}
	if line, err := pbr.ReadString('\n'); err != nil || line != "220 banner\r\n" {
		t.Fatalf("banner %q %v", line, err)
	}
	silent, _, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken)) // still being classified
	if resp != nil {
		t.Fatal(resp.Status)
	}

	closed := make(chan error, 1)
	go func() { closed <- e.p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}

	// Every client connection ends.
	if _, err := io.Copy(io.Discard, streamResp.Body); err == nil {
		t.Error("in-flight stream completed after Close")
	}
	streamResp.Body.Close()
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := ws.ReadMessage(); err == nil || netx.IsTimeout(err) {
		t.Errorf("websocket read after Close: %v", err)
	}
	for name, c := range map[string]net.Conn{"passthrough": pass, "unclassified": silent} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("%s: %v, want EOF", name, err)
		}
	}
	ws.Close()
	tr1.CloseIdleConnections()
	tr2.CloseIdleConnections()
	up.Close()
	plain.Close()
	waitGoroutines(t, base+1) // the banner server's listener
}

// TestServeTunnel drives the tunnel logic as transparent mode will: an
// accepted connection and a known destination, dialled directly.
func TestServeTunnel(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "api.example.test", CA: e.upCA})
	// The name resolves elsewhere: only the tunnel's Dst is right.
	e.namesMu.Lock()
	e.names["api.example.test"] = netip.MustParseAddr("127.0.0.9")
	e.namesMu.Unlock()
	proc := &event.Process{PID: 7}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		e.p.ServeTunnel(ctx, c, Tunnel{Session: testSession, Dst: up.Addr, Process: proc, Via: "transparent"})
	}()
	c, err := stdtls.Dial("tcp", ln.Addr().String(), &stdtls.Config{ServerName: "api.example.test", RootCAs: e.caPool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /t HTTP/1.1\r\nHost: "+hostPort(up)+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
	if resp.StatusCode != 200 || !strings.Contains(string(body), "hello from api.example.test") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
	if ev.Process != proc || ev.Session != testSession || ev.HTTP.URL != "https://"+hostPort(up)+"/t" {
		t.Errorf("event %+v %+v", ev, ev.HTTP)
	}
	// Cancelling the context ends the tunnel.
	cancel()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeTunnel did not return after its context ended")
	}
}
