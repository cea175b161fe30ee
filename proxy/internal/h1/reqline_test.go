package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRequestStart(t *testing.T) {
	tests := []struct {
		in   string
		want Tristate
	}{
		{"GET / HTTP/1.1", Yes},
		{"POST /x", Yes},
		{"OPTIONS * HTTP/1.1", Yes},
		{"GET http://h/", Yes},
		{"PRI * HTTP/2.0", Yes},
		{"get / HTTP/1.1", Yes},
		{"CONNECT 127.0.0.9:8080 HTTP/1.1", Yes},
		{"connect h:1", Yes},
		{"CoNnEcT [::1]:1", Yes},
		{"GET  http://h/", Yes},
		{"GET\thttp://h/", Yes},
		{"GET \t\v\f\r http://h/", Yes},
		{"\r\nGET http://h/", Yes},
		{"\n\n\r\n  GET /", Yes},
		{"HEAD HTTPS://h", Yes},
		{"X-ANY-METHOD~1 svn+ssh://h", Yes},
		{strings.Repeat("A", 100) + " http://h/", Yes},
		{"G", Maybe},
		{"GET", Maybe},
		{"GET ", Maybe},
		{"GET\t", Maybe},
		{"\r\n", Maybe},
		{"GET http", Maybe},
		{"GET http:/", Maybe},
		{"CONNECT", Maybe},
		{"CONNECT ", Maybe},
		{"PING\r\n", No},
		{"SSH-2.0-x", Maybe},
		{"SSH-2.0-OpenSSH_9.6\r\n", No},
		{"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n", No},
		{"\x00\x01", No},
		{"GET x", Maybe},
		{"GET x y", No},
		{"GET http:x", No},
		{"GET http:/x", No},
		{"get key:1\r\n", No},
		{"MAIL FROM:<a@b>", No},
		{"GET 1http://h", No},
		{"GET " + strings.Repeat("a", maxSchemeLen+1) + "://h", No},
		{"CONNECT \x00", No},
		{"GET\n/", No},
		{"(GET) /", No},
	}
	for _, tt := range tests {
		if got := RequestStart([]byte(tt.in)); got != tt.want {
			t.Errorf("requestStart(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParseRequestLine(t *testing.T) {
	tests := []struct {
		in        string
		want      RequestLine
		canonical string // what net/http is given for a line it reads otherwise
		bad       bool
	}{
		{in: "GET / HTTP/1.1\r\n", want: RequestLine{"GET", "/", "HTTP/1.1", true}},
		{in: "GET / HTTP/1.1\n", want: RequestLine{"GET", "/", "HTTP/1.1", true}},
		{in: "get http://h/ HTTP/1.0\r\n", want: RequestLine{"get", "http://h/", "HTTP/1.0", true}},
		{in: "PRI * HTTP/2.0\r\n", want: RequestLine{"PRI", "*", "HTTP/2.0", true}},
		{in: "CONNECT h:1 HTTP/1.1\r\n", want: RequestLine{"CONNECT", "h:1", "HTTP/1.1", false}, canonical: "CONNECT h:1 HTTP/1.1\r\n"},
		{in: "GET  http://h/ HTTP/1.1\r\n", want: RequestLine{"GET", "http://h/", "HTTP/1.1", false}, canonical: "GET http://h/ HTTP/1.1\r\n"},
		{in: "GET\thttp://h/\tHTTP/1.1\r\n", want: RequestLine{"GET", "http://h/", "HTTP/1.1", false}, canonical: "GET http://h/ HTTP/1.1\r\n"},
		{in: "\r\n\r\nGET /x HTTP/1.1\r\n", want: RequestLine{"GET", "/x", "HTTP/1.1", false}, canonical: "GET /x HTTP/1.1\r\n"},
		{in: "GET /x http/1.1\r\n", want: RequestLine{"GET", "/x", "http/1.1", false}, canonical: "GET /x HTTP/1.1\r\n"},
		{in: "GET /x HTTP/1.1 \r\n", want: RequestLine{"GET", "/x", "HTTP/1.1", false}, canonical: "GET /x HTTP/1.1\r\n"},
		{in: "GET /x HTTP/1.1\r\r\n", want: RequestLine{"GET", "/x", "HTTP/1.1", false}, canonical: "GET /x HTTP/1.1\r\n"},
		{in: "GET http://h/\r\n", want: RequestLine{"GET", "http://h/", "", false}, canonical: "GET http://h/ HTTP/1.0\r\n\r\n"}, // HTTP/0.9
		{in: "GET\n", bad: true},
		{in: "GET /x HTTP/1.1 extra\r\n", bad: true},
		{in: "GET /x HTTPS/1.1\r\n", bad: true},
		{in: "GET /x HTTP/11\r\n", bad: true},
		{in: "GET /\x00 HTTP/1.1\r\n", bad: true},
		{in: "G(T / HTTP/1.1\r\n", bad: true},
		{in: "GET / HTTP/1.1", bad: true}, // no LF
		{in: "\r\n", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseRequestLine([]byte(tt.in))
		if tt.bad {
			if err == nil {
				t.Errorf("parseRequestLine(%q) = %+v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseRequestLine(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(RequestLine{})); diff != "" {
			t.Errorf("parseRequestLine(%q) (-want +got):\n%s", tt.in, diff)
		}
		if tt.canonical != "" {
			if c := string(got.CanonicalLine()); c != tt.canonical {
				t.Errorf("canonicalLine of %q = %q, want %q", tt.in, c, tt.canonical)
			}
		}
	}
}

// FuzzRequestStart checks the tunnel's sniffing of request lines on
// arbitrary first bytes: a decided answer (yes or no) never changes as more
// bytes arrive, which is what lets classify stop reading at the first
// decided answer; and whatever net/http reads as a request that a proxy
// could act on (CONNECT, absolute form, origin form, asterisk) is
// recognised, at every length, never passed through.
func FuzzRequestStart(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: h\r\n\r\n", "PRI * HTTP/2.0", "CONNECT h:1 HTTP/1.1\r\n\r\n",
		"SSH-2.0-OpenSSH", "\x16\x03\x01", "GE", "POST http://x/ HTTP/1.1\r\nHost: x\r\n\r\n", "\r\nget  http://x/\tHTTP/1.1\r\n\r\n",
		"M mailto:x HTTP/1.1\r\nHost: x\r\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		prev := Maybe
		for i := 1; i <= len(b); i++ { // classify asks only once a byte has arrived
			got := RequestStart(b[:i])
			if prev != Maybe && got != prev {
				t.Fatalf("requestStart(%q) = %v after %q gave %v", b[:i], got, b[:i-1], prev)
			}
			prev = got
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		actionable := req.Method == http.MethodConnect || req.URL.Host != "" ||
			strings.HasPrefix(req.RequestURI, "/") || req.RequestURI == "*"
		if actionable && prev != Yes {
			t.Fatalf("net/http reads %q as %s %q, requestStart says %v", b, req.Method, req.RequestURI, prev)
		}
	})
}

// FuzzRequestLine checks parseRequestLine against net/http: a line it
// calls canonical is read by http.ReadRequest as the same method, target
// and version, and the line it makes of any other (canonicalLine) is too,
// unless net/http refuses the target itself.
func FuzzRequestLine(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\n", "\r\nCONNECT  h:1\tHTTP/1.1\r\n", "get http://x/\n",
		"GET /x HTTP/1.1 \r\n", "OPTIONS * http/1.0\r\n", "GET /\x7f HTTP/1.1\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i+1]
		}
		rl, err := ParseRequestLine(line)
		if err != nil || RequestStart(line) != Yes { // it is asked only about what requestStart recognised
			return
		}
		check := func(what string, b []byte) {
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(append(b, "Host: h\r\n\r\n"...))))
			if err != nil {
				if rl.Method != http.MethodConnect {
					if _, uerr := url.ParseRequestURI(rl.Target); uerr == nil {
						t.Fatalf("%s %q of %q: net/http refuses it: %v", what, b, line, err)
					}
				}
				return
			}
			if req.Method != rl.Method || req.RequestURI != rl.Target {
				t.Fatalf("%s %q of %q: net/http reads %s %q", what, b, line, req.Method, req.RequestURI)
			}
		}
		if rl.Canonical {
			check("canonical line", line)
		}
		c := rl.CanonicalLine()
		check("rewritten line", c)
		again, err := ParseRequestLine(c[:bytes.IndexByte(c, '\n')+1])
		if err != nil || again.Method != rl.Method || again.Target != rl.Target ||
			!again.Canonical && !IsConnectMethod([]byte(rl.Method)) {
			t.Fatalf("rewritten line %q of %q parses as %+v, %v", c, line, again, err)
		}
	})
}
