package proxy

import (
	"crypto/rand"
	stdtls "crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// BenchmarkHTTPSKeepAliveSession is BenchmarkHTTPSKeepAlive's proxied
// HTTP/1.1 GET in a session with rewrites, as cmd/chaperone makes it (a
// scanner, a redactor), deciding by the default policy, with a client's
// usual headers: what a session's request costs beyond the bare proxy
// (its header and query searched for secrets among the rest).
func BenchmarkHTTPSKeepAliveSession(b *testing.B) {
	pol, err := policy.Parse("default", policy.DefaultPolicyYAML())
	if err != nil {
		b.Fatal(err)
	}
	dec, err := policy.NewEngine(pol, policy.EngineOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sc, err := secrets.NewScanner(secrets.Options{})
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	rw := &Rewrites{Redactor: secrets.NewRedactor(sc, key), Scanner: sc, RewriteParams: dec.RewriteParams}
	e := newEnv(b, envOptions{decider: dec, rewrites: rw})
	e.p.publishFn = func(*event.Event) {}
	up := e.upstream(upstream.Options{Name: "bench.example.test", CA: e.upCA, Handler: http.HandlerFunc(serve1K)})
	tr := &http.Transport{
		Proxy:           http.ProxyURL(e.proxyURL(proxyUser, testToken)),
		TLSClientConfig: &stdtls.Config{RootCAs: e.caPool, NextProtos: []string{"http/1.1"}},
	}
	b.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	get := func() {
		req, _ := http.NewRequest(http.MethodGet, up.URL+"/1k?page=2&sort=recent", nil)
		req.Header.Set("User-Agent", "curl/8.14.1")
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("Authorization", "Bearer not-a-real-token")
		req.Header.Set("X-Request-Id", "4b1c9e2a-7f3d-4e8a-9c1b-2d5e6f7a8b9c")
		res, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil || n != 1024 || res.StatusCode != 200 {
			b.Fatalf("got %d, %d bytes, %v", res.StatusCode, n, err)
		}
	}
	for range 3 {
		get()
	}
	b.Run("h1/proxy", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			get()
		}
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
}
