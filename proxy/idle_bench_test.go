package proxy

import (
	"bufio"
	stdtls "crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// idleConns is how many kept-alive connections BenchmarkIdleConnections
// holds: the harness's idle scenario at a tenth of its scale.
const idleConns = 1000

// BenchmarkIdleConnections opens idleConns HTTPS connections, one GET of
// 1 KB on each, and holds them idle: directly to the upstream, through the
// explicit proxy (CONNECT) and through the transparent listener, side by
// side. It reports the memory (heap in use and goroutine stacks, after a
// collection) and the goroutines each held connection adds. Client,
// upstream and proxy share the process: direct is a client and a Go HTTPS
// server per connection, the proxied columns a client and the proxy per
// connection (the proxy keeps only a bounded pool of upstream
// connections), so proxied − direct is what the proxy holds beyond what
// an origin server does.
func BenchmarkIdleConnections(b *testing.B) {
	e := newEnv(b, envOptions{})
	e.p.publishFn = func(*event.Event) {}
	up := e.upstream(upstream.Options{Name: "idle.example.test", CA: e.upCA, Handler: http.HandlerFunc(serve1K)})
	target := hostPort(up)

	var origins sync.Map // client address -> Tunnel
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go e.p.ServeTransparent(tln, OriginFinderFunc(func(client netip.AddrPort) (Tunnel, error) {
		for range 500 {
			if t, ok := origins.Load(client); ok {
				return t.(Tunnel), nil
			}
			time.Sleep(time.Millisecond)
		}
		return Tunnel{}, errors.New("no redirect record")
	}))
	auth := basicAuth(proxyUser, testToken)

	open := map[string]func() (net.Conn, *stdtls.Config, error){
		"direct": func() (net.Conn, *stdtls.Config, error) {
			c, err := net.Dial("tcp", up.Addr.String())
			return c, &stdtls.Config{RootCAs: e.upCA.Pool, ServerName: up.Name, NextProtos: []string{"http/1.1"}}, err
		},
		"proxy": func() (net.Conn, *stdtls.Config, error) {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				return nil, nil, err
			}
			io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\nProxy-Authorization: "+auth+"\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil) // nothing follows the 200 until the hello
			if err == nil && resp.StatusCode != http.StatusOK {
				err = errors.New("CONNECT answered " + resp.Status)
			}
			return c, &stdtls.Config{RootCAs: e.caPool, ServerName: up.Name, NextProtos: []string{"http/1.1"}}, err
		},
		"transparent": func() (net.Conn, *stdtls.Config, error) {
			c, err := net.Dial("tcp", tln.Addr().String())
			if err != nil {
				return nil, nil, err
			}
			local := c.LocalAddr().(*net.TCPAddr).AddrPort()
			origins.Store(local, Tunnel{Session: testSession, Host: up.Name, Dst: up.Addr})
			return c, &stdtls.Config{RootCAs: e.caPool, ServerName: up.Name, NextProtos: []string{"http/1.1"}}, nil
		},
	}
	hold := func(how string) (net.Conn, error) {
		c, conf, err := open[how]()
		if err != nil {
			return nil, err
		}
		tc := stdtls.Client(c, conf)
		io.WriteString(tc, "GET /1k HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReaderSize(tc, 2048), nil)
		if err != nil {
			return tc, err
		}
		if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != 1024 {
			return tc, fmt.Errorf("%s: got %d bytes, %v", how, n, err)
		}
		return tc, nil
	}
	measure := func() (uint64, int) {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse + ms.StackInuse, runtime.NumGoroutine()
	}

	for _, how := range []string{"direct", "proxy", "transparent"} {
		b.Run(how, func(b *testing.B) {
			var kb, gr float64
			for b.Loop() {
				b.StopTimer()
				time.Sleep(100 * time.Millisecond) // the last round's connections wind down
				mem0, g0 := measure()
				b.StartTimer()
				conns := make([]net.Conn, idleConns)
				var wg sync.WaitGroup
				const workers = 8
				for w := range workers {
					wg.Go(func() {
						for i := w; i < idleConns; i += workers {
							var err error
							if conns[i], err = hold(how); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				if b.Failed() {
					b.FailNow()
				}
				time.Sleep(200 * time.Millisecond) // handlers return, idle states settle
				mem1, g1 := measure()
				kb += (float64(mem1) - float64(mem0)) / 1024 / idleConns
				gr += float64(g1-g0) / idleConns
				for _, c := range conns {
					if c != nil {
						c.Close()
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(kb/float64(b.N), "KB/conn")
			b.ReportMetric(gr/float64(b.N), "goroutines/conn")
		})
	}
}
