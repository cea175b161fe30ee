package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// compareRead parses raw with parsePlainResponse and, when it takes the
// response, checks that http.ReadResponse reads the same from it: every
// field, the body, its error and what follows it. It reports whether the
// fast path took the response.
func compareRead(t testing.TB, raw []byte, method string) bool {
	t.Helper()
	req := &http.Request{Method: method}
	brFast := bufio.NewReaderSize(bytes.NewReader(raw), 64<<10)
	fast, n := ParsePlainResponse(brFast, req)
	if fast == nil {
		return false
	}
	brFast.Discard(n)
	brStd := bufio.NewReaderSize(bytes.NewReader(raw), 64<<10)
	std, err := http.ReadResponse(brStd, req)
	if err != nil {
		t.Fatalf("took a response that http.ReadResponse refuses (%v):\n%q", err, raw)
	}
	type view struct {
		Status                 string
		StatusCode             int
		Proto                  string
		ProtoMajor, ProtoMinor int
		Header                 http.Header
		ContentLength          int64
		TransferEncoding       []string
		Close, Uncompressed    bool
		Trailer                http.Header
		NoBody                 bool
	}
	see := func(r *http.Response) view {
		return view{r.Status, r.StatusCode, r.Proto, r.ProtoMajor, r.ProtoMinor, r.Header, r.ContentLength,
			r.TransferEncoding, r.Close, r.Uncompressed, r.Trailer, r.Body == http.NoBody}
	}
	if got, want := see(fast), see(std); !reflect.DeepEqual(got, want) {
		t.Fatalf("read\n%+v\nhttp.ReadResponse read\n%+v\nfrom %q", got, want, raw)
	}
	if fast.Request != req {
		t.Fatal("Request not set")
	}
	if lb, ok := fast.Body.(*lengthBody); ok && lb.head.Fields != "" {
		compareVerbatim(t, lb.head, std.Header, raw)
	}
	compareTail(t, "http.ReadResponse", fast.Body, std.Body, brFast, brStd, raw)
	return true
}

// compareVerbatim checks that a head taken to be sent as received is what
// h1Writer would write of the header http.ReadResponse read (field by
// field, in any order), with no hop-by-hop field, and that it has a Date
// field when that header does.
func compareVerbatim(t testing.TB, vh VerbatimHead, h http.Header, raw []byte) {
	t.Helper()
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	for k, vv := range h {
		if IsHopHeader(k) {
			t.Fatalf("head with hop-by-hop field %s taken as it is, from %q", k, raw)
		}
		WriteField(bw, k, vv)
	}
	bw.Flush()
	lines := func(s string) []string { return slices.Sorted(strings.SplitSeq(s, "\r\n")) }
	if diff := cmp.Diff(lines(b.String()), lines(vh.Fields)); diff != "" {
		t.Fatalf("head taken as it is differs from the header written out (-want +got):\n%s\nfrom %q", diff, raw)
	}
	if _, date := h["Date"]; date != vh.Date {
		t.Fatalf("Date noted %v, the header has one: %v, from %q", vh.Date, date, raw)
	}
	if cl := h["Content-Length"]; len(cl) != 1 || func() bool { n, err := strconv.ParseInt(cl[0], 10, 64); return err != nil || n != vh.Length }() {
		t.Fatalf("Content-Length noted %d, the header's %q, from %q", vh.Length, cl, raw)
	}
}

// compareTail checks that a message's body read by the fast path (fast,
// then what is left in brFast) reads as the one std read: the same bytes,
// the same error, and the same bytes after it.
func compareTail(t testing.TB, std string, fastBody, stdBody, brFast, brStd io.Reader, raw []byte) {
	t.Helper()
	gotBody, gotErr := io.ReadAll(fastBody)
	wantBody, wantErr := io.ReadAll(stdBody)
	if !bytes.Equal(gotBody, wantBody) || !errors.Is(gotErr, wantErr) && !errors.Is(wantErr, gotErr) {
		t.Fatalf("body %q, %v; %s's %q, %v; from %q", gotBody, gotErr, std, wantBody, wantErr, raw)
	}
	gotRest, _ := io.ReadAll(brFast)
	wantRest, _ := io.ReadAll(brStd)
	if !bytes.Equal(gotRest, wantRest) {
		t.Fatalf("left %q after the message, %s %q", gotRest, std, wantRest)
	}
}

// TestReadResponse: the responses the fast path takes read exactly as
// http.ReadResponse reads them, and the others are left to it.
func TestReadResponse(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\n"
	tests := []struct {
		name, raw string
		method    string
		fast      bool
	}{
		{"plain", ok + "Content-Length: 5\r\nContent-Type: text/plain\r\nDate: Mon, 30 Nov 2026 05:00:00 GMT\r\n\r\nhello", "GET", true},
		{"no reason", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nhi", "GET", true},
		{"long reason", "HTTP/1.1 404 Not Found Here\r\nContent-Length: 0\r\n\r\n", "GET", true},
		{"empty body", ok + "Content-Length: 0\r\n\r\n", "POST", true},
		{"leading zeros", ok + "Content-Length: 005\r\n\r\nhello", "GET", true},
		{"repeated fields", ok + "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nVary: Accept\r\nvary: Origin\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"non-canonical names", ok + "content-type: text/html\r\nx-FOO-bar: 1\r\nX_Under_score: 2\r\nCONTENT-LENGTH: 1\r\n\r\nx", "GET", true},
		{"white space around values", ok + "X-A:  \t v \t \r\nX-B:\r\nX-C: \r\nContent-Length:\t1 \r\n\r\nx", "GET", true},
		{"obs-text", ok + "X-A: caf\xc3\xa9 \xff\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"connection close", ok + "Connection: close\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"connection keep-alive", ok + "Connection: keep-alive\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"connection close among tokens", ok + "Connection: Keep-Alive, CLOSE\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"body cut short", ok + "Content-Length: 10\r\n\r\nhello", "GET", true},
		{"next response follows", ok + "Content-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\n", "GET", true},
		{"no fields", "HTTP/1.1 200 OK\r\n\r\n", "GET", false},
		{"status 500", "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nerr", "GET", true},

		{"chunked", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "GET", false},
		{"until close", ok + "Content-Type: text/plain\r\n\r\nhello", "GET", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"204", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "GET", false},
		{"1xx", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", "GET", false},
		{"HEAD", ok + "Content-Length: 5\r\n\r\n", "HEAD", false},
		{"two lengths", ok + "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"length with sign", ok + "Content-Length: +1\r\n\r\nx", "GET", false},
		{"empty length", ok + "Content-Length: \r\n\r\n", "GET", false},
		{"Pragma", ok + "Pragma: no-cache\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"Trailer", ok + "Trailer: X\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"bare LF", ok + "Content-Length: 1\nX: y\r\n\r\nx", "GET", false},
		{"folded line", ok + "X: a\r\n b\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"space in name", ok + "Bad Name: x\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"space before colon", ok + "X : x\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"no colon", ok + "Nonsense\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"control byte in value", ok + "X: a\x01b\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"header not all here", ok + "Content-Length: 1\r\n", "GET", false},
		{"bad status", "HTTP/1.1 2x0 OK\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"status without space", "HTTP/1.1 2000\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"two spaces", "HTTP/1.1  200 OK\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", "GET", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compareRead(t, []byte(tt.raw), tt.method); got != tt.fast {
				t.Errorf("fast path took it: %v, want %v", got, tt.fast)
			}
			// Either way, readResponse reads what http.ReadResponse reads.
			req := &http.Request{Method: tt.method}
			res, err := ReadResponse(bufio.NewReader(strings.NewReader(tt.raw)), req)
			std, stdErr := http.ReadResponse(bufio.NewReader(strings.NewReader(tt.raw)), req)
			if (err != nil) != (stdErr != nil) || err == nil && (res.StatusCode != std.StatusCode || !reflect.DeepEqual(res.Header, std.Header)) {
				t.Errorf("readResponse: %v, %v; http.ReadResponse: %v, %v", res, err, std, stdErr)
			}
		})
	}
}

// TestReadResponseAllocs: a plain response costs at most half of what
// http.ReadResponse allocates.
func TestReadResponseAllocs(t *testing.T) {
	raw := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nDate: Mon, 30 Nov 2026 05:00:00 GMT\r\n" +
		"Server: origin\r\nCache-Control: no-store\r\nX-Request-Id: 42\r\n\r\n{}")
	r := bytes.NewReader(raw)
	br := bufio.NewReader(r)
	req := &http.Request{Method: "GET"}
	read := func(f func(*bufio.Reader, *http.Request) (*http.Response, error)) float64 {
		return testing.AllocsPerRun(100, func() {
			r.Reset(raw)
			br.Reset(r)
			res, err := f(br, req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
		})
	}
	fast, std := read(ReadResponse), read(http.ReadResponse)
	if fast > std/2 {
		t.Errorf("%v allocations per response, http.ReadResponse %v: want at most half", fast, std)
	}
}

func BenchmarkReadResponse(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nDate: Mon, 30 Nov 2026 05:00:00 GMT\r\n" +
		"Server: origin\r\nCache-Control: no-store\r\nX-Request-Id: 42\r\n\r\n{}")
	for _, c := range []struct {
		name string
		f    func(*bufio.Reader, *http.Request) (*http.Response, error)
	}{{"net/http", http.ReadResponse}, {"chaperone", ReadResponse}} {
		b.Run(c.name, func(b *testing.B) {
			r := bytes.NewReader(raw)
			br := bufio.NewReader(r)
			req := &http.Request{Method: "GET"}
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(raw)
				br.Reset(r)
				res, _ := c.f(br, req)
				io.Copy(io.Discard, res.Body)
			}
		})
	}
}

// FuzzReadResponse: whatever the fast path takes, http.ReadResponse reads
// the same way.
func FuzzReadResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"), false)
	f.Add([]byte("HTTP/1.1 404\r\nconnection: Close\r\nX: \t a \r\nContent-Length: 9\r\n\r\nshort"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nSet-Cookie: a\r\nset-cookie: b\r\nContent-Length: 0\r\n\r\n"), true)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), false)
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		compareRead(t, raw, method)
	})
}

// FuzzReadResponseFields builds responses from a status and header fields,
// so that most inputs reach the fast path's field parsing.
func FuzzReadResponseFields(f *testing.F) {
	f.Add("200 OK", "Content-Length: 5\nContent-Type: text/plain", []byte("hello"))
	f.Add("404", "connection: keep-alive, close\nX:  a b \t\nContent-Length: 7", []byte("short"))
	f.Add("500 Oops", "Set-Cookie: a\nset-cookie: b\nCONTENT-LENGTH: 0", []byte(nil))
	f.Add("200 OK", "Keep-Alive: timeout=5\nX-A: a\nDate: Mon, 01 Jan 2024 00:00:00 GMT\nContent-Length: 2", []byte("ok"))
	f.Fuzz(func(t *testing.T, status, fields string, body []byte) {
		raw := "HTTP/1.1 " + status + "\r\n" + strings.ReplaceAll(fields, "\n", "\r\n") + "\r\n\r\n" + string(body)
		compareRead(t, []byte(raw), "GET")
	})
}
