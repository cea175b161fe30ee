package proxy

import (
	"bufio"
	"bytes"
	stdtls "crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/rewrite/inject"
)

// wsEnv is a proxy deciding by the default policy (and a rule refusing
// the model gpt-denied), with rewrites and identity headers for the test
// session, and fake LLM APIs over WebSocket at api.openai.com and
// generativelanguage.googleapis.com, on this test's loopback addresses.
type wsEnv struct {
	*env
	oai, gem     *upstream.Server
	oaiWS, gemWS *upstream.WSLLM
}

const denyModelRule = `rules:
  - name: no-denied-model
    on: llm
    when: llm.model == "gpt-denied"
    action: deny
    reason: the model is not allowed
`

func newWSEnv(t *testing.T) *wsEnv {
	t.Helper()
	src := bytes.Replace(policy.DefaultPolicyYAML(), []byte("rules:\n"), []byte(denyModelRule), 1)
	eng, rw := policyRewrites(t, src)
	rw.Identity, rw.IdentityPresets = inject.Identity{Session: testSession, Agent: "codex"}, []string{"chaperone"}
	we := &wsEnv{env: newEnv(t, envOptions{decider: eng, rewrites: rw}), oaiWS: upstream.NewWSLLM(5), gemWS: upstream.NewWSLLM(5)}
	we.oai = we.upstream(upstream.Options{Name: "api.openai.com", Addr: "127.0.32.3:0", CA: we.upCA, Handler: we.oaiWS})
	we.gem = we.upstream(upstream.Options{Name: "generativelanguage.googleapis.com", Addr: "127.0.32.4:0", CA: we.upCA, Handler: we.gemWS})
	return we
}

// dial opens a WebSocket through the proxy, compressed or not.
func (we *wsEnv) dial(t *testing.T, s *upstream.Server, path string, compress bool) (*websocket.Conn, *http.Response) {
	t.Helper()
	d := websocket.Dialer{
		Proxy:             http.ProxyURL(we.proxyURL(proxyUser, testToken)),
		TLSClientConfig:   &stdtls.Config{RootCAs: we.caPool},
		HandshakeTimeout:  10 * time.Second,
		EnableCompression: compress,
	}
	h := http.Header{"Openai-Beta": {"responses_websockets=2026-02-06"}}
	c, res, err := d.Dial("wss://"+hostPort(s)+path, h)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, res)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	return c, res
}

// readUntil reads messages until one of type done (or, for Gemini Live,
// turnComplete) and returns the concatenated text deltas and the types
// read.
func readUntil(t *testing.T, c *websocket.Conn, done string) (text string, types []string) {
	t.Helper()
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("after %v: %v", types, err)
		}
		var m struct {
			Type          string `json:"type"`
			Delta         string `json:"delta"`
			ServerContent *struct {
				TurnComplete bool `json:"turnComplete"`
				ModelTurn    *struct {
					Parts []struct {
						Text string `json:"text"`
					} `json:"parts"`
				} `json:"modelTurn"`
			} `json:"serverContent"`
		}
		if err := json.Unmarshal(msg, &m); err != nil {
			t.Fatalf("not JSON: %q", msg)
		}
		types = append(types, m.Type)
		if strings.HasSuffix(m.Type, ".delta") {
			text += m.Delta
		}
		if sc := m.ServerContent; sc != nil {
			if sc.ModelTurn != nil {
				for _, p := range sc.ModelTurn.Parts {
					text += p.Text
				}
			}
			if sc.TurnComplete && done == "turnComplete" {
				return text, types
			}
		}
		if m.Type == done {
			return text, types
		}
	}
}

func (we *wsEnv) llmEvents() []*event.Event {
	return we.rec.kinds(event.KindLLM)
}

// Codex's Responses over WebSocket through the proxy: the secret in the
// input is replaced upstream and put back in the streamed answer, split
// across deltas; each request is an llm event with what its answer said;
// identity headers are on the upgrade; messages not understood pass and
// are counted; a refused model closes the connection with 1008 and the
// reason; permessage-deflate is agreed on each side.
func TestLLMWebSocketResponses(t *testing.T) {
	for _, compress := range []bool{true, false} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			we := newWSEnv(t)
			tok := fakeToken(t)
			c, res := we.dial(t, we.oai, "/v1/responses", compress)
			if got := strings.Contains(res.Header.Get("Sec-Websocket-Extensions"), "permessage-deflate"); got != compress {
				t.Errorf("the client's side agreed on %q", res.Header.Get("Sec-Websocket-Extensions"))
			}
			create := func(model, said string) string {
				b, _ := json.Marshal(map[string]any{"type": "response.create", "model": model, "instructions": "be brief", "stream": true, "store": false,
					"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": said}}}},
					"tools": []any{map[string]any{"type": "custom", "name": "shell"}}})
				return string(b)
			}
			prompt := "my token is " + tok + " and more"
			if err := c.WriteMessage(websocket.TextMessage, []byte(create("gpt-5-codex", prompt))); err != nil {
				t.Fatal(err)
			}
			text, _ := readUntil(t, c, "response.completed")
			if text != "You said: "+prompt {
				t.Errorf("the streamed answer is %q, want the prompt with the secret restored", strings.ReplaceAll(text, tok, "<token>"))
			}
			// Messages not understood: a type not known, a binary one.
			c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.teleport","input":"x"}`))
			readUntil(t, c, "unknown.echo")
			c.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3})
			if typ, b, err := c.ReadMessage(); err != nil || typ != websocket.BinaryMessage || !bytes.Equal(b, []byte{1, 2, 3}) {
				t.Fatalf("binary echo: %d %v %v", typ, b, err)
			}
			c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.processed","response_id":"resp_1"}`))
			c.WriteMessage(websocket.TextMessage, []byte(create("gpt-5-codex", "again")))
			readUntil(t, c, "response.completed")

			// A refused model: closed with 1008 and the rule's reason.
			c.WriteMessage(websocket.TextMessage, []byte(create("gpt-denied", "x")))
			_, _, err := c.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation ||
				ce.Text != "chaperone: denied by rule no-denied-model: the model is not allowed" {
				t.Fatalf("read %v, want a close 1008 with the rule and reason", err)
			}

			// What reached the upstream: never the secret, nor the refused message.
			msgs := we.oaiWS.Messages()
			if len(msgs) != 5 {
				t.Errorf("the upstream received %d messages, want 5", len(msgs))
			}
			for i, m := range msgs {
				if bytes.Contains(m.Data, []byte(tok)) || bytes.Contains(m.Data, []byte("gpt-denied")) {
					t.Errorf("message %d reached the upstream: %s", i, bytes.ReplaceAll(m.Data, []byte(tok), []byte("<token>")))
				}
			}
			if len(msgs) > 0 && (!bytes.Contains(msgs[0].Data, []byte("[REDACTED:github-pat:")) || !json.Valid(msgs[0].Data)) {
				t.Errorf("the first message reached the upstream as %.300s", bytes.ReplaceAll(msgs[0].Data, []byte(tok), []byte("<token>")))
			}
			reqs := we.oai.Requests()
			if len(reqs) != 1 || reqs[0].Header.Get("X-Chaperone-Session") != testSession || reqs[0].Header.Get("Openai-Beta") == "" {
				t.Errorf("the upgrade reached the upstream with %v", reqs)
			} else if ext := reqs[0].Header.Get("Sec-Websocket-Extensions"); (ext != "") != compress {
				t.Errorf("the proxy offered the upstream %q", ext)
			}

			httpEv := we.rec.wait(t, "upgrade", func(e *event.Event) bool { return e.Kind == event.KindHTTP })
			if httpEv.HTTP.Status != 101 || httpEv.Verdict.Action != event.Rewrite || httpEv.HTTP.Rewrite == nil ||
				len(httpEv.HTTP.Rewrite.Headers) == 0 {
				t.Errorf("http event %+v %+v", httpEv.HTTP, httpEv.Verdict)
			}
			we.rec.wait(t, "denied llm", func(e *event.Event) bool { return e.Kind == event.KindLLM && e.Verdict.Action == event.Deny })
			type llmSummary struct {
				Verdict                   event.Action
				Model, Message            string
				In, Out, Cached           int64
				Tools                     []string
				Restored, Unparsed        int
				Redacted                  map[string]int
				WebSocket                 bool
				Status                    int
				Operation, Provider, Rule string
			}
			var got []llmSummary
			for _, e := range we.llmEvents() {
				l := e.LLM
				s := llmSummary{Verdict: e.Verdict.Action, Model: l.Model, Message: l.WSMessage, In: l.InputTokens, Out: l.OutputTokens, Cached: l.CacheReadTokens,
					Restored: l.Restored, Unparsed: l.WSUnparsed, WebSocket: l.WebSocket, Status: l.Status, Operation: l.Operation, Provider: l.Provider, Rule: e.Verdict.Rule}
				for _, tc := range l.ToolCalls {
					s.Tools = append(s.Tools, tc.ID+" "+tc.Name)
				}
				if l.Rewrite != nil {
					s.Redacted = l.Rewrite.Redacted
				}
				got = append(got, s)
			}
			base := llmSummary{WebSocket: true, Status: 101, Operation: "responses", Provider: "openai"}
			with := func(f func(*llmSummary)) llmSummary { s := base; f(&s); return s }
			want := []llmSummary{
				with(func(s *llmSummary) {
					s.Verdict, s.Rule, s.Model, s.Message, s.In, s.Out, s.Cached = event.Rewrite, "redact-llm-prompts", "gpt-5-codex", "response.create", 12, 34, 3
					s.Tools, s.Restored, s.Redacted = []string{"call_1 shell"}, 4, map[string]int{"github-pat": 1}
				}),
				with(func(s *llmSummary) { // not understood, so decided and counted
					s.Verdict, s.Rule, s.Message, s.Unparsed = event.Rewrite, "redact-llm-prompts", "response.teleport", 1
				}),
				with(func(s *llmSummary) { // the binary message and its echo
					s.Verdict, s.Rule, s.Model, s.Message, s.In, s.Out, s.Cached = event.Rewrite, "redact-llm-prompts", "gpt-5-codex", "response.create", 12, 34, 3
					s.Tools, s.Unparsed = []string{"call_5 shell"}, 2
				}),
				with(func(s *llmSummary) {
					s.Verdict, s.Rule, s.Model, s.Message = event.Deny, "no-denied-model", "gpt-denied", "response.create"
				}),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("llm events (-want +got):\n%s", diff)
			}
			if evs := we.llmEvents(); len(evs) > 0 {
				checkPrompt(t, evs[0].LLM, tok, "my token is [REDACTED:github-pat:", "] and more")
				if evs[0].LLM.Latency <= 0 {
					t.Errorf("the answered request's latency is %v", evs[0].LLM.Latency)
				}
			}
		})
	}
}

// checkPrompt checks that an llm event's prompt is what was asked, the
// secret tok replaced by its placeholder: prefix, the placeholder's hex,
// suffix.
func checkPrompt(t *testing.T, l *event.LLM, tok, prefix, suffix string) {
	t.Helper()
	switch p := l.Prompt; {
	case strings.Contains(p, tok):
		t.Error("the secret is in the llm event's prompt")
	case !strings.HasPrefix(p, prefix) || !strings.HasSuffix(p, suffix) || strings.Trim(p[len(prefix):len(p)-len(suffix)], "0123456789abcdef") != "":
		t.Errorf("prompt %q, want %q, a placeholder's hex, %q", p, prefix, suffix)
	}
}

// The Realtime API and Gemini Live (whose server sends binary messages):
// the secret of the prompt redacted upstream and restored in the answer,
// split across deltas, and one llm event for each request.
func TestLLMWebSocketRealtimeAndLive(t *testing.T) {
	we := newWSEnv(t)
	tok := fakeToken(t)
	prompt := "use " + tok + " please"
	tests := []struct {
		name    string
		server  *upstream.Server
		ws      *upstream.WSLLM
		path    string
		send    []any
		done    string
		model   string
		message string
	}{
		{"realtime", we.oai, we.oaiWS, "/v1/realtime?model=gpt-realtime", []any{
			map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "be brief"}},
			map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": prompt}}}},
			map[string]any{"type": "response.create"},
		}, "response.done", "gpt-realtime", "response.create"},
		{"gemini live", we.gem, we.gemWS, "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent", []any{
			map[string]any{"setup": map[string]any{"model": "models/gemini-2.0-flash-live-001"}},
			map[string]any{"clientContent": map[string]any{"turns": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": prompt}}}}, "turnComplete": true}},
		}, "turnComplete", "gemini-2.0-flash-live-001", "clientContent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := we.dial(t, tt.server, tt.path, true)
			for _, m := range tt.send {
				if err := c.WriteJSON(m); err != nil {
					t.Fatal(err)
				}
			}
			text, _ := readUntil(t, c, tt.done)
			if text != "You said: "+prompt {
				t.Errorf("the answer is %q, want the prompt with the secret restored", strings.ReplaceAll(text, tok, "<token>"))
			}
			for _, m := range tt.ws.Messages() {
				if bytes.Contains(m.Data, []byte(tok)) {
					t.Errorf("the secret reached the upstream: %s", bytes.ReplaceAll(m.Data, []byte(tok), []byte("<token>")))
				}
			}
			e := we.rec.wait(t, "answered llm", func(e *event.Event) bool {
				return e.Kind == event.KindLLM && e.LLM.WSMessage == tt.message && e.LLM.OutputTokens == 34 && strings.Contains(tt.path, e.LLM.Path)
			})
			if e.LLM.Model != tt.model || e.LLM.InputTokens != 12 || e.LLM.Restored == 0 || e.Verdict.Action != event.Allow && e.Verdict.Action != event.Rewrite {
				t.Errorf("llm event %+v verdict %v", *e.LLM, e.Verdict)
			}
			ctx := we.rec.wait(t, "prompt llm", func(e *event.Event) bool {
				return e.Kind == event.KindLLM && e.LLM.Rewrite != nil && strings.Contains(tt.path, e.LLM.Path)
			})
			if ctx.LLM.Rewrite.Redacted["github-pat"] != 1 || ctx.Verdict.Action != event.Rewrite {
				t.Errorf("the prompt's llm event: %+v %v", *ctx.LLM, ctx.Verdict)
			}
			checkPrompt(t, ctx.LLM, tok, "use [REDACTED:github-pat:", "] please")
		})
	}
}

// A protocol switch to an LLM API that the proxy cannot inspect (a
// WebSocket version it does not speak, an Upgrade without its Connection
// token, which a lax server might take, another protocol) is refused, not
// passed through.
func TestLLMWebSocketHandshakeRefused(t *testing.T) {
	we := newWSEnv(t)
	for _, tt := range []struct {
		name, upgrade, connection, version string
	}{
		{"version 8", "websocket", "Upgrade", "8"},
		{"no connection token", "websocket", "keep-alive", "13"},
		{"h2c", "h2c", "Upgrade, HTTP2-Settings", "13"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, _, resp := we.connect(hostPort(we.oai), basicAuth(proxyUser, testToken))
			if resp != nil {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			tc := stdtls.Client(c, &stdtls.Config{RootCAs: we.caPool, ServerName: "api.openai.com", NextProtos: []string{"http/1.1"}})
			req, _ := http.NewRequest("GET", (&url.URL{Scheme: "https", Host: hostPort(we.oai), Path: "/v1/responses"}).String(), nil)
			req.Header.Set("Upgrade", tt.upgrade)
			req.Header.Set("Connection", tt.connection)
			req.Header.Set("Sec-WebSocket-Version", tt.version)
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			if err := req.Write(tc); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(tc), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", res.StatusCode)
			}
			if n := len(we.oai.Requests()); n != 0 {
				t.Errorf("the upstream got %d requests", n)
			}
		})
	}
	for _, e := range we.rec.kinds(event.KindHTTP) {
		if e.Verdict.Rule != ruleMalformedRequest || e.HTTP.Status != http.StatusBadRequest {
			t.Errorf("event %+v %+v", e.Verdict, e.HTTP)
		}
	}
}

// A session that ends closes its LLM WebSockets: the client's read fails,
// the relay's goroutines and the upstream's connection go.
func TestLLMWebSocketEndsWithSession(t *testing.T) {
	we := newWSEnv(t)
	base := runtime.NumGoroutine()
	c, _ := we.dial(t, we.oai, "/v1/responses", true)
	c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"m","input":"hi"}`))
	readUntil(t, c, "response.completed")
	we.p.RemoveSession(testSession)
	if _, _, err := c.ReadMessage(); err == nil || netx.IsTimeout(err) {
		t.Errorf("read after the session ended: %v", err)
	}
	c.Close()
	waitGoroutines(t, base)
}
