package h2

import (
	"bytes"
	"context"
	"crypto/sha256"
	stdtls "crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/net/http2"
)

// The h2Server against real clients: x/net's, curl, node and nghttp, each
// speaking h2c with prior knowledge to a server on 127.0.0.1.

// h2Wait bounds every wait of these tests: a stuck stream fails the test
// rather than hanging it.
const h2Wait = 10 * time.Second

// h2Payload returns n bytes, the same in every run.
func h2Payload(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{'h', '2'}).Read(b)
	return b
}

func h2Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// roundTripAsync sends req on c and delivers RoundTrip's error, once the
// response, if any, is closed.
func roundTripAsync(c *h2cClient, req *http.Request) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := c.tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	return done
}

// h2cClient is x/net's HTTP/2 client with prior knowledge over plain TCP.
// Whatever address it is asked for, it dials the server's, an IP literal:
// no name is ever resolved.
type h2cClient struct {
	tr    *http2.Transport
	base  string // http://addr
	dials atomic.Int32

	mu    sync.Mutex
	conns []net.Conn
}

func newH2CClient(t *testing.T, addr string) *h2cClient {
	c := &h2cClient{base: "http://" + addr}
	c.tr = &http2.Transport{
		AllowHTTP: true,
		// Requests past the server's stream limit wait for a slot rather
		// than dial: the tests count on one connection.
		StrictMaxConcurrentStreams: true,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *stdtls.Config) (net.Conn, error) {
			c.dials.Add(1)
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				c.mu.Lock()
				c.conns = append(c.conns, nc)
				c.mu.Unlock()
			}
			return nc, err
		},
	}
	// x/net waits for flow control and reads response bodies without
	// watching the request's context: a stuck stream would hang the test
	// rather than fail it, so the connections are closed past h2Wait.
	watchdog := time.AfterFunc(h2Wait, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, nc := range c.conns {
			nc.Close()
		}
	})
	t.Cleanup(func() {
		watchdog.Stop()
		c.tr.CloseIdleConnections()
	})
	return c
}

// newReq returns a request for path on c's server, bounded by h2Wait.
func (c *h2cClient) newReq(t *testing.T, method, path string, body io.Reader) *http.Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// do sends req and reads the whole response body.
func (c *h2cClient) do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL.Path, err)
	}
	return resp, body
}

// checkAlive sends one more GET /alive (which the handler must answer with
// 200) and checks that it went over the client's only connection.
func (c *h2cClient) checkAlive(t *testing.T) {
	t.Helper()
	resp, _ := c.do(t, c.newReq(t, http.MethodGet, "/alive", nil))
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /alive after the case: status %d, want 200", resp.StatusCode)
	}
	if n := c.dials.Load(); n != 1 {
		t.Errorf("client dialed %d connections, want 1", n)
	}
}

// seenRequest is what a handler saw of its request.
type seenRequest struct {
	Proto         string
	ProtoMajor    int
	Method        string
	Host          string
	Path          string
	RawQuery      string
	RequestURI    string
	XTest         []string
	Cookie        []string
	Cookies       int
	ContentLength int64
}

func TestH2ClientGet(t *testing.T) {
	page := h2Payload(1024)
	cases := []struct {
		name   string
		path   string
		host   string // req.Host; "" sends the URL's
		header http.Header
		want   func(addr string) seenRequest
	}{
		{
			name: "headers, query and split cookies",
			path: "/a/b?q=1&r=two",
			host: "svc.example.test",
			header: http.Header{
				"X-Test": {"one", "two"},
				// x/net sends each cookie as a field of its own: the
				// server joins them back into one header.
				"Cookie": {"a=1; b=2", "c=3"},
			},
			want: func(string) seenRequest {
				return seenRequest{
					Proto: "HTTP/2.0", ProtoMajor: 2, Method: "GET", Host: "svc.example.test",
					Path: "/a/b", RawQuery: "q=1&r=two", RequestURI: "/a/b?q=1&r=two",
					XTest: []string{"one", "two"}, Cookie: []string{"a=1; b=2; c=3"}, Cookies: 3,
				}
			},
		},
		{
			name: "escaped path, host from the URL",
			path: "/p%20q/%2Fx",
			want: func(addr string) seenRequest {
				return seenRequest{
					Proto: "HTTP/2.0", ProtoMajor: 2, Method: "GET", Host: addr,
					Path: "/p q//x", RequestURI: "/p%20q/%2Fx",
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan seenRequest, 1)
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- seenRequest{
					Proto: r.Proto, ProtoMajor: r.ProtoMajor, Method: r.Method, Host: r.Host,
					Path: r.URL.Path, RawQuery: r.URL.RawQuery, RequestURI: r.RequestURI,
					XTest: r.Header["X-Test"], Cookie: r.Header["Cookie"], Cookies: len(r.Cookies()),
					ContentLength: r.ContentLength,
				}
				w.Header().Set("X-Reply", "yes")
				w.Write(page)
			}), nil)
			c := newH2CClient(t, e.addr)
			req := c.newReq(t, http.MethodGet, tc.path, nil)
			req.Host = tc.host
			for k, vv := range tc.header {
				req.Header[k] = vv
			}
			resp, body := c.do(t, req)
			if diff := cmp.Diff(tc.want(e.addr), within(t, seen, "request seen")); diff != "" {
				t.Errorf("handler saw (-want +got):\n%s", diff)
			}
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || resp.Header.Get("X-Reply") != "yes" {
				t.Errorf("response: status %d, proto %s, X-Reply %q; want 200, HTTP/2.0, yes", resp.StatusCode, resp.Proto, resp.Header.Get("X-Reply"))
			}
			if !bytes.Equal(body, page) {
				t.Errorf("body: %d bytes, sha256 %s; want %d bytes, %s", len(body), h2Sum(body), len(page), h2Sum(page))
			}
		})
	}
}

// bodyReport is what the bodies handler received.
type bodyReport struct {
	declared int64
	n        int64
	sum      string
}

// hidLength hides a reader's length from the client, which then sends the
// body without a Content-Length.
type hidLength struct{ r io.Reader }

func (h hidLength) Read(p []byte) (int, error) { return h.r.Read(p) }

func TestH2ClientBodies(t *testing.T) {
	const upload, download = 8 << 20, 16 << 20
	up, down := h2Payload(upload), h2Payload(download)
	cases := []struct {
		name     string
		method   string
		body     func() io.Reader // nil: none
		wantSent *bodyReport      // what the handler must receive; nil for a GET
		want     []byte           // the response body
	}{
		{
			name: "upload 8 MiB with its length, echoed", method: http.MethodPost,
			body:     func() io.Reader { return bytes.NewReader(up) },
			wantSent: &bodyReport{declared: upload, n: upload, sum: h2Sum(up)},
			want:     up,
		},
		{
			name: "upload 8 MiB without a length, echoed", method: http.MethodPost,
			body:     func() io.Reader { return hidLength{bytes.NewReader(up)} },
			wantSent: &bodyReport{declared: -1, n: upload, sum: h2Sum(up)},
			want:     up,
		},
		{name: "download 16 MiB", method: http.MethodGet, want: down},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan bodyReport, 1)
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					for b := down; len(b) > 0; b = b[min(len(b), 32<<10):] {
						if _, err := w.Write(b[:min(len(b), 32<<10)]); err != nil {
							return
						}
					}
					return
				}
				h := sha256.New()
				n, _ := io.Copy(w, io.TeeReader(r.Body, h))
				got <- bodyReport{declared: r.ContentLength, n: n, sum: hex.EncodeToString(h.Sum(nil))}
			}), nil)
			c := newH2CClient(t, e.addr)
			var body io.Reader
			if tc.body != nil {
				body = tc.body()
			}
			resp, echoed := c.do(t, c.newReq(t, tc.method, "/", body))
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d, want 200", resp.StatusCode)
			}
			if len(echoed) != len(tc.want) || h2Sum(echoed) != h2Sum(tc.want) {
				t.Errorf("client received %d bytes, sha256 %s; want %d, %s", len(echoed), h2Sum(echoed), len(tc.want), h2Sum(tc.want))
			}
			if tc.wantSent != nil {
				if diff := cmp.Diff(*tc.wantSent, within(t, got, "body report"), cmp.AllowUnexported(bodyReport{})); diff != "" {
					t.Errorf("handler received (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestH2ClientResponseTrailers(t *testing.T) {
	cases := []struct {
		name    string
		handler func(w http.ResponseWriter)
		body    string
		want    http.Header
	}{
		{
			name: "announced in the Trailer header",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Trailer", "X-Sum, X-Count")
				io.WriteString(w, "body")
				w.Header().Set("X-Sum", "s1")
				w.Header().Set("X-Count", "4")
			},
			body: "body",
			want: http.Header{"X-Sum": {"s1"}, "X-Count": {"4"}},
		},
		{
			name: "under http.TrailerPrefix",
			handler: func(w http.ResponseWriter) {
				io.WriteString(w, "body")
				w.Header().Set(http.TrailerPrefix+"X-Late", "v")
			},
			body: "body",
			want: http.Header{"X-Late": {"v"}},
		},
		{
			name: "both, several values",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Trailer", "X-A")
				io.WriteString(w, "body")
				w.Header().Add("X-A", "1")
				w.Header().Add("X-A", "2")
				w.Header().Set(http.TrailerPrefix+"X-B", "b")
			},
			body: "body",
			want: http.Header{"X-A": {"1", "2"}, "X-B": {"b"}},
		},
		{
			name: "no body",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Trailer", "X-Only")
				w.WriteHeader(http.StatusOK)
				w.Header().Set("X-Only", "t")
			},
			want: http.Header{"X-Only": {"t"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.handler(w) }), nil)
			c := newH2CClient(t, e.addr)
			resp, body := c.do(t, c.newReq(t, http.MethodGet, "/", nil))
			if string(body) != tc.body {
				t.Errorf("body %q, want %q", body, tc.body)
			}
			if diff := cmp.Diff(tc.want, resp.Trailer); diff != "" {
				t.Errorf("trailers (-want +got):\n%s", diff)
			}
			for k := range tc.want {
				if v, ok := resp.Header[k]; ok {
					t.Errorf("trailer %s also in the header: %q", k, v)
				}
			}
		})
	}
}

// trailingBody is a request body that sets the request's trailer X-Sha256
// to its hash when it ends, as a client computing a checksum on the fly.
type trailingBody struct {
	r   io.Reader
	h   hash.Hash
	req *http.Request
}

func (b *trailingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	if err == io.EOF {
		b.req.Trailer.Set("X-Sha256", hex.EncodeToString(b.h.Sum(nil)))
	}
	return n, err
}

func TestH2ClientRequestTrailers(t *testing.T) {
	big := h2Payload(2 << 20)
	cases := []struct {
		name    string
		body    []byte
		trailer http.Header // set before the request is sent
		compute bool        // X-Sha256 is set as the body ends
		want    http.Header // r.Trailer once the body is read
	}{
		{
			name: "set ahead", body: []byte("hello"),
			trailer: http.Header{"X-Checksum": {"abc"}},
			want:    http.Header{"X-Checksum": {"abc"}},
		},
		{
			name: "several, several values", body: []byte("hello"),
			trailer: http.Header{"X-A": {"1", "2"}, "X-B": {"3"}},
			want:    http.Header{"X-A": {"1", "2"}, "X-B": {"3"}},
		},
		{
			name: "computed after 2 MiB", body: big,
			trailer: http.Header{"X-Sha256": nil}, compute: true,
			want: http.Header{"X-Sha256": {h2Sum(big)}},
		},
	}
	type report struct {
		n       int
		err     error
		trailer http.Header
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan report, 1)
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// r.Trailer is only read after the body's EOF, as net/http asks.
				b, err := io.ReadAll(r.Body)
				got <- report{n: len(b), err: err, trailer: r.Trailer.Clone()}
			}), nil)
			c := newH2CClient(t, e.addr)
			req := c.newReq(t, http.MethodPost, "/", nil)
			req.Trailer = tc.trailer.Clone()
			req.ContentLength = int64(len(tc.body))
			if tc.compute {
				req.Body = io.NopCloser(&trailingBody{r: bytes.NewReader(tc.body), h: sha256.New(), req: req})
			} else {
				req.Body = io.NopCloser(bytes.NewReader(tc.body))
			}
			if resp, _ := c.do(t, req); resp.StatusCode != http.StatusOK {
				t.Errorf("status %d, want 200", resp.StatusCode)
			}
			r := within(t, got, "handler report")
			if r.err != nil || r.n != len(tc.body) {
				t.Errorf("handler read %d bytes, %v; want %d, nil", r.n, r.err, len(tc.body))
			}
			if diff := cmp.Diff(tc.want, r.trailer); diff != "" {
				t.Errorf("r.Trailer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestH2ClientConcurrent(t *testing.T) {
	cases := []struct {
		name string
		n    int
	}{
		{"200 streams", 200},
		{"250 streams, the server's limit", h2MaxStreams},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			arrived, running, peak := 0, 0, 0
			remotes := map[string]bool{}
			all := make(chan struct{})
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				remotes[r.RemoteAddr] = true
				mu.Unlock()
				if r.URL.Path == "/prime" {
					return
				}
				mu.Lock()
				arrived++
				running++
				peak = max(peak, running)
				if arrived == tc.n {
					close(all)
				}
				mu.Unlock()
				// Held until every request runs: they must all be served at once.
				select {
				case <-all:
				case <-time.After(h2Wait / 2):
				case <-r.Context().Done():
				}
				mu.Lock()
				running--
				mu.Unlock()
				io.WriteString(w, strings.Repeat(r.URL.Path+";", 64))
			}), nil)
			c := newH2CClient(t, e.addr)
			// The client learns the server's stream limit from this one.
			c.do(t, c.newReq(t, http.MethodGet, "/prime", nil))

			reqs := make([]*http.Request, tc.n)
			for i := range reqs {
				reqs[i] = c.newReq(t, http.MethodGet, "/c/"+strconv.Itoa(i), nil)
			}
			errs := make([]error, tc.n)
			var wg sync.WaitGroup
			for i, req := range reqs {
				wg.Go(func() {
					path := req.URL.Path
					resp, err := c.tr.RoundTrip(req)
					if err != nil {
						errs[i] = err
						return
					}
					defer resp.Body.Close()
					body, err := io.ReadAll(resp.Body)
					switch {
					case err != nil:
						errs[i] = err
					case resp.StatusCode != http.StatusOK:
						errs[i] = fmt.Errorf("status %d", resp.StatusCode)
					case string(body) != strings.Repeat(path+";", 64):
						errs[i] = fmt.Errorf("body %.40q...", body)
					}
				})
			}
			wg.Wait()
			failed := 0
			for i, err := range errs {
				if err != nil {
					if failed++; failed <= 5 {
						t.Errorf("request %d: %v", i, err)
					}
				}
			}
			if failed > 0 {
				t.Errorf("%d of %d requests failed", failed, tc.n)
			}
			mu.Lock()
			defer mu.Unlock()
			if peak != tc.n {
				t.Errorf("at most %d handlers ran at once, want %d", peak, tc.n)
			}
			if len(remotes) != 1 || c.dials.Load() != 1 {
				t.Errorf("requests came from %d addresses over %d dials, want 1 and 1", len(remotes), c.dials.Load())
			}
		})
	}
}

func TestH2ClientAbort(t *testing.T) {
	cases := []struct {
		name    string
		written int  // bytes the handler writes (and flushes) before it aborts
		header  bool // the handler writes its header before it aborts
	}{
		{name: "before the header"},
		{name: "after the header", header: true},
		{name: "mid body", header: true, written: 64 << 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			part := h2Payload(tc.written)
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/alive" {
					return
				}
				if tc.header {
					w.WriteHeader(http.StatusOK)
					w.Write(part)
					w.(http.Flusher).Flush()
				}
				panic(http.ErrAbortHandler)
			}), nil)
			c := newH2CClient(t, e.addr)
			resp, err := c.tr.RoundTrip(c.newReq(t, http.MethodGet, "/", nil))
			if err == nil {
				var body []byte
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if !tc.header {
					t.Errorf("response %d with %d bytes, want the stream reset before any", resp.StatusCode, len(body))
				}
				if len(body) > len(part) {
					t.Errorf("read %d bytes, more than the %d written", len(body), len(part))
				}
			} else if tc.header {
				t.Errorf("RoundTrip: %v, want the response and an error reading its body", err)
			}
			var se http2.StreamError
			if !errors.As(err, &se) || se.Code != http2.ErrCodeInternal {
				t.Errorf("client saw %v, want a stream reset with INTERNAL_ERROR", err)
			}
			c.checkAlive(t)
		})
	}
}

func TestH2ClientCancel(t *testing.T) {
	type report struct {
		ctxErr  error // nil if the request's context was not done within h2Wait
		readErr error // what reading the body ended with
	}
	cases := []struct {
		name string
		// handle blocks, as a handler waiting on something, once it called
		// started.
		handle func(w http.ResponseWriter, r *http.Request, started func()) error
		// client cancels the request once the handler started.
		client func(t *testing.T, c *h2cClient, req *http.Request, cancel func(), started <-chan struct{})
		read   bool // the handler was reading the body: it must fail
	}{
		{
			name: "before the header",
			handle: func(w http.ResponseWriter, r *http.Request, started func()) error {
				started()
				return nil
			},
			client: func(t *testing.T, c *h2cClient, req *http.Request, cancel func(), started <-chan struct{}) {
				done := roundTripAsync(c, req)
				within(t, started, "handler start")
				cancel()
				if err := within(t, done, "RoundTrip"); !errors.Is(err, context.Canceled) {
					t.Errorf("RoundTrip: %v, want context.Canceled", err)
				}
			},
		},
		{
			name: "mid body",
			handle: func(w http.ResponseWriter, r *http.Request, started func()) error {
				io.WriteString(w, "partial")
				w.(http.Flusher).Flush()
				started()
				return nil
			},
			client: func(t *testing.T, c *h2cClient, req *http.Request, cancel func(), started <-chan struct{}) {
				resp, err := c.tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				defer resp.Body.Close()
				b := make([]byte, len("partial"))
				if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != "partial" {
					t.Fatalf("read %q, %v; want partial", b, err)
				}
				within(t, started, "handler start")
				cancel()
				if _, err := io.ReadAll(resp.Body); err == nil {
					t.Error("body read to its end after the cancel, want an error")
				}
			},
		},
		{
			name: "mid upload",
			handle: func(w http.ResponseWriter, r *http.Request, started func()) error {
				if _, err := io.ReadFull(r.Body, make([]byte, 1024)); err != nil {
					return fmt.Errorf("first KB: %w", err)
				}
				started()
				_, err := io.Copy(io.Discard, r.Body)
				if err == nil {
					err = errors.New("body ended") // io.Copy hides io.EOF
				}
				return err
			},
			client: func(t *testing.T, c *h2cClient, req *http.Request, cancel func(), started <-chan struct{}) {
				pr, pw := io.Pipe()
				defer pw.Close()
				req.Body = pr
				done := roundTripAsync(c, req)
				if _, err := pw.Write(make([]byte, 1024)); err != nil {
					t.Fatalf("write the first KB: %v", err)
				}
				within(t, started, "handler start")
				cancel()
				if err := within(t, done, "RoundTrip"); !errors.Is(err, context.Canceled) {
					t.Errorf("RoundTrip: %v, want context.Canceled", err)
				}
			},
			read: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{})
			got := make(chan report, 1)
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/alive" {
					return
				}
				var rep report
				rep.readErr = tc.handle(w, r, sync.OnceFunc(func() { close(started) }))
				select {
				case <-r.Context().Done():
					rep.ctxErr = r.Context().Err()
				case <-time.After(h2Wait / 2):
				}
				got <- rep
			}), nil)
			c := newH2CClient(t, e.addr)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.client(t, c, req, cancel, started)
			r := within(t, got, "handler report")
			if !errors.Is(r.ctxErr, context.Canceled) {
				t.Errorf("handler's r.Context(): %v, want context.Canceled", r.ctxErr)
			}
			if tc.read && r.readErr == nil {
				t.Error("handler's body read ended well, want an error")
			}
			if !tc.read && r.readErr != nil {
				t.Errorf("handler: %v", r.readErr)
			}
			c.checkAlive(t)
		})
	}
}

// info1xx is an informational response the client received.
type info1xx struct {
	Code   int
	Header http.Header
}

func TestH2Client1xx(t *testing.T) {
	const a, b = "</a.css>; rel=preload", "</b.js>; rel=preload"
	cases := []struct {
		name    string
		handler func(w http.ResponseWriter)
		want    []info1xx
	}{
		{
			name: "103 early hints",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Link", a)
				w.WriteHeader(http.StatusEarlyHints)
			},
			want: []info1xx{{103, http.Header{"Link": {a}}}},
		},
		{
			name: "two 103s",
			handler: func(w http.ResponseWriter) {
				w.Header().Set("Link", a)
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Add("Link", b)
				w.WriteHeader(http.StatusEarlyHints)
			},
			want: []info1xx{{103, http.Header{"Link": {a}}}, {103, http.Header{"Link": {a, b}}}},
		},
		{
			name: "102 processing",
			handler: func(w http.ResponseWriter) {
				w.WriteHeader(http.StatusProcessing)
			},
			want: []info1xx{{102, nil}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tc.handler(w)
				w.Header().Set("X-Final", "yes")
				w.WriteHeader(http.StatusOK)
				io.WriteString(w, "ok")
			}), nil)
			c := newH2CClient(t, e.addr)
			var mu sync.Mutex
			var got []info1xx
			req := c.newReq(t, http.MethodGet, "/", nil)
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					mu.Lock()
					got = append(got, info1xx{code, http.Header(h).Clone()})
					mu.Unlock()
					return nil
				},
			}))
			resp, body := c.do(t, req)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Final") != "yes" || string(body) != "ok" {
				t.Errorf("final response: %d, X-Final %q, body %q; want 200, yes, ok", resp.StatusCode, resp.Header.Get("X-Final"), body)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("1xx responses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestH2ClientNoBody(t *testing.T) {
	cases := []struct {
		name       string
		method     string
		status     int
		wantLength int64 // resp.ContentLength; checked for HEAD only
	}{
		{name: "HEAD", method: http.MethodHead, status: http.StatusOK, wantLength: 5},
		{name: "204", method: http.MethodGet, status: http.StatusNoContent},
		{name: "304", method: http.MethodGet, status: http.StatusNotModified},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			writeErr := make(chan error, 1)
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/alive" {
					return
				}
				w.Header().Set("Content-Length", "5")
				if tc.status != http.StatusOK {
					w.Header().Del("Content-Length")
				}
				w.WriteHeader(tc.status)
				_, err := io.WriteString(w, "hello")
				writeErr <- err
			}), nil)
			c := newH2CClient(t, e.addr)
			resp, body := c.do(t, c.newReq(t, tc.method, "/", nil))
			if resp.StatusCode != tc.status || len(body) != 0 {
				t.Errorf("response %d with body %q, want %d and none", resp.StatusCode, body, tc.status)
			}
			if tc.method == http.MethodHead && resp.ContentLength != tc.wantLength {
				t.Errorf("Content-Length %d, want %d", resp.ContentLength, tc.wantLength)
			}
			if err := within(t, writeErr, "handler's write"); !errors.Is(err, http.ErrBodyNotAllowed) {
				t.Errorf("handler's Write: %v, want http.ErrBodyNotAllowed", err)
			}
			c.checkAlive(t)
		})
	}
}

// countingBody counts the reads the client makes of a request body.
type countingBody struct {
	r     io.Reader
	reads atomic.Int32
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.reads.Add(1)
	return b.r.Read(p)
}

func (b *countingBody) Close() error { return nil }

// newExpectClientConn returns one x/net client connection to addr that
// waits up to h2Wait for 100 Continue before it sends a body: x/net reads
// ExpectContinueTimeout from the net/http Transport it configures, whose
// connection pool does not dial, so the connection is made here.
func newExpectClientConn(t *testing.T, addr string) *http2.ClientConn {
	t.Helper()
	t2, err := http2.ConfigureTransports(&http.Transport{ExpectContinueTimeout: h2Wait})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := t2.NewClientConn(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(h2Wait, func() { nc.Close() }) // as newH2CClient's
	t.Cleanup(func() {
		watchdog.Stop()
		cc.Close()
	})
	return cc
}

func TestH2ClientExpectContinue(t *testing.T) {
	payload := h2Payload(256 << 10)
	cases := []struct {
		name     string
		wait     bool // the client waits for 100 Continue before it sends the body
		read     bool // the handler reads the body
		status   int
		want100  bool
		wantSent bool // the client sent the body
	}{
		{name: "client sends at once", read: true, status: http.StatusOK, wantSent: true},
		{name: "client waits for 100", wait: true, read: true, status: http.StatusOK, want100: true, wantSent: true},
		{name: "handler answers without reading", wait: true, status: http.StatusExpectationFailed},
	}
	type report struct {
		expect string
		n      int
		sum    string
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan report, 1)
			e := startH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rep := report{expect: r.Header.Get("Expect")}
				if tc.read {
					b, _ := io.ReadAll(r.Body)
					rep.n, rep.sum = len(b), h2Sum(b)
				}
				got <- rep
				w.WriteHeader(tc.status)
			}), nil)
			c := newH2CClient(t, e.addr)
			body := &countingBody{r: bytes.NewReader(payload)}
			req := c.newReq(t, http.MethodPut, "/", nil)
			req.Body, req.ContentLength = body, int64(len(payload))
			req.Header.Set("Expect", "100-continue")
			var got100 atomic.Bool
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got100Continue: func() { got100.Store(true) },
			}))
			var resp *http.Response
			var err error
			if tc.wait {
				resp, err = newExpectClientConn(t, e.addr).RoundTrip(req)
			} else {
				resp, err = c.tr.RoundTrip(req)
			}
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			want := report{expect: "100-continue"}
			if tc.read {
				want.n, want.sum = len(payload), h2Sum(payload)
			}
			if diff := cmp.Diff(want, within(t, got, "handler report"), cmp.AllowUnexported(report{})); diff != "" {
				t.Errorf("handler (-want +got):\n%s", diff)
			}
			if tc.wait && got100.Load() != tc.want100 {
				t.Errorf("client got 100 Continue: %v, want %v", got100.Load(), tc.want100)
			}
			if sent := body.reads.Load() > 0; sent != tc.wantSent {
				t.Errorf("client sent the body: %v, want %v", sent, tc.wantSent)
			}
		})
	}
}

// h2Site serves the external clients:
//
//	POST /echo  the body back; its size and SHA-256 recorded
//	GET  /n/I   "stream I", once gate requests run (or h2Wait/2 passed)
//	anything    h2Hello
//
// and records each request's protocol and client address.
type h2Site struct {
	gate int

	mu      sync.Mutex
	protos  map[string]int
	remotes map[string]bool
	echoed  []string // "size sha256" of each echoed body
	arrived int
	running int
	peak    int
	open    chan struct{}
}

const h2Hello = "hello over h2\n"

func newH2Site(gate int) *h2Site {
	return &h2Site{gate: gate, protos: map[string]int{}, remotes: map[string]bool{}, open: make(chan struct{})}
}

func (s *h2Site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.protos[r.Proto]++
	s.remotes[r.RemoteAddr] = true
	s.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/echo":
		h := sha256.New()
		n, _ := io.Copy(w, io.TeeReader(r.Body, h))
		s.mu.Lock()
		s.echoed = append(s.echoed, fmt.Sprintf("%d %x", n, h.Sum(nil)))
		s.mu.Unlock()
	case strings.HasPrefix(r.URL.Path, "/n/"):
		s.mu.Lock()
		s.arrived++
		s.running++
		s.peak = max(s.peak, s.running)
		if s.arrived == s.gate {
			close(s.open)
		}
		s.mu.Unlock()
		select {
		case <-s.open:
		case <-time.After(h2Wait / 2):
		case <-r.Context().Done():
		}
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
		io.WriteString(w, "stream "+strings.TrimPrefix(r.URL.Path, "/n/"))
	default:
		io.WriteString(w, h2Hello)
	}
}

// siteLog is what an h2Site recorded.
type siteLog struct {
	Protos  map[string]int
	Remotes int
	Echoed  []string
	Peak    int
}

func (s *h2Site) log() siteLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return siteLog{Protos: s.protos, Remotes: len(s.remotes), Echoed: s.echoed, Peak: s.peak}
}

// runTool runs a client program, bounded by h2Wait, and returns its
// standard output and error; it fails the test when the program fails.
func runTool(t *testing.T, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstderr:\n%s\nstdout:\n%.2000s", name, strings.Join(args, " "), err, errOut.String(), out.String())
	}
	return out.String(), errOut.String()
}

func lookTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed: %v", name, err)
	}
	return p
}

func TestH2Curl(t *testing.T) {
	curl := lookTool(t, "curl")
	payload := h2Payload(3 << 20)
	echoed := fmt.Sprintf("%d %s", len(payload), h2Sum(payload))
	// curl 7.88 cannot reuse a prior-knowledge connection for a second
	// URL (it fails so against x/net's server too): one URL per run.
	cases := []struct {
		name    string
		args    []string // before the URL; IN is replaced by the payload's file
		path    string
		wantOut string // the -w line
		wantErr string // in curl's standard error, when not ""
		wantLog siteLog
		body    string // the response body; "" for the payload's echo
	}{
		{
			name: "GET", path: "/hello", wantOut: "2 200\n", body: h2Hello,
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 1}, Remotes: 1},
		},
		{
			name: "POST 3 MB echoed", args: []string{"--data-binary", "@IN"}, path: "/echo", wantOut: "2 200\n",
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 1}, Remotes: 1, Echoed: []string{echoed}},
		},
		{
			// curl waits for the 100 (up to --expect100-timeout) before it sends.
			name: "POST 3 MB after 100 Continue",
			args: []string{"-v", "--expect100-timeout", "8", "-H", "Expect: 100-continue", "--data-binary", "@IN"},
			path: "/echo", wantOut: "2 200\n", wantErr: "< HTTP/2 100",
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 1}, Remotes: 1, Echoed: []string{echoed}},
		},
		{
			name: "HEAD", args: []string{"-I"}, path: "/hello", wantOut: "2 200\n",
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 1}, Remotes: 1},
			body:    "HTTP/2 200 \r\n\r\n", // -I writes the header, here only the status line
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			site := newH2Site(0)
			e := startH2(t, site, nil)
			dir := t.TempDir()
			in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
			if err := os.WriteFile(in, payload, 0o600); err != nil {
				t.Fatal(err)
			}
			// -q first: no .curlrc; --noproxy: never a proxy from the
			// environment.
			args := []string{"-q", "-sS", "--noproxy", "*", "--http2-prior-knowledge", "-w", "%{http_version} %{http_code}\\n", "-o", out}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "IN", in))
			}
			stdout, stderr := runTool(t, curl, append(args, "http://"+e.addr+tc.path)...)
			if stdout != tc.wantOut {
				t.Errorf("curl wrote %q, want %q", stdout, tc.wantOut)
			}
			if !strings.Contains(stderr, tc.wantErr) {
				t.Errorf("curl's log lacks %q:\n%s", tc.wantErr, stderr)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if tc.body == "" {
				if got := fmt.Sprintf("%d %s", len(b), h2Sum(b)); got != echoed {
					t.Errorf("echo: %s, want %s", got, echoed)
				}
			} else if string(b) != tc.body {
				t.Errorf("body %q, want %q", b, tc.body)
			}
			if diff := cmp.Diff(tc.wantLog, site.log(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("server saw (-want +got):\n%s", diff)
			}
		})
	}
}

// h2NodeScript talks to the server with node's http2 module: node
// script.js ADDR MODE [FILE]; it prints its results as JSON.
const h2NodeScript = `'use strict';
const http2 = require('node:http2');
const crypto = require('node:crypto');
const fs = require('node:fs');
const [addr, mode, file] = process.argv.slice(2);
const session = http2.connect('http://' + addr);
session.on('error', (e) => { process.stderr.write('session: ' + e.stack + '\n'); process.exit(1); });

function request(headers, body) {
  return new Promise((resolve, reject) => {
    const req = session.request(headers, { endStream: body === undefined });
    const chunks = [];
    let status = 0;
    req.on('response', (h) => { status = h[':status']; });
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve({ status, body: Buffer.concat(chunks) }));
    req.on('error', reject);
    if (body !== undefined) req.end(body);
  });
}
const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');

async function main() {
  const out = { mode };
  if (mode === 'get') {
    const r = await request({ ':method': 'GET', ':path': '/hello?from=node' });
    out.statuses = [r.status];
    out.bodies = [r.body.toString()];
  } else if (mode === 'post') {
    const r = await request({ ':method': 'POST', ':path': '/echo', 'content-type': 'application/octet-stream' }, fs.readFileSync(file));
    out.statuses = [r.status];
    out.bodies = [r.body.length + ' ' + sha(r.body)];
  } else if (mode === 'concurrent') {
    const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => request({ ':method': 'GET', ':path': '/n/' + i })));
    out.statuses = rs.map((r) => r.status);
    out.bodies = rs.map((r) => r.body.toString());
  }
  await new Promise((resolve) => session.close(resolve));
  process.stdout.write(JSON.stringify(out));
}
main().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
`

func TestH2Node(t *testing.T) {
	node := lookTool(t, "node")
	dir := t.TempDir()
	script := filepath.Join(dir, "h2client.js")
	if err := os.WriteFile(script, []byte(h2NodeScript), 0o600); err != nil {
		t.Fatal(err)
	}
	payload := h2Payload(2 << 20)
	file := filepath.Join(dir, "payload")
	if err := os.WriteFile(file, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		Mode     string   `json:"mode"`
		Statuses []int    `json:"statuses"`
		Bodies   []string `json:"bodies"`
	}
	echoed := fmt.Sprintf("%d %s", len(payload), h2Sum(payload))
	var fifty result
	fifty.Mode = "concurrent"
	for i := range 50 {
		fifty.Statuses = append(fifty.Statuses, 200)
		fifty.Bodies = append(fifty.Bodies, "stream "+strconv.Itoa(i))
	}
	cases := []struct {
		name    string
		mode    string
		gate    int
		want    result
		wantLog siteLog
	}{
		{
			name: "GET", mode: "get",
			want:    result{Mode: "get", Statuses: []int{200}, Bodies: []string{h2Hello}},
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 1}, Remotes: 1},
		},
		{
			name: "POST 2 MB echoed", mode: "post",
			want:    result{Mode: "post", Statuses: []int{200}, Bodies: []string{echoed}},
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 1}, Remotes: 1, Echoed: []string{echoed}},
		},
		{
			name: "50 concurrent streams on one session", mode: "concurrent", gate: 50,
			want:    fifty,
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 50}, Remotes: 1, Peak: 50},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			site := newH2Site(tc.gate)
			e := startH2(t, site, nil)
			out, _ := runTool(t, node, script, e.addr, tc.mode, file)
			var got result
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("node printed %.500q: %v", out, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("node saw (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLog, site.log(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("server saw (-want +got):\n%s", diff)
			}
		})
	}
}

func TestH2Nghttp(t *testing.T) {
	nghttp := lookTool(t, "nghttp")
	dir := t.TempDir()
	payload := h2Payload(1 << 20)
	file := filepath.Join(dir, "payload")
	if err := os.WriteFile(file, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	echoed := fmt.Sprintf("%d %s", len(payload), h2Sum(payload))
	cases := []struct {
		name    string
		args    func(base string) []string
		check   func(t *testing.T, out string)
		wantLog siteLog
	}{
		{
			name: "GET, frames shown",
			args: func(base string) []string { return []string{"-v", base + "/hello"} },
			check: func(t *testing.T, out string) {
				// nghttp opens streams 3 to 11 for priorities: the
				// request's id varies.
				for _, want := range []string{
					`recv SETTINGS frame <length=24, flags=0x00, stream_id=0>`,
					`\[SETTINGS_ENABLE_CONNECT_PROTOCOL\(0x08\):1\]`,
					`\[SETTINGS_MAX_CONCURRENT_STREAMS\(0x03\):250\]`,
					`\[SETTINGS_INITIAL_WINDOW_SIZE\(0x04\):1048576\]`,
					`recv WINDOW_UPDATE frame <length=4, flags=0x00, stream_id=0>\s+\(window_size_increment=983041\)`,
					`recv \(stream_id=\d+\) :status: 200\n.* recv HEADERS frame <length=\d+, flags=0x04, stream_id=\d+>`,
					regexp.QuoteMeta(h2Hello),
					`recv DATA frame <length=14, flags=0x00, stream_id=\d+>`,
					`recv DATA frame <length=0, flags=0x01, stream_id=\d+>\s+; END_STREAM`,
				} {
					if !regexp.MustCompile(want).MatchString(out) {
						t.Errorf("nghttp output lacks %s:\n%s", want, out)
					}
				}
			},
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 1}, Remotes: 1},
		},
		{
			name: "20 requests on one connection",
			args: func(base string) []string { return []string{"-n", "-s", "-m", "20", base + "/x"} },
			check: func(t *testing.T, out string) {
				if n := strings.Count(out, " 200 "); n != 20 {
					t.Errorf("nghttp statistics list %d responses of 200, want 20:\n%s", n, out)
				}
			},
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 20}, Remotes: 1},
		},
		{
			name: "POST 1 MiB echoed",
			args: func(base string) []string { return []string{"-d", file, base + "/echo"} },
			check: func(t *testing.T, out string) {
				if got := fmt.Sprintf("%d %s", len(out), h2Sum([]byte(out))); got != echoed {
					t.Errorf("echo: %s, want %s", got, echoed)
				}
			},
			wantLog: siteLog{Protos: map[string]int{"HTTP/2.0": 1}, Remotes: 1, Echoed: []string{echoed}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			site := newH2Site(0)
			e := startH2(t, site, nil)
			out, _ := runTool(t, nghttp, tc.args("http://"+e.addr)...)
			tc.check(t, out)
			if diff := cmp.Diff(tc.wantLog, site.log(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("server saw (-want +got):\n%s", diff)
			}
		})
	}
}
