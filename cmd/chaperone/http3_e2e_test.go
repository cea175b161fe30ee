package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/quic-go/quic-go/http3"
)

// startH3Origin serves name on addr:443 over HTTP/3 (UDP) and HTTPS (TCP),
// with a certificate of w's CA; each answer names the server and the
// protocol the request came over.
func startH3Origin(t *testing.T, w *world, name, addr string) {
	t.Helper()
	startH3OriginWith(t, w, name, addr, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "hello from %s over %s\n", name, r.Proto)
	}))
}

// h3Request is what an origin of startH3OriginWith received.
type h3Request struct {
	Proto, Path string
	Body        []byte
}

// h3Origin records what startH3OriginWith's origin received.
type h3Origin struct {
	mu   sync.Mutex
	reqs []h3Request
}

func (o *h3Origin) requests() []h3Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.reqs)
}

// startH3OriginWith serves h for name on addr:443 over HTTP/3 (UDP) and
// HTTPS (TCP: HTTP/2 or 1.1, as the client offers), with a certificate of
// w's CA, and records each request before h reads it.
func startH3OriginWith(t *testing.T, w *world, name, addr string, h http.Handler) *h3Origin {
	t.Helper()
	leaf, err := w.ca.Leaf(name)
	if err != nil {
		t.Fatal(err)
	}
	o := &h3Origin{}
	rec := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, "bad body", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.reqs = append(o.reqs, h3Request{Proto: r.Proto, Path: r.URL.Path, Body: body})
		o.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(rw, r)
	})
	pc, err := net.ListenPacket("udp4", addr+":443")
	if err != nil {
		t.Skipf("cannot listen on UDP %s:443: %v", addr, err)
	}
	ln, err := net.Listen("tcp4", addr+":443")
	if err != nil {
		pc.Close()
		t.Skipf("cannot listen on TCP %s:443: %v", addr, err)
	}
	h3 := &http3.Server{Handler: rec, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{leaf}})}
	h1 := &http.Server{Handler: rec, TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}}}
	done := make(chan struct{}, 2)
	go func() { h3.Serve(pc); done <- struct{}{} }()
	go func() { h1.ServeTLS(ln, "", ""); done <- struct{}{} }()
	t.Cleanup(func() {
		h3.Close()
		pc.Close()
		h1.Close()
		<-done
		<-done
	})
	return o
}

// TestTransparentHTTP3 runs an HTTP/3-only client (quic-go, a process of
// its own) in transparent sessions: with QUIC intercepted (the default)
// the proxy serves its requests, denies a denied host with the reason,
// and records them with the client's process; --quic refuse fails it at
// once; --quic allow lets it reach the origin unseen.
func TestTransparentHTTP3(t *testing.T) {
	needTransparent(t)
	w := newWorld(t)
	const a, b = "127.0.43.1", "127.0.43.2"
	startH3Origin(t, w, "h3a.e2e.test", a)
	startH3Origin(t, w, "h3b.e2e.test", b)
	resolve := []string{"--resolve", "h3a.e2e.test:" + a, "--resolve", "h3b.e2e.test:" + b}

	t.Run("intercepted", func(t *testing.T) {
		// One transport, so one UDP socket, to two servers in turn.
		w.log = filepath.Join(t.TempDir(), "audit.jsonl")
		r := w.transparent(resolve, h3Client, "https://h3a.e2e.test/one", "https://h3b.e2e.test/two", "https://h3a.e2e.test/three")
		mustSucceed(t, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		hosts := []string{"h3a.e2e.test", "h3b.e2e.test", "h3a.e2e.test"}
		// The proxy may reach the origin over any protocol.
		if len(lines) != len(hosts) {
			t.Fatalf("client printed:\n%s\nwant one line per URL", r.stdout)
		}
		for i, host := range hosts {
			if want := "200 HTTP/3.0 hello from " + host + " over HTTP/"; !strings.HasPrefix(lines[i], want) {
				t.Errorf("line %d: %q, want %q...", i, lines[i], want)
			}
		}
		if strings.Contains(r.stderr, "QUIC datagrams") {
			t.Errorf("QUIC refused, want intercepted:\n%s", r.stderr)
		}
		for _, tc := range []struct{ host, path string }{{"h3a.e2e.test", "/one"}, {"h3b.e2e.test", "/two"}, {"h3a.e2e.test", "/three"}} {
			rec := w.checkSessionLogFor(t, tc.host, tc.path, "h3client")
			if rec.Proto != "HTTP/3.0" {
				t.Errorf("http record of %s%s: proto %q, want HTTP/3.0", tc.host, tc.path, rec.Proto)
			}
		}
		// Each QUIC connection's origin is the server it was sent to, even
		// though one socket sent to both.
		tlsSeen, udpDst := map[string]bool{}, map[string]string{}
		for _, rec := range w.records() {
			switch {
			case rec.Kind == event.KindTLS:
				tlsSeen[rec.SNI] = true
				if rec.Process == nil || filepath.Base(rec.Process.Exe) != "h3client" {
					t.Errorf("tls record's process %+v, want h3client", rec.Process)
				}
			case rec.Kind == event.KindConnect && rec.Transport == "udp":
				// quic-go's socket is dual-stack: its IPv4 destinations are v4-mapped.
				dst, err := netip.ParseAddrPort(rec.Dst)
				if err != nil {
					t.Errorf("udp connect record's dst %q: %v", rec.Dst, err)
				}
				udpDst[rec.Host] = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()).String()
				if rec.Via != "transparent" || rec.Verdict != event.Allow {
					t.Errorf("udp connect record %+v: want allowed, via transparent", rec)
				}
			}
		}
		if !tlsSeen["h3a.e2e.test"] || !tlsSeen["h3b.e2e.test"] {
			t.Errorf("tls records for %v, want h3a.e2e.test and h3b.e2e.test", tlsSeen)
		}
		if want := map[string]string{"h3a.e2e.test": a + ":443", "h3b.e2e.test": b + ":443"}; !maps.Equal(udpDst, want) {
			t.Errorf("udp connect records' destinations %v, want %v", udpDst, want)
		}
	})

	// Two handshakes at once from one socket: each connection's origin is
	// the record of its own first Initial (by its destination connection
	// ID), not the socket's latest datagram, so both requests reach their
	// own server.
	t.Run("two origins at once", func(t *testing.T) {
		w.log = filepath.Join(t.TempDir(), "audit.jsonl")
		r := w.transparent(resolve, h3Client, "-parallel", "https://h3a.e2e.test/pa", "https://h3b.e2e.test/pb")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		hosts := []string{"h3a.e2e.test", "h3b.e2e.test"}
		if len(lines) != len(hosts) {
			t.Fatalf("client printed:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
		for i, host := range hosts {
			if want := "200 HTTP/3.0 hello from " + host + " over HTTP/"; !strings.HasPrefix(lines[i], want) {
				t.Errorf("request to %s: %q, want %q...", host, lines[i], want)
			}
		}
	})

	t.Run("denied host", func(t *testing.T) {
		w.log = filepath.Join(t.TempDir(), "audit.jsonl")
		// By address: a denied name would get NXDOMAIN from the resolver first.
		args := append([]string{"--deny-host", b}, resolve...)
		r := w.transparent(args, h3Client, "https://h3b.e2e.test/no")
		if r.code == 0 || !strings.Contains(r.stdout, "error:") || !strings.Contains(r.stdout, "denied") {
			t.Errorf("exit %d, client printed %q; want an error carrying the denial", r.code, r.stdout)
		}
		denied := false
		for _, rec := range w.records() {
			if rec.Kind == event.KindHTTP && rec.Host == "h3b.e2e.test" {
				t.Errorf("a denied host's request was recorded as made: %+v", rec)
			}
			if rec.Kind == event.KindConnect && rec.Transport == "udp" && rec.Verdict == event.Deny {
				denied = true
			}
		}
		if !denied {
			t.Error("no denied udp connect record")
		}
	})

	t.Run("refuse", func(t *testing.T) {
		r := w.transparent(append([]string{"--quic", "refuse"}, resolve...), h3Client, "https://h3a.e2e.test/refused")
		if r.code == 0 || !strings.Contains(r.stdout, "operation not permitted") {
			t.Errorf("exit %d, client printed %q; want EPERM", r.code, r.stdout)
		}
		if !strings.Contains(r.stderr, "QUIC datagrams") {
			t.Errorf("the refusals are not reported:\n%s", r.stderr)
		}
	})

	t.Run("allow", func(t *testing.T) {
		// The origin's CA, for the client that now reaches it directly.
		caDir := t.TempDir()
		pem, err := os.ReadFile(w.caFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(caDir, "origin-ca.pem"), pem, 0o644); err != nil {
			t.Fatal(err)
		}
		w.log = filepath.Join(t.TempDir(), "audit.jsonl")
		r := w.transparent(append([]string{"--quic", "allow"}, resolve...), "env", "SSL_CERT_DIR="+caDir, h3Client, "https://h3a.e2e.test/direct")
		mustSucceed(t, r)
		if got := strings.TrimSpace(r.stdout); got != "200 HTTP/3.0 hello from h3a.e2e.test over HTTP/3.0" {
			t.Errorf("client printed %q", got)
		}
		for _, rec := range w.records() {
			if rec.Kind == event.KindHTTP && strings.HasSuffix(rec.URL, "/direct") {
				t.Errorf("an unmediated request was recorded: %+v", rec)
			}
		}
	})
}

// An LLM call over HTTP/3 in a transparent session: the HTTP/3-only
// client POSTs an Anthropic request whose prompt holds a secret to a fake
// api.anthropic.com (HTTP/3 and TCP on 127.0.45.1:443). The origin gets
// the placeholder, never the secret; the client gets the echo with the
// secret restored; the audit log's http record says HTTP/3.0, its llm
// record has the placeholder, and neither holds the secret, nor does the
// session's stderr.
func TestTransparentHTTP3LLM(t *testing.T) {
	needTransparent(t)
	w := newWorld(t)
	const host, addr = "api.anthropic.com", "127.0.45.1"
	origin := startH3OriginWith(t, w, host, addr, upstream.LLMHandler(5))
	tok := fakeGitHubToken(t)
	hide := func(s string) string { return strings.ReplaceAll(s, tok, "<token>") }
	prompt := "here is my token " + tok + ", write the config"
	body, err := json.Marshal(map[string]any{
		"model": "claude-e2e", "max_tokens": 100,
		"messages": []map[string]any{{"role": "user", "content": prompt}},
	})
	if err != nil {
		t.Fatal(err)
	}
	bodyFile := filepath.Join(t.TempDir(), "request.json")
	if err := os.WriteFile(bodyFile, body, 0o644); err != nil {
		t.Fatal(err)
	}
	r := w.transparent([]string{"--resolve", host + ":" + addr}, h3Client, "-post", bodyFile, "https://"+host+"/v1/messages")
	if r.code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, hide(r.stdout), hide(r.stderr))
	}
	if !strings.HasPrefix(r.stdout, "200 HTTP/3.0 ") || !strings.Contains(r.stdout, `"text":"You said: `+prompt+`"`) {
		t.Errorf("the client did not get the answer over HTTP/3 with the secret restored:\n%s", hide(r.stdout))
	}
	if strings.Contains(r.stderr, tok) {
		t.Errorf("the secret is on stderr:\n%s", hide(r.stderr))
	}

	reqs := origin.requests()
	if len(reqs) != 1 {
		t.Fatalf("the origin got %d requests, want 1", len(reqs))
	}
	if bytes.Contains(reqs[0].Body, []byte(tok)) {
		t.Fatal("the secret reached the origin")
	}
	if !json.Valid(reqs[0].Body) || !regexp.MustCompile(`my token \[REDACTED:github-pat:[0-9a-f]+\], write`).Match(reqs[0].Body) {
		t.Errorf("the origin got %.400s", reqs[0].Body)
	}
	// The client came over QUIC: so does the proxy to the origin.
	if reqs[0].Proto != "HTTP/3.0" {
		t.Errorf("the origin got the request over %s, want HTTP/3.0", reqs[0].Proto)
	}

	logBytes, err := os.ReadFile(w.log)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(logBytes, []byte(tok)) {
		t.Error("the secret is in the audit log")
	}
	var llms, https int
	for _, rec := range w.records() {
		switch {
		case rec.Kind == event.KindLLM:
			llms++
			// llm records carry no proto (over TCP neither): the http
			// record of the same request does.
			if rec.Verdict != event.Rewrite || rec.Restored != 1 || rec.InputTokens != 12 || rec.OutputTokens != 34 || rec.Model != "claude-e2e" {
				t.Errorf("llm record: verdict %q, restored %d, tokens %d/%d, model %q; want rewrite, 1, 12/34, claude-e2e",
					rec.Verdict, rec.Restored, rec.InputTokens, rec.OutputTokens, rec.Model)
			}
			if !regexp.MustCompile(`^here is my token \[REDACTED:github-pat:[0-9a-f]+\], write the config$`).MatchString(rec.Prompt) {
				t.Errorf("llm record's prompt %q", rec.Prompt)
			}
		case rec.Kind == event.KindHTTP && rec.Host == host:
			https++
			if rec.Proto != "HTTP/3.0" || rec.Rewrite == nil || rec.Rewrite.Redacted["github-pat"] != 1 {
				t.Errorf("http record: proto %q, rewrite %+v; want HTTP/3.0 and one github-pat redacted", rec.Proto, rec.Rewrite)
			}
			if rec.Process == nil || filepath.Base(rec.Process.Exe) != "h3client" {
				t.Errorf("http record's process %+v, want h3client", rec.Process)
			}
		}
	}
	if llms != 1 || https != 1 {
		t.Errorf("%d llm and %d http records of %s, want 1 and 1", llms, https, host)
	}
}

// An origin that serves HTTPS over TCP advertising HTTP/3 (Alt-Svc) and
// HTTP/3 on UDP 443, asked twice by curl over HTTP/2 in one run: the
// proxy reaches it over TCP first, learns its Alt-Svc, and sends the
// second request over HTTP/3. curl is told of h3 when the session
// intercepts QUIC (its QUIC would come to the proxy too), and not when
// QUIC is refused (it would only meet refusals) or allowed unmediated (it
// would go around the proxy); the proxy's own upstream is upgraded all
// the same.
func TestTransparentHTTP3AltSvcUpgrade(t *testing.T) {
	needTransparent(t)
	need(t, "curl")
	w := newWorld(t)
	const host, addr, altSvc = "h3up.e2e.test", "127.0.45.2", `h3=":443"; ma=60, h2=":443"`
	origin := startH3OriginWith(t, w, host, addr, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Alt-Svc", altSvc)
		fmt.Fprintf(rw, "over %s\n", r.Proto)
	}))
	for _, tc := range []struct {
		quic, clientAltSvc string
	}{
		{"intercept", altSvc},
		{"refuse", `h2=":443"`},
		{"allow", `h2=":443"`},
	} {
		t.Run(tc.quic, func(t *testing.T) {
			w.log = filepath.Join(t.TempDir(), "audit.jsonl")
			before := len(origin.requests())
			r := w.transparent([]string{"--quic", tc.quic, "--resolve", host + ":" + addr},
				"curl", "-sS", "--http2", "-w", `%{http_version} [%header{alt-svc}]\n`,
				"https://"+host+"/first", "https://"+host+"/second")
			mustSucceed(t, r)
			reqs := origin.requests()[before:]
			if len(reqs) != 2 {
				t.Fatalf("the origin got %d requests, want 2", len(reqs))
			}
			if reqs[0].Path != "/first" || reqs[0].Proto == "HTTP/3.0" {
				t.Errorf("first request: %s over %s, want /first over TCP", reqs[0].Path, reqs[0].Proto)
			}
			if reqs[1].Path != "/second" || reqs[1].Proto != "HTTP/3.0" {
				t.Errorf("second request: %s over %s, want /second over HTTP/3.0 (the upstream upgraded)", reqs[1].Path, reqs[1].Proto)
			}
			// What curl printed: the body, then its protocol and the Alt-Svc it got.
			want := fmt.Sprintf("over %s\n2 [%s]\nover HTTP/3.0\n2 [%s]\n", reqs[0].Proto, tc.clientAltSvc, tc.clientAltSvc)
			if diff := cmp.Diff(want, r.stdout); diff != "" {
				t.Errorf("curl printed (-want +got):\n%s", diff)
			}
			var protos []string
			for _, rec := range w.httpRecords(host) {
				protos = append(protos, rec.Proto)
			}
			if diff := cmp.Diff([]string{"HTTP/2.0", "HTTP/2.0"}, protos); diff != "" {
				t.Errorf("http records' protos, the client's (-want +got):\n%s", diff)
			}
		})
	}
}
