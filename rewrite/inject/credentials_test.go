package inject

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// countingReader yields 0, 1, 2, … so that placeholders are reproducible.
type countingReader struct{ n byte }

func (r *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.n
		r.n++
	}
	return len(p), nil
}

func testCreds() []Credential {
	return []Credential{
		{Name: "github", Value: "ghp_REALgithub0123456789abcdefABCDEF01", Hosts: []string{"api.github.com", "github.com"}},
		{Name: "openai", Value: "sk-REALopenai-9f8e7d6c5b4a39281706", Hosts: []string{"api.openai.com"},
			Header: "authorization", Format: "Bearer {value}"},
		{Name: "gitea", Value: "REALgitea5566778899", Hosts: []string{"*.gitea.example.com"},
			Header: "Authorization", Format: "token {value}"},
		{Name: "gitlab", Value: "glpat-REALgitlab-aabbccdd", Hosts: []string{"gitlab.example.com:8443"},
			Header: "Authorization", Format: "basic {user}:{value}", User: "oauth2"},
		{Name: "local", Value: "REALlocal-1234", Hosts: []string{"[::1]:8443", "127.0.0.1"}, Header: "X-Api-Key"},
		// "a" and "a-<32 hex>" make one placeholder a prefix of another.
		{Name: "a", Value: "REALshortA", Hosts: []string{"a.example.com"}},
	}
}

func newTestBroker(t testing.TB, creds []Credential) *Broker {
	t.Helper()
	b, err := NewBroker(creds, &countingReader{})
	if err != nil {
		t.Fatalf("NewBroker: %v", err)
	}
	return b
}

var call = regexp.MustCompile(`(b64|b64raw|pct)\(([^()]*)\)`)

// expand replaces {PH:name} with the placeholder and {VAL:name} with the real
// value, then b64(text), b64raw(text) and pct(text) with text in padded
// base64, unpadded base64, and with every '-' percent-encoded.
func expand(b *Broker, creds []Credential, s string) string {
	for _, c := range creds {
		s = strings.ReplaceAll(s, "{PH:"+c.Name+"}", b.Placeholder(c.Name))
		s = strings.ReplaceAll(s, "{VAL:"+c.Name+"}", c.Value)
	}
	return call.ReplaceAllStringFunc(s, func(m string) string {
		sm := call.FindStringSubmatch(m)
		switch sm[1] {
		case "b64":
			return base64.StdEncoding.EncodeToString([]byte(sm[2]))
		case "b64raw":
			return base64.RawStdEncoding.EncodeToString([]byte(sm[2]))
		default:
			return strings.ReplaceAll(sm[2], "-", "%2D")
		}
	})
}

func TestPlaceholder(t *testing.T) {
	b := newTestBroker(t, testCreds())
	tests := []struct {
		name, want string
	}{
		// countingReader gives github bytes 0..15, openai 16..31: input order.
		{"github", "chaperone-cred-github-000102030405060708090a0b0c0d0e0f"},
		{"openai", "chaperone-cred-openai-101112131415161718191a1b1c1d1e1f"},
		{"nope", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := b.Placeholder(tt.name); got != tt.want {
				t.Errorf("Placeholder(%q) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
	if diff := cmp.Diff([]string{"a", "gitea", "github", "gitlab", "local", "openai"}, b.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	re := regexp.MustCompile(`^chaperone-cred-[a-z0-9_-]+-[0-9a-f]{32}$`)
	for _, n := range b.Names() {
		if !re.MatchString(b.Placeholder(n)) {
			t.Errorf("Placeholder(%q) = %q: not chaperone-cred-<name>-<32 hex>", n, b.Placeholder(n))
		}
	}
}

func TestMatches(t *testing.T) {
	b := newTestBroker(t, testCreds())
	tests := []struct {
		cred, host string
		want       bool
	}{
		{"github", "api.github.com", true},
		{"github", "api.github.com:443", true},
		{"github", "API.GitHub.COM:8080", true},
		{"github", "api.github.com.", true},
		{"github", "api.github.com.:443", true},
		{"github", "github.com", true},
		{"github", "gist.github.com", false},
		{"github", "api.github.com.evil.com", false},
		{"github", "evilapi.github.com", false},
		{"github", "", false},
		{"github", "api.github.com:0", false},
		{"github", "api.github.com:99999", false},
		{"github", "api.github.com:", false},
		{"github", "api.github.com:x", false},
		{"github", "api github.com", false},
		{"gitea", "code.gitea.example.com", true},
		{"gitea", "a.b.gitea.example.com:3000", true},
		{"gitea", "gitea.example.com", false}, // apex
		{"gitea", ".gitea.example.com", false},
		{"gitea", "x..gitea.example.com", false},
		{"gitea", "evilgitea.example.com", false},
		{"gitea", "x.gitea.example.com.evil", false},
		{"gitea", "x/y.gitea.example.com", false},
		{"gitlab", "gitlab.example.com:8443", true},
		{"gitlab", "gitlab.example.com:08443", true},
		{"gitlab", "gitlab.example.com:443", false},
		{"gitlab", "gitlab.example.com", false}, // port unknown: fail closed
		{"local", "[::1]:8443", true},
		{"local", "[0:0::1]:8443", true},
		{"local", "[::1]:443", false},
		{"local", "[::1]", false},
		{"local", "::1", false},
		{"local", "127.0.0.1", true},
		{"local", "127.0.0.1:9999", true},
		{"local", "127.0.0.2", false},
		{"local", "[::1", false},
		{"local", "[127.0.0.1]:8443", false},
		{"nope", "api.github.com", false},
	}
	for _, tt := range tests {
		t.Run(tt.cred+"@"+tt.host, func(t *testing.T) {
			if got := b.Matches(tt.cred, tt.host); got != tt.want {
				t.Errorf("Matches(%q, %q) = %v, want %v", tt.cred, tt.host, got, tt.want)
			}
		})
	}
}

func TestHostPatterns(t *testing.T) {
	tests := []struct {
		pattern string
		want    string // String() of the parsed pattern; "" = error
	}{
		{"api.github.com", "api.github.com"},
		{"API.GitHub.com:443", "api.github.com:443"},
		{"*.example.com", "*.example.com"},
		{"*.example.com:8443", "*.example.com:8443"},
		{"10.0.0.1", "10.0.0.1"},
		{"[::1]", "[::1]"},
		{"[0::1]:8443", "[::1]:8443"},
		{"::1", "[::1]"},
		{"*.com", ""},
		{"*", ""},
		{"*.", ""},
		{"a.*.example.com", ""},
		{"*.*.example.com", ""},
		{"", ""},
		{"host:0", ""},
		{"host:65536", ""},
		{"[::1]:", ""},
		{"[fe80::1%eth0]", ""},
		{"exa mple.com", ""},
		{"example..com", ""},
		{"https://example.com", ""},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			p, err := parseHostPattern(tt.pattern)
			got := ""
			if err == nil {
				got = p.String()
			}
			if got != tt.want {
				t.Errorf("parseHostPattern(%q) = %q (err %v), want %q", tt.pattern, got, err, tt.want)
			}
		})
	}
}

func TestNewBrokerErrors(t *testing.T) {
	const secret = "SUPERSECRET-value-0042"
	ok := Credential{Name: "ok", Value: secret, Hosts: []string{"example.com"}}
	with := func(f func(c *Credential)) []Credential {
		c := ok
		f(&c)
		return []Credential{c}
	}
	tests := []struct {
		name   string
		creds  []Credential
		random io.Reader
		want   string // substring of the error
	}{
		{"bad name", with(func(c *Credential) { c.Name = "Bad Name" }), nil, "inject: credential 0: name must match"},
		{"empty name", with(func(c *Credential) { c.Name = "" }), nil, "credential 0: name"},
		{"long name", with(func(c *Credential) { c.Name = strings.Repeat("a", 65) }), nil, "credential 0: name"},
		{"empty value", with(func(c *Credential) { c.Value = "" }), nil, `credential "ok": empty value`},
		{"newline in value", with(func(c *Credential) { c.Value = secret + "\r\nX-Evil: 1" }), nil, "control character"},
		{"no hosts", with(func(c *Credential) { c.Hosts = nil }), nil, "no hosts"},
		{"bad host", with(func(c *Credential) { c.Hosts = []string{"*.com"} }), nil, `host "*.com"`},
		{"bad header", with(func(c *Credential) { c.Header = "X Api" }), nil, "not a valid header name"},
		{"reserved header", with(func(c *Credential) { c.Header = "host" }), nil, "reserved"},
		{"format without header", with(func(c *Credential) { c.Format = "Bearer {value}" }), nil, "format needs a header"},
		{"format without value", with(func(c *Credential) { c.Header = "Authorization"; c.Format = "Bearer" }), nil, "lacks {value}"},
		{"unknown placeholder", with(func(c *Credential) { c.Header = "Authorization"; c.Format = "{token}" }), nil, "only {value} and {user}"},
		{"user missing", with(func(c *Credential) { c.Header = "Authorization"; c.Format = "basic {user}:{value}" }), nil, "user is empty"},
		{"user unused", with(func(c *Credential) { c.Header = "Authorization"; c.User = "u" }), nil, "lacks {user}"},
		{"user with colon", with(func(c *Credential) {
			c.Header, c.Format, c.User = "Authorization", "basic {user}:{value}", "a:b"
		}), nil, "contains ':'"},
		{"user without header", with(func(c *Credential) { c.User = "u" }), nil, "user needs a header"},
		{"duplicate", []Credential{ok, ok}, nil, "duplicate name"},
		{"random fails", []Credential{ok}, iotestErrReader{}, "inject: read random: boom"},
		{"random repeats", []Credential{ok, {Name: "ok2", Value: secret, Hosts: []string{"example.com"}}},
			bytes.NewReader(make([]byte, 64)), "repeated"},
		{"nil random", []Credential{ok}, nil, "nil random reader"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			random := tt.random
			if random == nil && tt.name != "nil random" {
				random = &countingReader{}
			}
			b, err := NewBroker(tt.creds, random)
			if err == nil {
				t.Fatalf("NewBroker = %v, nil; want error containing %q", b, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error contains the credential's value")
			}
		})
	}
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func TestApply(t *testing.T) {
	creds := testCreds()
	b := newTestBroker(t, creds)
	tests := []struct {
		name         string
		host         string
		header       map[string][]string
		url          string
		wantHeader   map[string][]string
		wantURL      string
		wantInjected []string
		wantLeaked   []string
	}{
		{
			name:       "no placeholder",
			host:       "api.github.com",
			header:     map[string][]string{"Accept": {"*/*"}, "Authorization": {"Bearer abc"}},
			url:        "https://api.github.com/user?x=1",
			wantHeader: map[string][]string{"Accept": {"*/*"}, "Authorization": {"Bearer abc"}},
			wantURL:    "https://api.github.com/user?x=1",
		},
		{
			name:         "bearer swapped in place",
			host:         "api.github.com:443",
			header:       map[string][]string{"Authorization": {"Bearer {PH:github}"}},
			url:          "https://api.github.com/user",
			wantHeader:   map[string][]string{"Authorization": {"Bearer {VAL:github}"}},
			wantURL:      "https://api.github.com/user",
			wantInjected: []string{"github"},
		},
		{
			name:         "token scheme and other headers",
			host:         "github.com",
			header:       map[string][]string{"Authorization": {"token {PH:github}"}, "X-Extra": {"a {PH:github} b {PH:github}"}},
			url:          "https://github.com/",
			wantHeader:   map[string][]string{"Authorization": {"token {VAL:github}"}, "X-Extra": {"a {VAL:github} b {VAL:github}"}},
			wantURL:      "https://github.com/",
			wantInjected: []string{"github"},
		},
		{
			name:         "basic header from git",
			host:         "github.com:443",
			header:       map[string][]string{"Authorization": {"Basic b64(x-access-token:{PH:github})"}},
			url:          "https://github.com/o/r.git/info/refs?service=git-upload-pack",
			wantHeader:   map[string][]string{"Authorization": {"Basic b64(x-access-token:{VAL:github})"}},
			wantURL:      "https://github.com/o/r.git/info/refs?service=git-upload-pack",
			wantInjected: []string{"github"},
		},
		{
			name:         "basic header, lowercase scheme and unpadded base64",
			host:         "github.com",
			header:       map[string][]string{"Authorization": {"basic  b64raw({PH:github}:x) "}},
			url:          "https://github.com/",
			wantHeader:   map[string][]string{"Authorization": {"basic b64({VAL:github}:x)"}},
			wantURL:      "https://github.com/",
			wantInjected: []string{"github"},
		},
		{
			name:         "userinfo becomes a basic header",
			host:         "github.com",
			header:       map[string][]string{},
			url:          "https://x-access-token:{PH:github}@github.com/o/r.git",
			wantHeader:   map[string][]string{"Authorization": {"Basic b64(x-access-token:{VAL:github})"}},
			wantURL:      "https://github.com/o/r.git",
			wantInjected: []string{"github"},
		},
		{
			name:         "userinfo with an authorization header already there",
			host:         "github.com",
			header:       map[string][]string{"authorization": {"Bearer other"}},
			url:          "https://{PH:github}@github.com/o/r.git",
			wantHeader:   map[string][]string{"authorization": {"Bearer other"}},
			wantURL:      "https://github.com/o/r.git",
			wantInjected: []string{"github"},
		},
		{
			name:         "userinfo without a placeholder is left alone",
			host:         "github.com",
			header:       map[string][]string{"X-A": {"{PH:github}"}},
			url:          "https://me:pw@github.com/",
			wantHeader:   map[string][]string{"X-A": {"{VAL:github}"}},
			wantURL:      "https://me:pw@github.com/",
			wantInjected: []string{"github"},
		},
		{
			name:         "query value, order and encoding of the rest kept",
			host:         "api.github.com",
			header:       map[string][]string{},
			url:          "https://api.github.com/x?z=1&access_token={PH:github}&a=%2F&flag",
			wantHeader:   map[string][]string{},
			wantURL:      "https://api.github.com/x?z=1&access_token={VAL:github}&a=%2F&flag",
			wantInjected: []string{"github"},
		},
		{
			name:         "percent-encoded placeholder in a query value",
			host:         "api.github.com",
			header:       map[string][]string{},
			url:          "https://api.github.com/x?t=pct({PH:github})",
			wantHeader:   map[string][]string{},
			wantURL:      "https://api.github.com/x?t={VAL:github}",
			wantInjected: []string{"github"},
		},
		{
			name:         "header set from format when placeholder is present",
			host:         "api.openai.com",
			header:       map[string][]string{"Authorization": {"Bearer {PH:openai}"}, "authorization": {"junk"}},
			url:          "https://api.openai.com/v1/chat/completions",
			wantHeader:   map[string][]string{"Authorization": {"Bearer {VAL:openai}"}},
			wantURL:      "https://api.openai.com/v1/chat/completions",
			wantInjected: []string{"openai"},
		},
		{
			name:         "header replaces another scheme",
			host:         "code.gitea.example.com",
			header:       map[string][]string{"Authorization": {"Bearer {PH:gitea}", "second"}},
			url:          "https://code.gitea.example.com/api/v1/user",
			wantHeader:   map[string][]string{"Authorization": {"token {VAL:gitea}"}},
			wantURL:      "https://code.gitea.example.com/api/v1/user",
			wantInjected: []string{"gitea"},
		},
		{
			name:         "header triggered from the path",
			host:         "api.openai.com",
			header:       map[string][]string{},
			url:          "https://api.openai.com/v1/{PH:openai}/x",
			wantHeader:   map[string][]string{"Authorization": {"Bearer {VAL:openai}"}},
			wantURL:      "https://api.openai.com/v1/{PH:openai}/x",
			wantInjected: []string{"openai"},
		},
		{
			name:       "header not set when placeholder absent",
			host:       "api.openai.com",
			header:     map[string][]string{"Authorization": {"Bearer sk-agent-own"}},
			url:        "https://api.openai.com/v1/models",
			wantHeader: map[string][]string{"Authorization": {"Bearer sk-agent-own"}},
			wantURL:    "https://api.openai.com/v1/models",
		},
		{
			name:         "basic format; with a header the value goes nowhere else",
			host:         "gitlab.example.com:8443",
			header:       map[string][]string{"Private-Token": {"{PH:gitlab}"}},
			url:          "https://gitlab.example.com:8443/api/v4/user",
			wantHeader:   map[string][]string{"Private-Token": {"{PH:gitlab}"}, "Authorization": {"Basic b64(oauth2:{VAL:gitlab})"}},
			wantURL:      "https://gitlab.example.com:8443/api/v4/user",
			wantInjected: []string{"gitlab"},
		},
		{
			name:         "header credential in query and userinfo: header only",
			host:         "api.openai.com",
			header:       map[string][]string{"X-Echo": {"{PH:openai}"}},
			url:          "https://u:{PH:openai}@api.openai.com/v1/search?q={PH:openai}",
			wantHeader:   map[string][]string{"X-Echo": {"{PH:openai}"}, "Authorization": {"Bearer {VAL:openai}"}},
			wantURL:      "https://u:{PH:openai}@api.openai.com/v1/search?q={PH:openai}",
			wantInjected: []string{"openai"},
		},
		{
			name:         "ipv6 literal host with header",
			host:         "[::1]:8443",
			header:       map[string][]string{"X-Api-Key": {"{PH:local}"}},
			url:          "https://[::1]:8443/",
			wantHeader:   map[string][]string{"X-Api-Key": {"{VAL:local}"}},
			wantURL:      "https://[::1]:8443/",
			wantInjected: []string{"local"},
		},
		{
			name:       "placeholder to a host it is not bound to",
			host:       "evil.example.net",
			header:     map[string][]string{"Authorization": {"Bearer {PH:github}"}, "X-B": {"Basic b64(u:{PH:openai})"}},
			url:        "https://evil.example.net/?q={PH:gitea}#{PH:local}",
			wantHeader: map[string][]string{"Authorization": {"Bearer {PH:github}"}, "X-B": {"Basic b64(u:{PH:openai})"}},
			wantURL:    "https://evil.example.net/?q={PH:gitea}#{PH:local}",
			wantLeaked: []string{"gitea", "github", "local", "openai"},
		},
		{
			name:       "leaked through userinfo and path",
			host:       "gist.github.com",
			header:     map[string][]string{},
			url:        "https://u:{PH:github}@gist.github.com/{PH:gitlab}",
			wantHeader: map[string][]string{},
			wantURL:    "https://u:{PH:github}@gist.github.com/{PH:gitlab}",
			wantLeaked: []string{"github", "gitlab"},
		},
		{
			name:         "bound injected, unbound leaked, in one request",
			host:         "api.github.com",
			header:       map[string][]string{"Authorization": {"Bearer {PH:github}"}, "X-Other": {"{PH:openai}"}},
			url:          "https://api.github.com/",
			wantHeader:   map[string][]string{"Authorization": {"Bearer {VAL:github}"}, "X-Other": {"{PH:openai}"}},
			wantURL:      "https://api.github.com/",
			wantInjected: []string{"github"},
			wantLeaked:   []string{"openai"},
		},
		{
			name:       "malformed host binds nothing",
			host:       "api.github.com:notaport",
			header:     map[string][]string{"Authorization": {"Bearer {PH:github}"}},
			url:        "https://api.github.com/",
			wantHeader: map[string][]string{"Authorization": {"Bearer {PH:github}"}},
			wantURL:    "https://api.github.com/",
			wantLeaked: []string{"github"},
		},
		{
			name:         "placeholder followed by name characters",
			host:         "a.example.com",
			header:       map[string][]string{"X-K": {"{PH:a}-more{PH:a}x"}},
			url:          "https://a.example.com/",
			wantHeader:   map[string][]string{"X-K": {"{VAL:a}-more{VAL:a}x"}},
			wantURL:      "https://a.example.com/",
			wantInjected: []string{"a"},
		},
		{
			name:       "guessed placeholder is not ours",
			host:       "api.github.com",
			header:     map[string][]string{"X-K": {"chaperone-cred-github-00000000000000000000000000000000"}},
			url:        "https://api.github.com/",
			wantHeader: map[string][]string{"X-K": {"chaperone-cred-github-00000000000000000000000000000000"}},
			wantURL:    "https://api.github.com/",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := expandHeader(b, creds, tt.header)
			u, err := url.Parse(expand(b, creds, tt.url))
			if err != nil {
				t.Fatal(err)
			}
			injected, leaked := b.Apply(tt.host, h, u)
			if diff := cmp.Diff(expandHeader(b, creds, tt.wantHeader), h); diff != "" {
				t.Errorf("header (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(expand(b, creds, tt.wantURL), u.String()); diff != "" {
				t.Errorf("url (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantInjected, injected); diff != "" {
				t.Errorf("injected (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLeaked, leaked); diff != "" {
				t.Errorf("leaked (-want +got):\n%s", diff)
			}
		})
	}
}

// TestApplyPrefixPlaceholder: credential "a" gets bytes 00..0f, so the
// placeholder of "a-000102…0f" starts with the placeholder of "a".
func TestApplyPrefixPlaceholder(t *testing.T) {
	long := "a-000102030405060708090a0b0c0d0e0f"
	b := newTestBroker(t, []Credential{
		{Name: "a", Value: "REAL-a", Hosts: []string{"a.example.com"}},
		{Name: long, Value: "REAL-long", Hosts: []string{"b.example.com"}},
	})
	if !strings.HasPrefix(b.Placeholder(long), b.Placeholder("a")) {
		t.Fatalf("placeholders %q and %q: the test's premise is wrong", b.Placeholder("a"), b.Placeholder(long))
	}
	tests := []struct {
		host                   string
		wantValue              string
		wantInjected, wantLeak []string
	}{
		{"a.example.com", b.Placeholder(long), nil, []string{long}},
		{"b.example.com", "REAL-long", []string{long}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			h := http.Header{"X-K": {b.Placeholder(long)}}
			injected, leaked := b.Apply(tt.host, h, nil)
			if got := h.Get("X-K"); got != tt.wantValue {
				t.Errorf("X-K = %q, want %q", got, tt.wantValue)
			}
			if diff := cmp.Diff(tt.wantInjected, injected); diff != "" {
				t.Errorf("injected (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLeak, leaked); diff != "" {
				t.Errorf("leaked (-want +got):\n%s", diff)
			}
			if got := b.FindPlaceholders([]byte(h.Get("X-K"))); tt.wantLeak != nil && !cmp.Equal(got, tt.wantLeak) {
				t.Errorf("FindPlaceholders = %v, want %v", got, tt.wantLeak)
			}
		})
	}
}

func expandHeader(b *Broker, creds []Credential, m map[string][]string) http.Header {
	h := http.Header{}
	for k, vs := range m {
		for _, v := range vs {
			h[k] = append(h[k], expand(b, creds, v))
		}
	}
	return h
}

func TestApplyNil(t *testing.T) {
	creds := testCreds()
	b := newTestBroker(t, creds)
	u, _ := url.Parse("https://x-access-token:" + b.Placeholder("github") + "@github.com/?t=" + b.Placeholder("github"))
	injected, leaked := b.Apply("github.com", nil, u)
	if diff := cmp.Diff([]string{"github"}, injected); diff != "" || leaked != nil {
		t.Errorf("injected (-want +got):\n%s, leaked %v", diff, leaked)
	}
	// Without a header map the userinfo can only be swapped in place.
	if p, _ := u.User.Password(); p != creds[0].Value || u.Query().Get("t") != creds[0].Value {
		t.Errorf("with a nil header, userinfo and query not swapped")
	}
	h := http.Header{"Authorization": {"Bearer " + b.Placeholder("openai")}}
	injected, _ = b.Apply("api.openai.com", h, nil)
	if diff := cmp.Diff([]string{"openai"}, injected); diff != "" {
		t.Errorf("nil url: injected (-want +got):\n%s", diff)
	}
	var nb *Broker
	if i, l := nb.Apply("github.com", h, u); i != nil || l != nil {
		t.Errorf("nil Broker Apply = %v, %v", i, l)
	}
	if nb.Placeholder("x") != "" || nb.Names() != nil || nb.Matches("x", "y") || nb.FindPlaceholders([]byte("x")) != nil {
		t.Errorf("nil Broker not empty")
	}
}

func TestFindPlaceholders(t *testing.T) {
	creds := testCreds()
	b := newTestBroker(t, creds)
	tests := []struct {
		name, body string
		want       []string
	}{
		{"none", `{"messages":[{"content":"hello"}]}`, nil},
		{"prefix only", `chaperone-cred-github-zz chaperone-cred-`, nil},
		{"one", `{"k":"{PH:github}"}`, []string{"github"}},
		{"several, repeated, sorted", `{PH:openai} {PH:github}{PH:openai}{PH:a}`, []string{"a", "github", "openai"}},
		{"at the very end", `x{PH:local}`, []string{"local"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := b.FindPlaceholders([]byte(expand(b, creds, tt.body)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FindPlaceholders (-want +got):\n%s", diff)
			}
		})
	}
	ph := b.Placeholder("local")
	if got := b.FindPlaceholders([]byte(ph[:len(ph)-1])); got != nil {
		t.Errorf("FindPlaceholders(truncated placeholder) = %v, want nil", got)
	}
}

func TestNoValueInOutput(t *testing.T) {
	creds := testCreds()
	b := newTestBroker(t, creds)
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		outs = append(outs, fmt.Sprintf(verb, b), fmt.Sprintf(verb, *b), fmt.Sprintf(verb, []*Broker{b}),
			fmt.Sprintf(verb, struct{ b Broker }{*b}), fmt.Sprintf(verb, struct{ b *Broker }{b}))
	}
	// Credential has a field named Format, so it cannot implement
	// fmt.Formatter; the string verbs go through String and GoString.
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		outs = append(outs, fmt.Sprintf(verb, creds[0]), fmt.Sprintf(verb, &creds[0]), fmt.Sprintf(verb, creds))
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("x", "broker", b, "cred", creds[1], "creds", creds)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "broker", b, "cred", creds[3])
	outs = append(outs, buf.String())
	for _, out := range outs {
		for _, c := range creds {
			if strings.Contains(out, c.Value) {
				t.Errorf("output contains the value of %q: %s", c.Name, out)
			}
		}
	}
	// The outputs must still say something useful.
	if s := fmt.Sprint(b); !strings.Contains(s, "github→api.github.com,github.com") {
		t.Errorf("Broker.String() = %q", s)
	}
	if s := fmt.Sprint(creds[0]); !strings.Contains(s, `Name:"github"`) || !strings.Contains(s, redacted) {
		t.Errorf("Credential.String() = %q", s)
	}
	if !strings.Contains(buf.String(), `"credentials":["a","gitea","github","gitlab","local","openai"]`) {
		t.Errorf("Broker.LogValue: %s", buf.String())
	}
}

func TestHostMatcher(t *testing.T) {
	m, err := NewHostMatcher([]string{"gw.example:8443", "*.litellm.test", "[::1]"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"gw.example:8443": true, "gw.example": false, "gw.example:443": false,
		"a.litellm.test": true, "A.LiteLLM.test:9": true, "litellm.test": false,
		"[::1]:4000": true, "::1": true, "evil.test": false, "gw.example:8443@evil": false,
	} {
		if got := m.Match(host); got != want {
			t.Errorf("Match(%q) = %v, want %v", host, got, want)
		}
	}
	if _, err := NewHostMatcher([]string{"*.com"}); err == nil {
		t.Error("*.com accepted")
	}
	var none *HostMatcher
	if none.Match("gw.example:8443") {
		t.Error("a nil matcher matched")
	}
}
