package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// responsesCallID is the call_id of the fake's tool calls.
const responsesCallID = "call_ChaperoneScript"

// responsesRequest is what the fake reads of a Responses request, over
// HTTP or in a WebSocket response.create message.
type responsesRequest struct {
	Type   string `json:"type"` // "response.create" over WebSocket
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	// Generate false asks for no answer: a prewarm of the connection.
	Generate *bool `json:"generate"`
	Input    []struct {
		Type   string          `json:"type"`
		CallID string          `json:"call_id"`
		Output json.RawMessage `json:"output"`
		// Tools of an additional_tools item: tools declared in the
		// input rather than beside it.
		Tools []responsesTool `json:"tools"`
	} `json:"input"`
	Tools []responsesTool `json:"tools"`
}

// responsesTool is a declared tool; a namespace holds tools of its own.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Tools       []responsesTool `json:"tools"`
}

// responsesTools flattens declared tools, namespaces' included.
func responsesTools(ts []responsesTool, depth int) []tool {
	var out []tool
	for _, t := range ts {
		switch t.Type {
		case "function":
			out = append(out, toolFromSchema(t.Name, t.Parameters))
		case "custom":
			out = append(out, tool{name: t.Name, custom: true, code: strings.Contains(t.Description, "tools.exec_command")})
		case "local_shell":
			out = append(out, tool{name: "local_shell", local: true})
		case "namespace":
			if depth < 4 {
				out = append(out, responsesTools(t.Tools, depth+1)...)
			}
		}
	}
	return out
}

// outputTool is the tool each kind of output item answers.
var outputTool = map[string]string{
	"function_call_output":    "function",
	"custom_tool_call_output": "custom",
	"local_shell_call_output": "local_shell",
}

// play decides the answer to a Responses request.
func (l *ScriptedLLM) playResponses(req responsesRequest) decision {
	if req.Generate != nil && !*req.Generate {
		return decision{turn: TurnPrewarm}
	}
	tools := responsesTools(req.Tools, 0)
	var outputs []output
	for _, it := range req.Input {
		if it.Type == "additional_tools" {
			tools = append(tools, responsesTools(it.Tools, 0)...)
		}
		if kind, ok := outputTool[it.Type]; ok && it.CallID == responsesCallID {
			outputs = append(outputs, output{tool: kind, callID: it.CallID, text: textOf(it.Output)})
		}
	}
	return l.decide(tools, outputs, responsesCallID)
}

// serveResponses answers POST /v1/responses, streamed (SSE) or not.
func (l *ScriptedLLM) serveResponses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		badRequest(w, "body: "+err.Error())
		return
	}
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		badRequest(w, "body is not a Responses request: "+err.Error())
		return
	}
	d := l.playResponses(req)
	l.record(Call{API: "responses", Transport: "http", Path: r.URL.Path, Model: req.Model, Header: r.Header.Clone(), Body: body,
		Turn: d.turn, Tool: d.tool.name, CallID: d.callID})
	if !req.Stream {
		writeJSON(w, responseObject(req.Model, "completed", responsesOutput(d)))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	writeResponsesEvents(func(name string, v obj) error {
		sse(w, name, v)
		return nil
	}, req.Model, d)
}

// serveResponsesWebSocket answers the Responses API over WebSocket: each
// response.create message gets the events a streamed HTTP response would
// carry, as text messages; other messages are recorded and not answered.
func (l *ScriptedLLM) serveResponsesWebSocket(w http.ResponseWriter, r *http.Request) {
	if l.noWebSocket && websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUpgradeRequired)
		io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"WebSocket is not available here: use POST"}}`+"\n")
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Allow", "POST")
		http.Error(w, `{"error":{"type":"invalid_request_error","message":"use POST, or a WebSocket"}}`, http.StatusMethodNotAllowed)
		return
	}
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, EnableCompression: true}
	conn, err := up.Upgrade(w, r, nil) // on error Upgrade has already replied
	if err != nil {
		return
	}
	defer conn.Close()
	header := r.Header.Clone()
	for {
		typ, msg, err := conn.ReadMessage()
		if err != nil {
			return
		}
		var req responsesRequest
		if typ != websocket.TextMessage || json.Unmarshal(msg, &req) != nil || req.Type != "response.create" {
			l.record(Call{API: "responses", Transport: "websocket", Path: r.URL.Path, Header: header, Body: msg, Turn: ""})
			continue
		}
		d := l.playResponses(req)
		l.record(Call{API: "responses", Transport: "websocket", Path: r.URL.Path, Model: req.Model, Header: header, Body: msg,
			Turn: d.turn, Tool: d.tool.name, CallID: d.callID})
		if err := writeResponsesEvents(func(_ string, v obj) error {
			return conn.WriteJSON(v)
		}, req.Model, d); err != nil {
			return
		}
	}
}

func responseObject(model, status string, output []obj) obj {
	o := obj{"id": "resp_ChaperoneScript", "object": "response", "created_at": time.Now().Unix(), "status": status,
		"model": model, "output": output, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []obj{}}
	if status == "completed" {
		o["usage"] = obj{"input_tokens": 12, "input_tokens_details": obj{"cached_tokens": 3},
			"output_tokens": 34, "output_tokens_details": obj{"reasoning_tokens": 0}, "total_tokens": 46}
	}
	return o
}

// responsesOutput is the whole output of decision d: none for a prewarm.
func responsesOutput(d decision) []obj {
	if d.turn == TurnPrewarm {
		return []obj{}
	}
	return []obj{responsesItem(d, "completed")}
}

// responsesItem is the output item of decision d.
func responsesItem(d decision, status string) obj {
	if d.turn != TurnToolCall {
		content := []obj{}
		if status == "completed" {
			content = []obj{{"type": "output_text", "text": d.text, "annotations": []obj{}}}
		}
		return obj{"type": "message", "id": "msg_ChaperoneScript", "role": "assistant", "status": status, "content": content}
	}
	switch {
	case d.tool.custom:
		input := ""
		if status == "completed" {
			input = d.tool.input(d.input)
		}
		return obj{"type": "custom_tool_call", "id": "ctc_ChaperoneScript", "call_id": d.callID, "name": d.tool.name, "input": input, "status": status}
	case d.tool.local:
		return obj{"type": "local_shell_call", "id": "lsc_ChaperoneScript", "call_id": d.callID, "status": status,
			"action": obj{"type": "exec", "command": []string{"bash", "-lc", d.input}, "env": obj{}}}
	}
	args := ""
	if status == "completed" {
		args = string(d.tool.args(d.input))
	}
	return obj{"type": "function_call", "id": "fc_ChaperoneScript", "call_id": d.callID, "name": d.tool.name, "arguments": args, "status": status}
}

// writeResponsesEvents emits the events of a streamed response for d, in
// the order the API sends them; it stops at emit's first error.
func writeResponsesEvents(emit func(name string, v obj) error, model string, d decision) error {
	seq := 0
	send := func(name string, v obj) error {
		v["type"] = name
		v["sequence_number"] = seq
		seq++
		return emit(name, v)
	}
	created := func() error {
		return send("response.created", obj{"response": responseObject(model, "in_progress", []obj{})})
	}
	if d.turn == TurnPrewarm {
		if err := created(); err != nil {
			return err
		}
		return send("response.completed", obj{"response": responseObject(model, "completed", []obj{})})
	}
	done := responsesItem(d, "completed")
	steps := []func() error{
		created,
		func() error {
			return send("response.in_progress", obj{"response": responseObject(model, "in_progress", []obj{})})
		},
		func() error {
			return send("response.output_item.added", obj{"output_index": 0, "item": responsesItem(d, "in_progress")})
		},
	}
	itemID, _ := done["id"].(string)
	switch {
	case d.turn != TurnToolCall:
		steps = append(steps, func() error {
			return send("response.content_part.added", obj{"item_id": itemID, "output_index": 0, "content_index": 0,
				"part": obj{"type": "output_text", "text": "", "annotations": []obj{}}})
		})
		for _, p := range pieces(d.text, streamChunk) {
			steps = append(steps, func() error {
				return send("response.output_text.delta", obj{"item_id": itemID, "output_index": 0, "content_index": 0, "delta": p})
			})
		}
		steps = append(steps,
			func() error {
				return send("response.output_text.done", obj{"item_id": itemID, "output_index": 0, "content_index": 0, "text": d.text})
			},
			func() error {
				return send("response.content_part.done", obj{"item_id": itemID, "output_index": 0, "content_index": 0,
					"part": obj{"type": "output_text", "text": d.text, "annotations": []obj{}}})
			})
	case d.tool.custom:
		input := d.tool.input(d.input)
		for _, p := range pieces(input, streamChunk) {
			steps = append(steps, func() error {
				return send("response.custom_tool_call_input.delta", obj{"item_id": itemID, "output_index": 0, "delta": p})
			})
		}
		steps = append(steps, func() error {
			return send("response.custom_tool_call_input.done", obj{"item_id": itemID, "output_index": 0, "input": input})
		})
	case !d.tool.local:
		args := string(d.tool.args(d.input))
		for _, p := range pieces(args, streamChunk) {
			steps = append(steps, func() error {
				return send("response.function_call_arguments.delta", obj{"item_id": itemID, "output_index": 0, "delta": p})
			})
		}
		steps = append(steps, func() error {
			return send("response.function_call_arguments.done", obj{"item_id": itemID, "output_index": 0, "arguments": args})
		})
	}
	steps = append(steps,
		func() error { return send("response.output_item.done", obj{"output_index": 0, "item": done}) },
		func() error {
			return send("response.completed", obj{"response": responseObject(model, "completed", []obj{done})})
		})
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
