package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// LLMHandler is a fake LLM API: Anthropic's /v1/messages and OpenAI's
// /v1/chat/completions, streamed (SSE) or not. The answer echoes the last
// user message ("You said: …"), streamed in deltas of chunk bytes, so a
// test sees what the upstream received and what comes back of it. An
// Anthropic request with tools gets a tool_use block for the first tool.
// Usage is reported as input 12 (cache read 3, cache write 4 on
// Anthropic), output 34.
func LLMHandler(chunk int) http.Handler {
	if chunk <= 0 {
		chunk = 5
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
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
				Name     string `json:"name"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"type":"invalid_request_error","message":"body is not JSON"}}`, http.StatusBadRequest)
			return
		}
		said := ""
		for _, m := range req.Messages {
			if m.Role == "user" {
				said = contentText(m.Content)
			}
		}
		answer := "You said: " + said
		var tool string
		if len(req.Tools) > 0 {
			tool = req.Tools[0].Name
		}
		switch r.URL.Path {
		case "/v1/messages":
			anthropicAnswer(w, req.Model, answer, tool, req.Stream, chunk)
		case "/v1/chat/completions":
			openAIAnswer(w, req.Model, answer, req.Stream, chunk)
		default:
			http.Error(w, "not found", http.StatusNotFound)
		}
	})
}

// contentText is a message's text: a string, or its text blocks joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &blocks)
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// pieces splits s into runs of at most n bytes (not splitting runes).
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i := min(n, len(s))
		for i < len(s) && i > 0 && s[i]&0xC0 == 0x80 {
			i--
		}
		if i == 0 {
			i = len(s)
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

func sse(w http.ResponseWriter, name string, v any) {
	b, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(w, "event: %s\n", name)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

type obj = map[string]any

func anthropicAnswer(w http.ResponseWriter, model, answer, tool string, stream bool, chunk int) {
	usage := obj{"input_tokens": 12, "output_tokens": 34, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 4}
	stop := "end_turn"
	if tool != "" {
		stop = "tool_use"
	}
	if !stream {
		content := []obj{{"type": "text", "text": answer}}
		if tool != "" {
			content = append(content, obj{"type": "tool_use", "id": "toolu_01", "name": tool, "input": obj{"command": "ls"}})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(obj{"id": "msg_01", "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "message_start", obj{"type": "message_start", "message": obj{"id": "msg_01", "type": "message", "role": "assistant",
		"model": model, "content": []obj{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": obj{"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 4}}})
	sse(w, "content_block_start", obj{"type": "content_block_start", "index": 0, "content_block": obj{"type": "text", "text": ""}})
	for _, p := range pieces(answer, chunk) {
		sse(w, "content_block_delta", obj{"type": "content_block_delta", "index": 0, "delta": obj{"type": "text_delta", "text": p}})
	}
	sse(w, "content_block_stop", obj{"type": "content_block_stop", "index": 0})
	if tool != "" {
		sse(w, "content_block_start", obj{"type": "content_block_start", "index": 1,
			"content_block": obj{"type": "tool_use", "id": "toolu_01", "name": tool, "input": obj{}}})
		sse(w, "content_block_delta", obj{"type": "content_block_delta", "index": 1,
			"delta": obj{"type": "input_json_delta", "partial_json": `{"command": "ls"}`}})
		sse(w, "content_block_stop", obj{"type": "content_block_stop", "index": 1})
	}
	sse(w, "message_delta", obj{"type": "message_delta", "delta": obj{"stop_reason": stop, "stop_sequence": nil},
		"usage": obj{"output_tokens": 34}})
	sse(w, "message_stop", obj{"type": "message_stop"})
}

func openAIAnswer(w http.ResponseWriter, model, answer string, stream bool, chunk int) {
	usage := obj{"prompt_tokens": 12, "completion_tokens": 34, "total_tokens": 46}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(obj{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
			"choices": []obj{{"index": 0, "message": obj{"role": "assistant", "content": answer}, "finish_reason": "stop"}},
			"usage":   usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	base := func(choices []obj) obj {
		return obj{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": choices}
	}
	sse(w, "", base([]obj{{"index": 0, "delta": obj{"role": "assistant", "content": ""}, "finish_reason": nil}}))
	for _, p := range pieces(answer, chunk) {
		sse(w, "", base([]obj{{"index": 0, "delta": obj{"content": p}, "finish_reason": nil}}))
	}
	sse(w, "", base([]obj{{"index": 0, "delta": obj{}, "finish_reason": "stop"}}))
	last := base([]obj{})
	last["usage"] = usage
	sse(w, "", last)
	fmt.Fprint(w, "data: [DONE]\n\n")
}
