package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/rewrite/inject"
)

// Addresses of this file's upstreams.
const (
	canaryAddr = "127.0.0.80:0"
	geminiAddr = "127.0.0.81:0"
)

// canary is an upstream that records each request it gets: its header,
// every byte of its body, and whether the body came whole.
type canary struct {
	mu   sync.Mutex
	reqs []canaryReq
}

type canaryReq struct {
	proto    string
	header   http.Header
	query    string
	body     []byte
	complete bool   // the body ended as its framing said
	err      string // why not
}

func (c *canary) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	rec := canaryReq{proto: r.Proto, header: r.Header.Clone(), query: r.URL.RawQuery, body: b, complete: err == nil}
	if err != nil {
		rec.err = err.Error()
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, rec)
	c.mu.Unlock()
	if err == nil {
		io.WriteString(w, "canary got it\n")
	}
}

// waitGot waits (up to 10 s) until the canary has recorded n requests,
// and returns what it got: it records a request once its body has ended,
// which may be after the client has its answer.
func (c *canary) waitGot(t *testing.T, n int) []canaryReq {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := c.got()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *canary) got() []canaryReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reqs)
}

// holds reports whether what the canary got holds secret, in its body (as
// sent, or decoded as far as it goes), query or headers.
func (r canaryReq) holds(secret string) bool {
	if bytes.Contains(r.body, []byte(secret)) || strings.Contains(r.query, secret) {
		return true
	}
	for _, vs := range r.header {
		for _, v := range vs {
			if strings.Contains(v, secret) {
				return true
			}
		}
	}
	return bytes.Contains(decodeAsFarAsItGoes(r.header.Values("Content-Encoding"), r.body), []byte(secret))
}

// decodeAsFarAsItGoes undoes codings with the reference decoders, keeping
// what comes out of a cut or corrupt body.
func decodeAsFarAsItGoes(codings []string, b []byte) []byte {
	var names []string
	for _, c := range codings {
		for n := range strings.SplitSeq(c, ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	for i := len(names) - 1; i >= 0; i-- {
		var r io.Reader
		switch names[i] {
		case "gzip":
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return b
			}
			r = zr
		case "deflate":
			if zr, err := zlib.NewReader(bytes.NewReader(b)); err == nil {
				r = zr
			} else {
				r = flate.NewReader(bytes.NewReader(b))
			}
		case "br":
			r = brotli.NewReader(bytes.NewReader(b))
		case "zstd":
			zr, err := zstd.NewReader(bytes.NewReader(b))
			if err != nil {
				return b
			}
			defer zr.Close()
			r = zr
		default:
			return b
		}
		var out bytes.Buffer
		io.Copy(&out, r)
		b = out.Bytes()
	}
	return b
}

// secretsEnv is a rewriteEnv with a canary at canary.test and a Gemini
// API at generativelanguage.googleapis.com.
type secretsEnv struct {
	*rewriteEnv
	canary    *canary
	canarySrv *upstream.Server
	gemini    *upstream.Server
}

func newSecretsEnv(t *testing.T, configure func(*Rewrites)) *secretsEnv {
	t.Helper()
	re := newRewriteEnv(t, configure)
	se := &secretsEnv{rewriteEnv: re, canary: &canary{}}
	se.canarySrv = re.upstream(upstream.Options{Name: "canary.test", Addr: canaryAddr, CA: re.upCA, Handler: se.canary})
	se.gemini = re.upstream(upstream.Options{Name: "generativelanguage.googleapis.com", Addr: geminiAddr, CA: re.upCA})
	return se
}

// do sends a request through the proxy and returns the status and body.
func (se *secretsEnv) do(t *testing.T, h2 bool, method, url string, header http.Header, body io.Reader) (int, string) {
	t.Helper()
	c, _ := se.client(h2)
	c.Timeout = 5 * time.Minute // bodies of 20 MiB, scanned under the race detector on a busy machine
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// httpEvent waits for the http event of the one request made to host.
func (se *secretsEnv) httpEvent(t *testing.T, host string) *event.Event {
	t.Helper()
	return se.rec.wait(t, "http event for "+host, func(e *event.Event) bool {
		return e.Kind == event.KindHTTP && strings.HasPrefix(e.HTTP.Host, host)
	})
}

// fakeGoogleKey is shaped like a Google API key.
func fakeGoogleKey() string { return "AIza" + upstream.FakeGitHubToken()[4:39] }

// Secrets in headers (names and values), the path and the query are found,
// decoded; the default policy refuses them, saying where, naming no value;
// the event shows them redacted; credential headers, a signed URL's key id
// and a Gemini call's key keep their own handling.
func TestSecretsInHeadersAndURL(t *testing.T) {
	tok := fakeToken(t)
	gkey := fakeGoogleKey()
	tests := []struct {
		name   string
		host   string // "canary", "gemini", "llm"
		path   string
		header http.Header
		status int
		where  string // in the reason
		rule   string
		// upgrade: a GET asking to switch protocols, else a POST
		upgrade bool
	}{
		{name: "custom header", host: "canary", path: "/x", header: http.Header{"X-Custom": {"v=" + tok}},
			status: 403, where: "github-pat in request header X-Custom", rule: "no-secrets-to-other-hosts"},
		{name: "query key=", host: "canary", path: "/x?key=" + tok, status: 403,
			where: "github-pat in query parameter key", rule: "no-secrets-to-other-hosts"},
		{name: "query percent-encoded", host: "canary", path: "/x?q=" + percentEncodeAll(tok), status: 403,
			where: "github-pat in query parameter q", rule: "no-secrets-to-other-hosts"},
		{name: "query name", host: "canary", path: "/x?" + tok + "=1", status: 403,
			where: "github-pat in the name of a query parameter", rule: "no-secrets-to-other-hosts"},
		{name: "path", host: "canary", path: "/paste/" + tok + "/raw?page=2", status: 403,
			where: "github-pat in the URL path", rule: "no-secrets-to-other-hosts"},
		{name: "path percent-encoded", host: "canary", path: "/paste/" + percentEncodeAll(tok), status: 403,
			where: "github-pat in the URL path", rule: "no-secrets-to-other-hosts"},
		{name: "path and query", host: "canary", path: "/paste/" + tok + "?key=" + tok, status: 403,
			where: "github-pat in the URL path, github-pat in query parameter key", rule: "no-secrets-to-other-hosts"},
		{name: "google key in query to another host", host: "canary", path: "/x?key=" + gkey, status: 403,
			where: "gcp-api-key in query parameter key", rule: "no-secrets-to-other-hosts"},
		{name: "LLM API, custom header", host: "llm", path: "/v1/messages", header: http.Header{"X-Custom": {tok}},
			status: 403, where: "github-pat in request header X-Custom", rule: "no-secrets-to-other-hosts"},
		{name: "LLM API, query", host: "llm", path: "/v1/messages?trace=" + tok,
			status: 403, where: "github-pat in query parameter trace", rule: "no-secrets-to-other-hosts"},
		{name: "websocket upgrade", host: "canary", path: "/ws?token=" + tok, upgrade: true,
			header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}},
			status: 403, where: "github-pat in query parameter token", rule: "no-secrets-to-other-hosts"},
		{name: "Authorization", host: "canary", path: "/x", header: http.Header{"Authorization": {"Bearer " + tok}}, status: 200},
		{name: "X-Api-Key", host: "canary", path: "/x", header: http.Header{"X-Api-Key": {tok}}, status: 200},
		{name: "Cookie", host: "canary", path: "/x", header: http.Header{"Cookie": {"s=" + tok}}, status: 200},
		{name: "signed URL", host: "canary", path: "/asset?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAVCODYLSA53PQK4ZA%2F20240101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=4d8f7b5a0f0e",
			status: 200},
		{name: "Gemini key", host: "gemini", path: "/v1beta/models/gemini-pro:generateContent?key=" + gkey, status: 200},
		{name: "clean path", host: "canary", path: "/repos/acme/api/git/commits/9fceb02d0ae598e95dc970b74767f19372d61af8", status: 200},
		{name: "clean", host: "canary", path: "/x?page=2&q=hello", header: http.Header{"X-Request-Id": {"4b1c9e2a-7f3d-4e8a-9c1b-2d5e6f7a8b9c"}}, status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := newSecretsEnv(t, nil)
			srv := map[string]*upstream.Server{"canary": se.canarySrv, "gemini": se.gemini, "llm": se.llm}[tt.host]
			method, body := http.MethodPost, io.Reader(bytes.NewReader(anthropicBody(t, false, "hello")))
			if tt.upgrade {
				method, body = http.MethodGet, nil
			}
			status, answer := se.do(t, false, method, "https://"+hostPort(srv)+tt.path, tt.header, body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, answer)
			}
			e := se.httpEvent(t, srv.Name)
			if tt.status == 200 {
				if len(e.HTTP.Secrets) != 0 {
					t.Errorf("http.secrets %v, want none", e.HTTP.Secrets)
				}
				return
			}
			if !strings.Contains(answer, tt.rule) || !strings.Contains(answer, tt.where) {
				t.Errorf("answer %q, want rule %s and %q", answer, tt.rule, tt.where)
			}
			if e.Verdict.Action != event.Deny || e.Verdict.Rule != tt.rule || !strings.Contains(e.Verdict.Reason, tt.where) {
				t.Errorf("verdict %+v, want deny by %s saying %q", e.Verdict, tt.rule, tt.where)
			}
			if tt.host == "canary" {
				if n := len(se.canary.got()); n != 0 {
					t.Errorf("the canary got %d requests", n)
				}
			}
			if n := len(srv.Requests()); n != 0 && tt.host != "canary" {
				t.Errorf("the upstream got %d requests", n)
			}
			if strings.Contains(tt.where, "the URL path") && !strings.Contains(e.HTTP.URL, hostPort(srv)+"/"+Redacted) {
				t.Errorf("the event's URL is %q, want its path redacted", strings.ReplaceAll(e.HTTP.URL, tok, "<token>"))
			}
			// Nothing of the event holds the secret.
			if s := fmt.Sprintf("%+v %+v %v", e.HTTP, e.Verdict, e.HTTP.Header); strings.Contains(s, tok) || strings.Contains(s, gkey) {
				t.Errorf("the event holds the secret: %s", s)
			}
		})
	}
}

func percentEncodeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// encodeBody applies codings (as a Content-Encoding lists them; "deflate-raw"
// for bare deflate) with the reference encoders.
func encodeBody(t testing.TB, codings string, b []byte) []byte {
	t.Helper()
	for c := range strings.SplitSeq(codings, ",") {
		var buf bytes.Buffer
		var w io.WriteCloser
		switch strings.TrimSpace(c) {
		case "gzip":
			w = gzip.NewWriter(&buf)
		case "deflate":
			w = zlib.NewWriter(&buf)
		case "deflate-raw":
			w, _ = flate.NewWriter(&buf, flate.BestSpeed)
		case "br":
			w = brotli.NewWriter(&buf)
		case "zstd":
			zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
			if err != nil {
				t.Fatal(err)
			}
			w = zw
		default:
			t.Fatalf("coding %q", c)
		}
		w.Write(b)
		w.Close()
		b = buf.Bytes()
	}
	return b
}

// A body is decoded whatever its codings (deflate zlib-wrapped or bare,
// brotli, zstd, stacked) before it is scanned; one that cannot be decoded
// is refused, saying why; a clean one goes as it came.
func TestSecretsInEncodedBodies(t *testing.T) {
	tok := fakeToken(t)
	secretBody := []byte(`{"note":"deploy","token":"` + tok + `"}`)
	cleanBody := []byte(`{"note":"nothing to see"}`)
	gz := encodeBody(t, "gzip", secretBody)
	tests := []struct {
		name, ce string
		body     []byte
		status   int
		rule     string
		reason   string
	}{
		{"deflate zlib", "deflate", encodeBody(t, "deflate", secretBody), 403, "no-secrets-to-other-hosts", "github-pat in request body"},
		{"deflate bare", "deflate", encodeBody(t, "deflate-raw", secretBody), 403, "no-secrets-to-other-hosts", "github-pat in request body"},
		{"brotli", "br", encodeBody(t, "br", secretBody), 403, "no-secrets-to-other-hosts", "github-pat in request body"},
		{"zstd", "zstd", encodeBody(t, "zstd", secretBody), 403, "no-secrets-to-other-hosts", "github-pat in request body"},
		{"stacked", "deflate, br", encodeBody(t, "deflate,br", secretBody), 403, "no-secrets-to-other-hosts", "github-pat in request body"},
		{"stacked in two fields", "gzip|zstd", encodeBody(t, "gzip,zstd", secretBody), 403, "no-secrets-to-other-hosts", "github-pat in request body"},
		{"corrupt", "gzip", append([]byte("\x1f\x8b\x08\x00"), bytes.Repeat([]byte{0xff}, 40)...), 400, "undecodable_body",
			"request body: Content-Encoding gzip could not be decoded: "},
		{"cut", "gzip", gz[:len(gz)-10], 400, "undecodable_body", "request body: Content-Encoding gzip could not be decoded: "},
		{"deflate then plain", "deflate", append(encodeBody(t, "deflate", cleanBody), tok...), 400, "undecodable_body",
			"request body: Content-Encoding deflate could not be decoded: data after the end of the deflate stream"},
		{"unsupported", "compress", cleanBody, 415, "undecodable_body", "request body: Content-Encoding compress is not supported"},
		{"clean deflate", "deflate", encodeBody(t, "deflate", cleanBody), 200, "", ""},
		{"clean stacked", "zstd, gzip", encodeBody(t, "zstd,gzip", cleanBody), 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := newSecretsEnv(t, nil)
			h := http.Header{"Content-Type": {"application/json"}, "Content-Encoding": strings.Split(tt.ce, "|")}
			status, answer := se.do(t, false, http.MethodPost, "https://"+hostPort(se.canarySrv)+"/upload", h, bytes.NewReader(tt.body))
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, answer)
			}
			got := se.canary.got()
			e := se.httpEvent(t, "canary.test")
			if tt.status == 200 {
				if len(got) != 1 || !bytes.Equal(got[0].body, tt.body) {
					t.Fatalf("the canary got %d requests, want one with the body as sent", len(got))
				}
				return
			}
			if len(got) != 0 {
				t.Errorf("the canary got %d requests", len(got))
			}
			if e.Verdict.Action != event.Deny || e.Verdict.Rule != tt.rule || !strings.Contains(e.Verdict.Reason, tt.reason) {
				t.Errorf("verdict %+v, want deny by %s saying %q", e.Verdict, tt.rule, tt.reason)
			}
			if !strings.Contains(answer, tt.reason) || strings.Contains(answer, tok) {
				t.Errorf("answer %q, want the reason and no secret", answer)
			}
		})
	}
}

// An LLM request that inflates past the limit is refused, the reason
// saying the limit was exceeded.
func TestLLMBodyBomb(t *testing.T) {
	se := newSecretsEnv(t, nil)
	zeros := make([]byte, 65<<20)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(zeros)
	zw.Close()
	status, answer := se.do(t, false, http.MethodPost, "https://"+hostPort(se.llm)+"/v1/messages",
		http.Header{"Content-Encoding": {"gzip"}, "Content-Type": {"application/json"}}, &buf)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(answer, "Content-Encoding gzip decodes to more than 67108864 bytes (the limit)") {
		t.Errorf("status %d: %s", status, answer)
	}
	if n := len(se.llm.Requests()); n != 0 {
		t.Errorf("the LLM API got %d requests", n)
	}
}

// A secret the session has shown before is known in its encodings: in a
// later request's body, header or query, base64 (each alignment, both
// alphabets), hex, percent-encoded or \u-escaped, it counts as the secret
// (its rule) and is refused to another host; in an LLM prompt, it is
// replaced by the value's placeholder. A brokered credential's real value
// counts anywhere but on its hosts.
func TestKnownSecretEncodings(t *testing.T) {
	tok := fakeToken(t)
	b64 := func(pre string) string { return base64.StdEncoding.EncodeToString([]byte(pre + tok)) }
	encodings := map[string]string{
		"base64-0":    b64(""),
		"base64-1":    b64("u"),
		"base64-2":    b64("u:"),
		"base64url":   base64.RawURLEncoding.EncodeToString([]byte("\xfb" + tok)),
		"hex":         hex.EncodeToString([]byte(tok)),
		"HEX":         strings.ToUpper(hex.EncodeToString([]byte(tok))),
		"percent":     percentEncodeAll(tok),
		"json-escape": jsonEscapeAll(tok),
	}
	for name, enc := range encodings {
		t.Run(name, func(t *testing.T) {
			se := newSecretsEnv(t, nil)
			url := "https://" + hostPort(se.canarySrv)
			// The session shows the secret once (refused).
			if status, _ := se.do(t, false, http.MethodPost, url+"/first", nil, strings.NewReader("token="+tok)); status != 403 {
				t.Fatalf("the plain secret: status %d", status)
			}
			// Then in its encodings, wherever no rule would find them.
			for _, where := range []struct {
				name   string
				path   string
				header http.Header
				body   string
			}{
				{"body", "/b", nil, `{"blob":"` + enc + `"}`},
				{"header", "/h", http.Header{"X-Data": {enc}}, ""},
				{"query", "/q?d=" + url2(enc), nil, ""},
				{"query name", "/q?" + url2(enc) + "=1", nil, ""},
			} {
				status, answer := se.do(t, false, http.MethodPost, url+where.path, where.header, strings.NewReader(where.body))
				if status != 403 || !strings.Contains(answer, "github-pat in ") {
					t.Errorf("%s: status %d: %s", where.name, status, answer)
				}
			}
			if name == "hex" {
				// Header names are canonicalised (X-Ghp-…): a secret's case
				// does not survive in one, lowercase hex does.
				status, answer := se.do(t, false, http.MethodGet, url+"/n", http.Header{"X-" + enc: {"1"}}, nil)
				if status != 403 || !strings.Contains(answer, "github-pat in the name of a request header") {
					t.Errorf("header name: status %d: %s", status, answer)
				}
			}
			if got := se.canary.got(); len(got) != 0 {
				t.Errorf("the canary got %d requests", len(got))
			}
			// In a prompt, the value's placeholder replaces the encoding.
			status, _ := se.do(t, false, http.MethodPost, "https://"+hostPort(se.llm)+"/v1/messages", nil,
				bytes.NewReader(anthropicBody(t, false, "decode this: "+enc)))
			if status != 200 {
				t.Fatalf("LLM call: status %d", status)
			}
			sent := se.llm.Requests()[0].Body
			if bytes.Contains(sent, []byte(enc)) || bytes.Contains(sent, []byte(tok)) || !bytes.Contains(sent, []byte("[REDACTED:github-pat:")) {
				t.Errorf("the LLM API got the encoding: %s", sent)
			}
		})
	}
}

// url2 escapes s for a query value.
func url2(s string) string { return url.QueryEscape(s) }

func jsonEscapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, `\u%04x`, s[i])
	}
	return b.String()
}

// A brokered credential's real value, plain or encoded, counts on any
// host but its own.
func TestBrokeredValueKnown(t *testing.T) {
	real := fakeToken(t)
	se := newSecretsEnv(t, func(rw *Rewrites) {
		b, err := inject.NewBroker([]inject.Credential{{Name: "gh", Value: real, Hosts: []string{"api.anthropic.com"}}}, randReader{})
		if err != nil {
			t.Fatal(err)
		}
		rw.Credentials = b
		rw.Redactor.Known().AddCredential("gh", real)
	})
	enc := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + real))
	status, answer := se.do(t, false, http.MethodGet, "https://"+hostPort(se.canarySrv)+"/x", http.Header{"Authorization": {"Basic " + enc}}, nil)
	if status != 403 || !strings.Contains(answer, "brokered-credential in request header Authorization") {
		t.Errorf("to another host: %d %s", status, answer)
	}
	if status, answer := se.do(t, false, http.MethodGet, "https://"+hostPort(se.llm)+"/v1/models", http.Header{"Authorization": {"Basic " + enc}}, nil); status == 403 {
		t.Errorf("to its own host: %d %s", status, answer)
	}
}

type randReader struct{}

func (randReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*7 + 3)
	}
	return len(p), nil
}

// bigBody is n bytes of text with secret at pos (if any); noise is text
// that compresses badly (base64 of random bytes, in lines).
func bigBody(n int, secret string, pos int, noise bool) []byte {
	var b []byte
	if noise {
		raw := make([]byte, n*3/4+64)
		rng := mrand.New(mrand.NewPCG(uint64(n), 9))
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		b = []byte(base64.StdEncoding.EncodeToString(raw))[:n]
		for i := 76; i < n; i += 77 {
			b[i] = '\n'
		}
	} else {
		b = bytes.Repeat([]byte("lorem ipsum dolor sit amet, consectetur adipiscing elit\n"), n/56+1)[:n]
	}
	if secret != "" {
		copy(b[pos:], " "+secret+" ")
	}
	return b
}

// onlyReader hides a reader's length, so the client sends it chunked.
type onlyReader struct{ io.Reader }

// A body too large to hold (over 8 MiB) is checked as it streams: a
// secret near its end, or astride two windows, stops the request before
// its end reaches the upstream (Content-Length: short; chunked: no last
// chunk; HTTP/2: the stream reset), the event denied by the rule with the
// secret's rule id; a clean one goes through whole.
func TestStreamedBodySecrets(t *testing.T) {
	const size = 20 << 20
	tok := fakeToken(t)
	tests := []struct {
		name    string
		h2      bool // the client speaks HTTP/2
		te      bool // and asks for trailers: HTTP/2 upstream too
		chunked bool
		ce      string
		pos     int // -1: no secret
	}{
		{name: "content-length, near the end", pos: size - 200},
		{name: "content-length, astride a window", pos: 9<<20 - 20},
		{name: "chunked, near the end", chunked: true, pos: size - 100},
		{name: "http2, near the end", h2: true, te: true, pos: size - 300},
		{name: "http2 client, HTTP/1.1 upstream", h2: true, pos: size - 300},
		{name: "gzip, near the end", ce: "gzip", pos: size - 500},
		{name: "clean", pos: -1},
		{name: "clean chunked", chunked: true, pos: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := newSecretsEnv(t, nil)
			secret := ""
			if tt.pos >= 0 {
				secret = tok
			}
			plain := bigBody(size, secret, max(tt.pos, 0), tt.ce != "")
			body := plain
			h := http.Header{"Content-Type": {"text/plain"}}
			if tt.te {
				h.Set("Te", "trailers") // gRPC-like: goes upstream over HTTP/2
			}
			if tt.ce != "" {
				body = encodeBody(t, tt.ce, plain)
				h.Set("Content-Encoding", tt.ce)
			}
			var r io.Reader = bytes.NewReader(body)
			if tt.chunked {
				r = onlyReader{r}
			}
			status, answer := se.do(t, tt.h2, http.MethodPost, "https://"+hostPort(se.canarySrv)+"/upload", h, r)
			e := se.httpEvent(t, "canary.test")
			got := se.canary.waitGot(t, 1)
			if tt.pos < 0 {
				if status != 200 || len(got) != 1 || !got[0].complete || !bytes.Equal(got[0].body, body) {
					t.Fatalf("clean body: status %d, canary got %d requests", status, len(got))
				}
				return
			}
			if status != 403 || !strings.Contains(answer, "no-secrets-to-other-hosts") || !strings.Contains(answer, "github-pat in request body") {
				t.Errorf("status %d: %s", status, answer)
			}
			if e.Verdict.Action != event.Deny || e.Verdict.Rule != "no-secrets-to-other-hosts" {
				t.Errorf("verdict %+v, want deny by no-secrets-to-other-hosts", e.Verdict)
			}
			if d := cmp.Diff([]string{"github-pat"}, e.HTTP.Secrets); d != "" {
				t.Errorf("http.secrets (-want +got):\n%s", d)
			}
			if len(got) != 1 || len(got[0].body) < 8<<20 {
				t.Errorf("the canary got %d requests, want one cut short after its first 8 MiB", len(got))
			}
			for _, g := range got {
				if g.complete {
					t.Errorf("the canary got a complete request (%d bytes of %d)", len(g.body), len(body))
				}
				if g.holds(tok) || g.holds(tok[:12]) {
					t.Errorf("the canary got the secret (or its start)")
				}
				if want := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[tt.te]; g.proto != want {
					t.Errorf("the canary was spoken to over %s, want %s", g.proto, want)
				}
			}
		})
	}
}

// A streamed body that stops decoding half way stops there, refused as
// undecodable; a small body that inflates past what is held (64 MiB) is
// checked as it streams instead, and goes through whole when clean.
func TestStreamedBodyDecoding(t *testing.T) {
	t.Run("corrupt half way", func(t *testing.T) {
		se := newSecretsEnv(t, nil)
		body := encodeBody(t, "gzip", bigBody(20<<20, "", 0, true))
		for i := len(body) / 2; i < len(body)/2+256; i++ {
			body[i] ^= 0x5a
		}
		status, answer := se.do(t, false, http.MethodPost, "https://"+hostPort(se.canarySrv)+"/upload",
			http.Header{"Content-Encoding": {"gzip"}}, bytes.NewReader(body))
		if status != http.StatusBadRequest || !strings.Contains(answer, "undecodable_body") ||
			!strings.Contains(answer, "request body: Content-Encoding gzip could not be decoded") {
			t.Errorf("status %d: %s", status, answer)
		}
		e := se.httpEvent(t, "canary.test")
		if e.Verdict.Rule != "undecodable_body" || e.HTTP.Error == "" {
			t.Errorf("event verdict %+v, error %q", e.Verdict, e.HTTP.Error)
		}
		got := se.canary.waitGot(t, 1)
		if len(got) != 1 || got[0].complete {
			t.Errorf("the canary got %d requests, want one cut short", len(got))
		}
	})
	t.Run("inflates past what is held", func(t *testing.T) {
		se := newSecretsEnv(t, nil)
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		zw.Write(make([]byte, 80<<20))
		zw.Close()
		body := buf.Bytes()
		status, answer := se.do(t, false, http.MethodPost, "https://"+hostPort(se.canarySrv)+"/upload",
			http.Header{"Content-Encoding": {"gzip"}}, bytes.NewReader(body))
		got := se.canary.got()
		if status != 200 || len(got) != 1 || !got[0].complete || !bytes.Equal(got[0].body, body) {
			t.Errorf("status %d (%s), the canary got %d requests", status, answer, len(got))
		}
	})
}

// FuzzScanQuery: a secret wholly inside a query parameter's name or value
// (as sent or percent-encoded) is found, and the event's URL, redacted by
// the flags scanQuery returns, does not show it; scanQuery splits the
// query as writeRedactedQuery does, so the flags name the right
// parameters.
func FuzzScanQuery(f *testing.F) {
	f.Add("a=1&b=2", uint16(2), false)
	f.Add("x=%41&y;z=", uint16(9), true)
	f.Add("", uint16(0), false)
	rw := benchRewrites(f, 0)
	secret := "ghp_" + strings.Repeat("aB3", 12)
	rw.Redactor.Known().Add("github-pat", secret)
	f.Fuzz(func(t *testing.T, q string, at uint16, encoded bool) {
		ins := secret
		if encoded {
			ins = percentEncodeAll(secret)
		}
		pos := int(at) % (len(q) + 1)
		q = q[:pos] + ins + q[pos:]
		u := &url.URL{Scheme: "https", Host: "h.test", Path: "/", RawQuery: q}
		x := &exchange{rw: rw}
		flags := x.scanQuery(q, "h.test", false)
		out := redactURL(u, flags)
		whole := false
		for seg := range strings.FieldsFuncSeq(q, func(r rune) bool { return r == '&' || r == ';' }) {
			k, v, _ := strings.Cut(seg, "=")
			for _, p := range []string{k, v} {
				if strings.Contains(p, ins) {
					whole = true
				}
			}
		}
		if whole && (len(x.found) == 0 || strings.Contains(out, ins)) {
			t.Fatalf("query %q: found %v, event URL %q", q, x.found, out)
		}
	})
}
