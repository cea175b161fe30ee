package proxy

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/rewrite"
	"github.com/chaperone-dev/chaperone/rewrite/inject"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// fakeToken returns a GitHub-token-shaped secret made for this test.
func fakeToken(testing.TB) string { return upstream.FakeGitHubToken() }

// rewriteEnv is a proxy deciding by the default policy, with rewrites for
// the test session, and a fake LLM API at api.anthropic.com and
// api.openai.com.
type rewriteEnv struct {
	*env
	rw    *Rewrites
	llm   *upstream.Server
	oai   *upstream.Server
	mu    sync.Mutex
	tasks []string
}

func newRewriteEnv(t *testing.T, configure func(*Rewrites)) *rewriteEnv {
	t.Helper()
	return newRewriteEnvPolicy(t, policy.DefaultPolicyYAML(), configure)
}

// newRewriteEnvPolicy is newRewriteEnv deciding by the policy src.
func newRewriteEnvPolicy(t *testing.T, src []byte, configure func(*Rewrites)) *rewriteEnv {
	t.Helper()
	eng, rw := policyRewrites(t, src)
	re := &rewriteEnv{}
	re.rw = rw
	rw.Task = func(task string) {
		re.mu.Lock()
		defer re.mu.Unlock()
		re.tasks = append(re.tasks, task)
	}
	if configure != nil {
		configure(re.rw)
	}
	re.env = newEnv(t, envOptions{decider: eng, rewrites: re.rw})
	re.llm = re.upstream(upstream.Options{Name: "api.anthropic.com", CA: re.upCA, Handler: upstream.LLMHandler(3)})
	re.oai = re.upstream(upstream.Options{Name: "api.openai.com", Addr: "127.0.0.3:0", CA: re.upCA, Handler: upstream.LLMHandler(4)})
	return re
}

// policyRewrites is the engine of the policy src and the rewrites of a
// session deciding by it: secrets redacted with a random key, restored in
// answers.
func policyRewrites(t testing.TB, src []byte) (*policy.Engine, *Rewrites) {
	t.Helper()
	pol, err := policy.Parse("test", src)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(pol, policy.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := secrets.NewScanner(secrets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	return eng, &Rewrites{Redactor: secrets.NewRedactor(sc, key), Scanner: sc, Restore: true, RewriteParams: eng.RewriteParams}
}

// post sends body to url through the proxy and returns the status and the
// response body.
func (re *rewriteEnv) post(t *testing.T, url string, header http.Header, body []byte) (int, string) {
	t.Helper()
	c, _ := re.client(false)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

func anthropicBody(t *testing.T, stream bool, text string) []byte {
	b, err := json.Marshal(map[string]any{
		"model": "claude-test", "max_tokens": 100, "stream": stream,
		"system":   "You are a coding agent.",
		"messages": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "text", "text": text}}}},
		"tools":    []map[string]any{{"name": "bash", "input_schema": map[string]string{"type": "object"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A secret in a prompt never reaches the LLM API; the answer that quotes
// it gets the real value back, streamed or not; the llm event carries the
// usage and tool calls, the http event what was redacted.
func TestRedactLLMPrompt(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "json"}[stream], func(t *testing.T) {
			re := newRewriteEnv(t, nil)
			tok := fakeToken(t)
			prompt := "deploy with token " + tok + " please"
			status, answer := re.post(t, "https://"+hostPort(re.llm)+"/v1/messages", nil, anthropicBody(t, stream, prompt))
			if status != 200 {
				t.Fatalf("status %d: %s", status, answer)
			}
			got := re.llm.Requests()
			if len(got) != 1 {
				t.Fatalf("upstream got %d requests", len(got))
			}
			sent := got[0].Body
			if bytes.Contains(sent, []byte(tok)) {
				t.Fatal("the secret reached the LLM API")
			}
			if !json.Valid(sent) || !bytes.Contains(sent, []byte("[REDACTED:github-pat:")) {
				t.Errorf("upstream body is not valid JSON with a placeholder: %.300s", sent)
			}
			if !strings.Contains(answer, tok) && !strings.Contains(strings.ReplaceAll(answer, `"`, ""), tok) {
				// The streamed answer is split into deltas: join their text.
				t.Errorf("the answer did not get the secret back:\n%.600s", answer)
			}
			if strings.Contains(answer, "[REDACTED:") {
				t.Errorf("a placeholder reached the agent:\n%.600s", answer)
			}

			llm := re.rec.wait(t, "llm event", func(e *event.Event) bool { return e.Kind == event.KindLLM })
			want := event.LLM{Provider: "anthropic", Model: "claude-test", Path: "/v1/messages", Operation: "messages", Stream: stream,
				Status: 200, ResponseModel: "claude-test", InputTokens: 12, OutputTokens: 34, CacheReadTokens: 3, CacheCreationTokens: 4,
				FinishReasons: []string{"tool_use"}, ToolCalls: []event.ToolCall{{ID: "toolu_01", Name: "bash"}}, Restored: 1}
			// When the answer named the call is checked by TestToolCallTimes;
			// the prompt and latency by TestLLMPrompt.
			if d := cmp.Diff(want, *llm.LLM, cmpopts.IgnoreFields(event.ToolCall{}, "Time"), cmpopts.IgnoreFields(event.LLM{}, "Prompt", "Latency")); d != "" {
				t.Errorf("llm event (-want +got):\n%s", d)
			}
			if strings.Contains(llm.LLM.Prompt, tok) {
				t.Error("the secret is in the llm event's prompt")
			} else if !strings.HasPrefix(llm.LLM.Prompt, "deploy with token [REDACTED:github-pat:") {
				t.Errorf("prompt %q: want the prompt, redacted", llm.LLM.Prompt)
			}
			if llm.Verdict.Action != event.Rewrite || llm.Verdict.Rule != "redact-llm-prompts" {
				t.Errorf("llm verdict %v", llm.Verdict)
			}
			h := re.rec.wait(t, "http event", func(e *event.Event) bool { return e.Kind == event.KindHTTP })
			if h.HTTP.Rewrite == nil || h.HTTP.Rewrite.Redacted["github-pat"] != 1 {
				t.Errorf("http event rewrite = %+v", h.HTTP.Rewrite)
			}
			if len(h.HTTP.Secrets) != 0 {
				t.Errorf("secrets left in the request as sent: %v", h.HTTP.Secrets)
			}
			re.mu.Lock()
			defer re.mu.Unlock()
			if len(re.tasks) != 1 || strings.Contains(re.tasks[0], tok) || !strings.Contains(re.tasks[0], "deploy with token [REDACTED:github-pat:") {
				t.Errorf("tasks %q: want the prompt, redacted", re.tasks)
			}
		})
	}
}

// The task the judge reads is cut at rewrite.MaxTaskBytes only after the
// whole last user turn was searched: a secret across the bound is neither
// sent whole nor in part.
func TestTaskSecretAcrossTheBound(t *testing.T) {
	re := newRewriteEnv(t, nil)
	tok := fakeToken(t)
	pad := strings.Repeat("x ", (rewrite.MaxTaskBytes-len(tok)/2)/2)
	if status, body := re.post(t, re.llm.URL+"/v1/messages", nil, anthropicBody(t, false, pad+tok+" please")); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	re.mu.Lock()
	defer re.mu.Unlock()
	if len(re.tasks) != 1 {
		t.Fatalf("%d tasks, want 1", len(re.tasks))
	}
	task := re.tasks[0]
	if len(task) > rewrite.MaxTaskBytes {
		t.Errorf("task of %d bytes, want at most %d", len(task), rewrite.MaxTaskBytes)
	}
	if i := strings.LastIndex(task, "x "); strings.Contains(task[i+2:], tok[:8]) {
		t.Errorf("the task ends with part of the secret (%d bytes after the padding)", len(task)-i-2)
	}
}

// The placeholder is restored also in OpenAI's format, and the same secret
// gets the same placeholder each time (prompt caching keeps working).
func TestRedactOpenAIDeterministic(t *testing.T) {
	re := newRewriteEnv(t, nil)
	tok := fakeToken(t)
	body := []byte(`{"model":"gpt-test","stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"key ` + tok + `"}]}`)
	for range 2 {
		status, answer := re.post(t, "https://"+hostPort(re.oai)+"/v1/chat/completions", nil, body)
		if status != 200 || !strings.Contains(answer, "data: [DONE]") {
			t.Fatalf("status %d: %s", status, answer)
		}
	}
	reqs := re.oai.Requests()
	if len(reqs) != 2 || !bytes.Equal(reqs[0].Body, reqs[1].Body) || bytes.Contains(reqs[0].Body, []byte(tok)) {
		t.Fatalf("upstream bodies differ or hold the secret:\n%s\n%s", reqs[0].Body, reqs[1].Body)
	}
}

// A secret sent to a host that is not an LLM API is found before the
// policy decides: the default policy refuses it.
func TestSecretsToOtherHosts(t *testing.T) {
	re := newRewriteEnv(t, nil)
	paste := re.upstream(upstream.Options{Name: "paste.test", Addr: "127.0.0.4:0", CA: re.upCA})
	status, body := re.post(t, "https://"+hostPort(paste)+"/upload", http.Header{"Content-Type": {"text/plain"}}, []byte("token="+fakeToken(t)))
	if status != http.StatusForbidden || !strings.Contains(body, "no-secrets-to-other-hosts") {
		t.Errorf("status %d: %s", status, body)
	}
	if n := len(paste.Requests()); n != 0 {
		t.Errorf("the host received %d requests", n)
	}
	h := re.rec.wait(t, "http event", func(e *event.Event) bool { return e.Kind == event.KindHTTP })
	if d := cmp.Diff([]string{"github-pat"}, h.HTTP.Secrets); d != "" {
		t.Errorf("http.secrets (-want +got):\n%s", d)
	}
	// Without a secret, the same upload goes through.
	if status, body := re.post(t, "https://"+hostPort(paste)+"/upload", nil, []byte(`{"note":"nothing secret"}`)); status != 200 {
		t.Errorf("clean upload: %d %s", status, body)
	}
}

// A gzip-encoded prompt is decoded, redacted and encoded again.
func TestRedactGzipPrompt(t *testing.T) {
	re := newRewriteEnv(t, nil)
	tok := fakeToken(t)
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(anthropicBody(t, false, "token "+tok))
	zw.Close()
	status, answer := re.post(t, "https://"+hostPort(re.llm)+"/v1/messages", http.Header{"Content-Encoding": {"gzip"}}, zb.Bytes())
	// The fake API does not decode gzip: it answers 400, which is fine;
	// what matters is what it received.
	_ = answer
	_ = status
	reqs := re.llm.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	zr, err := gzip.NewReader(bytes.NewReader(reqs[0].Body))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(plain, []byte(tok)) || !bytes.Contains(plain, []byte("[REDACTED:github-pat:")) || !json.Valid(plain) {
		t.Errorf("upstream got %.300s", plain)
	}
}

// A SigV4-signed Bedrock request cannot be changed: a secret in it is
// refused, saying why.
func TestSignedBedrockWithSecretIsRefused(t *testing.T) {
	re := newRewriteEnv(t, nil)
	bed := re.upstream(upstream.Options{Name: "bedrock-runtime.us-east-1.amazonaws.com", Addr: "127.0.0.5:0", CA: re.upCA})
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"token ` + fakeToken(t) + `"}]}]}`)
	hdr := http.Header{"Authorization": {"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=abc"}}
	status, msg := re.post(t, "https://"+hostPort(bed)+"/model/anthropic.claude-3/converse", hdr, body)
	if status != http.StatusForbidden || !strings.Contains(msg, "signed (SigV4)") {
		t.Errorf("status %d: %s", status, msg)
	}
	if n := len(bed.Requests()); n != 0 {
		t.Errorf("bedrock received %d requests", n)
	}
}

// A rule may let signed requests go unchanged; and a rewrite rule on http
// redacts the bodies it matches, for hosts that are not LLM APIs.
func TestRewriteRuleParams(t *testing.T) {
	re := newRewriteEnvPolicy(t, []byte(`
rules:
  - name: bedrock-signed-ok
    on: llm
    when: llm.provider == "bedrock"
    action: rewrite
    rewrite: {redact_secrets: true, on_signed: allow}
  - name: redact-pastes
    on: http
    when: host.startsWith("paste.")
    action: rewrite
    rewrite: {redact_secrets: true}
default: allow
`), nil)
	tok := fakeToken(t)
	bed := re.upstream(upstream.Options{Name: "bedrock-runtime.us-east-1.amazonaws.com", Addr: "127.0.0.5:0", CA: re.upCA})
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"token ` + tok + `"}]}]}`)
	hdr := http.Header{"Authorization": {"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=abc"}}
	if status, msg := re.post(t, "https://"+hostPort(bed)+"/model/anthropic.claude-3/converse", hdr, body); status != 200 {
		t.Errorf("signed request with on_signed allow: %d %s", status, msg)
	}
	if got := bed.Requests(); len(got) != 1 || !bytes.Equal(got[0].Body, body) {
		t.Errorf("the signed request was not sent unchanged")
	}

	paste := re.upstream(upstream.Options{Name: "paste.test", Addr: "127.0.0.4:0", CA: re.upCA})
	if status, msg := re.post(t, "https://"+hostPort(paste)+"/new", http.Header{"Content-Type": {"text/plain"}}, []byte("my token is "+tok+"\n")); status != 200 {
		t.Fatalf("paste: %d %s", status, msg)
	}
	got := paste.Requests()[0].Body
	if bytes.Contains(got, []byte(tok)) || !bytes.HasPrefix(got, []byte("my token is [REDACTED:github-pat:")) {
		t.Errorf("the paste host got %q", got)
	}
	h := re.rec.wait(t, "paste http event", func(e *event.Event) bool {
		return e.Kind == event.KindHTTP && e.HTTP.Host == hostPort(paste)
	})
	if h.Verdict.Action != event.Rewrite || h.Verdict.Rule != "redact-pastes" || h.HTTP.Rewrite == nil || h.HTTP.Rewrite.Redacted["github-pat"] != 1 {
		t.Errorf("paste event: verdict %v, rewrite %+v", h.Verdict, h.HTTP.Rewrite)
	}
}

// Brokered credentials: the placeholder becomes the real value only on
// the bound host; anywhere else the request is refused.
func TestCredentialBroker(t *testing.T) {
	real := fakeToken(t)
	var broker *inject.Broker
	re := newRewriteEnv(t, func(rw *Rewrites) {
		b, err := inject.NewBroker([]inject.Credential{{Name: "github", Value: real, Hosts: []string{"api.github.test"},
			Header: "Authorization", Format: "Bearer {value}"}}, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		broker, rw.Credentials = b, b
	})
	gh := re.upstream(upstream.Options{Name: "api.github.test", Addr: "127.0.0.4:0", CA: re.upCA})
	other := re.upstream(upstream.Options{Name: "other.test", Addr: "127.0.0.5:0", CA: re.upCA})
	ph := broker.Placeholder("github")
	auth := http.Header{"Authorization": {"Bearer " + ph}}

	if status, body := re.post(t, "https://"+hostPort(gh)+"/user", auth, []byte(`{}`)); status != 200 {
		t.Fatalf("bound host: %d %s", status, body)
	}
	if got := gh.Requests()[0].Header.Get("Authorization"); got != "Bearer "+real {
		t.Errorf("bound host got Authorization %q, want the real token", strings.ReplaceAll(got, real, "<real>"))
	}
	status, body := re.post(t, "https://"+hostPort(other)+"/steal", auth, []byte(`{}`))
	if status != http.StatusForbidden || !strings.Contains(body, "credential github") || strings.Contains(body, real) {
		t.Errorf("other host: %d %s", status, body)
	}
	if n := len(other.Requests()); n != 0 {
		t.Errorf("the other host received %d requests", n)
	}
	for _, e := range re.rec.all() {
		b, _ := json.Marshal(e)
		if bytes.Contains(b, []byte(real)) {
			t.Errorf("an event holds the real credential: %s event", e.Kind)
		}
	}
}

// Identity headers are set on LLM API calls, from what the OS says, and
// replace any the agent set; other hosts get none.
func TestIdentityHeaders(t *testing.T) {
	re := newRewriteEnv(t, func(rw *Rewrites) {
		rw.IdentityPresets = []string{"chaperone", "w3c"}
		rw.Identity = inject.Identity{Session: testSession, Agent: "claude-code", TraceID: [16]byte{1, 2, 3}}
	})
	spoof := http.Header{"X-Chaperone-Session": {"spoofed"}, "Traceparent": {"00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"}}
	if status, body := re.post(t, "https://"+hostPort(re.llm)+"/v1/messages", spoof, anthropicBody(t, false, "hello")); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	h := re.llm.Requests()[0].Header
	if got := h.Values("X-Chaperone-Session"); len(got) != 1 || got[0] != testSession {
		t.Errorf("X-Chaperone-Session = %q", got)
	}
	if got := h.Get("Traceparent"); !strings.HasPrefix(got, "00-01020300000000000000000000000000-") {
		t.Errorf("Traceparent = %q", got)
	}
	plain := re.upstream(upstream.Options{Name: "docs.test", Addr: "127.0.0.4:0", CA: re.upCA})
	re.post(t, "https://"+hostPort(plain)+"/x", nil, []byte(`{}`))
	if got := plain.Requests()[0].Header.Get("X-Chaperone-Session"); got != "" {
		t.Errorf("a plain host got identity headers: %q", got)
	}
	ev := re.rec.wait(t, "llm http event", func(e *event.Event) bool {
		return e.Kind == event.KindHTTP && e.HTTP.Rewrite != nil && len(e.HTTP.Rewrite.Headers) > 0
	})
	if !contains(ev.HTTP.Rewrite.Headers, "X-Chaperone-Session") {
		t.Errorf("rewrite headers %v", ev.HTTP.Rewrite.Headers)
	}
	// The event shows the header as the agent sent it, before the rewrite
	// (here a header with no credential to redact, which the event shares).
	sent := "00-eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee-eeeeeeeeeeeeeeee-01"
	if status, body := re.post(t, "https://"+hostPort(re.llm)+"/v1/messages", http.Header{"Traceparent": {sent}},
		anthropicBody(t, false, "hello")); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	ev = re.rec.wait(t, "second llm http event", func(e *event.Event) bool {
		return e.Kind == event.KindHTTP && e.HTTP.Rewrite != nil && slices.Equal(e.HTTP.Header["Traceparent"], []string{sent})
	})
	if got := ev.HTTP.Header["X-Chaperone-Session"]; got != nil {
		t.Errorf("the event shows the proxy's X-Chaperone-Session %q", got)
	}
	if got := ev.HTTP.Header["Accept-Encoding"]; len(got) == 1 && got[0] == "identity" {
		t.Errorf("the event shows the proxy's Accept-Encoding %q", got)
	}
	if reqs := re.llm.Requests(); reqs[len(reqs)-1].Header.Get("Traceparent") == sent {
		t.Errorf("the agent's Traceparent went upstream")
	}
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// fakePEM is a PEM private key whose body is random (no rule checks it).
func fakePEM(t *testing.T) string {
	var b strings.Builder
	b.WriteString("-----BEGIN RSA PRIVATE KEY-----\n")
	raw := make([]byte, 48)
	for range 10 {
		rand.Read(raw)
		b.WriteString(base64.StdEncoding.EncodeToString(raw) + "\n")
	}
	b.WriteString("-----END RSA PRIVATE KEY-----\n")
	return b.String()
}

// mustJSON is v as encoding/json writes it.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An LLM call's http.secrets are what the redactor saw in its strings,
// decoded, JSON in them included, and left: a private key inside a tool
// call's arguments and quoted escaped in prose, next to a prompt cache
// key, is redacted and the call goes through, with nothing in
// http.secrets.
func TestLLMSecretsAsTheRedactorSees(t *testing.T) {
	re := newRewriteEnv(t, nil)
	inArgs, inOutput, inProse := fakePEM(t), fakePEM(t), fakePEM(t)
	body := mustJSON(t, map[string]any{
		"model": "gpt-test", "stream": false, "prompt_cache_key": "0b5e2c1c-5d7e-4c55-9a4f-0b3f5c0de0a1",
		"messages": []any{
			// Escaped once in the prose, twice in the body as sent.
			map[string]any{"role": "user", "content": "the key file reads " + mustJSON(t, inProse)},
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "write", "arguments": mustJSON(t, map[string]string{"path": "k.pem", "content": inArgs})}}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": mustJSON(t, map[string]string{"output": inOutput})},
		},
	})
	status, answer := re.post(t, "https://"+hostPort(re.oai)+"/v1/chat/completions", nil, []byte(body))
	if status != 200 {
		t.Fatalf("status %d: %s", status, answer)
	}
	sent := re.oai.Requests()[0].Body
	for name, pem := range map[string]string{"tool call arguments": inArgs, "tool output": inOutput} {
		for _, line := range strings.Split(pem, "\n")[1:11] {
			if bytes.Contains(sent, []byte(line)) {
				t.Fatalf("a line of the private key in the %s reached the LLM API", name)
			}
		}
	}
	if !json.Valid(sent) || !bytes.Contains(sent, []byte(`"prompt_cache_key":"0b5e2c1c-5d7e-4c55-9a4f-0b3f5c0de0a1"`)) {
		t.Errorf("the body sent is not JSON, or lost its prompt cache key")
	}
	h := re.rec.wait(t, "http event", func(e *event.Event) bool { return e.Kind == event.KindHTTP })
	if len(h.HTTP.Secrets) != 0 {
		t.Errorf("http.secrets = %v, want none: the prompt was redacted", h.HTTP.Secrets)
	}
	if h.HTTP.Rewrite == nil || h.HTTP.Rewrite.Redacted["private-key"] < 2 {
		t.Errorf("http event rewrite = %+v, want 2 private keys redacted or more", h.HTTP.Rewrite)
	}
}

// A prompt that the policy lets go unredacted counts, and the refusal says
// where the secret is: in the LLM request body, not redacted; never that
// it is outside a prompt.
func TestLLMUnredactedPromptRefusal(t *testing.T) {
	src := bytes.Replace(policy.DefaultPolicyYAML(), []byte("rules:\n"), []byte("rules:\n  - name: llm-as-is\n    on: llm\n    action: allow\n"), 1)
	re := newRewriteEnvPolicy(t, src, nil)
	status, answer := re.post(t, "https://"+hostPort(re.llm)+"/v1/messages", nil, anthropicBody(t, false, "token "+fakeToken(t)))
	if status != http.StatusForbidden {
		t.Fatalf("status %d: %s", status, answer)
	}
	want := "denied by rule no-secrets-to-other-hosts: the request carries a secret where it would not be redacted (github-pat in the LLM request body at /messages/0/content/0/text, not redacted)"
	if !strings.Contains(answer, want) {
		t.Errorf("answer %q, want it to hold %q", answer, want)
	}
	if n := len(re.llm.Requests()); n != 0 {
		t.Errorf("the LLM API got %d requests", n)
	}
}
