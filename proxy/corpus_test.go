package proxy

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/secretcorpus"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/rewrite"
)

// TestCorpusNoFalseRefusals sends generated agent traffic (secrets in
// every layout, hard negatives) as LLM calls of the Anthropic, OpenAI Chat,
// Responses and Gemini APIs through a proxy that decides by the default
// policy: each call must be redacted and sent, none refused. The seed is
// new each run and printed; secretcorpus.SeedEnv replays it. One session's
// Redactor serves every generated session (the proxy keeps one per
// session).
func TestCorpusNoFalseRefusals(t *testing.T) {
	seed, err := secretcorpus.Seed(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d (replay: %s=%d go test -run TestCorpusNoFalseRefusals ./proxy)", seed, secretcorpus.SeedEnv, seed)
	sessions := secretcorpus.Generate(secretcorpus.Options{
		Seed:      seed,
		Providers: []secretcorpus.Provider{secretcorpus.Anthropic, secretcorpus.OpenAIChat, secretcorpus.OpenAIResponses, secretcorpus.Gemini},
	})

	eng, rw := policyRewrites(t, policy.DefaultPolicyYAML())
	e := newEnv(t, envOptions{decider: eng, rewrites: rw, addr: "127.0.26.1:0"})
	ups := map[string]*upstream.Server{}
	for i, host := range []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"} {
		ups[host] = e.upstream(upstream.Options{Name: host, Addr: "127.0.26." + string(rune('2'+i)) + ":0", CA: e.upCA, Handler: upstream.LLMHandler(64)})
	}
	c, _ := e.client(false)

	sent, refused, prompts, checked := 0, 0, 0, 0
	for _, s := range sessions {
		for _, r := range s.Requests {
			n := len(e.rec.kinds(event.KindLLM))
			up := ups[r.Provider.Host()]
			req, err := http.NewRequest(http.MethodPost, "https://"+hostPort(up)+r.Provider.Path(), bytes.NewReader(r.Body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
			answer, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
			sent++
			// A refusal's reason names rules and places, never a value.
			if msg := string(answer); strings.HasPrefix(msg, "chaperone: denied") {
				refused++
				t.Errorf("%s refused (%d): %s", r.Name, res.StatusCode, strings.TrimSpace(msg))
				continue
			}
			// The llm event's prompt is the last user turn of the body
			// as the API received it, and holds no secret that
			// redaction took out of that body.
			e.rec.wait(t, "llm", func(*event.Event) bool { return len(e.rec.kinds(event.KindLLM)) > n })
			l := e.rec.kinds(event.KindLLM)[n].LLM
			got := up.Requests()
			body := got[len(got)-1].Body
			sentReq, err := rewrite.Inspect(rewrite.API{Provider: rewrite.Provider(l.Provider), Op: l.Operation}, l.Path, body)
			if err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
			if want, cut := rewrite.LogPrompt(sentReq.Prompt, placeholders, event.MaxPrompt); want != l.Prompt || cut != l.PromptTruncated {
				t.Errorf("%s: the llm event's prompt (%d bytes, cut %v) is not the last user turn sent (%d bytes, cut %v); they differ from byte %d",
					r.Name, len(l.Prompt), l.PromptTruncated, len(want), cut, commonPrefix(want, l.Prompt))
			}
			if l.Prompt != "" {
				prompts++
			}
			res2, err := r.Check(body)
			if err != nil {
				t.Fatal(err)
			}
			for i, sec := range r.Secrets {
				if res2.Leaked[i] {
					continue // not redacted: TestCorpus of rewrite/secrets scores these
				}
				checked++
				for _, p := range sec.Probes {
					if strings.Contains(l.Prompt, p) {
						t.Errorf("%s: a %s secret (%s, %s) redacted from the body is in the llm event's prompt", r.Name, sec.Type, sec.Location, sec.Layout)
						break
					}
				}
			}
		}
	}
	t.Logf("%d prompts, checked against %d redacted secrets", prompts, checked)
	if prompts == 0 || checked == 0 {
		t.Error("no prompt or no redacted secret to check")
	}
	got := 0
	for _, up := range ups {
		got += len(up.Requests())
	}
	t.Logf("%d LLM calls, %d refused, %d reached the API", sent, refused, got)
	if got != sent-refused {
		t.Errorf("the APIs received %d requests, want %d", got, sent-refused)
	}
}

// placeholders finds the placeholders of a redacted text, each replaced
// by itself: LogPrompt with it cuts a redacted text as the proxy cut it
// (never inside a placeholder), and redacts nothing more.
var placeholders = rewrite.RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
	for _, m := range placeholderRE.FindAllStringIndex(s, -1) {
		found(m[0], m[1], "", s[m[0]:m[1]])
	}
})

var placeholderRE = regexp.MustCompile(`\[REDACTED:[a-z0-9-]+:[0-9a-f]{4,}\]`)

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
