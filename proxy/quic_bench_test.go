package proxy

import (
	"context"
	stdtls "crypto/tls"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// BenchmarkH3 measures the same 1 KB GET over kept-alive HTTP/3, direct to
// an HTTP/3 origin and through ServeQUIC (upstream over HTTP/3 too), with
// 1 and 64 requests at once on one client connection, side by side in
// one run: go test -run '^$' -bench H3 ./proxy.
func BenchmarkH3(b *testing.B) {
	dec, err := policy.NewBuiltin(nil)
	if err != nil {
		b.Fatal(err)
	}
	e := newQUICEnv(b, envOptions{decider: dec})
	var published atomic.Uint64
	e.p.publishFn = func(*event.Event) { published.Add(1) } // a bus that keeps nothing
	origin := startH3Origin(b, e.env, "bench.example.test", "127.0.42.9:0", http.HandlerFunc(serve1K))
	e.redirect(origin.addr)
	url := "https://bench.example.test:" + strconv.Itoa(int(origin.addr.Port())) + "/1k"
	direct := &http3.Transport{
		TLSClientConfig: &stdtls.Config{RootCAs: e.upCA.Pool},
		Dial: func(ctx context.Context, _ string, tc *stdtls.Config, qc *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, origin.addr.String(), tc, qc)
		},
	}
	b.Cleanup(func() { direct.Close() })
	clients := map[string]*http.Client{
		"direct": {Transport: direct, Timeout: 30 * time.Second},
		"proxy":  e.client(b),
	}
	get := func(b *testing.B, c *http.Client) bool { // Error, not Fatal: RunParallel's goroutines call it
		res, err := c.Get(url)
		if err != nil {
			b.Error(err)
			return false
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil || n != 1024 || res.StatusCode != 200 || res.ProtoMajor != 3 {
			b.Errorf("got %d %s, %d bytes, %v", res.StatusCode, res.Proto, n, err)
			return false
		}
		return true
	}
	for _, c := range clients {
		for range 3 { // warm up: connections, the leaf cache, the upstream pool
			if !get(b, c) {
				b.FailNow()
			}
		}
	}
	for _, conc := range []int{1, 64} {
		for _, path := range []string{"direct", "proxy"} {
			c := clients[path]
			b.Run("c="+strconv.Itoa(conc)+"/"+path, func(b *testing.B) {
				b.ReportAllocs()
				if conc == 1 {
					for b.Loop() {
						if !get(b, c) {
							b.FailNow()
						}
					}
					return
				}
				procs := runtime.GOMAXPROCS(0)
				b.SetParallelism((conc + procs - 1) / procs) // times GOMAXPROCS goroutines: conc
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() && get(b, c) {
					}
				})
			})
		}
	}
}
