package rewrite

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// Operations of LLM APIs reached over WebSocket. Codex's Responses over
// WebSocket is OpResponses, as over HTTP.
const (
	OpRealtime            = "realtime"            // OpenAI's Realtime API (/v1/realtime)
	OpBidiGenerateContent = "bidiGenerateContent" // Gemini Live (…BidiGenerateContent)
	// OpWebSocket is a WebSocket to an LLM API's host whose messages
	// Chaperone does not know.
	OpWebSocket = "websocket"
)

// DetectWebSocketAPI recognises a WebSocket upgrade to an LLM API: any
// WebSocket to a host DetectAPI knows or to an extra host (so that no
// WebSocket to an LLM API goes uninspected), its Op from the path:
// OpResponses for …/responses, OpRealtime for …/realtime, and
// OpBidiGenerateContent for Gemini Live's …BidiGenerateContent (and its
// …BidiGenerateContentConstrained, and Vertex's LlmBidiService);
// OpWebSocket for any other path.
func DetectWebSocketAPI(host, path string, extra []string) (API, bool) {
	host = strings.ToLower(strings.TrimSpace(host))
	name := strings.TrimSuffix(hostname(host), ".")
	shape, op := wsPath(path)
	if p, known := knownHost(name); known {
		return API{Provider: p, Op: op}, true
	}
	for _, e := range extra {
		if matchExtra(strings.ToLower(strings.TrimSpace(e)), host, name) {
			return API{Provider: shape, Op: op}, true
		}
	}
	return API{}, false
}

// wsPath names the operation of a WebSocket path and the provider its
// shape implies.
func wsPath(p string) (Provider, string) {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	switch {
	case strings.HasSuffix(p, "/responses"):
		if strings.HasPrefix(p, "/openai/") {
			return AzureOpenAI, OpResponses
		}
		return OpenAI, OpResponses
	case strings.HasSuffix(p, "/realtime"):
		if strings.HasPrefix(p, "/openai/") {
			return AzureOpenAI, OpRealtime
		}
		return OpenAI, OpRealtime
	case strings.HasSuffix(p, ".BidiGenerateContent"), strings.HasSuffix(p, ".BidiGenerateContentConstrained"),
		strings.HasSuffix(p, "/BidiGenerateContent"):
		return Gemini, OpBidiGenerateContent
	}
	return "", OpWebSocket
}

// WSKind is what a client's message to an LLM API over WebSocket does.
type WSKind uint8

const (
	// WSUnknown: not understood (not JSON, or of a type not known). It may
	// carry a prompt: it is to be decided and redacted as one.
	WSUnknown WSKind = iota
	// WSControl carries no prompt: an acknowledgement, audio, a cancel.
	WSControl
	// WSContext carries prompt or configuration but asks for no answer by
	// itself: Realtime's session.update and conversation.item.create,
	// Gemini Live's setup and a clientContent that does not end the turn.
	WSContext
	// WSRequest asks for an answer: response.create, a clientContent that
	// ends the turn, realtimeInput text, toolResponse.
	WSRequest
)

func (k WSKind) String() string {
	switch k {
	case WSControl:
		return "control"
	case WSContext:
		return "context"
	case WSRequest:
		return "request"
	}
	return "unknown"
}

// WSMessage is what InspectWSMessage learns from a client's message.
type WSMessage struct {
	Kind WSKind
	// Type is the message's type ("response.create", "session.update",
	// "clientContent": Gemini Live's top-level field, as spelled); empty
	// when it has none.
	Type  string
	Model string // the model it names, if any ("models/" removed)
	Task  string // the text of its last user message, as Inspect's Task
	// Prompt is that text whole, as Inspect's Prompt.
	Prompt string
}

// InspectWSMessage reads a client's message to an LLM API over WebSocket,
// api being what DetectWebSocketAPI said. Fields of unexpected shapes are
// left empty; a message that is not a JSON object is WSUnknown.
func InspectWSMessage(api API, msg []byte) WSMessage {
	var top map[string]json.RawMessage
	if json.Unmarshal(msg, &top) != nil || top == nil {
		return WSMessage{}
	}
	m := WSMessage{Type: jsonString(top["type"])}
	switch api.Op {
	case OpResponses:
		switch m.Type {
		case "response.create":
			m.Kind, m.Model = WSRequest, jsonString(top["model"])
			if m.Task = jsonString(top["input"]); m.Task == "" {
				m.Task = lastUserText(top["input"], "role", "content")
			}
		case "response.append":
			m.Kind = WSContext
			m.Task = lastUserText(top["input"], "role", "content")
		case "response.processed", "response.cancel":
			m.Kind = WSControl
		}
	case OpRealtime:
		switch m.Type {
		case "session.update", "transcription_session.update":
			m.Kind = WSContext
			var s struct {
				Model string `json:"model"`
			}
			if json.Unmarshal(top["session"], &s) == nil {
				m.Model = s.Model
			}
		case "conversation.item.create":
			m.Kind = WSContext
			m.Task = lastUserText(append(append([]byte("["), top["item"]...), ']'), "role", "content")
		case "response.create":
			m.Kind = WSRequest
			var r struct {
				Input json.RawMessage `json:"input"`
			}
			if json.Unmarshal(top["response"], &r) == nil {
				m.Task = lastUserText(r.Input, "role", "content")
			}
		case "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
			"output_audio_buffer.clear", "conversation.item.truncate", "conversation.item.delete",
			"conversation.item.retrieve", "response.cancel":
			m.Kind = WSControl
		}
	case OpBidiGenerateContent:
		m = inspectLive(top)
	}
	if m.Kind != WSUnknown {
		m.Model = strings.TrimPrefix(m.Model, "models/")
		m.Prompt, m.Task = m.Task, clip(m.Task, MaxTaskBytes)
	}
	return m
}

// inspectLive reads a Gemini Live client message: one top-level field,
// in the protocol's camelCase or snake_case.
func inspectLive(top map[string]json.RawMessage) WSMessage {
	field := func(names ...string) (string, json.RawMessage) {
		for _, n := range names {
			if v, ok := top[n]; ok {
				return n, v
			}
		}
		return "", nil
	}
	if n, v := field("setup"); n != "" {
		var s struct {
			Model string `json:"model"`
		}
		json.Unmarshal(v, &s)
		return WSMessage{Kind: WSContext, Type: n, Model: s.Model}
	}
	if n, v := field("clientContent", "client_content"); n != "" {
		var c struct {
			Turns         json.RawMessage `json:"turns"`
			TurnComplete  bool            `json:"turnComplete"`
			TurnComplete2 bool            `json:"turn_complete"`
		}
		json.Unmarshal(v, &c)
		m := WSMessage{Kind: WSContext, Type: n, Task: lastUserText(c.Turns, "role", "parts")}
		if c.TurnComplete || c.TurnComplete2 {
			m.Kind = WSRequest
		}
		return m
	}
	if n, v := field("realtimeInput", "realtime_input"); n != "" {
		var r struct {
			Text string `json:"text"`
		}
		json.Unmarshal(v, &r)
		if r.Text != "" {
			return WSMessage{Kind: WSRequest, Type: n, Task: r.Text}
		}
		return WSMessage{Kind: WSControl, Type: n} // audio, video, activity marks
	}
	if n, _ := field("toolResponse", "tool_response"); n != "" {
		return WSMessage{Kind: WSRequest, Type: n}
	}
	return WSMessage{}
}

// WSEvent is what a server's message was.
type WSEvent struct {
	// Understood: a JSON object of the API's shape (an OpenAI event with
	// a type, a Gemini Live message with a known field).
	Understood bool
	// Done: it ends an answer. Responses: response.completed, .failed,
	// .incomplete, .cancelled, or an error; Realtime: response.done;
	// Gemini Live: a turn complete, or a tool call (the model then waits
	// for its result, which the client sends as a request of its own).
	Done bool
}

// WSAnswer reads the server's messages of one WebSocket connection to an
// LLM API, in order, as ResponseReader reads an SSE stream: it restores
// the placeholders the answers quote (when restore is not nil), also one
// split across two delta messages (the first is held back and sent merged
// with the next when that is a delta of the same text, else unchanged
// before it), and gathers what each answer says: model, usage, finish
// reasons, tool calls. A message that is not JSON has its placeholders
// restored as raw text; JSON that is not an object, JSON-escaped. It is
// not safe for concurrent use.
type WSAnswer struct {
	r ResponseReader
}

// NewWSAnswer returns a reader of the server messages of a connection to
// api.
func NewWSAnswer(api API, restore func(placeholder string) (string, bool)) *WSAnswer {
	return &WSAnswer{r: ResponseReader{api: api, restore: restore, kind: kindSSE, bare: true}}
}

// StampToolCalls makes each tool call record when now says its message
// arrived.
func (a *WSAnswer) StampToolCalls(now func() time.Time) { a.r.now = now }

// Message reads one server message and returns what to send in its place:
// nothing (a delta held back), the message (restored), or two (a delta
// held back before, then this one).
func (a *WSAnswer) Message(msg []byte) (out [][]byte, ev WSEvent) {
	r := &a.r
	trimmed := bytes.TrimLeft(msg, " \t\r\n")
	isJSON := len(trimmed) > 0 && trimmed[0] == '{'
	if isJSON {
		ev = a.parse(msg)
	}
	if r.restore == nil {
		return [][]byte{msg}, ev
	}
	if !isJSON { // restored as text, or JSON-escaped in JSON that is not an object
		out = a.Flush()
		return append(out, appendRestored(nil, msg, r.restore, json.Valid(msg))), ev
	}
	r.heldEnd = -1
	dst := r.rewriteEvent(nil, msg, nil, msg)
	if r.heldEnd > 0 && r.heldEnd < len(dst) {
		return [][]byte{dst[:r.heldEnd:r.heldEnd], dst[r.heldEnd:]}, ev
	}
	if len(dst) == 0 && r.held != nil {
		return nil, ev
	}
	return [][]byte{dst}, ev
}

// Flush returns the message held back, if any: at the connection's end,
// or before a message that goes on without being read.
func (a *WSAnswer) Flush() [][]byte {
	if a.r.held == nil {
		return nil
	}
	return [][]byte{a.r.appendHeld(nil)}
}

// Take returns what the current answer said, and starts the next.
func (a *WSAnswer) Take() ResponseInfo {
	info := a.r.Info()
	a.r.info, a.r.tools = ResponseInfo{}, nil
	return info
}

// parse reads a server message for its answer's ResponseInfo.
func (a *WSAnswer) parse(msg []byte) WSEvent {
	r := &a.r
	switch r.api.Op {
	case OpResponses:
		typ := msgType(msg)
		if typ == "" {
			return WSEvent{}
		}
		if strings.HasSuffix(typ, ".delta") { // the bulk of a stream, and nothing in it to gather
			return WSEvent{Understood: true}
		}
		r.parseResponses(msg)
		switch typ {
		case "response.completed", "response.failed", "response.incomplete", "response.cancelled":
			return WSEvent{Understood: true, Done: true}
		case "error":
			r.addFinish("error")
			return WSEvent{Understood: true, Done: true}
		}
		return WSEvent{Understood: true}
	case OpRealtime:
		return a.parseRealtime(msg)
	case OpBidiGenerateContent:
		return a.parseLive(msg)
	}
	return WSEvent{}
}

type realtimeEvent struct {
	Type    string `json:"type"`
	Session *struct {
		Model string `json:"model"`
	} `json:"session"`
	Response *struct {
		Status        string     `json:"status"`
		Output        []respItem `json:"output"`
		StatusDetails *struct {
			Reason string `json:"reason"`
		} `json:"status_details"`
		Usage *struct {
			InputTokens       int64 `json:"input_tokens"`
			OutputTokens      int64 `json:"output_tokens"`
			InputTokenDetails *struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_token_details"`
		} `json:"usage"`
	} `json:"response"`
	Item *respItem `json:"item"`
}

func (a *WSAnswer) parseRealtime(msg []byte) WSEvent {
	r := &a.r
	if typ := msgType(msg); strings.HasSuffix(typ, ".delta") { // audio and text deltas: nothing to gather
		return WSEvent{Understood: true}
	}
	var ev realtimeEvent
	if json.Unmarshal(msg, &ev) != nil || ev.Type == "" {
		return WSEvent{}
	}
	switch ev.Type {
	case "session.created", "session.updated":
		if ev.Session != nil {
			r.setModel(ev.Session.Model)
		}
	case "response.output_item.done":
		if ev.Item != nil {
			if tc, ok := ev.Item.toolCall(); ok && tc.ID != "" {
				r.addTool(tc.ID, tc.Name)
			}
		}
	case "response.done":
		if o := ev.Response; o != nil {
			for _, it := range o.Output {
				if tc, ok := it.toolCall(); ok {
					r.addTool(tc.ID, tc.Name)
				}
			}
			if o.StatusDetails != nil && o.StatusDetails.Reason != "" {
				r.addFinish(o.StatusDetails.Reason)
			} else {
				r.addFinish(o.Status)
			}
			if u := o.Usage; u != nil {
				r.info.InputTokens, r.info.OutputTokens = u.InputTokens, u.OutputTokens
				if u.InputTokenDetails != nil {
					r.info.CacheReadTokens = u.InputTokenDetails.CachedTokens
				}
			}
		}
		return WSEvent{Understood: true, Done: true}
	}
	return WSEvent{Understood: true}
}

type liveMessage struct {
	SetupComplete        json.RawMessage `json:"setupComplete"`
	ToolCallCancellation json.RawMessage `json:"toolCallCancellation"`
	GoAway               json.RawMessage `json:"goAway"`
	SessionResumption    json.RawMessage `json:"sessionResumptionUpdate"`
	ServerContent        *struct {
		TurnComplete bool `json:"turnComplete"`
		Interrupted  bool `json:"interrupted"`
		ModelTurn    *struct {
			Parts []struct {
				FunctionCall *struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"modelTurn"`
	} `json:"serverContent"`
	ToolCall *struct {
		FunctionCalls []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"functionCalls"`
	} `json:"toolCall"`
	UsageMetadata *struct {
		PromptTokenCount        int64 `json:"promptTokenCount"`
		ResponseTokenCount      int64 `json:"responseTokenCount"`
		CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
		CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
		ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	} `json:"usageMetadata"`
}

func (a *WSAnswer) parseLive(msg []byte) WSEvent {
	r := &a.r
	var m liveMessage
	if json.Unmarshal(msg, &m) != nil {
		return WSEvent{}
	}
	ev := WSEvent{Understood: m.SetupComplete != nil || m.ToolCallCancellation != nil || m.GoAway != nil ||
		m.SessionResumption != nil || m.ServerContent != nil || m.ToolCall != nil || m.UsageMetadata != nil}
	if u := m.UsageMetadata; u != nil {
		r.info.InputTokens = u.PromptTokenCount
		r.info.OutputTokens = u.ResponseTokenCount + u.CandidatesTokenCount + u.ThoughtsTokenCount
		r.info.CacheReadTokens = u.CachedContentTokenCount
	}
	if sc := m.ServerContent; sc != nil {
		if sc.ModelTurn != nil {
			for _, p := range sc.ModelTurn.Parts {
				if p.FunctionCall != nil {
					r.addTool(p.FunctionCall.ID, p.FunctionCall.Name)
				}
			}
		}
		if sc.Interrupted {
			r.addFinish("interrupted")
		}
		ev.Done = sc.TurnComplete
	}
	if tc := m.ToolCall; tc != nil {
		for _, fc := range tc.FunctionCalls {
			r.addTool(fc.ID, fc.Name)
		}
		ev.Done = true
	}
	return ev
}

// msgType returns the string value of an object's "type" member, read
// only as far as it: "" when b is not a JSON object or has none (or the
// object is malformed before it).
func msgType(b []byte) string {
	// OpenAI's events begin with their type: read it without a decoder.
	if rest, ok := bytes.CutPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(`{"type":"`)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 && json.Valid(b) {
			return string(rest[:i])
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return ""
		}
		if k == "type" {
			v, err := dec.Token()
			if s, ok := v.(string); ok && err == nil {
				return s
			}
			return ""
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}
