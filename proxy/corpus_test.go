package proxy

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/internal/secretcorpus"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
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

	pol, err := policy.Parse("default", policy.DefaultPolicyYAML())
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
	rw := &Rewrites{Redactor: secrets.NewRedactor(sc, key), Scanner: sc, Restore: true, RewriteParams: eng.RewriteParams}
	e := newEnv(t, envOptions{decider: eng, rewrites: rw, addr: "127.0.26.1:0"})
	ups := map[string]*upstream.Server{}
	for i, host := range []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"} {
		ups[host] = e.upstream(upstream.Options{Name: host, Addr: "127.0.26." + string(rune('2'+i)) + ":0", CA: e.upCA, Handler: upstream.LLMHandler(64)})
	}
	c, _ := e.client(false)

	sent, refused := 0, 0
	for _, s := range sessions {
		for _, r := range s.Requests {
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
			}
		}
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
