package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// reqSpec builds the same request twice, each with a fresh body.
type reqSpec struct {
	method, host, url string
	query             string // replaces the URL's query, when set: url.Parse refuses control bytes
	header            http.Header
	body              string // sent when hasBody
	hasBody           bool
	cl                int64
	close             bool
	te                []string
}

func (s reqSpec) build(t testing.TB) *http.Request {
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatalf("%q: %v", s.url, err)
	}
	if s.query != "" {
		u.RawQuery = s.query
	}
	req := &http.Request{Method: s.method, URL: u, Host: s.host, Header: http.Header{},
		ContentLength: s.cl, Close: s.close, TransferEncoding: s.te}
	for k, vv := range s.header {
		req.Header[k] = append([]string(nil), vv...)
	}
	if s.hasBody {
		req.Body = io.NopCloser(strings.NewReader(s.body))
	}
	return req
}

// writeBoth writes the request with req.Write and with writeRequest; it
// reports both outputs and errors.
func writeBoth(t testing.TB, s reqSpec) (want, got []byte, wantErr, gotErr error) {
	var a, b bytes.Buffer
	bwA := bufio.NewWriter(&a)
	wantErr = s.build(t).Write(bwA)
	bwA.Flush()
	bwB := bufio.NewWriter(&b)
	gotErr = WriteRequest(bwB, s.build(t), true)
	bwB.Flush()
	return a.Bytes(), b.Bytes(), wantErr, gotErr
}

// TestWriteRequest: writeRequest writes what req.Write writes, byte for
// byte, and fails where it fails; the requests it hands to req.Write are
// the ones it should.
func TestWriteRequest(t *testing.T) {
	common := http.Header{"User-Agent": {"curl/8.14"}, "Accept": {"*/*"}, "Accept-Encoding": {"gzip", "br"},
		"X-Trace": {"  padded\t"}, "Cookie": {"a=1; b=2"}}
	many := http.Header{"User-Agent": {""}}
	for i := range 40 {
		many[fmt.Sprintf("X-H%02d", i)] = []string{fmt.Sprint(i)}
	}
	tests := []struct {
		name  string
		spec  reqSpec
		plain bool // written by writeRequest itself
	}{
		{"GET", reqSpec{method: "GET", url: "https://example.com/a/b", header: common}, true},
		{"GET with query", reqSpec{method: "GET", url: "https://example.com/s?q=1&r=%20", header: common}, true},
		{"empty query kept", reqSpec{method: "GET", url: "https://example.com/s?", header: common}, true},
		{"no path", reqSpec{method: "GET", url: "https://example.com", header: common}, true},
		{"escaped path", reqSpec{method: "GET", url: "https://example.com/a%2Fb/c%20d", header: common}, true},
		{"path to escape", reqSpec{method: "GET", url: "https://example.com/a b/ü", header: common}, true},
		{"no method", reqSpec{url: "https://example.com/", header: common}, true},
		{"Host over URL", reqSpec{method: "GET", host: "other.example:8443", url: "https://example.com/", header: common}, true},
		{"invalid Host emptied", reqSpec{method: "GET", host: "a b", url: "https://example.com/", header: common}, true},
		{"IPv6 zone removed", reqSpec{method: "GET", url: "http://[fe80::1%25eth0]:8080/", header: common}, true},
		{"default User-Agent", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{"Accept": {"*/*"}}}, true},
		{"no User-Agent", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{"User-Agent": {""}}}, true},
		{"User-Agent without values", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{"User-Agent": {}}}, true},
		{"two User-Agents", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{"User-Agent": {"a", "b"}}}, true},
		{"line breaks in values", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{
			"X-A": {"one\r\nInjected: yes"}, "X-B": {"two\nthree\r"}, "User-Agent": {"ua\r\nX: y"}}}, true},
		{"non-ASCII space kept", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{"X-A": {"v\u00a0"}, "X-B": {"\u0085v"}}}, true},
		{"invalid names dropped", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{"Bad Name": {"x"}, "Bad:Name": {"y"}, "": {"z"}, "Good": {"g"}}}, true},
		{"framing fields ignored", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{
			"Host": {"evil.example"}, "Content-Length": {"99"}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X"}}}, true},
		{"non-canonical keys", reqSpec{method: "GET", url: "https://example.com/", header: http.Header{"x-lower": {"1"}, "X-Upper": {"2"}, "host": {"h"}}}, true},
		{"40 fields", reqSpec{method: "GET", url: "https://example.com/", header: many}, true},
		{"POST body", reqSpec{method: "POST", url: "https://example.com/v1/messages", header: common, body: `{"a":1}`, hasBody: true, cl: 7}, true},
		{"POST empty", reqSpec{method: "POST", url: "https://example.com/", header: common}, true},
		{"PUT empty", reqSpec{method: "PUT", url: "https://example.com/", header: common}, true},
		{"PATCH empty", reqSpec{method: "PATCH", url: "https://example.com/", header: common}, true},
		{"DELETE empty", reqSpec{method: "DELETE", url: "https://example.com/", header: common}, true},
		{"OPTIONS empty", reqSpec{method: "OPTIONS", url: "https://example.com/", header: common}, true},
		{"DELETE body", reqSpec{method: "DELETE", url: "https://example.com/", header: common, body: "x", hasBody: true, cl: 1}, true},
		{"NoBody", reqSpec{method: "GET", url: "https://example.com/", header: common}, true},
		{"body shorter than its length", reqSpec{method: "POST", url: "https://example.com/", header: common, body: "abc", hasBody: true, cl: 5}, true},
		{"body longer than its length", reqSpec{method: "POST", url: "https://example.com/", header: common, body: "abcdefg", hasBody: true, cl: 5}, true},
		{"control byte in path", reqSpec{method: "GET", url: "https://example.com/a%00b", header: common}, true},
		{"control byte in query", reqSpec{method: "GET", url: "https://example.com/", query: "a=\x01", header: common}, true},
		{"DEL in query", reqSpec{method: "GET", url: "https://example.com/", query: "a=\x7f", header: common}, true},

		{"streamed body", reqSpec{method: "POST", url: "https://example.com/", header: common, body: "stream", hasBody: true, cl: -1}, false},
		{"body of length 0", reqSpec{method: "POST", url: "https://example.com/", header: common, body: "x", hasBody: true, cl: 0}, false},
		{"length without body", reqSpec{method: "POST", url: "https://example.com/", header: common, cl: 3}, false},
		{"close", reqSpec{method: "GET", url: "https://example.com/", header: common, close: true}, false},
		{"transfer encoding", reqSpec{method: "POST", url: "https://example.com/", header: common, body: "x", hasBody: true, cl: 1, te: []string{"chunked"}}, false},
		{"non-ASCII host", reqSpec{method: "GET", url: "https://bücher.example/", header: common}, false},
		{"opaque URL", reqSpec{method: "GET", url: "https:opaque", header: common}, false},
		{"CONNECT", reqSpec{method: "CONNECT", url: "https://example.com:443", header: common}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := plainRequest(tt.spec.build(t)); got != tt.plain {
				t.Errorf("plainRequest = %v, want %v", got, tt.plain)
			}
			want, got, wantErr, gotErr := writeBoth(t, tt.spec)
			if (wantErr != nil) != (gotErr != nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
				t.Fatalf("error %v, req.Write's %v", gotErr, wantErr)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("wrote\n%q\nreq.Write wrote\n%q", got, want)
			}
		})
	}
}

// TestWriteRequestBodyClosed: the body is closed however the write ends,
// as req.Write closes it.
func TestWriteRequestBodyClosed(t *testing.T) {
	for _, tt := range []struct {
		body string
		cl   int64
	}{{"abc", 3}, {"ab", 3}, {"abcd", 3}} {
		cb := &closeCounter{Reader: strings.NewReader(tt.body)}
		req, _ := http.NewRequest("POST", "https://example.com/", cb)
		req.ContentLength = tt.cl
		WriteRequest(bufio.NewWriter(io.Discard), req, false)
		if cb.closed != 1 {
			t.Errorf("body %q of length %d: closed %d times, want once", tt.body, tt.cl, cb.closed)
		}
	}
}

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

// TestWriteRequestAllocs: a bodyless request with a dozen fields is written
// without an allocation.
func TestWriteRequestAllocs(t *testing.T) {
	req := reqSpec{method: "GET", url: "https://api.example.com/v1/items?page=2", header: http.Header{
		"User-Agent": {"curl/8.14"}, "Accept": {"*/*"}, "Accept-Encoding": {"gzip"}, "Authorization": {"Bearer x"},
		"Cookie": {"a=1"}, "If-None-Match": {`"abc"`}, "X-Request-Id": {"1"}, "Traceparent": {"00-1-2-01"},
		"Cache-Control": {"no-cache"}, "Accept-Language": {"en"}, "Referer": {"https://example.com/"}, "Origin": {"https://example.com"},
	}}.build(t)
	bw := bufio.NewWriter(io.Discard)
	if n := testing.AllocsPerRun(100, func() { WriteRequest(bw, req, false) }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}

func BenchmarkWriteRequest(b *testing.B) {
	req := reqSpec{method: "GET", url: "https://api.example.com/v1/items?page=2", header: http.Header{
		"User-Agent": {"curl/8.14"}, "Accept": {"*/*"}, "Accept-Encoding": {"gzip"}, "Authorization": {"Bearer x"},
		"Cookie": {"a=1"}, "If-None-Match": {`"abc"`}, "X-Request-Id": {"1"}, "Traceparent": {"00-1-2-01"},
	}}.build(b)
	bw := bufio.NewWriter(io.Discard)
	b.Run("net/http", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req.Write(bw)
		}
	})
	b.Run("chaperone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			WriteRequest(bw, req, false)
		}
	})
}

// FuzzWriteRequest: for any request, writeRequest and req.Write write the
// same bytes and fail alike.
func FuzzWriteRequest(f *testing.F) {
	f.Add("GET", "", "https://example.com/a?b=c", "User-Agent: curl\nAccept: */*", "", false, int64(0))
	f.Add("POST", "h.example:81", "http://[::1%25lo]:80/x%20y", "X-A:  v \nBad Name: x\nContent-Length: 3", "body", true, int64(4))
	f.Add("PUT", "a b", "https://e.example/?", "User-Agent:\nX: a\r\nb", "ab", true, int64(3))
	f.Add("", "", "/rel", "", "", false, int64(0))
	f.Fuzz(func(t *testing.T, method, host, rawURL, fields, body string, hasBody bool, cl int64) {
		u, err := url.Parse(rawURL)
		if err != nil {
			return
		}
		s := reqSpec{method: method, host: host, url: u.String(), header: http.Header{}, body: body, hasBody: hasBody, cl: cl}
		if u2, err := url.Parse(s.url); err != nil || u2.String() != s.url {
			return
		}
		for l := range strings.SplitSeq(fields, "\n") {
			k, v, _ := strings.Cut(l, ":")
			s.header[k] = append(s.header[k], v)
		}
		want, got, wantErr, gotErr := writeBoth(t, s)
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("error %v, req.Write's %v", gotErr, wantErr)
		}
		if wantErr == nil && !bytes.Equal(got, want) {
			t.Errorf("wrote\n%q\nreq.Write wrote\n%q", got, want)
		}
	})
}
