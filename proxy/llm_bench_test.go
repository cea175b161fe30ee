package proxy

import (
	"bytes"
	"context"
	stdtls "crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// llmBenchHost is the fake LLM API's name: a provider's own host, so the
// proxy recognises its calls without LLMHosts.
const llmBenchHost = "api.anthropic.com"

// llmBench is one fake Anthropic API and three clients of it: direct (TLS,
// no proxy), through a proxy whose session has no rewrites, and through a
// proxy whose session redacts prompts and restores answers (the default
// policy's redact-llm-prompts rule). Both proxies decide by the default
// policy, so the rewrite stage is the only difference between them.
type llmBench struct {
	url     string // the messages endpoint
	clients map[string]*http.Client
	scanner *secrets.Scanner
	red     *secrets.Redactor

	// While keep is set, the upstream keeps the last body it received, for
	// the checks made before timing; unset, it records nothing, so that
	// thousands of 100 KB bodies do not pile up.
	keep atomic.Bool
	last atomic.Pointer[[]byte]
}

// newLLMBench starts the upstream, whose streamed answers wait gap between
// SSE events, and the two proxies.
func newLLMBench(b *testing.B, gap time.Duration) *llmBench {
	b.Helper()
	pol, err := policy.Parse("default", policy.DefaultPolicyYAML())
	if err != nil {
		b.Fatal(err)
	}
	eng, err := policy.NewEngine(pol, policy.EngineOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sc, err := secrets.NewScanner(secrets.Options{})
	if err != nil {
		b.Fatal(err)
	}
	key := bytes.Repeat([]byte{0x5a}, 32) // placeholders need not differ between runs
	lb := &llmBench{clients: map[string]*http.Client{}, scanner: sc, red: secrets.NewRedactor(sc, key)}
	rw := &Rewrites{Redactor: lb.red, Scanner: sc, Restore: true, RewriteParams: eng.RewriteParams}

	plain := newEnv(b, envOptions{decider: eng})
	rewriting := newEnv(b, envOptions{decider: eng, rewrites: rw, roots: plain.upCA.Pool})
	for _, e := range []*env{plain, rewriting} {
		e.p.publishFn = func(*event.Event) {} // a bus that keeps nothing
	}

	addr := lb.startUpstream(b, plain.upCA, gap)
	for _, e := range []*env{plain, rewriting} {
		e.namesMu.Lock()
		e.names[llmBenchHost] = addr.Addr().Unmap()
		e.namesMu.Unlock()
	}
	hostPort := net.JoinHostPort(llmBenchHost, fmt.Sprint(addr.Port()))
	lb.url = "https://" + hostPort + "/v1/messages"

	var d net.Dialer
	direct := &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			if a != hostPort {
				return nil, fmt.Errorf("bench: dial %s: not the fake LLM API", a)
			}
			return d.DialContext(ctx, network, addr.String())
		},
		TLSClientConfig: &stdtls.Config{RootCAs: plain.upCA.Pool, NextProtos: []string{"http/1.1"}},
	}
	b.Cleanup(direct.CloseIdleConnections)
	lb.clients["direct"] = &http.Client{Transport: direct, Timeout: 20 * time.Second}
	lb.clients["proxy"], _ = plain.client(false)
	lb.clients["proxy-rewrite"], _ = rewriting.client(false)
	return lb
}

// startUpstream serves upstream.LLMHandler on 127.0.0.2 with a
// certificate of ca for llmBenchHost. It is not an upstream.Server, which
// records every body it receives.
func (lb *llmBench) startUpstream(b *testing.B, ca *upstream.CA, gap time.Duration) netip.AddrPort {
	b.Helper()
	cert, err := ca.Leaf(llmBenchHost, "127.0.0.2")
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		b.Fatal(err)
	}
	llm := upstream.LLMHandler(3)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if lb.keep.Load() {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					http.Error(w, "bad body", http.StatusBadRequest)
					return
				}
				lb.last.Store(&body)
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			llm.ServeHTTP(&pacedWriter{ResponseWriter: w, gap: gap}, r)
		}),
		TLSConfig: &stdtls.Config{Certificates: []stdtls.Certificate{cert}},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeTLS(ln, "", "") // ErrServerClosed after Close
	}()
	b.Cleanup(func() {
		srv.Close()
		<-served
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// pacedWriter holds every flush of a streamed answer but the first for
// gap, so that the SSE events reach the proxy gap apart: a proxy that
// buffered the stream would show a time to first byte close to the whole
// exchange's.
type pacedWriter struct {
	http.ResponseWriter
	gap     time.Duration
	flushed bool
}

func (w *pacedWriter) Flush() {
	if w.flushed && w.gap > 0 {
		time.Sleep(w.gap)
	}
	w.flushed = true
	w.ResponseWriter.(http.Flusher).Flush()
}

// send posts body with client name and fails b unless the answer is 200.
func (lb *llmBench) send(b *testing.B, name string, body []byte) *http.Response {
	req, err := http.NewRequest(http.MethodPost, lb.url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	res, err := lb.clients[name].Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 300))
		res.Body.Close()
		b.Fatalf("%s: status %d: %s", name, res.StatusCode, msg)
	}
	return res
}

// exchange sends body with client name and returns the answer.
func (lb *llmBench) exchange(b *testing.B, name string, body []byte) []byte {
	res := lb.send(b, name, body)
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
	if err != nil {
		b.Fatal(err)
	}
	return answer
}

// inspect sends body with client name and returns what the upstream
// received and the answer.
func (lb *llmBench) inspect(b *testing.B, name string, body []byte) (received, answer []byte) {
	b.Helper()
	lb.keep.Store(true)
	defer lb.keep.Store(false)
	lb.last.Store(nil)
	answer = lb.exchange(b, name, body)
	p := lb.last.Load()
	if p == nil {
		b.Fatalf("%s: the upstream received nothing", name)
	}
	return *p, answer
}

// BenchmarkLLMRequest100KB measures a non-streamed 100 KB Anthropic
// messages request (a coding agent's conversation: system prompt, turns
// of prose, tool calls and source files) direct, through the proxy
// without rewrites, and through the proxy redacting the prompt: without a
// secret to find, and with five GitHub tokens spread over the
// conversation. The difference between proxy and proxy-redact-* is the
// rewrite stage: reading the body, recognising the call and deciding its
// llm event, scanning every string of the prompt, rewriting it, and
// parsing (and restoring) the answer.
func BenchmarkLLMRequest100KB(b *testing.B) {
	lb := newLLMBench(b, 0)
	var toks, fillers [5]string
	for i := range toks {
		toks[i] = fakeToken(b)
		// Same length, nothing a rule finds: both bodies are the same size.
		fillers[i] = ("${{ secrets.RELEASE_TOKEN }}" + strings.Repeat("_", len(toks[i])))[:len(toks[i])]
	}
	clean, dirty := conversationBody(b, fillers), conversationBody(b, toks)
	if len(clean) != len(dirty) {
		b.Fatalf("clean body %d bytes, with secrets %d", len(clean), len(dirty))
	}
	if fs := lb.scanner.Scan(clean); len(fs) != 0 {
		b.Fatalf("the clean body has %d findings (%s…)", len(fs), fs[0].RuleID)
	}
	if fs := lb.scanner.Scan(dirty); len(fs) != len(toks) {
		b.Fatalf("the body with secrets has %d findings, want %d", len(fs), len(toks))
	}

	// The bodies reach the upstream as each variant should send them.
	for _, name := range []string{"direct", "proxy", "proxy-rewrite"} {
		if got, _ := lb.inspect(b, name, clean); !bytes.Equal(got, clean) {
			b.Fatalf("%s: the upstream received a changed clean body", name)
		}
	}
	got, answer := lb.inspect(b, "proxy-rewrite", dirty)
	if n := bytes.Count(got, []byte(secrets.PlaceholderPrefix+"github-pat:")); n != len(toks) || !json.Valid(got) {
		b.Fatalf("the upstream received %d placeholders (valid JSON %t), want %d", n, json.Valid(got), len(toks))
	}
	for _, tok := range toks {
		if bytes.Contains(got, []byte(tok)) {
			b.Fatal("a secret reached the upstream")
		}
	}
	if !bytes.Contains(answer, []byte(toks[4])) || bytes.Contains(answer, []byte(secrets.PlaceholderPrefix)) {
		b.Fatal("the answer did not get the secret of the last message back")
	}

	variants := []struct {
		name, client string
		body         []byte
	}{
		{"direct", "direct", clean},
		{"proxy", "proxy", clean},
		{"proxy-redact-clean", "proxy-rewrite", clean},
		{"proxy-redact-5secrets", "proxy-rewrite", dirty},
	}
	for _, v := range variants {
		for range 3 { // warm the connections
			lb.exchange(b, v.client, v.body)
		}
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(v.body)))
			b.ReportAllocs()
			for b.Loop() {
				res := lb.send(b, v.client, v.body)
				_, err := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStreamTTFB measures a streamed Anthropic answer whose SSE
// events come 2 ms apart: ns-ttfb/op is the time from sending the request
// to having read the first event, ns/op the whole exchange. proxy-restore
// is a session that redacts prompts and restores answers: its agent sends
// a secret, the proxy sends the upstream its placeholder, and the answer,
// which quotes it, gets the secret back. The other variants send the
// placeholder itself, so the upstream receives the same body and streams
// the same events in all three.
func BenchmarkStreamTTFB(b *testing.B) {
	const gap = 2 * time.Millisecond
	lb := newLLMBench(b, gap)
	tok := fakeToken(b)
	prompt := "deploy with token " + tok + " please"
	redacted, ids := lb.red.Redact(prompt)
	if len(ids) != 1 {
		b.Fatalf("the prompt has %d secrets, want 1", len(ids))
	}
	withSecret, withPlaceholder := streamBody(b, prompt), streamBody(b, redacted)

	sent, _ := lb.inspect(b, "direct", withPlaceholder)
	got, answer := lb.inspect(b, "proxy-rewrite", withSecret)
	if !bytes.Equal(got, sent) {
		b.Fatal("the upstream received different bodies direct and with proxy-restore")
	}
	if text := sseText(b, answer); !strings.Contains(text, tok) || strings.Contains(text, secrets.PlaceholderPrefix) {
		b.Fatal("the streamed answer did not get the secret back")
	}

	variants := []struct {
		name, client string
		body         []byte
	}{
		{"direct", "direct", withPlaceholder},
		{"proxy", "proxy", withPlaceholder},
		{"proxy-restore", "proxy-rewrite", withSecret},
	}
	for _, v := range variants {
		for range 3 {
			lb.exchange(b, v.client, v.body)
		}
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 4<<10)
			var ttfb time.Duration
			var n int
			for b.Loop() {
				t0 := time.Now()
				res := lb.send(b, v.client, v.body)
				first, err := readFirstEvent(res.Body, buf)
				ttfb += time.Since(t0)
				if err != nil || !bytes.HasPrefix(first, []byte("event: message_start\n")) {
					res.Body.Close()
					b.Fatalf("first event %.80q, %v", first, err)
				}
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(ttfb.Nanoseconds())/float64(n), "ns-ttfb/op")
		})
	}
}

// readFirstEvent reads r into buf until it holds a whole SSE event and
// returns what it read.
func readFirstEvent(r io.Reader, buf []byte) ([]byte, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if bytes.Contains(buf[:n], []byte("\n\n")) {
			return buf[:n], nil
		}
		if err != nil {
			return buf[:n], err
		}
	}
	return buf[:n], fmt.Errorf("no event in the first %d bytes", n)
}

// sseText joins the text deltas of a streamed Anthropic answer.
func sseText(b *testing.B, stream []byte) string {
	var text strings.Builder
	for line := range strings.Lines(string(stream)) {
		data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Delta struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			b.Fatalf("SSE data is not JSON: %v", err)
		}
		if ev.Delta.Type == "text_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	return text.String()
}

// streamBody is a short streamed Anthropic request whose last user
// message is text, with one tool.
func streamBody(b *testing.B, text string) []byte {
	body, err := json.Marshal(map[string]any{
		"model": "claude-test", "max_tokens": 1024, "stream": true,
		"system":   "You are a coding agent.",
		"messages": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "text", "text": text}}}},
		"tools":    []map[string]any{{"name": "bash", "input_schema": map[string]string{"type": "object"}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// conversationBody is a non-streamed Anthropic messages request of about
// 100 KB, the same for the same slots: a system prompt, then turns of a
// coding session (the user's questions, the assistant's prose and tool
// calls, tool results holding source files), ending with a user message.
// The five slots go into a .env file, a CI config, a user message, an
// assistant message and the last user message.
func conversationBody(b *testing.B, slot [5]string) []byte {
	const target = 100 << 10
	for turns := 8; ; turns++ {
		body := conversation(b, slot, turns)
		if len(body) >= target {
			return body
		}
	}
}

func conversation(b *testing.B, slot [5]string, turns int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(l []string) string { return l[rng.IntN(len(l))] }
	sentences := []string{
		"The handler reads the whole body before it decides, so a slow client holds a goroutine for as long as it takes.",
		"Tests start their own servers on loopback addresses and never resolve a name through the machine's resolver.",
		"A cache entry expires after its TTL; a miss fetches the record again and replaces the entry under the lock.",
		"Errors are wrapped with the package name as a prefix so that the log says where a failure came from.",
		"The retry loop backs off exponentially with jitter and gives up after the context's deadline.",
		"I will read the file first to see how the client is built, then change the constructor to take the timeout.",
		"The migration adds a nullable column first, backfills it in batches, and only then makes it NOT NULL.",
		"This function is called from two goroutines, so the map needs the mutex or a sync.Map instead.",
		"The benchmark compares the new path with the old one in the same run, so machine noise affects both alike.",
		"Let me run the tests of that package with the race detector to make sure the fix does not hide a data race.",
	}
	prose := func(n int) string {
		var s strings.Builder
		for i := range n {
			if i > 0 {
				s.WriteByte(' ')
			}
			s.WriteString(pick(sentences))
		}
		return s.String()
	}
	pkgs := []string{"billing", "accounts", "ledger", "invoice", "storage", "gateway"}
	types := []string{"Client", "Store", "Fetcher", "Cache", "Syncer", "Resolver"}
	nouns := []string{"Invoice", "Account", "Payment", "Record", "Ledger", "Tenant"}
	goFile := func() string {
		pkg, typ, noun := pick(pkgs), pick(types), pick(nouns)
		return fmt.Sprintf(`package %[1]s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// %[2]s fetches the %[3]s records of an account and caches them for ttl.
type %[2]s struct {
	client *http.Client
	base   string
	ttl    time.Duration

	mu    sync.Mutex
	cache map[string]%[4]sEntry
}

type %[4]sEntry struct {
	records []%[3]s
	expires time.Time
}

// %[3]s is one record as the API returns it.
type %[3]s struct {
	ID        string    `+"`json:\"id\"`"+`
	Amount    int64     `+"`json:\"amount\"`"+`
	Currency  string    `+"`json:\"currency\"`"+`
	CreatedAt time.Time `+"`json:\"created_at\"`"+`
}

var errNotFound = errors.New("%[1]s: not found")

// Get returns the records of account, from the cache while they are fresh.
func (c *%[2]s) Get(ctx context.Context, account string) ([]%[3]s, error) {
	c.mu.Lock()
	e, ok := c.cache[account]
	c.mu.Unlock()
	if ok && time.Now().Before(e.expires) {
		return e.records, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/accounts/"+account+"/%[1]s", nil)
	if err != nil {
		return nil, fmt.Errorf("%[1]s: get %%s: %%w", account, err)
	}
	res, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%[1]s: get %%s: %%w", account, err)
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, errNotFound
	default:
		return nil, fmt.Errorf("%[1]s: get %%s: status %%d", account, res.StatusCode)
	}
	var out []%[3]s
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%[1]s: decode %%s: %%w", account, err)
	}
	c.mu.Lock()
	c.cache[account] = %[4]sEntry{records: out, expires: time.Now().Add(c.ttl)}
	c.mu.Unlock()
	return out, nil
}
`, pkg, typ, noun, strings.ToLower(typ[:1])+typ[1:])
	}

	type block = map[string]any
	text := func(s string) []block { return []block{{"type": "text", "text": s}} }
	var msgs []map[string]any
	add := func(role string, content []block) {
		msgs = append(msgs, map[string]any{"role": role, "content": content})
	}
	add("user", text("The "+pick(pkgs)+" service times out under load. "+prose(3)))
	for i := range turns {
		id := fmt.Sprintf("toolu_%03d", i)
		var call block
		var result string
		switch i {
		case 1:
			call = block{"command": "cat .env"}
			result = "GITHUB_TOKEN=" + slot[0] + "\nDATABASE_URL=postgres://app@127.0.0.1:5432/app?sslmode=disable\nLOG_LEVEL=debug\n"
		case 4:
			call = block{"command": "cat .github/workflows/release.yaml"}
			result = "name: release\non:\n  push:\n    tags: ['v*']\njobs:\n  release:\n    runs-on: ubuntu-latest\n    env:\n      GH_TOKEN: " +
				slot[1] + "\n    steps:\n      - uses: actions/checkout@v4\n      - run: make release\n"
		default:
			path := fmt.Sprintf("internal/%s/%s.go", pick(pkgs), strings.ToLower(pick(types)))
			call = block{"command": "cat " + path}
			result = goFile()
		}
		say := prose(2 + rng.IntN(3))
		if i == 6 {
			say = "The workflow hard-codes a token (" + slot[3] + "); it should come from the repository's secrets. " + say
		}
		add("assistant", []block{
			{"type": "text", "text": say},
			{"type": "tool_use", "id": id, "name": "bash", "input": call},
		})
		add("user", []block{{"type": "tool_result", "tool_use_id": id, "content": result}})
		if i%5 == 2 {
			add("assistant", text(prose(4)))
			ask := prose(2)
			if i == 2 {
				ask = "I rotated the token, the new one is " + slot[2] + ". " + ask
			}
			add("user", text(ask))
		}
	}
	add("assistant", text(prose(3)))
	add("user", text("Good. Use "+slot[4]+" to push the tag, then run the release workflow and tell me when it is green."))

	body, err := json.Marshal(map[string]any{
		"model": "claude-test", "max_tokens": 8192, "stream": false,
		"system": []block{{"type": "text", "text": "You are a coding agent working in a Go repository. " + prose(12)}},
		"tools": []block{
			{"name": "bash", "description": "Run a shell command in the repository.",
				"input_schema": block{"type": "object", "properties": block{"command": block{"type": "string"}}, "required": []string{"command"}}},
		},
		"messages": msgs,
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}
