package loadgen_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/bench/loadgen"
	"github.com/chaperone-dev/chaperone/bench/origin"
)

func startOrigin(t *testing.T) *origin.Server {
	t.Helper()
	o, err := origin.Start("127.0.0.1:0", t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// tunnel is a minimal CONNECT proxy that demands one Proxy-Authorization
// value and counts the tunnels it opened.
type tunnel struct {
	addr    string
	want    string
	tunnels atomic.Int64
	refused atomic.Int64
}

func startTunnel(t *testing.T, user, pass string) *tunnel {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tn := &tunnel{addr: ln.Addr().String(), want: "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Go(func() { tn.serve(c, track) })
		}
	})
	return tn
}

func (tn *tunnel) serve(c net.Conn, track func(net.Conn)) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect || req.Header.Get("Proxy-Authorization") != tn.want {
		tn.refused.Add(1)
		io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	track(up)
	defer up.Close()
	tn.tunnels.Add(1)
	io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n")
	done := make(chan struct{})
	go func() {
		io.Copy(up, br)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, up)
	<-done
}

func TestRunDirect(t *testing.T) {
	o := startOrigin(t)
	if err := o.ServeHTTP3(0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		proto     loadgen.Proto
		keepAlive bool
		wantProto string
	}{
		{"h1 keep-alive", loadgen.HTTP1, true, "HTTP/1.1"},
		{"h2 keep-alive", loadgen.HTTP2, true, "HTTP/2.0"},
		{"h1 new connection each", loadgen.HTTP1, false, "HTTP/1.1"},
		{"h3 keep-alive", loadgen.HTTP3, true, "HTTP/3.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, _ := url.Parse(o.URL(origin.Path1K))
			if tt.proto == loadgen.HTTP3 {
				target, _ = url.Parse(o.H3URL(origin.Path1K))
			}
			res, err := loadgen.Run(context.Background(), loadgen.Load{
				Client:      loadgen.Client{Roots: o.Roots, Proto: tt.proto, KeepAlive: tt.keepAlive},
				Target:      target,
				Concurrency: 2,
				Warmup:      100 * time.Millisecond,
				Duration:    time.Second,
				Watch:       loadgen.Watch{PIDs: []int{os.Getpid()}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests == 0 || res.Errors != 0 {
				t.Fatalf("%d requests, %d errors (first: %s)", res.Requests, res.Errors, res.FirstError)
			}
			if res.Bytes != res.Requests*origin.Size1K {
				t.Errorf("%d bytes for %d requests of %d", res.Bytes, res.Requests, origin.Size1K)
			}
			if res.Proto != tt.wantProto {
				t.Errorf("proto %q, want %q", res.Proto, tt.wantProto)
			}
			if res.P50Ms <= 0 || res.P99Ms < res.P50Ms {
				t.Errorf("latency p50 %v p99 %v", res.P50Ms, res.P99Ms)
			}
			if res.Before == nil || res.After == nil || res.After.CPUSec < res.Before.CPUSec || res.CPUPerReqUs < 0 {
				t.Errorf("watch samples %+v → %+v, cpu/req %v (%s)", res.Before, res.After, res.CPUPerReqUs, res.WatchError)
			}
		})
	}
}

func TestRunThroughProxy(t *testing.T) {
	o := startOrigin(t)
	target, _ := url.Parse(o.URL(origin.Path1K))
	tests := []struct {
		name        string
		user, pass  string
		wantOK      bool
		wantRefused bool
	}{
		{"credentials become Proxy-Authorization", "chaperone", "s3cret", true, false},
		{"wrong credentials are refused", "chaperone", "wrong", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := startTunnel(t, "chaperone", "s3cret")
			proxy, err := loadgen.ProxyFromEnv(func(k string) string {
				if k == "HTTPS_PROXY" {
					return "http://" + tt.user + ":" + tt.pass + "@" + tn.addr
				}
				return ""
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := loadgen.Run(context.Background(), loadgen.Load{
				Client:      loadgen.Client{Proxy: proxy, Roots: o.Roots, Proto: loadgen.HTTP2, KeepAlive: true},
				Target:      target,
				Concurrency: 4,
				Duration:    300 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			if ok := res.Requests > 0 && res.Errors == 0; ok != tt.wantOK {
				t.Fatalf("%d requests, %d errors (first: %s); want success %v", res.Requests, res.Errors, res.FirstError, tt.wantOK)
			}
			// Workers that start together may each dial before the first
			// h2 connection is up; never more than one each.
			if n := tn.tunnels.Load(); tt.wantOK && (res.Proto != "HTTP/2.0" || n < 1 || n > 4) {
				t.Errorf("proto %q over %d tunnels, want HTTP/2.0 over 1 to 4", res.Proto, n)
			}
			if (tn.refused.Load() > 0) != tt.wantRefused {
				t.Errorf("proxy refused %d CONNECTs", tn.refused.Load())
			}
			if res.Via != "proxy" {
				t.Errorf("via %q", res.Via)
			}
		})
	}
}

func TestRunHold(t *testing.T) {
	o := startOrigin(t)
	target, _ := url.Parse(o.URL(origin.Path1K))
	tn := startTunnel(t, "u", "p")
	proxy, err := loadgen.ParseProxy("http://u:p@" + tn.addr)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		client loadgen.Client
	}{
		{"direct", loadgen.Client{Roots: o.Roots}},
		{"through the proxy", loadgen.Client{Proxy: proxy, Roots: o.Roots}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := loadgen.RunHold(context.Background(), loadgen.Hold{
				Client: tt.client, Target: target, Conns: 20, Parallel: 4,
				Open: 10 * time.Second, Settle: 50 * time.Millisecond, Idle: 50 * time.Millisecond,
				Watch: loadgen.Watch{PIDs: []int{os.Getpid()}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Held != 20 || res.Errors != 0 || res.FirstError != "" {
				t.Fatalf("held %d of 20, %d errors (%s)", res.Held, res.Errors, res.FirstError)
			}
			if res.Before == nil || res.After == nil {
				t.Errorf("no memory samples: %s", res.WatchError)
			}
		})
	}
	if got := tn.tunnels.Load(); got != 20 {
		t.Errorf("proxy opened %d tunnels, want 20", got)
	}
}

func TestParseProxy(t *testing.T) {
	tests := []struct {
		in     string
		wantOK bool
	}{
		{"http://127.0.0.1:3128", true},
		{"http://user:pass@[::1]:3128", true},
		{"http://proxy.example:3128", false}, // a name: never resolved
		{"socks5://127.0.0.1:1080", false},
		{"http://127.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := loadgen.ParseProxy(tt.in)
			if (err == nil) != tt.wantOK {
				t.Errorf("ParseProxy(%q) error = %v, want ok %v", tt.in, err, tt.wantOK)
			}
		})
	}
}

func TestRunRefusesHTTP3ThroughAProxy(t *testing.T) {
	proxy, _ := url.Parse("http://127.0.0.1:1")
	target, _ := url.Parse("https://127.0.0.1:443/1k")
	_, err := loadgen.Run(context.Background(), loadgen.Load{
		Client:      loadgen.Client{Proxy: proxy, Proto: loadgen.HTTP3, KeepAlive: true},
		Target:      target,
		Concurrency: 1,
		Duration:    time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "HTTP/3 goes direct") {
		t.Fatalf("Run over a proxy with HTTP/3: %v, want a refusal", err)
	}
}
