package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
)

// geminiCallID is the id of the fake's functionCall parts.
const geminiCallID = "call_ChaperoneScript"

// serveGemini answers POST /v1beta/models/MODEL:METHOD for generateContent,
// streamGenerateContent (SSE with alt=sse, else a JSON array) and
// countTokens.
func (l *ScriptedLLM) serveGemini(w http.ResponseWriter, r *http.Request) {
	rest := r.URL.Path[strings.Index(r.URL.Path, "/models/")+len("/models/"):]
	model, method, ok := strings.Cut(rest, ":")
	if !ok {
		badRequest(w, "no method in "+r.URL.Path)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		badRequest(w, "body: "+err.Error())
		return
	}
	if method == "countTokens" {
		writeJSON(w, obj{"totalTokens": 12})
		return
	}
	if method != "generateContent" && method != "streamGenerateContent" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":404,"message":"method not found","status":"NOT_FOUND"}}`+"\n")
		return
	}
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				FunctionResponse *struct {
					ID       string          `json:"id"`
					Name     string          `json:"name"`
					Response json.RawMessage `json:"response"`
				} `json:"functionResponse"`
			} `json:"parts"`
		} `json:"contents"`
		Tools []struct {
			FunctionDeclarations []struct {
				Name                 string          `json:"name"`
				Parameters           json.RawMessage `json:"parameters"`
				ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
		GenerationConfig struct {
			ResponseMimeType   string          `json:"responseMimeType"`
			ResponseSchema     json.RawMessage `json:"responseSchema"`
			ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
		} `json:"generationConfig"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		badRequest(w, "body is not a generateContent request: "+err.Error())
		return
	}
	var tools []tool
	for _, t := range req.Tools {
		for _, f := range t.FunctionDeclarations {
			schema := f.Parameters
			if len(schema) == 0 {
				schema = f.ParametersJSONSchema
			}
			tools = append(tools, toolFromSchema(f.Name, schema))
		}
	}
	var outputs []output
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			if f := p.FunctionResponse; f != nil && (f.ID == geminiCallID || f.ID == "" && slices.Contains(shellNames, f.Name)) {
				outputs = append(outputs, output{tool: f.Name, callID: f.ID, text: geminiOutput(f.Response)})
			}
		}
	}
	d := l.decide(tools, outputs, geminiCallID)
	if d.turn == TurnText && strings.HasPrefix(req.GenerationConfig.ResponseMimeType, "application/json") {
		schema := req.GenerationConfig.ResponseJSONSchema
		if len(schema) == 0 {
			schema = req.GenerationConfig.ResponseSchema
		}
		b, _ := json.Marshal(fillSchema(schema, 0))
		d.text = string(b)
	}
	l.record(Call{API: "gemini", Transport: "http", Path: r.URL.Path, Model: model, Header: r.Header.Clone(), Body: body,
		Turn: d.turn, Tool: d.tool.name, CallID: d.callID})

	usage := obj{"promptTokenCount": 12, "candidatesTokenCount": 34, "totalTokenCount": 46}
	chunk := func(parts []obj, last bool) obj {
		cand := obj{"content": obj{"role": "model", "parts": parts}, "index": 0}
		c := obj{"candidates": []obj{cand}, "modelVersion": model, "responseId": "ChaperoneScript"}
		if last {
			cand["finishReason"] = "STOP"
			c["usageMetadata"] = usage
		}
		return c
	}
	var chunks []obj
	switch {
	case d.turn == TurnToolCall:
		chunks = append(chunks, chunk([]obj{{"functionCall": obj{"id": d.callID, "name": d.tool.name, "args": d.tool.args(d.input)}}}, true))
	case method == "streamGenerateContent":
		ps := pieces(d.text, streamChunk)
		for i, p := range ps {
			chunks = append(chunks, chunk([]obj{{"text": p}}, i == len(ps)-1))
		}
	default:
		chunks = append(chunks, chunk([]obj{{"text": d.text}}, true))
	}
	switch {
	case method == "generateContent":
		writeJSON(w, chunks[0])
	case r.URL.Query().Get("alt") == "sse":
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			sse(w, "", c)
		}
	default:
		writeJSON(w, chunks)
	}
}

// geminiOutput is the text of a functionResponse's response: its output
// (or error) string, else the JSON as it is.
func geminiOutput(raw json.RawMessage) string {
	var r struct {
		Output *string `json:"output"`
		Error  *string `json:"error"`
	}
	if json.Unmarshal(raw, &r) == nil {
		switch {
		case r.Output != nil:
			return *r.Output
		case r.Error != nil:
			return *r.Error
		}
	}
	return string(raw)
}

// fillSchema returns the smallest value a JSON schema (OpenAPI or JSON
// Schema, types in either case) allows: an enum's first value, empty
// strings as "ok", zero numbers, false, empty arrays, and objects with
// every property filled.
func fillSchema(raw json.RawMessage, depth int) any {
	var s struct {
		Type       json.RawMessage            `json:"type"`
		Enum       []json.RawMessage          `json:"enum"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if depth > 16 || json.Unmarshal(raw, &s) != nil {
		return obj{}
	}
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	var typ string
	if json.Unmarshal(s.Type, &typ) != nil {
		var types []string
		json.Unmarshal(s.Type, &types)
		if len(types) > 0 {
			typ = types[0]
		}
	}
	switch strings.ToLower(typ) {
	case "string":
		return "ok"
	case "number", "integer":
		return 0
	case "boolean":
		return false
	case "array":
		return []any{}
	case "null":
		return nil
	}
	o := obj{}
	for k, v := range s.Properties {
		o[k] = fillSchema(v, depth+1)
	}
	return o
}
