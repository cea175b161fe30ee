//go:build linux

package main

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// Addresses of TestBypassSecrets' canaries.
const (
	secretsCanaryTLS   = "127.0.0.80"
	secretsCanaryPlain = "127.0.0.81"
)

// secretsCanary is a host that must never get the secret: an HTTPS server
// (canary.e2e.test, HTTP/1.1 and HTTP/2) and a plain HTTP one, recording
// each request they get, every byte of its body, and whether the body
// came whole.
type secretsCanary struct {
	tlsAddr, plainAddr net.Addr
	mu                 sync.Mutex
	reqs               []canaryRequest
}

type canaryRequest struct {
	path, query, proto string
	header             http.Header
	body               []byte
	complete           bool
}

func startSecretsCanary(t *testing.T, ca *upstream.CA) *secretsCanary {
	t.Helper()
	c := &secretsCanary{}
	cert, err := ca.Leaf("canary.e2e.test", secretsCanaryTLS)
	if err != nil {
		t.Fatal(err)
	}
	for _, secure := range []bool{true, false} {
		addr := secretsCanaryPlain
		if secure {
			addr = secretsCanaryTLS
		}
		ln, err := net.Listen("tcp", addr+":0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: c}
		t.Cleanup(func() { srv.Close() })
		if secure {
			c.tlsAddr = ln.Addr()
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
			go srv.ServeTLS(ln, "", "")
		} else {
			c.plainAddr = ln.Addr()
			go srv.Serve(ln)
		}
	}
	return c
}

func (c *secretsCanary) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, canaryRequest{path: r.URL.Path, query: r.URL.RawQuery, proto: r.Proto, header: r.Header.Clone(), body: b, complete: err == nil})
	c.mu.Unlock()
	if err == nil {
		io.WriteString(w, "canary got it\n")
	}
}

func (c *secretsCanary) got() []canaryRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reqs)
}

// forms are the ways the secret must not reach the canary: as it is, its
// start, and every encoding the session is to recognise.
func secretForms(secret string) []string {
	forms := []string{secret, secret[:12], hex.EncodeToString([]byte(secret)), strings.ToUpper(hex.EncodeToString([]byte(secret)))}
	for k := range 3 {
		mid := []byte(secret)[k : k+(len(secret)-k)/3*3]
		forms = append(forms, base64.RawStdEncoding.EncodeToString(mid), base64.RawURLEncoding.EncodeToString(mid))
	}
	return forms
}

// holds reports whether what the canary got holds a form of the secret:
// in its query (as sent and decoded), headers, or body (as sent, and
// decoded as far as it goes).
func (r canaryRequest) holds(forms []string) bool {
	texts := []string{r.query, string(r.body), string(decodeAsFar(r.header.Values("Content-Encoding"), r.body))}
	if q, err := url.QueryUnescape(r.query); err == nil {
		texts = append(texts, q)
	}
	for _, vs := range r.header {
		texts = append(texts, vs...)
	}
	for _, t := range texts {
		for _, f := range forms {
			if strings.Contains(t, f) {
				return true
			}
		}
	}
	return false
}

// decodeAsFar undoes codings with the reference decoders, keeping what
// comes out of a cut or corrupt body.
func decodeAsFar(codings []string, b []byte) []byte {
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

// encode applies the codings, in order, with the reference encoders.
func encode(t *testing.T, b []byte, codings ...string) []byte {
	t.Helper()
	for _, c := range codings {
		var buf bytes.Buffer
		var w io.WriteCloser
		switch c {
		case "gzip":
			w = gzip.NewWriter(&buf)
		case "zlib":
			w = zlib.NewWriter(&buf)
		case "raw":
			w, _ = flate.NewWriter(&buf, flate.BestSpeed)
		case "br":
			w = brotli.NewWriter(&buf)
		case "zstd":
			zw, err := zstd.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			w = zw
		}
		w.Write(b)
		w.Close()
		b = buf.Bytes()
	}
	return b
}

// secretsBodies writes the bodies the agent sends into dir.
func secretsBodies(t *testing.T, dir, secret string) {
	t.Helper()
	note := []byte(`{"note":"deploy with ` + secret + `"}`)
	big := func(pos int) []byte {
		b := bytes.Repeat([]byte("lorem ipsum dolor sit amet, consectetur adipiscing elit\n"), 20<<20/56+1)[:20<<20]
		copy(b[pos:], " "+secret+" ")
		return b
	}
	b64 := func(pre string) string { return base64.StdEncoding.EncodeToString([]byte(pre + secret)) }
	files := map[string][]byte{
		"deflate-zlib": encode(t, note, "zlib"),
		"deflate-raw":  encode(t, note, "raw"),
		"brotli":       encode(t, note, "br"),
		"zstd":         encode(t, note, "zstd"),
		"stacked":      encode(t, note, "gzip", "br"),
		"corrupt":      append([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"), note...),
		"big-end":      big(20<<20 - 300),
		"big-straddle": big(9<<20 - 20), // the scan's windows are 1 MiB
		"clean":        encode(t, []byte(`{"note":"nothing secret here"}`), "zlib"),
		"b64-0":        []byte(`{"blob":"` + b64("") + `"}`),
		"b64-1":        []byte(b64("u")),
		"b64-2":        []byte(url.QueryEscape(b64("u:"))),
		"hex":          []byte(hex.EncodeToString([]byte(secret))),
		"url":          []byte("note=" + percentAll(secret)),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func percentAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// TestBypassSecrets: a secret leaves by none of the side doors of section
// 5 of issue 25, from a transparent session, as root and as an ordinary
// user: a header of its own, the path, the query, a body in any coding (deflate
// zlib-wrapped or bare, brotli, zstd, stacked) or in one it is not, a body
// too large to hold (20 MiB, the secret near its end or astride two of the
// scan's windows, HTTP/1.1 and HTTP/2), and the encodings (base64 at each
// alignment, hex, percent-encoding, JSON \u escapes) of a secret the
// session showed before. Each attempt is refused, with an http record
// naming the process and the rule; the canary gets no complete request
// from any, and never the secret in any form.
func TestBypassSecrets(t *testing.T) {
	needTransparent(t)
	need(t, "bash", "curl", "python3")
	w := newWorld(t)
	canary := startSecretsCanary(t, w.ca)
	secret := upstream.FakeGitHubToken()
	forms := secretForms(secret)

	// Readable by an ordinary user.
	dir, err := os.MkdirTemp("", "bypass-secrets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	for _, d := range []string{dir, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
	}
	secretsBodies(t, data, secret)
	agent, err := filepath.Abs("testdata/bypass_secrets/agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	_, tlsPort, _ := net.SplitHostPort(canary.tlsAddr.String())

	attempts := []struct {
		name, exe string
		status    string // what the client got
		rule      string
		where     string // in the reason
		streamed  bool   // the canary may get the request's start, never its end
		allowed   bool
		recPath   string // the path the http record shows, when not /RUN/NAME
	}{
		{name: "header", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request header X-Custom"},
		{name: "query", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in query parameter key"},
		{name: "path", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in the URL path", recPath: "/[REDACTED]"},
		{name: "deflate-zlib", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
		{name: "deflate-raw", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
		{name: "brotli", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
		{name: "zstd", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
		{name: "stacked", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
		{name: "corrupt", exe: "curl", status: "400", rule: "undecodable_body", where: "request body: Content-Encoding gzip could not be decoded"},
		{name: "big-end", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body", streamed: true},
		{name: "big-straddle", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body", streamed: true},
		{name: "big-h2", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body", streamed: true},
		{name: "clean", exe: "curl", status: "200", allowed: true},
		{name: "leak", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
		{name: "known-b64-0", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
		{name: "known-b64-1", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request header X-Data"},
		{name: "known-b64-2", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in query parameter d"},
		{name: "known-hex", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in query parameter h"},
		{name: "known-url", exe: "curl", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
		{name: "known-json", exe: "python3", status: "403", rule: "no-secrets-to-other-hosts", where: "github-pat in request body"},
	}

	for _, user := range []string{"root", "nobody"} {
		t.Run(user, func(t *testing.T) {
			run := "run-" + user
			work := filepath.Join(dir, run)
			if err := os.Mkdir(work, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(work, 0o777)
			targets := filepath.Join(dir, run+".env")
			err := os.WriteFile(targets, fmt.Appendf(nil, "SECRET=%s\nADDR=%s\nPORT=%s\nPLAIN=%s\nRUN=%s\nDATA=%s\nWORK=%s\n",
				secret, secretsCanaryTLS, tlsPort, canary.plainAddr, run, data, work), 0o644)
			if err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, run+".jsonl")
			args := []string{"run", "--mode", "transparent",
				"--dns-upstream", fakeDNSUpstream(t).String(),
				"--upstream-ca", w.caFile,
				"--log", log}
			if user != "root" {
				args = append(args, "--user", user)
			}
			r := w.chaperone(nil, append(args, "--", "bash", agent, targets)...)
			mustSucceed(t, r)
			if strings.Contains(r.stdout+r.stderr, secret) {
				// The agent printed only what the proxy answered.
				t.Errorf("the secret is in what the session printed")
			}
			lines := parseBypassLines(t, r.stdout)
			if _, ok := lines["done"]; !ok {
				t.Fatalf("the agent did not finish:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			recs := readRecords(t, log)
			for _, rec := range recs {
				if strings.Contains(fmt.Sprintf("%+v", rec), secret) {
					t.Errorf("BYPASS: the audit log holds the secret: %+v", rec)
				}
			}
			got := canary.got()
			for _, a := range attempts {
				t.Run(a.name, func(t *testing.T) {
					l, ok := lines[a.name]
					if !ok || l.pid == 0 {
						t.Fatalf("the agent printed no line for %s", a.name)
					}
					if !strings.Contains(l.outcome, "status="+a.status) {
						t.Errorf("the client got %q, want status %s", l.outcome, a.status)
					}
					path := "/" + run + "/" + a.name
					var mine []canaryRequest
					for _, g := range got {
						if g.path == path {
							mine = append(mine, g)
						}
					}
					recPath := path
					if a.recPath != "" {
						recPath = a.recPath
					}
					rec, ok := findHTTP(recs, l.pid, recPath)
					if !ok {
						t.Fatalf("not seen: no http record of pid %d for %s (agent: %s)", l.pid, path, l.outcome)
					}
					if rec.Process == nil || !strings.HasPrefix(filepath.Base(rec.Process.Exe), a.exe) {
						t.Errorf("attributed to %+v, want %s", rec.Process, a.exe)
					}
					if a.allowed {
						if rec.Verdict == event.Deny || len(mine) != 1 || !mine[0].complete {
							t.Errorf("the clean request: verdict %s, the canary got %d requests", rec.Verdict, len(mine))
						}
						return
					}
					if rec.Verdict != event.Deny || rec.Rule != a.rule || !strings.Contains(rec.Reason, a.where) {
						t.Errorf("BYPASS: http record verdict %s by %q (%q), want deny by %s saying %q", rec.Verdict, rec.Rule, rec.Reason, a.rule, a.where)
					}
					if a.rule == "no-secrets-to-other-hosts" && !slices.Contains(rec.Secrets, "github-pat") {
						t.Errorf("http record secrets %v, want github-pat", rec.Secrets)
					}
					for _, g := range mine {
						if !a.streamed || g.complete {
							t.Errorf("BYPASS: the canary got a request for %s (complete %v, %d bytes of body)", path, g.complete, len(g.body))
						}
					}
					if a.streamed {
						// The body streamed: the canary got its start, not its end.
						if len(mine) != 1 || len(mine[0].body) < 8<<20 {
							t.Errorf("the canary got %d requests for %s, want one cut short after its first 8 MiB", len(mine), path)
						} else if want := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[a.name == "big-h2"]; mine[0].proto != want {
							t.Errorf("the canary was spoken to over %s, want %s", mine[0].proto, want)
						}
					}
				})
			}
			t.Run("canary never got the secret", func(t *testing.T) {
				for _, g := range got {
					if strings.HasPrefix(g.path, "/"+run+"/") && g.holds(forms) {
						t.Errorf("BYPASS: the canary got the secret (or an encoding of it) in %s", g.path)
					}
				}
			})
		})
	}
}

// readRecords reads an audit log.
func readRecords(t *testing.T, path string) []telemetry.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rs []telemetry.Record
	if err := telemetry.ReadRecords(f, telemetry.Filter{}, func(r telemetry.Record) error {
		rs = append(rs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return rs
}

// findHTTP finds the http record of pid's request for path.
func findHTTP(recs []telemetry.Record, pid int, path string) (telemetry.Record, bool) {
	for _, rec := range recs {
		if rec.Kind != event.KindHTTP || rec.Process == nil || rec.Process.PID != pid {
			continue
		}
		u, err := url.Parse(rec.URL)
		if err == nil && u.Path == path {
			return rec, true
		}
	}
	return telemetry.Record{}, false
}
