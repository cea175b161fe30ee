package proxy

import (
	"bytes"
	"crypto/rand"
	stdtls "crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/rewrite"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// benchRewrites is a session's rewrites as cmd/chaperone makes them, with
// known values learned or not.
func benchRewrites(b testing.TB, known int) *Rewrites {
	b.Helper()
	sc, err := secrets.NewScanner(secrets.Options{})
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	rw := &Rewrites{Redactor: secrets.NewRedactor(sc, key), Scanner: sc}
	for i := range known {
		rw.Redactor.Known().Add("github-pat", upstream.FakeGitHubToken()+strconv.Itoa(i))
	}
	return rw
}

// BenchmarkScanHead measures the search of a request's header, path and query
// for secrets, on every request of a session: a plain client's, an LLM
// SDK's, and a browser-like one with a query, with no value known and
// with 100.
func BenchmarkScanHead(b *testing.B) {
	sets := []struct {
		name, url string
		h         http.Header
	}{
		{"curl", "https://api.example.test/v1/items", http.Header{"User-Agent": {"curl/8.14.1"}, "Accept": {"*/*"}}},
		{"session-bench", "https://bench.example.test/1k?page=2&sort=recent", http.Header{ // BenchmarkHTTPSKeepAliveSession's
			"User-Agent": {"curl/8.14.1"}, "Accept": {"application/vnd.github+json"}, "Authorization": {"Bearer not-a-real-token"},
			"X-Request-Id": {"4b1c9e2a-7f3d-4e8a-9c1b-2d5e6f7a8b9c"}, "Accept-Encoding": {"gzip"},
		}},
		{"llm-sdk", "https://api.anthropic.com/v1/messages", http.Header{
			"Authorization": {"Bearer sk-x"}, "Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"},
			"Accept": {"application/json"}, "User-Agent": {"claude-cli/1.0.83 (external, cli)"}, "X-Stainless-Lang": {"js"},
			"X-Stainless-Os": {"Linux"}, "X-Stainless-Arch": {"x64"}, "Accept-Encoding": {"gzip, deflate"},
			"Anthropic-Beta": {"claude-code-20250219,interleaved-thinking-2025-05-14"}, "X-App": {"cli"},
			"X-Stainless-Runtime-Version": {"v22.17.0"}, "X-Stainless-Package-Version": {"0.55.1"},
		}},
		{"browser-query", "https://www.example.test/search?q=golang+streaming+scanner&page=2&sort=recent&utm_source=newsletter", http.Header{
			"User-Agent":      {"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"},
			"Accept":          {"text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"},
			"Accept-Language": {"en-US,en;q=0.9"}, "Cookie": {"session=abc; theme=dark"}, "Referer": {"https://www.example.test/"},
			"Sec-Fetch-Mode": {"navigate"}, "Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		}},
	}
	for _, known := range []int{0, 100} {
		rw := benchRewrites(b, known)
		for _, s := range sets {
			u, _ := url.Parse(s.url)
			r := &http.Request{Method: "GET", URL: u, Host: u.Host, Header: s.h}
			api, isLLM := rewrite.DetectAPI(r.Host, r.URL.Path, nil)
			b.Run(fmt.Sprintf("%s/known-%d", s.name, known), func(b *testing.B) {
				b.ReportAllocs()
				x := &exchange{rw: rw}
				for b.Loop() {
					x.found = x.found[:0]
					x.scanHead(r, api, isLLM)
					if len(x.found) != 0 {
						b.Fatalf("found %v", x.found)
					}
				}
			})
		}
	}
}

// BenchmarkStreamScan measures the scan of a body too large to hold, as it
// streams (MB/s of the body): 64 MiB of text, as sent and gzip-encoded,
// with no value known and with 100.
func BenchmarkStreamScan(b *testing.B) {
	const size = 64 << 20
	plain := bigBody(size, "", 0, false)
	noise := bigBody(size, "", 0, true)
	gz := encodeBody(b, "gzip", noise)
	for _, known := range []int{0, 100} {
		rw := benchRewrites(b, known)
		for _, c := range []struct {
			name, ce string
			body     []byte
		}{{"text", "", plain}, {"base64-noise", "", noise}, {"base64-noise-gzip", "gzip", gz}} {
			b.Run(fmt.Sprintf("%s/known-%d", c.name, known), func(b *testing.B) {
				b.SetBytes(int64(len(c.body)))
				buf := make([]byte, 32<<10)
				for b.Loop() {
					r, _ := http.NewRequest("POST", "https://canary.test/upload", nil)
					if c.ce != "" {
						r.Header.Set("Content-Encoding", c.ce)
					}
					x := &exchange{rw: rw}
					bs, err := (&Proxy{}).newBodyScan(r, x, c.body[:maxScanBody+1], bytes.NewReader(c.body[maxScanBody+1:]))
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.CopyBuffer(io.Discard, bs, buf)
					if err != nil || n != int64(len(c.body)) {
						b.Fatalf("%d bytes, %v", n, err)
					}
				}
			})
		}
	}
}

// BenchmarkUploadScanned is BenchmarkUpload's proxied POST in a session
// with rewrites, of 4 MiB (scanned whole) and 32 MiB (scanned as it
// streams): the cost per byte of an upload checked for secrets.
func BenchmarkUploadScanned(b *testing.B) {
	dec, err := policy.NewEngine(mustParseDefault(b), policy.EngineOptions{})
	if err != nil {
		b.Fatal(err)
	}
	e := newEnv(b, envOptions{decider: dec, rewrites: benchRewrites(b, 0)})
	e.p.publishFn = func(*event.Event) {}
	up := e.upstream(upstream.Options{Name: "transfer.example.test", CA: e.upCA, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Received", strconv.FormatInt(n, 10))
	})})
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(e.proxyURL(proxyUser, testToken)),
		TLSClientConfig: &stdtls.Config{RootCAs: e.caPool, NextProtos: []string{"http/1.1"}}}}
	b.Cleanup(c.CloseIdleConnections)
	for _, size := range []int{4 << 20, 32 << 20} {
		body := bigBody(size, "", 0, false)
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				res, err := c.Post(up.URL+"/transfer", "text/plain", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if n, _ := strconv.Atoi(res.Header.Get("X-Received")); res.StatusCode != 200 || n != size {
					b.Fatalf("status %d, %d bytes", res.StatusCode, n)
				}
			}
		})
	}
}

func mustParseDefault(b testing.TB) *policy.Policy {
	pol, err := policy.Parse("default", policy.DefaultPolicyYAML())
	if err != nil {
		b.Fatal(err)
	}
	return pol
}
