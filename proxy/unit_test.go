package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

func TestParseProxyAuthorization(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		in         string
		user, pass string
		ok         bool
	}{
		{"Basic " + b64("chaperone:tok"), "chaperone", "tok", true},
		{"basic " + b64("chaperone:tok"), "chaperone", "tok", true},
		{"BASIC   " + b64("chaperone:tok") + " ", "chaperone", "tok", true},
		{"Basic " + b64("chaperone:to:k"), "chaperone", "to:k", true},
		{"Basic " + b64("chaperone:"), "chaperone", "", true},
		{"Basic " + b64("chaperone"), "", "", false},
		{"Basic", "", "", false},
		{"Basic ", "", "", false},
		{"Basicx " + b64("a:b"), "", "", false},
		{"Bearer " + b64("a:b"), "", "", false},
		{"Basic " + b64("a:b")[:3], "", "", false},
		{"Basic " + strings.TrimRight(b64("chaperone:tok1"), "="), "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			user, pass, ok := parseProxyAuthorization(tt.in)
			if diff := cmp.Diff([]any{tt.user, tt.pass, tt.ok}, []any{user, pass, ok}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSessionTable(t *testing.T) {
	st := (&sessionTable{}).with("a", "token-a").with("b", "token-b").with("a", "token-a2")
	tests := []struct {
		token, want string
		ok          bool
	}{
		{"token-a2", "a", true},
		{"token-b", "b", true},
		{"token-a", "", false}, // replaced
		{"", "", false},
		{"token-b ", "", false},
	}
	for _, tt := range tests {
		if id, ok := st.lookup(tt.token); id != tt.want || ok != tt.ok {
			t.Errorf("lookup(%q) = %q, %v; want %q, %v", tt.token, id, ok, tt.want, tt.ok)
		}
	}
	st = st.without("b")
	if _, ok := st.lookup("token-b"); ok || st.has("b") || !st.has("a") {
		t.Error("without did not remove only b")
	}
}

func FuzzProxyAuthorization(f *testing.F) {
	for _, s := range []string{
		"Basic " + base64.StdEncoding.EncodeToString([]byte("chaperone:tok")),
		"basic Y2hhcGVyb25lOg==", "Basic", "Basic  ===", "Bearer x", "Basic\tYTpi", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		user, pass, ok := parseProxyAuthorization(in)
		if !ok {
			if user != "" || pass != "" {
				t.Fatalf("not ok but returned %q %q", user, pass)
			}
			return
		}
		if strings.Contains(user, ":") {
			t.Fatalf("user %q contains ':'", user)
		}
		again := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		u2, p2, ok2 := parseProxyAuthorization(again)
		if !ok2 || u2 != user || p2 != pass {
			t.Fatalf("round trip of %q:%q gave %q:%q %v", user, pass, u2, p2, ok2)
		}
	})
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://api.example.test/v1/chat", "https://api.example.test/v1/chat"},
		{"https://user:pw@api.example.test/x?a=1", "https://api.example.test/x?a=1"},
		{"https://h/x?sig=abc&x=1", "https://h/x?sig=[REDACTED]&x=1"},
		{"https://h/?token=t&access_token=u&refresh_token=v&key=k&api_key=a&apiKey=b", "https://h/?token=[REDACTED]&access_token=[REDACTED]&refresh_token=[REDACTED]&key=[REDACTED]&api_key=[REDACTED]&apiKey=[REDACTED]"},
		{"https://s3.example.test/o?X-Amz-Signature=abc&X-Amz-Credential=AK%2F1&X-Amz-Date=20260101", "https://s3.example.test/o?X-Amz-Signature=[REDACTED]&X-Amz-Credential=[REDACTED]&X-Amz-Date=20260101"},
		{"https://h/?client_secret=s&password=p&Signature=x", "https://h/?client_secret=[REDACTED]&password=[REDACTED]&Signature=[REDACTED]"},
		{"https://h/?%74oken=t", "https://h/?%74oken=[REDACTED]"},
		{"https://h/?a=1;token=t", "https://h/?a=1;token=[REDACTED]"},
		{"https://h/?token", "https://h/?token"},
		{"https://h/?q=token&monkey=1&my_key=2", "https://h/?q=token&monkey=1&my_key=[REDACTED]"},
		{"https://h/?keyword=go", "https://h/?keyword=go"},
		{"https://h/p#frag", "https://h/p"},
		{"https://h/a%2Fb?x=%20", "https://h/a%2Fb?x=%20"},
		{"/relative?token=1", "/relative?token=[REDACTED]"},
		{"https://h:8443", "https://h:8443"},
		{"https://h/?", "https://h/?"},
		{"mailto:a@b", "mailto:a@b"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			u, err := url.Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := RedactURL(u); got != tt.want {
				t.Errorf("RedactURL = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"https://user:pw@h/p?token=t&x=1", "http://h/?a=1;sig=2", "/p?%6Bey=v", "https://h/?X-Amz-Signature=s#f",
		"//u:p@h/x", "https:opaque?key=1", "http://[::1]:80/?access_token=a",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		u, err := url.Parse(in)
		if err != nil {
			return
		}
		out := RedactURL(u)
		if u.User != nil {
			if pw, ok := u.User.Password(); ok && len(pw) >= 3 && !strings.Contains(u.Host+u.EscapedPath()+u.RawQuery+u.Opaque, pw) && strings.Contains(out, pw) {
				t.Fatalf("password %q survives in %q", pw, out)
			}
		}
		_, q, _ := strings.Cut(out, "?")
		for seg := range strings.FieldsFuncSeq(q, func(r rune) bool { return r == '&' || r == ';' }) {
			k, v, ok := strings.Cut(seg, "=")
			if ok && isSecretParam(k) && v != Redacted {
				t.Fatalf("secret parameter %q kept value %q in %q", k, v, out)
			}
		}
	})
}

func TestPolicyHeader(t *testing.T) {
	in := http.Header{
		"Authorization":       {"Bearer sk-secret"},
		"Cookie":              {"a=1", "b=2"},
		"X-Api-Key":           {"k"},
		"Anthropic-Version":   {"2023-06-01"},
		"Accept":              {"a", "b"},
		"Proxy-Authorization": {"Basic x"},
		"X-Goog-Api-Key":      {"g"},
		"Empty":               {},
	}
	want := map[string][]string{
		"Authorization":       {Redacted},
		"Cookie":              {Redacted},
		"X-Api-Key":           {Redacted},
		"Anthropic-Version":   {"2023-06-01"},
		"Accept":              {"a", "b"},
		"Proxy-Authorization": {Redacted},
		"X-Goog-Api-Key":      {Redacted},
	}
	got, shared := policyHeader(in)
	if diff := cmp.Diff(want, got); diff != "" || shared {
		t.Errorf("shared %v; (-want +got):\n%s", shared, diff)
	}
	got["Accept"] = append(got["Accept"], "c") // full slices: no aliasing between keys
	if got["Anthropic-Version"][0] != "2023-06-01" || len(in["Accept"]) != 2 {
		t.Error("policyHeader's slices alias each other or the request")
	}
	// Nothing to redact or leave out: the request's map itself.
	clean := map[string][]string{"Accept": {"*/*"}, "User-Agent": {"curl/8.5"}}
	got, shared = policyHeader(clean)
	if got["Shared"] = []string{"x"}; !shared || len(clean) != 3 {
		t.Errorf("a clean header is not shared (shared %v)", shared)
	}
}

func TestTargetOf(t *testing.T) {
	tests := []struct {
		method, target string
		host           string
		port           uint16
		ok             bool
	}{
		{"CONNECT", "api.example.test:443", "api.example.test", 443, true},
		{"CONNECT", "API.example.test.:8443", "api.example.test", 8443, true},
		{"CONNECT", "[::1]:22", "::1", 22, true},
		{"CONNECT", "api.example.test", "api.example.test", 0, false},
		{"CONNECT", "api.example.test:0", "api.example.test", 0, false},
		{"CONNECT", "api.example.test:70000", "api.example.test", 0, false},
		{"GET", "http://plain.example.test/x", "plain.example.test", 80, true},
		{"GET", "http://plain.example.test:8080/x", "plain.example.test", 8080, true},
		{"GET", "https://plain.example.test/x", "", 0, false},
		{"GET", "/x", "", 0, false},
	}
	for _, tt := range tests {
		r, err := http.NewRequest(tt.method, "http://placeholder/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tt.method == "CONNECT" {
			r.Host = tt.target
		} else {
			r.URL, _ = url.Parse(tt.target)
		}
		host, port, ok := targetOf(r)
		if ok != tt.ok || (ok && (host != tt.host || port != tt.port)) {
			t.Errorf("targetOf(%s %s) = %q %d %v, want %q %d %v", tt.method, tt.target, host, port, ok, tt.host, tt.port, tt.ok)
		}
	}
}

func TestDenyMessage(t *testing.T) {
	tests := []struct {
		v    event.Verdict
		want string
	}{
		{event.Verdict{Rule: "deny_hosts", Reason: "evil.test is listed in deny_hosts"}, "chaperone: denied by rule deny_hosts: evil.test is listed in deny_hosts\n"},
		{event.Verdict{Reason: "default deny"}, "chaperone: denied by default: default deny\n"},
		{event.Verdict{DecidedBy: event.DecidedByJudge}, "chaperone: denied by judge: no reason given\n"},
	}
	for _, tt := range tests {
		if got := denyMessage(tt.v); got != tt.want {
			t.Errorf("denyMessage(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

// FuzzCredentialHeader checks the fast credential-header test against its
// definition: one of the words, anywhere in the name, in any ASCII case.
func FuzzCredentialHeader(f *testing.F) {
	for _, s := range []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Cookie", "Set-Cookie",
		"Accept", "User-Agent", "X-Session-Id", "PASSWORD", "x-sIgNaTuRe", "X-Amz-Credential", "Ke", "",
		"\xffkey", "ToKeN", "sessio", "A\x00uth"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		want := false
		for _, w := range []string{"auth", "cookie", "token", "secret", "key", "passw", "signature", "credential", "session"} {
			want = want || containsFold(name, w)
		}
		if got := isCredentialHeader(name); got != want {
			t.Errorf("isCredentialHeader(%q) = %v, want %v", name, got, want)
		}
	})
}

func TestHeaderSize(t *testing.T) {
	tests := []struct {
		name string
		wire string // a request as a client sends it: its header is what headerSize measures
	}{
		{"origin form", "GET /a?b=c HTTP/1.1\r\nHost: example.test\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n"},
		{"absolute form", "GET http://example.test:8080/p HTTP/1.1\r\nHost: example.test:8080\r\nProxy-Authorization: Basic abc\r\n\r\n"},
		{"repeated fields", "POST / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-A: 2\r\nContent-Length: 0\r\n\r\n"},
		{"no host", "GET / HTTP/1.0\r\nX: y\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tt.wire)))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := headerSize(r), len(tt.wire); got != want {
				t.Errorf("headerSize = %d, want %d, the bytes on the wire", got, want)
			}
		})
	}
}

func TestBodyError(t *testing.T) {
	h1, _ := http.NewRequest("GET", "https://example.test/", nil)
	h2 := h1.Clone(context.Background())
	h2.ProtoMajor = 2
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := h1.WithContext(ctx)
	tests := []struct {
		name string
		r    *http.Request
		err  error
		want string
	}{
		{"client write failed", h1, nil, "client closed the connection after 7 bytes of the body"},
		{"client write failed, h2", h2, nil, "client closed the stream after 7 bytes of the body"},
		{"request cancelled by the client", gone, context.Canceled, "client closed the connection after 7 bytes of the body"},
		{"reset", h1, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, "upstream reset the connection after 7 bytes of the body"},
		{"cut short", h1, io.ErrUnexpectedEOF, "upstream closed the connection after 7 bytes of the body"},
		{"timeout", h1, os.ErrDeadlineExceeded, "upstream timed out after 7 bytes of the body"},
		{"other", h1, errors.New("stream error: stream ID 1; INTERNAL_ERROR"), "upstream failed after 7 bytes of the body: stream error: stream ID 1; INTERNAL_ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bodyError(tt.r, tt.err, 7); got != tt.want {
				t.Errorf("bodyError = %q, want %q", got, tt.want)
			}
		})
	}
}
