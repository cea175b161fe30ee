package upstream

import (
	"encoding/json"
	"io"
	"net/http"
)

// anthropicCallID is the id of the fake's tool_use block.
const anthropicCallID = "toolu_01ChaperoneScript"

// serveAnthropic answers POST /v1/messages, streamed (SSE) or not.
func (l *ScriptedLLM) serveAnthropic(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		badRequest(w, "body: "+err.Error())
		return
	}
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		badRequest(w, "body is not a Messages request: "+err.Error())
		return
	}
	var tools []tool
	for _, t := range req.Tools {
		tools = append(tools, toolFromSchema(t.Name, t.InputSchema))
	}
	var outputs []output
	for _, m := range req.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		if m.Role != "user" || json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" && b.ToolUseID == anthropicCallID {
				outputs = append(outputs, output{tool: "Bash", callID: b.ToolUseID, text: textOf(b.Content)})
			}
		}
	}
	d := l.decide(tools, outputs, anthropicCallID)
	l.record(Call{API: "anthropic", Transport: "http", Path: r.URL.Path, Model: req.Model, Header: r.Header.Clone(), Body: body,
		Turn: d.turn, Tool: d.tool.name, CallID: d.callID})
	writeAnthropic(w, req.Model, d, req.Stream)
}

func writeAnthropic(w http.ResponseWriter, model string, d decision, stream bool) {
	usage := obj{"input_tokens": 12, "output_tokens": 34, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 4}
	stop := "end_turn"
	var block obj
	var input json.RawMessage
	if d.turn == TurnToolCall {
		stop = "tool_use"
		input = d.tool.args(d.input)
		block = obj{"type": "tool_use", "id": d.callID, "name": d.tool.name, "input": input}
	} else {
		block = obj{"type": "text", "text": d.text}
	}
	if !stream {
		writeJSON(w, obj{"id": "msg_01ChaperoneScript", "type": "message", "role": "assistant", "model": model,
			"content": []obj{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	sse(w, "message_start", obj{"type": "message_start", "message": obj{"id": "msg_01ChaperoneScript", "type": "message", "role": "assistant",
		"model": model, "content": []obj{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": obj{"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 4}}})
	if d.turn == TurnToolCall {
		sse(w, "content_block_start", obj{"type": "content_block_start", "index": 0,
			"content_block": obj{"type": "tool_use", "id": d.callID, "name": d.tool.name, "input": obj{}}})
		for _, p := range pieces(string(input), streamChunk) {
			sse(w, "content_block_delta", obj{"type": "content_block_delta", "index": 0,
				"delta": obj{"type": "input_json_delta", "partial_json": p}})
		}
	} else {
		sse(w, "content_block_start", obj{"type": "content_block_start", "index": 0, "content_block": obj{"type": "text", "text": ""}})
		for _, p := range pieces(d.text, streamChunk) {
			sse(w, "content_block_delta", obj{"type": "content_block_delta", "index": 0, "delta": obj{"type": "text_delta", "text": p}})
		}
	}
	sse(w, "content_block_stop", obj{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", obj{"type": "message_delta", "delta": obj{"stop_reason": stop, "stop_sequence": nil},
		"usage": obj{"output_tokens": 34}})
	sse(w, "message_stop", obj{"type": "message_stop"})
}

// streamChunk is how many bytes of text each streamed delta carries, about
// what the APIs send; small enough that a secret's placeholder spans
// deltas.
const streamChunk = 16
