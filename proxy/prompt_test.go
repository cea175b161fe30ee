package proxy

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
)

// promptEnv is a proxy deciding by the default policy (which redacts LLM
// prompts) with a fake LLM API of each provider, on 127.0.41.0/24.
func promptEnv(t *testing.T, src []byte) (*env, map[string]*upstream.Server) {
	t.Helper()
	eng, rw := policyRewrites(t, src)
	e := newEnv(t, envOptions{decider: eng, rewrites: rw, addr: "127.0.41.1:0"})
	ups := map[string]*upstream.Server{}
	for i, host := range []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com", "bedrock-runtime.us-east-1.amazonaws.com"} {
		ups[host] = e.upstream(upstream.Options{Name: host, Addr: "127.0.41." + string(rune('2'+i)) + ":0", CA: e.upCA, Handler: upstream.LLMHandler(64)})
	}
	return e, ups
}

// Each provider's last user turn is the llm event's prompt, as sent: the
// secret in it replaced by its placeholder, earlier turns, the assistant's
// and tool results left out; the latency is the call's.
func TestLLMPrompt(t *testing.T) {
	e, ups := promptEnv(t, policy.DefaultPolicyYAML())
	c, _ := e.client(false)
	tok := fakeToken(t)
	ph := `\[REDACTED:github-pat:[0-9a-f]+\]`
	long := strings.Repeat("é", 1500) // 3,000 bytes
	tests := []struct {
		name, host, path, body string
		want                   string // a regexp of the whole prompt
		truncated              bool
	}{
		{"anthropic", "api.anthropic.com", "/v1/messages",
			`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"old turn"},{"role":"assistant","content":"ok"},` +
				`{"role":"user","content":[{"type":"text","text":"push with ` + tok + `"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"text","text":"now"}]},` +
				`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"tool output"}]}]}`,
			`push with ` + ph + `\nnow`, false},
		{"openai chat", "api.openai.com", "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"first"},{"role":"assistant","content":"a"},{"role":"user","content":[{"type":"text","text":"key ` + tok + `"}]}]}`,
			`key ` + ph, false},
		{"openai responses", "api.openai.com", "/v1/responses",
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"rotate ` + tok + `"}]},{"type":"function_call_output","call_id":"c","output":"out"}]}`,
			`rotate ` + ph, false},
		{"gemini", "generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:generateContent",
			`{"contents":[{"role":"user","parts":[{"text":"check ` + tok + `"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`,
			`check ` + ph, false},
		{"bedrock converse", "bedrock-runtime.us-east-1.amazonaws.com", "/model/anthropic.claude-3/converse",
			`{"messages":[{"role":"user","content":[{"text":"token ` + tok + `"}]}]}`,
			`token ` + ph, false},
		{"cut at 2,000 bytes", "api.anthropic.com", "/v1/messages",
			`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"` + tok + " " + long + `"}]}`,
			ph + " (é)+", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(e.rec.kinds(event.KindLLM))
			req, err := http.NewRequest(http.MethodPost, "https://"+hostPort(ups[tt.host])+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			e.rec.wait(t, "llm", func(*event.Event) bool { return len(e.rec.kinds(event.KindLLM)) > n })
			l := e.rec.kinds(event.KindLLM)[n].LLM
			if strings.Contains(l.Prompt, tok) {
				t.Fatal("the secret is in the prompt")
			}
			if !regexp.MustCompile(`^` + tt.want + `$`).MatchString(l.Prompt) {
				t.Errorf("prompt %q, want /%s/", l.Prompt, tt.want)
			}
			if l.PromptTruncated != tt.truncated || len(l.Prompt) > event.MaxPrompt {
				t.Errorf("prompt of %d bytes, truncated %v; want truncated %v", len(l.Prompt), l.PromptTruncated, tt.truncated)
			}
			if l.Latency <= 0 {
				t.Errorf("latency %v", l.Latency)
			}
			if got := ups[tt.host].Requests(); len(got) == 0 || bytes.Contains(got[len(got)-1].Body, []byte(tok)) {
				t.Error("the request was not sent redacted")
			}
		})
	}
}

// A call that is not redacted (no rule asks) or that is denied has its
// prompt with placeholders all the same: the log never holds the secret
// the request carried.
func TestLLMPromptNotRedacted(t *testing.T) {
	e, ups := promptEnv(t, []byte(`default: allow
rules:
  - name: no-denied-model
    on: llm
    when: llm.model == "denied-model"
    action: deny
`))
	c, _ := e.client(false)
	tok := fakeToken(t)
	for _, model := range []string{"some-model", "denied-model"} {
		t.Run(model, func(t *testing.T) {
			n := len(e.rec.kinds(event.KindLLM))
			body := `{"model":"` + model + `","max_tokens":9,"messages":[{"role":"user","content":"token ` + tok + ` here"}]}`
			req, err := http.NewRequest(http.MethodPost, "https://"+hostPort(ups["api.anthropic.com"])+"/v1/messages", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			e.rec.wait(t, "llm", func(*event.Event) bool { return len(e.rec.kinds(event.KindLLM)) > n })
			ev := e.rec.kinds(event.KindLLM)[n]
			if want := model == "denied-model"; (ev.Verdict.Action == event.Deny) != want {
				t.Errorf("verdict %v", ev.Verdict)
			}
			if strings.Contains(ev.LLM.Prompt, tok) {
				t.Fatal("the secret is in the prompt")
			}
			if !regexp.MustCompile(`^token \[REDACTED:github-pat:[0-9a-f]+\] here$`).MatchString(ev.LLM.Prompt) {
				t.Errorf("prompt %q, want the placeholder for the token", ev.LLM.Prompt)
			}
		})
	}
	// Unredacted, the API got the token: the prompt says what was sent
	// but for its secrets.
	if got := ups["api.anthropic.com"].Requests(); len(got) != 1 || !bytes.Contains(got[0].Body, []byte(tok)) {
		t.Errorf("the API received %d requests; want the allowed one, unredacted", len(got))
	}
}
