package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/gorilla/websocket"
)

// WSMessage is a message a WSLLM received.
type WSMessage struct {
	Binary bool
	Data   []byte
}

// WSLLM is a fake LLM API over WebSocket, with permessage-deflate when the
// client offers it, playing a scripted turn for each request:
//
//	…/responses               Codex's Responses over WebSocket: each
//	                          response.create is answered with
//	                          response.created, output_text deltas,
//	                          output_item.done (and a custom_tool_call of
//	                          the first tool declared), response.completed
//	…/realtime                the Realtime API: session.created at once
//	                          (the model of ?model=), and each
//	                          response.create answered for the last
//	                          conversation.item.create, ending with
//	                          response.done
//	…BidiGenerateContent      Gemini Live: setup answered setupComplete,
//	                          a clientContent that ends the turn answered
//	                          with modelTurn text parts and turnComplete,
//	                          as binary messages, as Google's server does
//
// The answer echoes the last user text ("You said: …") in deltas of chunk
// bytes; usage is input 12 (3 cached), output 34. A text message of a type
// it does not know is answered {"type":"unknown.echo","got":TYPE}, and a
// binary one (not Gemini Live) is echoed. It records every message it
// receives.
type WSLLM struct {
	chunk int
	mu    sync.Mutex
	msgs  []WSMessage
}

// NewWSLLM returns a WSLLM answering in deltas of chunk bytes (5 when
// zero or less).
func NewWSLLM(chunk int) *WSLLM {
	if chunk <= 0 {
		chunk = 5
	}
	return &WSLLM{chunk: chunk}
}

// Messages returns the messages received so far, in order.
func (s *WSLLM) Messages() []WSMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]WSMessage(nil), s.msgs...)
}

func (s *WSLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{EnableCompression: true, CheckOrigin: func(*http.Request) bool { return true }}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	send := func(binary bool, v any) error {
		b, _ := json.Marshal(v)
		typ := websocket.TextMessage
		if binary {
			typ = websocket.BinaryMessage
		}
		return c.WriteMessage(typ, b)
	}
	path := strings.TrimRight(r.URL.Path, "/")
	live := strings.HasSuffix(path, "BidiGenerateContent")
	if strings.HasSuffix(path, "/realtime") {
		send(false, obj{"type": "session.created", "session": obj{"model": r.URL.Query().Get("model")}})
	}
	var said string // Realtime: the last user text
	for n := 1; ; n++ {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, WSMessage{Binary: typ == websocket.BinaryMessage, Data: msg})
		s.mu.Unlock()
		if typ == websocket.BinaryMessage && !live {
			c.WriteMessage(typ, msg)
			continue
		}
		var m map[string]json.RawMessage
		json.Unmarshal(msg, &m)
		var kind string
		json.Unmarshal(m["type"], &kind)
		switch {
		case live:
			err = s.live(send, m)
		case kind == "response.create" && strings.HasSuffix(path, "/responses"):
			err = s.responses(send, n, m)
		case kind == "conversation.item.create":
			var item struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			}
			json.Unmarshal(m["item"], &item)
			if item.Role == "user" {
				said = inputText(item.Content)
			}
		case kind == "session.update":
		case kind == "response.create":
			err = s.realtime(send, n, said)
		default:
			err = send(false, obj{"type": "unknown.echo", "got": kind})
		}
		if err != nil {
			return
		}
	}
}

// inputText is a message's text: a string, or its text and input_text
// blocks joined.
func inputText(raw json.RawMessage) string {
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
		if b.Type == "text" || b.Type == "input_text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func (s *WSLLM) responses(send func(bool, any) error, n int, m map[string]json.RawMessage) error {
	var req struct {
		Model string `json:"model"`
		Input []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"input"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	raw, _ := json.Marshal(m)
	json.Unmarshal(raw, &req)
	said := ""
	for _, it := range req.Input {
		if it.Role == "user" {
			said = inputText(it.Content)
		}
	}
	answer := "You said: " + said
	id, item := fmt.Sprintf("resp_%d", n), fmt.Sprintf("msg_%d", n)
	evs := []obj{
		{"type": "response.created", "response": obj{"id": id, "object": "response", "model": req.Model, "status": "in_progress", "output": []obj{}}},
		{"type": "response.output_item.added", "output_index": 0, "item": obj{"id": item, "type": "message", "role": "assistant", "status": "in_progress", "content": []obj{}}},
	}
	for _, p := range pieces(answer, s.chunk) {
		evs = append(evs, obj{"type": "response.output_text.delta", "item_id": item, "output_index": 0, "content_index": 0, "delta": p})
	}
	msg := obj{"id": item, "type": "message", "role": "assistant", "status": "completed", "content": []obj{{"type": "output_text", "text": answer}}}
	output := []obj{msg}
	evs = append(evs,
		obj{"type": "response.output_text.done", "item_id": item, "output_index": 0, "content_index": 0, "text": answer},
		obj{"type": "response.output_item.done", "output_index": 0, "item": msg})
	if len(req.Tools) > 0 {
		call := obj{"type": "custom_tool_call", "id": fmt.Sprintf("ctc_%d", n), "call_id": fmt.Sprintf("call_%d", n), "name": req.Tools[0].Name, "input": "ls"}
		output = append(output, call)
		evs = append(evs, obj{"type": "response.output_item.done", "output_index": 1, "item": call})
	}
	evs = append(evs, obj{"type": "response.completed", "response": obj{"id": id, "object": "response", "model": req.Model, "status": "completed",
		"output": output, "usage": obj{"input_tokens": 12, "output_tokens": 34, "input_tokens_details": obj{"cached_tokens": 3}}}})
	for _, ev := range evs {
		if err := send(false, ev); err != nil {
			return err
		}
	}
	return nil
}

func (s *WSLLM) realtime(send func(bool, any) error, n int, said string) error {
	answer := "You said: " + said
	id, item := fmt.Sprintf("resp_%d", n), fmt.Sprintf("item_%d", n)
	if err := send(false, obj{"type": "response.created", "response": obj{"id": id, "object": "realtime.response", "status": "in_progress"}}); err != nil {
		return err
	}
	for _, p := range pieces(answer, s.chunk) {
		if err := send(false, obj{"type": "response.output_text.delta", "response_id": id, "item_id": item, "output_index": 0, "content_index": 0, "delta": p}); err != nil {
			return err
		}
	}
	return send(false, obj{"type": "response.done", "response": obj{"id": id, "object": "realtime.response", "status": "completed",
		"output": []obj{{"id": item, "type": "message", "role": "assistant", "content": []obj{{"type": "output_text", "text": answer}}}},
		"usage":  obj{"input_tokens": 12, "output_tokens": 34, "input_token_details": obj{"cached_tokens": 3}}}})
}

func (s *WSLLM) live(send func(bool, any) error, m map[string]json.RawMessage) error {
	if _, ok := m["setup"]; ok {
		return send(true, obj{"setupComplete": obj{}})
	}
	var cc struct {
		Turns []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"turns"`
		TurnComplete bool `json:"turnComplete"`
	}
	if json.Unmarshal(m["clientContent"], &cc) != nil || !cc.TurnComplete {
		return nil
	}
	said := ""
	for _, t := range cc.Turns {
		if t.Role == "user" && len(t.Parts) > 0 {
			said = t.Parts[0].Text
		}
	}
	for _, p := range pieces("You said: "+said, s.chunk) {
		if err := send(true, obj{"serverContent": obj{"modelTurn": obj{"parts": []obj{{"text": p}}}}}); err != nil {
			return err
		}
	}
	return send(true, obj{"serverContent": obj{"turnComplete": true},
		"usageMetadata": obj{"promptTokenCount": 12, "responseTokenCount": 34, "cachedContentTokenCount": 3}})
}
