package inject

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// FuzzApply feeds random hosts, headers and URLs (with {PH:name} markers
// expanded to real placeholders, so that mutations keep hitting them) and
// checks that Apply never panics and never puts a value into a request to a
// host its credential is not bound to.
func FuzzApply(f *testing.F) {
	f.Add("api.github.com", "Authorization", "Bearer {PH:github}", "https://api.github.com/user?x={PH:github}")
	f.Add("evil.example.net:443", "Authorization", "Basic b64(x-access-token:{PH:github})", "https://u:{PH:openai}@evil.example.net/{PH:gitea}")
	f.Add("[::1]:8443", "X-Api-Key", "{PH:local}{PH:a}", "https://[::1]:8443/?k={PH:local}&j={PH:gitlab}")
	f.Add("gitlab.example.com:8443", "Private-Token", "basic b64raw({PH:gitlab}:{PH:github})", "https://x:{PH:gitlab}@gitlab.example.com:8443/")
	f.Add("code.gitea.example.com", "authorization", "token {PH:gitea}", "//{PH:gitea}@host/p%2F?q=pct({PH:gitea})#f")
	f.Add("API.OPENAI.COM.", "x", "{PH:openai", "https://api.openai.com/{PH:openai}")
	creds := testCreds()
	b := newTestBroker(f, creds)
	f.Fuzz(func(t *testing.T, host, name, value, rawURL string) {
		h := http.Header{}
		h.Add(name, expand(b, creds, value))
		h["lower-"+name] = []string{expand(b, creds, value)}
		u, err := url.Parse(expand(b, creds, rawURL))
		if err != nil {
			u = &url.URL{}
		}
		before := requestText(h, u)
		injected, leaked := b.Apply(host, h, u)
		after := requestText(h, u)
		for _, c := range creds {
			bound := b.Matches(c.Name, host)
			if bound {
				if contains(leaked, c.Name) {
					t.Errorf("%s leaked to %q, which it is bound to", c.Name, host)
				}
				continue
			}
			if contains(injected, c.Name) {
				t.Errorf("%s injected into a request to %q", c.Name, host)
			}
			if strings.Contains(after, c.Value) && !strings.Contains(before, c.Value) {
				t.Fatalf("value of %s in a request to %q: %s", c.Name, host, strings.ReplaceAll(after, c.Value, "<VALUE>"))
			}
		}
	})
}

// requestText is everything a request carries that Apply touches, Basic
// credentials decoded.
func requestText(h http.Header, u *url.URL) string {
	var sb strings.Builder
	for k, vs := range h {
		for _, v := range vs {
			sb.WriteString(k + ": " + v + "\n")
			if _, tok, ok := cutBasic(v); ok {
				if d, ok := decodeBase64(tok); ok {
					sb.WriteString(d + "\n")
				}
			}
		}
	}
	sb.WriteString(u.String() + "\n")
	if q, err := url.QueryUnescape(u.RawQuery); err == nil {
		sb.WriteString(q + "\n")
	}
	if u.User != nil {
		p, _ := u.User.Password()
		sb.WriteString(u.User.Username() + ":" + p + "\n")
	}
	return sb.String()
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)

// FuzzIdentity checks that whatever the names, every identity header value is
// printable ASCII of bounded length, JSON values parse, and ApplyIdentity
// leaves no agent-set copy of a header it owns.
func FuzzIdentity(f *testing.F) {
	f.Add("ses_1", "claude", "bash\x00claude\x00node", byte(1))
	f.Add("s\r\nX-Evil: 1", "a\"b\\c,d;e%f", "\xff\xfe\x00\r\n", byte(0))
	f.Add("", "", "", byte(7))
	f.Add(strings.Repeat("é", 200), strings.Repeat("x", 1000), strings.Repeat("p\x00", 100), byte(3))
	presets := []string{"chaperone", "litellm", "portkey", "helicone", "cloudflare", "w3c"}
	f.Fuzz(func(t *testing.T, session, agent, lineage string, seed byte) {
		id := Identity{Session: session, Agent: agent, Lineage: strings.Split(lineage, "\x00")}
		id.TraceID[0], id.SpanID[7] = seed|1, seed|2
		h := http.Header{}
		for _, p := range presets {
			// The agent tries every owned name in a non-canonical case.
			for _, n := range mustPreset(t, p).names {
				h[strings.ToLower(n)] = []string{"forged\r\n"}
			}
		}
		h["X-Chaperone-Other"] = []string{"forged"}
		names, err := ApplyIdentity(h, presets, id)
		if err != nil {
			t.Fatalf("ApplyIdentity: %v", err)
		}
		if len(names) != len(h) {
			t.Errorf("set %d names, header has %d keys: %v", len(names), len(h), h)
		}
		for k, vs := range h {
			if k != http.CanonicalHeaderKey(k) {
				t.Errorf("agent's %q survived", k)
			}
			if len(vs) != 1 {
				t.Errorf("%s has %d values", k, len(vs))
			}
			v := vs[0]
			if len(v) == 0 || len(v) > 1024 || v != strings.TrimSpace(v) {
				t.Errorf("%s: bad length or padding: %q", k, v)
			}
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] > 0x7e {
					t.Fatalf("%s: byte %#x in %q", k, v[i], v)
				}
			}
			if strings.HasSuffix(k, "-Metadata") && !json.Valid([]byte(v)) {
				t.Errorf("%s: not JSON: %q", k, v)
			}
		}
		if tp := h.Get("Traceparent"); !traceparentRE.MatchString(tp) {
			t.Errorf("traceparent %q", tp)
		}
		for _, m := range strings.Split(h.Get("Baggage"), ",") {
			k, v, ok := strings.Cut(m, "=")
			if !ok || k == "" || strings.ContainsAny(v, " \",;\\") {
				t.Errorf("baggage member %q", m)
			}
			if _, err := url.PathUnescape(v); err != nil {
				t.Errorf("baggage member %q: %v", m, err)
			}
		}
		if strings.Contains(h.Get("X-Litellm-Tags"), ",") && strings.Count(h.Get("X-Litellm-Tags"), ",") != 1 {
			t.Errorf("litellm tags split: %q", h.Get("X-Litellm-Tags"))
		}
	})
}

func mustPreset(t *testing.T, name string) preset {
	p, ok := lookupPreset(name)
	if !ok {
		t.Fatalf("no preset %q", name)
	}
	return p
}

func BenchmarkApply(b *testing.B) {
	creds := testCreds()
	br := newTestBroker(b, creds)
	typical := func(auth string) (http.Header, *url.URL) {
		h := http.Header{
			"Accept":          {"application/json"},
			"Accept-Encoding": {"gzip, deflate, br"},
			"Content-Type":    {"application/json"},
			"User-Agent":      {"claude-cli/1.0.0 (external, cli)"},
			"X-Stainless-Os":  {"Linux"},
			"Anthropic-Beta":  {"prompt-caching-2024-07-31"},
			"Authorization":   {auth},
		}
		u, _ := url.Parse("https://api.openai.com/v1/chat/completions?api-version=2024-10-21")
		return h, u
	}
	b.Run("no-placeholder", func(b *testing.B) {
		h, u := typical("Bearer sk-agent-own-key-0123456789")
		b.ReportAllocs()
		for b.Loop() {
			br.Apply("api.openai.com:443", h, u)
		}
	})
	b.Run("basic-no-placeholder", func(b *testing.B) {
		h, u := typical("Basic " + base64.StdEncoding.EncodeToString([]byte("user:password")))
		b.ReportAllocs()
		for b.Loop() {
			br.Apply("api.openai.com:443", h, u)
		}
	})
	// Apply rewrites in place, so each run works on a copy; copy-only is the
	// cost of that copy, to subtract.
	h1, u1 := typical("Bearer " + br.Placeholder("openai"))
	b.Run("copy-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h, u := h1.Clone(), *u1
			_, _ = h, u
		}
	})
	b.Run("one-placeholder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h, u := h1.Clone(), *u1
			br.Apply("api.openai.com:443", h, &u)
		}
	})
}

func BenchmarkFindPlaceholders(b *testing.B) {
	br := newTestBroker(b, testCreds())
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor sit amet ", 1000) + `"}]}`)
	b.Run("none-27KiB", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			br.FindPlaceholders(body)
		}
	})
	withOne := append([]byte(br.Placeholder("github")+" "), body...)
	b.Run("one-27KiB", func(b *testing.B) {
		b.SetBytes(int64(len(withOne)))
		for b.Loop() {
			br.FindPlaceholders(withOne)
		}
	})
}

func BenchmarkIdentityHeaders(b *testing.B) {
	id := testIdentity()
	b.Run("chaperone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			IdentityHeaders([]string{"chaperone"}, id)
		}
	})
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		presets := []string{"chaperone", "litellm", "portkey", "helicone", "cloudflare", "w3c"}
		for b.Loop() {
			IdentityHeaders(presets, id)
		}
	})
	b.Run("apply-all", func(b *testing.B) {
		b.ReportAllocs()
		presets := []string{"chaperone", "litellm", "portkey", "helicone", "cloudflare", "w3c"}
		h0 := http.Header{"Accept": {"*/*"}, "X-Chaperone-Agent": {"forged"}}
		for b.Loop() {
			ApplyIdentity(h0.Clone(), presets, id)
		}
	})
}
