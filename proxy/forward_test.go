package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

var clientProtos = []struct {
	name string
	h2   bool
}{{"h1 client", false}, {"h2 client", true}}

// TestForwardHeaders checks what crosses the proxy: hop-by-hop headers
// (RFC 9110 section 7.6.1) and the client's Forwarded and X-Forwarded-*
// stay behind in both directions, end-to-end headers pass, "TE: trailers"
// is kept, a request without User-Agent reaches the upstream without one,
// and a query Go cannot parse is re-encoded.
func TestForwardHeaders(t *testing.T) {
	for _, cp := range clientProtos {
		t.Run(cp.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			up := e.upstream(upstream.Options{Name: "hdr.example.test", CA: e.upCA, HTTP1Only: true,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					h := w.Header()
					h.Set("Connection", "X-Resp-Hop")
					h.Set("X-Resp-Hop", "1")
					h.Set("Keep-Alive", "timeout=5")
					h.Set("Proxy-Authenticate", `Basic realm="up"`)
					h.Set("X-Resp-Keep", "yes")
					io.WriteString(w, "ok")
				})})
			c, _ := e.client(cp.h2)
			req, _ := http.NewRequest("GET", up.URL+"/h?a=1;b=2&c=3", nil)
			req.Header.Set("User-Agent", "") // Go's client then sends none
			req.Header.Set("X-Keep", "yes")
			req.Header.Set("Te", "trailers")
			req.Header.Set("Forwarded", "for=192.0.2.1")
			req.Header.Set("X-Forwarded-For", "192.0.2.1")
			req.Header.Set("X-Forwarded-Host", "elsewhere.test")
			req.Header.Set("X-Forwarded-Proto", "http")
			if !cp.h2 { // HTTP/2 has no connection-specific headers
				req.Header.Set("Connection", "X-Hop")
				req.Header.Set("X-Hop", "1")
				req.Header.Set("Keep-Alive", "timeout=5")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "ok" {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
			for _, k := range []string{"X-Resp-Hop", "Keep-Alive", "Proxy-Authenticate"} {
				if v, ok := resp.Header[k]; ok {
					t.Errorf("client received %s: %q", k, v)
				}
			}
			if got := resp.Header.Get("X-Resp-Keep"); got != "yes" {
				t.Errorf("client received X-Resp-Keep %q, want yes", got)
			}

			reqs := up.Requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream got %d requests", len(reqs))
			}
			got := reqs[0].Header
			for _, k := range []string{"X-Hop", "Keep-Alive", "Connection", "Forwarded", "X-Forwarded-For",
				"X-Forwarded-Host", "X-Forwarded-Proto", "User-Agent", "Proxy-Authorization", "Proxy-Connection"} {
				if v, ok := got[k]; ok {
					t.Errorf("upstream received %s: %q", k, v)
				}
			}
			if got.Get("X-Keep") != "yes" || got.Get("Te") != "trailers" {
				t.Errorf("upstream received X-Keep %q, Te %q; want yes, trailers", got.Get("X-Keep"), got.Get("Te"))
			}
			if reqs[0].RawQuery != "c=3" {
				t.Errorf("upstream query %q, want c=3", reqs[0].RawQuery)
			}
			ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
			if want := "https://" + hostPort(up) + "/h?a=1;b=2&c=3"; ev.HTTP.URL != want {
				t.Errorf("event URL %q, want %q", ev.HTTP.URL, want)
			}
			if v := ev.HTTP.Header["X-Forwarded-For"]; len(v) != 1 || v[0] != "192.0.2.1" {
				t.Errorf("event header X-Forwarded-For %q: the policy sees what the client sent", v)
			}
		})
	}
}

// TestForwardStreams checks that nothing is held: a response's header and
// each write reach the client while the upstream waits before writing more.
func TestForwardStreams(t *testing.T) {
	tests := []struct {
		name     string
		ct       string
		length   string // Content-Length, if any
		first    string // written and flushed, then the upstream waits
		rest     string
		wantHead bool // only the header is sent before the wait
	}{
		{name: "event stream", ct: "text/event-stream", first: "data: 1\n\n", rest: "data: 2\n\n"},
		{name: "unknown length", ct: "application/octet-stream", first: "first ", rest: "rest"},
		{name: "known length", ct: "application/json", length: "10", first: "12345", rest: "67890"},
		{name: "header of a slow body", ct: "application/json", length: "4", rest: "done", wantHead: true},
		{name: "header of a slow stream", ct: "text/event-stream", rest: "data: 1\n\n", wantHead: true},
	}
	for _, tt := range tests {
		for _, cp := range clientProtos {
			for _, upH1 := range []bool{false, true} {
				name := tt.name + "/" + cp.name
				if upH1 {
					name += "/h1 upstream"
				}
				t.Run(name, func(t *testing.T) {
					e := newEnv(t, envOptions{})
					release := make(chan struct{})
					up := e.upstream(upstream.Options{Name: "stream.example.test", CA: e.upCA, HTTP1Only: upH1,
						Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
							w.Header().Set("Content-Type", tt.ct)
							if tt.length != "" {
								w.Header().Set("Content-Length", tt.length)
							}
							w.WriteHeader(http.StatusOK)
							io.WriteString(w, tt.first)
							http.NewResponseController(w).Flush()
							select {
							case <-release:
							case <-r.Context().Done():
								return
							}
							io.WriteString(w, tt.rest)
						})})
					c, _ := e.client(cp.h2)
					type result struct {
						resp *http.Response
						err  error
					}
					got := make(chan result, 1)
					go func() {
						resp, err := c.Get(up.URL + "/stream")
						got <- result{resp, err}
					}()
					var res result
					select {
					case res = <-got:
					case <-time.After(10 * time.Second):
						close(release)
						t.Fatal("the response header was held until the body was complete")
					}
					if res.err != nil {
						close(release)
						t.Fatal(res.err)
					}
					defer res.resp.Body.Close()
					if !tt.wantHead {
						buf := make([]byte, len(tt.first))
						read := make(chan error, 1)
						go func() {
							_, err := io.ReadFull(res.resp.Body, buf)
							read <- err
						}()
						select {
						case err := <-read:
							if err != nil || string(buf) != tt.first {
								t.Errorf("first part %q, %v; want %q", buf, err, tt.first)
							}
						case <-time.After(10 * time.Second):
							close(release)
							t.Fatal("the first part was held until the body was complete")
						}
					}
					// The event says how the response ended: not yet.
					for _, ev := range e.rec.kinds(event.KindHTTP) {
						t.Errorf("http event published before the response ended: %s status %d", ev.HTTP.URL, ev.HTTP.Status)
					}
					close(release)
					rest, err := io.ReadAll(res.resp.Body)
					if err != nil || string(rest) != tt.rest {
						t.Errorf("rest %q, %v; want %q", rest, err, tt.rest)
					}
					ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
					if ev.HTTP.Status != http.StatusOK || ev.HTTP.Error != "" {
						t.Errorf("event status %d error %q, want 200 and none", ev.HTTP.Status, ev.HTTP.Error)
					}
				})
			}
		}
	}
}

// TestForwardBodies checks request bodies of known and unknown length, and
// a large response, both ways through the proxy.
func TestForwardBodies(t *testing.T) {
	payload := make([]byte, 3<<20+17)
	rand.Read(payload)
	for _, cp := range clientProtos {
		for _, known := range []bool{true, false} {
			name := cp.name + "/unknown length"
			if known {
				name = cp.name + "/known length"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, envOptions{})
				up := e.upstream(upstream.Options{Name: "echo.example.test", CA: e.upCA})
				c, _ := e.client(cp.h2)
				var body io.Reader = bytes.NewReader(payload)
				if !known {
					body = io.MultiReader(body) // hides the length
				}
				req, _ := http.NewRequest("POST", up.URL+"/echo", body)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, payload) {
					t.Errorf("status %d, %d bytes back of %d, %v", resp.StatusCode, len(got), len(payload), err)
				}
				if known && resp.ContentLength != int64(len(payload)) {
					t.Errorf("Content-Length %d, want %d", resp.ContentLength, len(payload))
				}
			})
		}
	}
}

// TestForwardTrailersAnd1xx checks that trailers and an informational
// response (103 Early Hints) reach the client.
func TestForwardTrailersAnd1xx(t *testing.T) {
	for _, cp := range clientProtos {
		for _, upH1 := range []bool{false, true} {
			name := cp.name
			if upH1 {
				name += "/h1 upstream"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, envOptions{})
				up := e.upstream(upstream.Options{Name: "trailer.example.test", CA: e.upCA, HTTP1Only: upH1,
					Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						w.Header().Set("Link", "</style.css>; rel=preload")
						w.WriteHeader(http.StatusEarlyHints)
						w.Header().Del("Link")
						w.Header().Set("Trailer", "X-Checksum")
						w.WriteHeader(http.StatusOK)
						io.WriteString(w, "body")
						w.Header().Set("X-Checksum", "abc")
						w.Header().Set(http.TrailerPrefix+"X-Late", "unannounced")
					})})
				c, _ := e.client(cp.h2)
				var hints []string
				trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					hints = append(hints, h.Get("Link"))
					return nil
				}}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", up.URL+"/t", nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(body) != "body" {
					t.Fatalf("body %q, %v", body, err)
				}
				want := http.Header{"X-Checksum": {"abc"}, "X-Late": {"unannounced"}}
				if diff := cmp.Diff(want, resp.Trailer); diff != "" {
					t.Errorf("trailers (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"</style.css>; rel=preload"}, hints); diff != "" {
					t.Errorf("103 Link headers (-want +got):\n%s", diff)
				}
				ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
				if ev.HTTP.Status != 200 {
					t.Errorf("event status %d, want 200 (not the 103)", ev.HTTP.Status)
				}
			})
		}
	}
}

// TestForwardAbortsTruncatedBody checks that a response the upstream cuts
// short reaches the client as an error, never as a complete short body.
func TestForwardAbortsTruncatedBody(t *testing.T) {
	for _, cp := range clientProtos {
		t.Run(cp.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			up := e.upstream(upstream.Options{Name: "cut.example.test", CA: e.upCA, HTTP1Only: true,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					conn, brw, err := http.NewResponseController(w).Hijack()
					if err != nil {
						return
					}
					defer conn.Close()
					brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten..")
					brw.Flush()
				})})
			c, _ := e.client(cp.h2)
			resp, err := c.Get(up.URL + "/cut")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Errorf("read %q and no error: a truncated body looked complete", body)
			}
			ev := e.rec.wait(t, "http", func(ev *event.Event) bool { return ev.Kind == event.KindHTTP })
			if ev.HTTP.Status != 200 {
				t.Errorf("event status %d, want 200", ev.HTTP.Status)
			}
		})
	}
}

// TestForwardLargeBodyFraming: a body too large to scan goes upstream
// framed as it came: with its Content-Length when it had one (servers
// that need a length refuse a chunked upload), chunked when it was.
func TestForwardLargeBodyFraming(t *testing.T) {
	const size = maxScanBody + 1
	type seen struct {
		length  int64
		chunked bool
		n       int64
	}
	got := make(chan seen, 1)
	for _, cp := range clientProtos {
		for _, known := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/length known %v", cp.name, known), func(t *testing.T) {
				e := newEnv(t, envOptions{rewrites: &Rewrites{}}) // bodies are read to be scanned
				up := e.upstream(upstream.Options{Name: "upload.example.test", CA: e.upCA,
					Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						n, _ := io.Copy(io.Discard, r.Body)
						got <- seen{r.ContentLength, slices.Contains(r.TransferEncoding, "chunked"), n}
					})})
				c, _ := e.client(cp.h2)
				var body io.Reader = bytes.NewReader(make([]byte, size))
				if !known {
					body = io.MultiReader(body) // hides the length from the client
				}
				resp, err := c.Post(up.URL+"/upload", "application/octet-stream", body)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				want := seen{size, false, size}
				if !known {
					want = seen{-1, true, size}
				}
				if s := <-got; s != want {
					t.Errorf("upstream got length %d, chunked %v, %d bytes; want %d, %v, %d", s.length, s.chunked, s.n, want.length, want.chunked, want.n)
				}
			})
		}
	}
}

// TestForwardUpstreamProtocol checks that requests reach an upstream that
// offers HTTP/2 over HTTP/1.1, from HTTP/1 and HTTP/2 clients alike, except
// an HTTP/2 client's gRPC requests (TE: trailers, or a gRPC Content-Type),
// which go over HTTP/2; each on a kept-alive connection.
func TestForwardUpstreamProtocol(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := e.upstream(upstream.Options{Name: "proto.example.test", CA: e.upCA})
	get := func(c *http.Client, path string, h http.Header) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, up.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(req.Header, h)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, cp := range clientProtos {
		c, _ := e.client(cp.h2)
		for range 3 {
			get(c, "/"+strings.ReplaceAll(cp.name, " ", "-"), nil)
			if cp.h2 {
				get(c, "/grpc-te", http.Header{"Te": {"trailers"}})
				get(c, "/grpc-type", http.Header{"Content-Type": {"application/grpc+proto"}})
			}
		}
	}
	remotes := map[string]map[string]bool{}
	for _, r := range up.Requests() {
		if remotes[r.Path] == nil {
			remotes[r.Path] = map[string]bool{}
		}
		remotes[r.Path][r.Proto+" "+r.ALPN+" from "+r.RemoteAddr] = true
	}
	want := map[string]string{"/h1-client": "HTTP/1.1 http/1.1", "/h2-client": "HTTP/1.1 http/1.1",
		"/grpc-te": "HTTP/2.0 h2", "/grpc-type": "HTTP/2.0 h2"}
	for path, want := range want {
		if len(remotes[path]) != 1 {
			t.Errorf("%s: upstream saw %v, want one kept-alive connection", path, remotes[path])
			continue
		}
		for k := range remotes[path] {
			if !strings.HasPrefix(k, want+" ") {
				t.Errorf("%s: upstream saw %s, want %s", path, k, want)
			}
		}
	}
}
