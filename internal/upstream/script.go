package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// ScriptedLLM is a fake of the LLM APIs that coding agents speak, closely
// enough that an unchanged agent CLI runs a turn against it: Anthropic
// Messages (Claude Code), OpenAI Responses over HTTPS and over WebSocket
// (Codex) and Gemini's generateContent (Gemini CLI), streamed or not, with
// the calls an agent makes around them (token counts, model lists).
//
// It plays one scripted turn, decided from the conversation each request
// carries, so it needs no state between requests:
//   - a request that declares the agent's shell tool and holds no output
//     of it gets a call of that tool running Command;
//   - a request that holds the tool's output gets a final text that quotes
//     the output whole, after FinalPrefix;
//   - any other request (titles, classifiers, checks) gets a short text,
//     or, when it asks for JSON, the smallest JSON its schema allows.
//
// It records every model request it answers, HTTP or WebSocket message,
// with what it answered (Calls). Its methods are safe for concurrent use.
type ScriptedLLM struct {
	command string
	prefix  string
	// noWebSocket refuses the Responses API's WebSocket, as a server
	// without it does: clients fall back to HTTPS.
	noWebSocket bool

	mu      sync.Mutex
	calls   []Call
	changed chan struct{} // closed and replaced on every new call
}

// FinalPrefix starts the final answer, before the tool output it quotes.
const FinalPrefix = "The command printed:\n"

// Turn is what the fake answered to one model request.
type Turn string

// The turns of the script.
const (
	TurnToolCall Turn = "tool_call" // it asked for the shell tool
	TurnFinal    Turn = "final"     // it quoted the tool's output
	TurnText     Turn = "text"      // a request without the shell tool got a short text
	// TurnPrewarm is a Responses request that asks for no answer
	// (generate: false, Codex's first WebSocket message): it got an empty
	// response.
	TurnPrewarm Turn = "prewarm"
)

// Call is one model request the fake answered.
type Call struct {
	API       string // "anthropic", "responses" or "gemini"
	Transport string // "http" or "websocket"
	Path      string
	Model     string
	// Header is the request's headers; for a WebSocket message, the
	// upgrade request's.
	Header http.Header
	Body   []byte // the request body, or the WebSocket message
	Turn   Turn
	// Tool is the shell tool asked for (TurnToolCall) or whose output was
	// quoted (TurnFinal); CallID the call's id.
	Tool, CallID string
}

// NewScriptedLLM returns a fake whose model asks the shell tool to run
// command, then quotes what it printed.
func NewScriptedLLM(command string) *ScriptedLLM {
	return &ScriptedLLM{command: command, prefix: FinalPrefix, changed: make(chan struct{})}
}

// RefuseWebSocket makes the fake answer the Responses API's WebSocket
// upgrade with 426 Upgrade Required, as a server without WebSocket
// support does, so that clients fall back to HTTPS. Call it before the
// fake serves.
func (l *ScriptedLLM) RefuseWebSocket() { l.noWebSocket = true }

// Calls returns the model requests answered so far, in arrival order.
func (l *ScriptedLLM) Calls() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.copyLocked()
}

func (l *ScriptedLLM) copyLocked() []Call {
	out := make([]Call, len(l.calls))
	for i, c := range l.calls {
		c.Header = c.Header.Clone()
		c.Body = bytes.Clone(c.Body)
		out[i] = c
	}
	return out
}

// WaitTurn waits until a call of the given turn was answered and returns
// every call so far. If ctx ends first it returns the calls so far and an
// error wrapping ctx's.
func (l *ScriptedLLM) WaitTurn(ctx context.Context, turn Turn) ([]Call, error) {
	for {
		l.mu.Lock()
		if slices.ContainsFunc(l.calls, func(c Call) bool { return c.Turn == turn }) {
			out := l.copyLocked()
			l.mu.Unlock()
			return out, nil
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return l.Calls(), fmt.Errorf("upstream: scripted llm: waiting for a %s turn: %w", turn, ctx.Err())
		}
	}
}

func (l *ScriptedLLM) record(c Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
	close(l.changed)
	l.changed = make(chan struct{})
}

// ServeHTTP answers the APIs' paths; anything else is a 404 with a JSON
// error, as the real APIs give.
func (l *ScriptedLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/v1/messages" && r.Method == http.MethodPost:
		l.serveAnthropic(w, r)
	case p == "/v1/messages/count_tokens" && r.Method == http.MethodPost:
		writeJSON(w, obj{"input_tokens": 12})
	case p == "/v1/responses" && r.Method == http.MethodGet:
		l.serveResponsesWebSocket(w, r)
	case p == "/v1/responses" && r.Method == http.MethodPost:
		l.serveResponses(w, r)
	case p == "/v1/models" && r.Method == http.MethodGet:
		serveModels(w, r)
	case (strings.HasPrefix(p, "/v1beta/models/") || strings.HasPrefix(p, "/v1/models/")) && r.Method == http.MethodPost:
		l.serveGemini(w, r)
	case (p == "/v1beta/models" || p == "/v1beta/models/") && r.Method == http.MethodGet:
		writeJSON(w, obj{"models": []obj{{"name": "models/gemini-2.5-pro", "supportedGenerationMethods": []string{"generateContent", "countTokens"}}}})
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"type":"not_found_error","message":"no %s %s here"}}`+"\n", r.Method, jsonEscape(p))
	}
}

// serveModels answers GET /v1/models: Anthropic's list when the client
// says anthropic-version, OpenAI's otherwise.
func serveModels(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Anthropic-Version") != "" {
		writeJSON(w, obj{"data": []obj{{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5", "created_at": "2025-09-29T00:00:00Z"}},
			"has_more": false, "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"})
		return
	}
	writeJSON(w, obj{"object": "list", "data": []obj{{"id": "gpt-5", "object": "model", "created": 1, "owned_by": "openai"}}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func badRequest(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":"%s"}}`+"\n", jsonEscape(msg))
}

// tool is a tool a request declares.
type tool struct {
	name   string
	custom bool // a freeform tool (Responses type "custom"): its input is raw text
	// code says the freeform tool takes JavaScript that reaches the shell
	// through tools.exec_command (Codex's code mode).
	code  bool
	local bool // Responses' built-in local_shell
	// arg is the schema property that takes the command ("command" or
	// "cmd"); array says it takes an argv.
	arg   string
	array bool
}

// shellNames are the names agents give their shell tool, preferred first.
var shellNames = []string{"Bash", "run_shell_command", "shell_command", "exec_command", "shell", "exec", "local_shell"}

// pickShell returns the declared shell tool, if any.
func pickShell(tools []tool) (tool, bool) {
	for _, name := range shellNames {
		for _, t := range tools {
			if t.name == name {
				return t, true
			}
		}
	}
	return tool{}, false
}

// toolFromSchema reads a function tool's JSON schema for the property
// that takes the command.
func toolFromSchema(name string, schema json.RawMessage) tool {
	t := tool{name: name, arg: "command"}
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return t
	}
	for _, arg := range []string{"command", "cmd"} {
		if p, ok := s.Properties[arg]; ok {
			t.arg = arg
			t.array = strings.Contains(strings.ToLower(string(p.Type)), "array")
			break
		}
	}
	return t
}

// args are the JSON arguments of a call of t running command.
func (t tool) args(command string) json.RawMessage {
	a := obj{}
	if t.array {
		a[t.arg] = []string{"bash", "-lc", command}
	} else {
		a[t.arg] = command
	}
	if t.name == "Bash" || t.name == "run_shell_command" {
		a["description"] = "Show the project's settings and reach the service"
	}
	b, _ := json.Marshal(a)
	return b
}

// input is the freeform input of a call of t running command: the
// command itself, or in code mode a script that runs it and returns what
// it printed.
func (t tool) input(command string) string {
	if !t.code {
		return command
	}
	cmd, _ := json.Marshal(command)
	return "const r = await tools.exec_command({ cmd: " + string(cmd) + ", tty: false });\n" +
		"text(r.output);\nif (r.exit_code) text(\"exit code \" + r.exit_code);\n"
}

// output is a tool output the conversation holds, for a call of the fake.
type output struct {
	tool, callID, text string
}

// decision is the fake's answer to one request.
type decision struct {
	turn   Turn
	tool   tool
	callID string
	text   string // the final or short text
	input  string // the command, for a tool call
}

// decide plays the script on a request's tools and the outputs in it.
func (l *ScriptedLLM) decide(tools []tool, outputs []output, callID string) decision {
	if len(outputs) > 0 {
		o := outputs[len(outputs)-1]
		return decision{turn: TurnFinal, tool: tool{name: o.tool}, callID: o.callID, text: l.prefix + o.text}
	}
	if t, ok := pickShell(tools); ok {
		return decision{turn: TurnToolCall, tool: t, callID: callID, input: l.command}
	}
	return decision{turn: TurnText, text: "OK."}
}

// textOf is the text a tool output or message content holds: a string,
// the text parts of an array of blocks, or else the JSON as it is.
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil {
		var parts []string
		for _, b := range blocks {
			if b.Text != "" {
				parts = append(parts, b.Text)
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, "\n")
		}
	}
	return string(raw)
}
