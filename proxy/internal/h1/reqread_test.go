package h1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// compareRequest parses raw with parsePlainRequest and, when it takes the
// request, checks that http.ReadRequest reads the same from it: every
// field, the body, its error and what follows it. It reports whether the
// fast path took the request.
func compareRequest(t testing.TB, raw []byte) bool {
	t.Helper()
	brFast := bufio.NewReaderSize(bytes.NewReader(raw), 64<<10)
	if _, err := brFast.Peek(1); err != nil {
		return false
	}
	ctx := context.WithValue(context.Background(), testKey{}, "t")
	fast, n := ParsePlainRequest(brFast, ctx)
	if fast == nil {
		return false
	}
	brFast.Discard(n)
	if fast.Context() != ctx {
		t.Fatalf("the request's context is %v, want %v", fast.Context(), ctx)
	}
	brStd := bufio.NewReaderSize(bytes.NewReader(raw), 64<<10)
	std, err := http.ReadRequest(brStd)
	if err != nil {
		t.Fatalf("took a request that http.ReadRequest refuses (%v):\n%q", err, raw)
	}
	std = std.WithContext(ctx)
	// The proxy's loop skips CheckRequest's field checks for what the fast
	// path took: they must find nothing.
	if status, msg := CheckRequest(fast, true); status != 0 {
		if s2, _ := CheckRequest(fast, false); s2 != status {
			t.Fatalf("took a request that CheckRequest refuses (%d %s) only for its fields:\n%q", status, msg, raw)
		}
	}
	got, want := *fast, *std
	got.Body, want.Body = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read\n%+v\nhttp.ReadRequest read\n%+v\nfrom %q", got, want, raw)
	}
	if (fast.Body == http.NoBody) != (std.Body == http.NoBody) {
		t.Fatalf("NoBody %v, http.ReadRequest's %v, from %q", fast.Body == http.NoBody, std.Body == http.NoBody, raw)
	}
	compareTail(t, "http.ReadRequest", fast.Body, std.Body, brFast, brStd, raw)
	return true
}

// TestReadRequest: the requests the fast path takes read exactly as
// http.ReadRequest reads them, and the others, request smuggling's among
// them, are left to it.
func TestReadRequest(t *testing.T) {
	const get = "GET /v1/models HTTP/1.1\r\nHost: api.example.test\r\n"
	tests := []struct {
		name, raw string
		fast      bool
	}{
		{"plain", get + "User-Agent: curl/8.5\r\nAccept: */*\r\n\r\n", true},
		{"post with a body", "POST /v1/chat HTTP/1.1\r\nHost: a.test\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", true},
		{"zero length", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\n\r\n", true},
		{"leading zeros", "PUT / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 002\r\n\r\nhi", true},
		{"no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", true},
		{"no fields", "GET / HTTP/1.1\r\n\r\n", true},
		{"absolute form", "GET http://b.test:8080/x?y=1 HTTP/1.1\r\nHost: other.test\r\n\r\n", true},
		{"query and escapes", "GET /a%20b/c%2Fd?q=%41&r HTTP/1.1\r\nHost: a.test\r\n\r\n", true},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n", true},
		{"lower-case method", "get / HTTP/1.1\r\nHost: a.test\r\n\r\n", true},
		{"extension method", "PROPFIND /dav HTTP/1.1\r\nHost: a.test\r\n\r\n", true},
		{"repeated fields", get + "Cookie: a=1\r\ncookie: b=2\r\nX-A: 1\r\nx-a: 2\r\n\r\n", true},
		{"non-canonical names", "GET / HTTP/1.1\r\nhost: a.test\r\ncontent-LENGTH: 1\r\nX_Under_score: 2\r\n\r\nx", true},
		{"white space around values", get + "X-A:  \t v \t \r\nX-B:\r\nX-C: \r\n\r\n", true},
		{"obs-text", get + "X-A: caf\xc3\xa9 \xff\r\n\r\n", true},
		{"connection close", get + "Connection: close\r\n\r\n", true},
		{"connection close among tokens", get + "Connection: keep-alive, Close\r\n\r\n", true},
		{"expect continue", "POST / HTTP/1.1\r\nHost: a.test\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc", true},
		{"body cut short", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 10\r\n\r\nhello", true},
		{"pipelined", get + "\r\nGET /2 HTTP/1.1\r\nHost: a.test\r\n\r\n", true},
		{"body then next request", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\nhiGET / HTTP/1.1\r\n\r\n", true},
		{"fragment", "GET /a#b HTTP/1.1\r\nHost: a.test\r\n\r\n", true},

		// Framing a client could play on: net/http's alone.
		{"chunked", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", false},
		{"length and chunked", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n", false},
		{"chunked and length", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", false},
		{"two equal lengths", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", false},
		{"two lengths", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 5\r\n\r\nxGET /", false},
		{"length list", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1, 5\r\n\r\nx", false},
		{"signed length", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: +1\r\n\r\nx", false},
		{"hex length", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0x1\r\n\r\nx", false},
		{"empty length", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: \r\n\r\n", false},
		{"huge length", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 99999999999999999999\r\n\r\n", false},
		{"space before colon", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length : 1\r\n\r\nx", false},
		{"space before colon of chunked", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding : chunked\r\nContent-Length: 1\r\n\r\nx", false},
		{"folded length", "POST / HTTP/1.1\r\nHost: a.test\r\nX: a\r\n Content-Length: 1\r\n\r\nx", false},
		{"bare LF", "GET / HTTP/1.1\nHost: a.test\r\nX: y\r\n\r\n", false},
		{"bare LF in fields", get + "X: y\nContent-Length: 1\r\n\r\nx", false},
		{"CR in value", get + "X: a\rb\r\n\r\n", false},
		{"NUL in value", get + "X: a\x00b\r\n\r\n", false},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", false},
		{"trailer", "POST / HTTP/1.1\r\nHost: a.test\r\nTrailer: X\r\nContent-Length: 1\r\n\r\nx", false},
		{"pragma", get + "Pragma: no-cache\r\n\r\n", false},
		{"leading space field", "GET / HTTP/1.1\r\n Host: a.test\r\n\r\n", false},
		{"no colon", get + "Nonsense\r\n\r\n", false},

		// Request lines net/http must judge.
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: a.test\r\n\r\n", false},
		{"HTTP/2.0", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false},
		{"lower-case version", "GET / http/1.1\r\nHost: a.test\r\n\r\n", false},
		{"CONNECT", "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n", false},
		{"bad method", "GE(T / HTTP/1.1\r\nHost: a.test\r\n\r\n", false},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n", false},
		{"trailing space", "GET / HTTP/1.1 \r\nHost: a.test\r\n\r\n", false},
		{"no version", "GET /\r\nHost: a.test\r\n\r\n", false},
		{"relative URI", "GET a/b HTTP/1.1\r\nHost: a.test\r\n\r\n", false},
		{"control byte in URI", "GET /a\x7fb HTTP/1.1\r\nHost: a.test\r\n\r\n", false},
		{"blank line first", "\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n", false},
		{"header not all here", get + "Accept: */*\r\n", false},
		{"TLS", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compareRequest(t, []byte(tt.raw)); got != tt.fast {
				t.Errorf("fast path took it: %v, want %v", got, tt.fast)
			}
			// Either way, readRequest reads what http.ReadRequest reads.
			ctx := context.WithValue(context.Background(), testKey{}, "t")
			req, plain, err := ReadRequest(bufio.NewReader(strings.NewReader(tt.raw)), ctx)
			if plain != tt.fast || err == nil && req.Context() != ctx {
				t.Errorf("readRequest: plain %v, want %v; context %v, want %v", plain, tt.fast, req.Context(), ctx)
			}
			std, stdErr := http.ReadRequest(bufio.NewReader(strings.NewReader(tt.raw)))
			if (err != nil) != (stdErr != nil) || err == nil && (req.Method != std.Method || req.Host != std.Host ||
				req.ContentLength != std.ContentLength || !reflect.DeepEqual(req.Header, std.Header) ||
				!reflect.DeepEqual(req.TransferEncoding, std.TransferEncoding)) {
				t.Errorf("readRequest: %v, %v; http.ReadRequest: %v, %v", req, err, std, stdErr)
			}
		})
	}
}

// TestReadRequestNothingBuffered: a reader that fails before its first
// byte fails readRequest with its error, as it fails http.ReadRequest.
func TestReadRequestNothingBuffered(t *testing.T) {
	for _, src := range []io.Reader{strings.NewReader(""), io.MultiReader(), errReader{io.ErrClosedPipe}} {
		_, _, err := ReadRequest(bufio.NewReader(src), context.Background())
		_, stdErr := http.ReadRequest(bufio.NewReader(src))
		if err == nil || err.Error() != stdErr.Error() {
			t.Errorf("readRequest: %v; http.ReadRequest: %v", err, stdErr)
		}
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestReadRequestAllocs: a plain request, with its context, costs at
// most half of what http.ReadRequest allocates.
func TestReadRequestAllocs(t *testing.T) {
	fast, std := readAllocs(t, chaperoneRead), readAllocs(t, stdRead)
	if fast > std/2 {
		t.Errorf("%v allocations per request, http.ReadRequest %v: want at most half", fast, std)
	}
}

// chaperoneRead and stdRead read a request and give it a context, as the
// proxy's loop and net/http's server do.
func chaperoneRead(br *bufio.Reader) (*http.Request, error) {
	req, _, err := ReadRequest(br, context.Background())
	return req, err
}

func stdRead(br *bufio.Reader) (*http.Request, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	return req.WithContext(context.Background()), nil
}

// benchRequest is a request of the kind an SDK sends: eight fields and a
// small JSON body.
var benchRequest = []byte("POST /v1/messages HTTP/1.1\r\nHost: api.example.test\r\nUser-Agent: Anthropic/Go 1.2.0\r\n" +
	"Accept: application/json\r\nContent-Type: application/json\r\nAnthropic-Version: 2023-06-01\r\n" +
	"X-Stainless-Retry-Count: 0\r\nAccept-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}")

func readAllocs(t *testing.T, read func(*bufio.Reader) (*http.Request, error)) float64 {
	r := bytes.NewReader(benchRequest)
	br := bufio.NewReader(r)
	return testing.AllocsPerRun(100, func() {
		r.Reset(benchRequest)
		br.Reset(r)
		req, err := read(br)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, req.Body)
	})
}

func BenchmarkReadRequest(b *testing.B) {
	for _, c := range []struct {
		name string
		f    func(*bufio.Reader) (*http.Request, error)
	}{{"net/http", stdRead}, {"chaperone", chaperoneRead}} {
		b.Run(c.name, func(b *testing.B) {
			r := bytes.NewReader(benchRequest)
			br := bufio.NewReader(r)
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(benchRequest)
				br.Reset(r)
				req, _ := c.f(br)
				io.Copy(io.Discard, req.Body)
			}
		})
	}
}

// FuzzReadRequest: whatever the fast path takes, http.ReadRequest reads
// the same way.
func FuzzReadRequest(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte("POST /x?y HTTP/1.1\r\nhost: a.test\r\nContent-Length: 9\r\nConnection: close\r\n\r\nshort"))
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\nCookie: a\r\ncookie: b\r\n\r\nGET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n"))
	f.Add(benchRequest)
	f.Fuzz(func(t *testing.T, raw []byte) {
		compareRequest(t, raw)
	})
}

// FuzzReadRequestFields builds requests from a request line and header
// fields, so that most inputs reach the fast path's field parsing.
func FuzzReadRequestFields(f *testing.F) {
	f.Add("GET", "/", "Host: a.test\nAccept: */*", []byte(nil))
	f.Add("POST", "/v1/chat?x=%20", "Host: a.test\ncontent-length: 7\nConnection: keep-alive, close", []byte("short"))
	f.Add("OPTIONS", "*", "Host: a.test\nHost: b.test", []byte(nil))
	f.Add("PUT", "http://a.test:1/p", "X:  a b \t\nContent-Length: 0", []byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, method, uri, fields string, body []byte) {
		raw := method + " " + uri + " HTTP/1.1\r\n" + strings.ReplaceAll(fields, "\n", "\r\n") + "\r\n\r\n" + string(body)
		compareRequest(t, []byte(raw))
	})
}

// testKey keys a value of the requests' context.
type testKey struct{}
