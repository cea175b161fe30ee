package rewrite

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"slices"
	"strings"
	"time"
)

// maxParseBytes bounds what ResponseReader keeps to parse: a non-streamed body,
// or one SSE event.
const maxParseBytes = 8 << 20

// ToolCall is a tool the model asked to call.
type ToolCall struct {
	ID, Name string
	// Seen is when the response named the call, by the clock given to
	// StampToolCalls: in a stream, before the end of the event that
	// names it is handed on; in a JSON body, at its end. Zero without a
	// clock.
	Seen time.Time
}

// ResponseInfo is what a response says about the call. Token counts are as the
// provider reports them: Anthropic and Bedrock count cache reads and writes
// apart from InputTokens; OpenAI and Gemini include cached tokens in
// InputTokens. Gemini's OutputTokens include its thinking tokens.
type ResponseInfo struct {
	Model                                                           string
	InputTokens, OutputTokens, CacheReadTokens, CacheCreationTokens int64
	FinishReasons                                                   []string // in order seen, one per choice or candidate
	// ToolCalls are the tools the model asked for, in order, each once:
	// Anthropic's tool_use, server_tool_use and mcp_tool_use blocks; Chat
	// Completions' tool_calls (function and custom) and function_call;
	// the Responses API's function_call, custom_tool_call,
	// local_shell_call, shell_call, apply_patch_call, computer_call and
	// mcp_call items; Gemini's functionCall parts; Bedrock Converse's
	// toolUse blocks (not streamed).
	ToolCalls []ToolCall
}

type bodyKind int

const (
	kindJSON   bodyKind = iota // JSON (or an array of JSON chunks): restored JSON-escaped, parsed at EOF
	kindSSE                    // text/event-stream: parsed and restored event by event
	kindBinary                 // AWS event-stream: passed through untouched, not parsed
	kindText                   // anything else: restored raw, not parsed
)

// ResponseReader passes an LLM API response through while parsing it; see
// NewResponseReader. It is not safe for concurrent use: call Info after Read
// returned an error, from the same goroutine or after synchronising with it.
type ResponseReader struct {
	api     API
	kind    bodyKind
	src     io.ReadCloser
	restore func(string) (string, bool)

	buf  []byte // what src gave (restoring only)
	out  []byte // output not yet handed out
	off  int
	done bool
	err  error

	bytesR   byteRestorer
	copy     []byte // the body so far, to parse at EOF (kindJSON)
	overflow bool   // copy outgrew maxParseBytes

	sse   sseSplitter
	held  *heldDelta // a delta event waiting for the rest of a placeholder
	info  ResponseInfo
	tools map[string]bool
	now   func() time.Time // stamps tool calls; nil: no stamps

	// A reader of WebSocket messages (WSAnswer): events are bare
	// messages, not SSE, and heldEnd is where emitHeld's event ended.
	bare    bool
	heldEnd int
}

// NewResponseReader passes an LLM API response through as it arrives (SSE or
// JSON, chunked or not; it never waits for the whole body), parsing it for
// ResponseInfo, and, when restore is not nil, replacing placeholders with what
// restore returns: JSON-escaped in JSON and SSE bodies, raw in others. body
// must already be decoded (no Content-Encoding).
//
// What a Read may hold back:
//   - restore == nil, or an AWS event-stream body (Bedrock converse-stream,
//     invoke-with-response-stream, which is framed and checksummed and so is
//     neither restored nor parsed): nothing; each Read returns what the
//     underlying Read gave, byte for byte.
//   - JSON and other bodies: at most the last 63 bytes of what has arrived,
//     when they could begin a placeholder.
//   - SSE: the event being received, until its blank line (a client acts on
//     whole events only), and a text delta event whose text ends with what
//     could begin a placeholder, until the next event: when that is a delta of
//     the same block, the two are merged into one event, with the later
//     event's envelope, so a placeholder split across deltas ("[REDA",
//     "CTED:…]") is restored; otherwise the held event goes out unchanged
//     first. Text deltas are Anthropic's text_delta, input_json_delta and
//     thinking_delta, OpenAI chat's delta.content and tool call arguments,
//     Responses' output_text, function_call_arguments,
//     custom_tool_call_input, reasoning and refusal deltas, and Gemini's
//     parts[].text. An event whose text changes is
//     re-serialised (its JSON keys then come out sorted); all others pass
//     byte for byte.
//
// Info is complete once Read returned io.EOF.
func NewResponseReader(api API, contentType string, body io.ReadCloser, restore func(placeholder string) (string, bool)) *ResponseReader {
	r := &ResponseReader{api: api, src: body, restore: restore, kind: classify(api, contentType)}
	r.bytesR = byteRestorer{restore: restore, jsonEsc: r.kind != kindText}
	if restore != nil && r.kind != kindBinary {
		r.buf = make([]byte, 32<<10)
	}
	return r
}

func classify(api API, contentType string) bodyKind {
	if api.Op == OpConverseStream || api.Op == OpInvokeStream {
		return kindBinary
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(contentType))
	}
	switch {
	case mt == "application/vnd.amazon.eventstream":
		return kindBinary
	case mt == "text/event-stream":
		return kindSSE
	case mt == "", mt == "application/json", strings.HasSuffix(mt, "+json"):
		return kindJSON
	}
	return kindText
}

// StampToolCalls makes each tool call record, in Seen, when now says the
// response named it: what the agent runs for a call starts after that.
// Call it before the first Read.
func (r *ResponseReader) StampToolCalls(now func() time.Time) { r.now = now }

// Read implements io.Reader.
func (r *ResponseReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if r.off < len(r.out) {
			n := copy(p, r.out[r.off:])
			r.off += n
			return n, nil
		}
		if r.done {
			return 0, r.err
		}
		if r.buf == nil { // nothing to restore: straight through
			n, err := r.src.Read(p)
			if n > 0 {
				r.observe(p[:n])
			}
			if err != nil {
				r.finish(nil)
				r.done, r.err = true, err
			}
			if n > 0 || err == nil {
				return n, nil
			}
			return 0, err
		}
		r.out, r.off = r.out[:0], 0
		n, err := r.src.Read(r.buf)
		if n > 0 {
			r.out = r.process(r.out, r.buf[:n])
		}
		if err != nil {
			r.out = r.finish(r.out)
			r.done, r.err = true, err
		} else if n == 0 && len(r.out) == 0 {
			return 0, nil
		}
	}
}

// Close closes the underlying body.
func (r *ResponseReader) Close() error { return r.src.Close() }

// Info returns what the response said so far; it is complete after io.EOF.
func (r *ResponseReader) Info() ResponseInfo {
	i := r.info
	i.FinishReasons = slices.Clone(i.FinishReasons)
	i.ToolCalls = slices.Clone(i.ToolCalls)
	return i
}

// observe parses b without changing it (restore == nil).
func (r *ResponseReader) observe(b []byte) {
	switch r.kind {
	case kindJSON:
		r.keep(b)
	case kindSSE:
		r.sse.feed(b, r.sseParseOnly)
	}
}

func (r *ResponseReader) keep(b []byte) {
	if r.overflow {
		return
	}
	if len(r.copy)+len(b) > maxParseBytes {
		r.overflow, r.copy = true, nil
		return
	}
	r.copy = append(r.copy, b...)
}

// process appends to dst what b becomes (restore != nil).
func (r *ResponseReader) process(dst, b []byte) []byte {
	switch r.kind {
	case kindJSON:
		r.keep(b)
		return r.bytesR.feed(dst, b, false)
	case kindSSE:
		r.out = dst
		r.sse.feed(b, r.sseRewrite)
		return r.out
	}
	return r.bytesR.feed(dst, b, false)
}

// finish releases what is held and parses what was kept, at the end of the
// body; dst is nil when nothing is restored.
func (r *ResponseReader) finish(dst []byte) []byte {
	switch r.kind {
	case kindJSON:
		if !r.overflow {
			r.parseJSON(r.copy)
		}
		r.copy = nil
	case kindSSE:
		rest := r.sse.rest()
		if len(rest) > 0 {
			name, data := sseFields(rest)
			r.parseEvent(name, data)
		}
		if r.buf != nil {
			if r.held != nil {
				dst = r.emitHeld(dst)
			}
			dst = r.bytesR.feed(dst, rest, false)
		}
	}
	if r.buf != nil {
		dst = r.bytesR.feed(dst, nil, true)
	}
	return dst
}

func (r *ResponseReader) addTool(id, name string) {
	if id != "" {
		if r.tools == nil {
			r.tools = map[string]bool{}
		}
		if r.tools[id] {
			return
		}
		r.tools[id] = true
	}
	tc := ToolCall{ID: id, Name: name}
	if r.now != nil {
		tc.Seen = r.now()
	}
	r.info.ToolCalls = append(r.info.ToolCalls, tc)
}

func (r *ResponseReader) addFinish(reason string) {
	if reason != "" {
		r.info.FinishReasons = append(r.info.FinishReasons, reason)
	}
}

func (r *ResponseReader) setModel(m string) {
	if m != "" {
		r.info.Model = m
	}
}

// parseJSON parses a whole non-streamed body (or Gemini's streamed array).
func (r *ResponseReader) parseJSON(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var chunks []json.RawMessage
		if json.Unmarshal(b, &chunks) != nil {
			return
		}
		for _, c := range chunks {
			r.parseChunk(c)
		}
		return
	}
	r.parseChunk(b)
}

// parseChunk parses one JSON object: a non-streamed response or one SSE
// event's data.
func (r *ResponseReader) parseChunk(b []byte) {
	switch r.api.Op {
	case OpMessages, OpCountTokens, OpInvoke:
		r.parseAnthropic(b)
	case OpChatCompletions:
		r.parseChat(b)
	case OpResponses:
		r.parseResponses(b)
	case OpGenerateContent, OpStreamGenerateContent:
		r.parseGemini(b)
	case OpConverse:
		r.parseConverse(b)
	}
}

type anthropicUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
}

type anthropicBlock struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Name string `json:"name"`
}

type anthropicMessage struct {
	Type        string           `json:"type"`
	Model       string           `json:"model"`
	StopReason  string           `json:"stop_reason"`
	Content     []anthropicBlock `json:"content"`
	Usage       *anthropicUsage  `json:"usage"`
	InputTokens *int64           `json:"input_tokens"` // count_tokens
}

// anthropicEvent is a streamed event or, with Type "message", a whole
// response: one struct so that a body is decoded once.
type anthropicEvent struct {
	anthropicMessage
	Message *anthropicMessage `json:"message"`
	Delta   *struct {
		StopReason string `json:"stop_reason"`
	} `json:"delta"`
	ContentBlock *anthropicBlock `json:"content_block"`
}

func setIf(dst *int64, v *int64) {
	if v != nil {
		*dst = *v
	}
}

func (r *ResponseReader) anthropicUsage(u *anthropicUsage) {
	if u == nil {
		return
	}
	setIf(&r.info.InputTokens, u.InputTokens)
	setIf(&r.info.OutputTokens, u.OutputTokens)
	setIf(&r.info.CacheReadTokens, u.CacheReadInputTokens)
	setIf(&r.info.CacheCreationTokens, u.CacheCreationInputTokens)
}

func isToolUse(t string) bool {
	return t == "tool_use" || t == "server_tool_use" || t == "mcp_tool_use"
}

func (r *ResponseReader) parseAnthropic(b []byte) {
	var ev anthropicEvent
	if json.Unmarshal(b, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message": // not streamed
		r.anthropicMessage(&ev.anthropicMessage)
	case "message_start":
		if ev.Message != nil {
			r.anthropicMessage(ev.Message)
		}
	case "message_delta":
		if ev.Delta != nil {
			r.addFinish(ev.Delta.StopReason)
		}
		r.anthropicUsage(ev.Usage)
	case "content_block_start":
		if ev.ContentBlock != nil && isToolUse(ev.ContentBlock.Type) {
			r.addTool(ev.ContentBlock.ID, ev.ContentBlock.Name)
		}
	case "": // count_tokens: {"input_tokens": n}
		setIf(&r.info.InputTokens, ev.InputTokens)
	}
}

func (r *ResponseReader) anthropicMessage(m *anthropicMessage) {
	r.setModel(m.Model)
	r.addFinish(m.StopReason)
	for _, c := range m.Content {
		if isToolUse(c.Type) {
			r.addTool(c.ID, c.Name)
		}
	}
	r.anthropicUsage(m.Usage)
}

// chatToolCall is an entry of a Chat Completions message's tool_calls: a
// function ({"type":"function","function":{"name":…}}) or a custom
// (freeform) tool ({"type":"custom","custom":{"name":…}}).
type chatToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
	Custom struct {
		Name string `json:"name"`
	} `json:"custom"`
}

func (c *chatToolCall) name() string {
	if c.Function.Name != "" {
		return c.Function.Name
	}
	return c.Custom.Name
}

// chatMessage is what a Chat Completions choice says of tools: its
// tool_calls, or the function_call of the older functions API (no id,
// and its name only in the first delta).
type chatMessage struct {
	ToolCalls    []chatToolCall `json:"tool_calls"`
	FunctionCall *struct {
		Name string `json:"name"`
	} `json:"function_call"`
}

type chatChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		FinishReason string       `json:"finish_reason"`
		Delta        *chatMessage `json:"delta"`
		Message      *chatMessage `json:"message"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (r *ResponseReader) parseChat(b []byte) {
	var c chatChunk
	if json.Unmarshal(b, &c) != nil {
		return
	}
	r.setModel(c.Model)
	for _, ch := range c.Choices {
		m := ch.Delta
		if m == nil {
			m = ch.Message
		}
		if m != nil {
			for _, tc := range m.ToolCalls {
				if tc.ID != "" { // later deltas of a call carry only arguments
					r.addTool(tc.ID, tc.name())
				}
			}
			if f := m.FunctionCall; f != nil && f.Name != "" {
				r.addTool("", f.Name)
			}
		}
		r.addFinish(ch.FinishReason)
	}
	if u := c.Usage; u != nil {
		r.info.InputTokens, r.info.OutputTokens = u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil {
			r.info.CacheReadTokens = u.PromptTokensDetails.CachedTokens
		}
	}
}

// respItem is a Responses output item, as much of it as names a tool call.
type respItem struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	CallID string `json:"call_id"`
	Name   string `json:"name"`
}

// toolCall returns the tool call an output item is, if it is one: a
// function_call or custom_tool_call (a freeform tool: Codex's shell and
// apply_patch), the built-in tools the client runs (local_shell_call,
// shell_call, apply_patch_call, computer_call), named after their tool,
// or an mcp_call of a remote MCP server. Its ID is the call_id the
// client's *_output item answers, else the item's id.
func (it *respItem) toolCall() (ToolCall, bool) {
	name := it.Name
	switch it.Type {
	case "function_call", "custom_tool_call", "mcp_call":
	case "local_shell_call":
		name = "local_shell"
	case "shell_call":
		name = "shell"
	case "apply_patch_call":
		name = "apply_patch"
	case "computer_call":
		name = "computer"
	default:
		return ToolCall{}, false
	}
	id := it.CallID
	if id == "" {
		id = it.ID
	}
	return ToolCall{ID: id, Name: name}, true
}

type respObject struct {
	Object            string     `json:"object"`
	Model             string     `json:"model"`
	Status            string     `json:"status"`
	Output            []respItem `json:"output"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage *struct {
		InputTokens        int64 `json:"input_tokens"`
		OutputTokens       int64 `json:"output_tokens"`
		InputTokensDetails *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

type respEvent struct {
	Type     string      `json:"type"`
	Response *respObject `json:"response"`
	Item     *respItem   `json:"item"`
}

func (r *ResponseReader) parseResponses(b []byte) {
	var ev respEvent
	if json.Unmarshal(b, &ev) != nil {
		return
	}
	switch {
	case ev.Type == "": // not streamed: the response object itself
		var o respObject
		if json.Unmarshal(b, &o) == nil && o.Object == "response" {
			r.responseObject(&o, true)
		}
	case ev.Response != nil:
		final := ev.Type == "response.completed" || ev.Type == "response.incomplete" ||
			ev.Type == "response.failed" || ev.Type == "response.cancelled"
		r.responseObject(ev.Response, final)
	case ev.Item != nil:
		// An item is announced (output_item.added) and finished
		// (output_item.done) with its id both times; one without an id
		// is left to the final response's output, where it is once.
		if tc, ok := ev.Item.toolCall(); ok && tc.ID != "" {
			r.addTool(tc.ID, tc.Name)
		}
	}
}

// responseObject records a Responses object; only a final one has a status,
// usage and the output worth reading.
func (r *ResponseReader) responseObject(o *respObject, final bool) {
	r.setModel(o.Model)
	if !final {
		return
	}
	for _, it := range o.Output {
		if tc, ok := it.toolCall(); ok {
			r.addTool(tc.ID, tc.Name)
		}
	}
	if o.IncompleteDetails != nil && o.IncompleteDetails.Reason != "" {
		r.addFinish(o.IncompleteDetails.Reason)
	} else {
		r.addFinish(o.Status)
	}
	if u := o.Usage; u != nil {
		r.info.InputTokens, r.info.OutputTokens = u.InputTokens, u.OutputTokens
		if u.InputTokensDetails != nil {
			r.info.CacheReadTokens = u.InputTokensDetails.CachedTokens
		}
	}
}

type geminiChunk struct {
	ModelVersion string `json:"modelVersion"`
	Candidates   []struct {
		FinishReason string `json:"finishReason"`
		Content      struct {
			Parts []struct {
				FunctionCall *struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount        int64 `json:"promptTokenCount"`
		CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
		CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
		ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	} `json:"usageMetadata"`
}

func (r *ResponseReader) parseGemini(b []byte) {
	var c geminiChunk
	if json.Unmarshal(b, &c) != nil {
		return
	}
	r.setModel(c.ModelVersion)
	for _, cand := range c.Candidates {
		for _, p := range cand.Content.Parts {
			if p.FunctionCall != nil {
				r.addTool(p.FunctionCall.ID, p.FunctionCall.Name)
			}
		}
		r.addFinish(cand.FinishReason)
	}
	if u := c.UsageMetadata; u != nil { // cumulative: the last one wins
		r.info.InputTokens = u.PromptTokenCount
		r.info.OutputTokens = u.CandidatesTokenCount + u.ThoughtsTokenCount
		r.info.CacheReadTokens = u.CachedContentTokenCount
	}
}

type converseResponse struct {
	Output struct {
		Message struct {
			Content []struct {
				ToolUse *struct {
					ToolUseID string `json:"toolUseId"`
					Name      string `json:"name"`
				} `json:"toolUse"`
			} `json:"content"`
		} `json:"message"`
	} `json:"output"`
	StopReason string `json:"stopReason"`
	Usage      *struct {
		InputTokens           int64 `json:"inputTokens"`
		OutputTokens          int64 `json:"outputTokens"`
		CacheReadInputTokens  int64 `json:"cacheReadInputTokens"`
		CacheWriteInputTokens int64 `json:"cacheWriteInputTokens"`
	} `json:"usage"`
}

func (r *ResponseReader) parseConverse(b []byte) {
	var c converseResponse
	if json.Unmarshal(b, &c) != nil {
		return
	}
	for _, blk := range c.Output.Message.Content {
		if blk.ToolUse != nil {
			r.addTool(blk.ToolUse.ToolUseID, blk.ToolUse.Name)
		}
	}
	r.addFinish(c.StopReason)
	if u := c.Usage; u != nil {
		r.info.InputTokens, r.info.OutputTokens = u.InputTokens, u.OutputTokens
		r.info.CacheReadTokens, r.info.CacheCreationTokens = u.CacheReadInputTokens, u.CacheWriteInputTokens
	}
}
