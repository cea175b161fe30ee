package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
)

// An agent speaking the Responses API over WebSocket as Codex does
// (sdkagent responses-ws: gorilla/websocket, permessage-deflate offered),
// through a session on the built-in policy plus a rule that refuses the
// model gpt-denied, to a fake Responses-over-WebSocket server: the secret
// of the prompt never reaches the server and comes back restored in the
// streamed answer, split across deltas; permessage-deflate is agreed on
// both sides; a message of an unknown type and a binary one pass and are
// counted; the refused model closes the connection with 1008 and the
// rule's reason; the audit log has the llm records, never the secret.
func TestLLMWebSocketEndToEnd(t *testing.T) {
	for _, mode := range []string{"proxy", "transparent"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "transparent" {
				needTransparent(t)
			}
			w := newWorld(t)
			ws := upstream.NewWSLLM(5)
			oai := startUpstream(t, upstream.Options{Name: "api.openai.com", Addr: "127.0.32.5:0", CA: w.ca, Handler: ws})
			pol := filepath.Join(w.dir, "policy.yaml")
			src := bytes.Replace(policy.DefaultPolicyYAML(), []byte("rules:\n"), []byte(`rules:
  - name: no-denied-model
    on: llm
    when: llm.model == "gpt-denied"
    action: deny
    reason: the model is not allowed
`), 1)
			if err := os.WriteFile(pol, src, 0o644); err != nil {
				t.Fatal(err)
			}
			tok := fakeGitHubToken(t)
			prompt := "here is my token " + tok + ", write the config"
			args := []string{"run", "--mode", mode, "--mediate-files=false", "--policy", pol, "--upstream-ca", w.caFile,
				"--resolve", "api.openai.com:" + oai.Addr.Addr().String(), "--log", w.log}
			if mode == "transparent" {
				args = append(args, "--dns-upstream", fakeDNSUpstream(t).String())
			}
			args = append(args, "--", sdkAgent, "responses-ws", fmt.Sprintf("wss://api.openai.com:%d/v1/responses", oai.Addr.Port()), prompt)
			r := w.chaperone(nil, args...)
			hide := func(s string) string { return strings.ReplaceAll(s, tok, "<token>") }
			if r.code != 0 {
				t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, hide(r.stdout), hide(r.stderr))
			}
			for _, want := range []string{
				"extensions: permessage-deflate",
				"text: You said: " + prompt + "\n",
				"usage: in=12 out=34",
				"unknown: unknown.echo",
				"binary: true [0 1 2]",
				"text: You said: and again\n",
				"close: 1008 chaperone: denied by rule no-denied-model: the model is not allowed\n",
			} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the agent's output lacks %q:\n%s", hide(want), hide(r.stdout))
				}
			}
			if strings.Contains(r.stderr, tok) {
				t.Errorf("the secret is on stderr:\n%s", hide(r.stderr))
			}

			msgs := ws.Messages()
			if len(msgs) != 5 { // two turns, the unknown one, the binary one, response.processed
				t.Errorf("the server received %d messages, want 5", len(msgs))
			}
			for i, m := range msgs {
				if bytes.Contains(m.Data, []byte(tok)) {
					t.Fatalf("the secret reached the server in message %d", i)
				}
				if bytes.Contains(m.Data, []byte("gpt-denied")) {
					t.Errorf("the refused request reached the server")
				}
			}
			if len(msgs) > 0 && !bytes.Contains(msgs[0].Data, []byte(`my token [REDACTED:github-pat:`)) {
				t.Errorf("the first message reached the server as %.300s", hide(string(msgs[0].Data)))
			}
			reqs := oai.Requests()
			if len(reqs) != 1 {
				t.Fatalf("the server got %d upgrades", len(reqs))
			}
			if h := reqs[0].Header; !strings.HasPrefix(h.Get("Sec-Websocket-Extensions"), "permessage-deflate") ||
				h.Get("X-Chaperone-Session") == "" || h.Get("Openai-Beta") == "" || h.Get("Authorization") != "Bearer test-key" {
				t.Errorf("the upgrade reached the server with %v", h)
			}

			logBytes, err := os.ReadFile(w.log)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(logBytes, []byte(tok)) {
				t.Error("the secret is in the audit log")
			}
			type llm struct {
				Verdict  event.Action
				Rule     string
				Model    string
				Message  string
				Redacted int
				In, Out  int64
				Tools    int
				Restored bool
				Unparsed int
			}
			var got []llm
			for _, rec := range w.records() {
				if rec.Kind != event.KindLLM || !rec.WebSocket {
					continue
				}
				l := llm{Verdict: rec.Verdict, Rule: rec.Rule, Model: rec.Model, Message: rec.WSMessage, In: rec.InputTokens, Out: rec.OutputTokens,
					Tools: len(rec.ToolCalls), Restored: rec.Restored > 0, Unparsed: rec.WSUnparsed}
				if rec.Rewrite != nil {
					l.Redacted = rec.Rewrite.Redacted["github-pat"]
				}
				got = append(got, l)
			}
			want := []llm{
				{Verdict: event.Rewrite, Rule: "redact-llm-prompts", Model: "gpt-5-codex", Message: "response.create", Redacted: 1, In: 12, Out: 34, Tools: 1, Restored: true},
				{Verdict: event.Rewrite, Rule: "redact-llm-prompts", Message: "response.teleport", Unparsed: 1},
				{Verdict: event.Rewrite, Rule: "redact-llm-prompts", Model: "gpt-5-codex", Message: "response.create", In: 12, Out: 34, Tools: 1, Unparsed: 2},
				{Verdict: event.Deny, Rule: "no-denied-model", Model: "gpt-denied", Message: "response.create"},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("llm records (-want +got):\n%s", diff)
			}
		})
	}
}
