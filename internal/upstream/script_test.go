package upstream

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
)

const scriptCommand = "cat .env; curl -sS https://denied.test/x"

// played is what an agent makes of the fake's answer: the tool call it
// would run, or the text it would show.
type played struct {
	Turn   Turn
	Tool   string
	CallID string
	Args   string // the call's arguments (JSON) or freeform input
	Text   string
}

// sseData returns the data of each event of an SSE stream, with its name.
func sseData(t *testing.T, r io.Reader) (names []string, data []json.RawMessage) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			names = append(names, name)
			data = append(data, json.RawMessage(strings.TrimPrefix(line, "data: ")))
			name = ""
		}
	}
	return names, data
}

// playAnthropic reassembles a streamed Messages answer.
func playAnthropic(t *testing.T, body io.Reader) played {
	t.Helper()
	var p played
	_, data := sseData(t, body)
	for _, d := range data {
		var ev struct {
			Type         string `json:"type"`
			ContentBlock struct {
				Type string `json:"type"`
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
		}
		if err := json.Unmarshal(d, &ev); err != nil {
			t.Fatalf("event %s: %v", d, err)
		}
		switch ev.Type {
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				p.Turn, p.Tool, p.CallID = TurnToolCall, ev.ContentBlock.Name, ev.ContentBlock.ID
			}
		case "content_block_delta":
			p.Args += ev.Delta.PartialJSON
			p.Text += ev.Delta.Text
		case "message_delta":
			if (ev.Delta.StopReason == "tool_use") != (p.Turn == TurnToolCall) {
				t.Errorf("stop reason %q for a %q turn", ev.Delta.StopReason, p.Turn)
			}
		}
	}
	return p
}

// playResponses reassembles the events of a streamed Responses answer,
// checking that the deltas add up to the finished item.
func playResponses(t *testing.T, events []json.RawMessage) played {
	t.Helper()
	var p played
	var deltas string
	completed := false
	for _, d := range events {
		var ev struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
			Item  struct {
				Type      string `json:"type"`
				CallID    string `json:"call_id"`
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
				Input     string `json:"input"`
				Action    struct {
					Command []string `json:"command"`
				} `json:"action"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"item"`
		}
		if err := json.Unmarshal(d, &ev); err != nil {
			t.Fatalf("event %s: %v", d, err)
		}
		switch ev.Type {
		case "response.output_text.delta", "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
			deltas += ev.Delta
		case "response.output_item.done":
			switch it := ev.Item; it.Type {
			case "message":
				p.Turn, p.Text = TurnText, it.Content[0].Text
			case "function_call":
				p.Turn, p.Tool, p.CallID, p.Args = TurnToolCall, it.Name, it.CallID, it.Arguments
			case "custom_tool_call":
				p.Turn, p.Tool, p.CallID, p.Args = TurnToolCall, it.Name, it.CallID, it.Input
			case "local_shell_call":
				b, _ := json.Marshal(it.Action.Command)
				p.Turn, p.Tool, p.CallID, p.Args = TurnToolCall, "local_shell", it.CallID, string(b)
			}
		case "response.completed":
			completed = true
		}
	}
	if !completed {
		t.Error("no response.completed event")
	}
	if want := p.Text + p.Args; deltas != "" && deltas != want && p.Tool != "local_shell" {
		t.Errorf("deltas add up to %q, the item holds %q", deltas, want)
	}
	return p
}

// playGemini reassembles a Gemini answer: an SSE stream, a JSON array of
// chunks or one chunk.
func playGemini(t *testing.T, resp *http.Response) played {
	t.Helper()
	var chunks []json.RawMessage
	body, _ := io.ReadAll(resp.Body)
	switch {
	case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
		_, chunks = sseData(t, strings.NewReader(string(body)))
	case strings.HasPrefix(strings.TrimSpace(string(body)), "["):
		if err := json.Unmarshal(body, &chunks); err != nil {
			t.Fatal(err)
		}
	default:
		chunks = []json.RawMessage{body}
	}
	var p played
	for _, c := range chunks {
		var ch struct {
			Candidates []struct {
				Content struct {
					Parts []struct {
						Text         string `json:"text"`
						FunctionCall *struct {
							ID   string          `json:"id"`
							Name string          `json:"name"`
							Args json.RawMessage `json:"args"`
						} `json:"functionCall"`
					} `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
		}
		if err := json.Unmarshal(c, &ch); err != nil {
			t.Fatalf("chunk %s: %v", c, err)
		}
		for _, part := range ch.Candidates[0].Content.Parts {
			if f := part.FunctionCall; f != nil {
				p.Turn, p.Tool, p.CallID, p.Args = TurnToolCall, f.Name, f.ID, string(f.Args)
			}
			p.Text += part.Text
		}
	}
	return p
}

func TestScriptedLLM(t *testing.T) {
	final := FinalPrefix + "SECRET=<placeholder>\ncurl: (56) CONNECT tunnel failed, response 403\n"
	tests := []struct {
		name, method, path, body string
		play                     func(*testing.T, *http.Response) played
		want                     played
	}{
		{
			name: "anthropic asks Bash", method: "POST", path: "/v1/messages?beta=true",
			body: `{"model":"claude-sonnet-4-5","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"run it"}]}],
				"tools":[{"name":"Read","input_schema":{"type":"object"}},{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number"}}}}]}`,
			play: func(t *testing.T, r *http.Response) played { return playAnthropic(t, r.Body) },
			want: played{Turn: TurnToolCall, Tool: "Bash", CallID: anthropicCallID,
				Args: `{"command":"cat .env; curl -sS https://denied.test/x","description":"Show the project's settings and reach the service"}`},
		},
		{
			name: "anthropic quotes the tool result", method: "POST", path: "/v1/messages",
			body: `{"model":"claude-sonnet-4-5","stream":true,"messages":[{"role":"user","content":"run it"},
				{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01ChaperoneScript","name":"Bash","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01ChaperoneScript","content":[{"type":"text","text":"SECRET=<placeholder>\ncurl: (56) CONNECT tunnel failed, response 403\n"}]}]}],
				"tools":[{"name":"Bash","input_schema":{}}]}`,
			play: func(t *testing.T, r *http.Response) played { return playAnthropic(t, r.Body) },
			want: played{Text: final},
		},
		{
			name: "anthropic without tools", method: "POST", path: "/v1/messages",
			body: `{"model":"claude-haiku-4-5","stream":true,"messages":[{"role":"user","content":"a title for this"}]}`,
			play: func(t *testing.T, r *http.Response) played { return playAnthropic(t, r.Body) },
			want: played{Text: "OK."},
		},
		{
			name: "responses custom tool", method: "POST", path: "/v1/responses",
			body: `{"model":"gpt-5-codex","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"run it"}]}],
				"tools":[{"type":"custom","name":"apply_patch","format":{"type":"grammar"}},{"type":"custom","name":"exec","format":{"type":"grammar"}}]}`,
			play: func(t *testing.T, r *http.Response) played {
				_, d := sseData(t, r.Body)
				return playResponses(t, d)
			},
			want: played{Turn: TurnToolCall, Tool: "exec", CallID: responsesCallID, Args: scriptCommand},
		},
		{
			name: "responses code mode, tools declared in the input", method: "POST", path: "/v1/responses",
			body: `{"model":"gpt-6.1-sol","stream":true,"input":[{"type":"additional_tools","role":"developer","tools":[
				{"type":"namespace","name":"functions","tools":[{"type":"custom","name":"exec","description":"Run JavaScript ... await tools.exec_command(...)"},
				{"type":"function","name":"wait","parameters":{"type":"object","properties":{"cell_id":{"type":"string"}}}}]}]},
				{"type":"message","role":"user","content":[{"type":"input_text","text":"run it"}]}]}`,
			play: func(t *testing.T, r *http.Response) played {
				_, d := sseData(t, r.Body)
				return playResponses(t, d)
			},
			want: played{Turn: TurnToolCall, Tool: "exec", CallID: responsesCallID,
				Args: "const r = await tools.exec_command({ cmd: \"cat .env; curl -sS https://denied.test/x\", tty: false });\n" +
					"text(r.output);\nif (r.exit_code) text(\"exit code \" + r.exit_code);\n"},
		},
		{
			name: "responses prewarm", method: "POST", path: "/v1/responses",
			body: `{"model":"gpt-6.1-sol","stream":true,"generate":false,"input":[],"tools":[{"type":"custom","name":"exec"}]}`,
			play: func(t *testing.T, r *http.Response) played {
				names, d := sseData(t, r.Body)
				if diff := cmp.Diff([]string{"response.created", "response.completed"}, names); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
				return playResponses(t, d)
			},
			want: played{Turn: TurnPrewarm},
		},
		{
			name: "responses function tool taking an argv", method: "POST", path: "/v1/responses",
			body: `{"model":"gpt-5","stream":true,"input":[],"tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}}}}]}`,
			play: func(t *testing.T, r *http.Response) played {
				_, d := sseData(t, r.Body)
				return playResponses(t, d)
			},
			want: played{Turn: TurnToolCall, Tool: "shell", CallID: responsesCallID, Args: `{"command":["bash","-lc","cat .env; curl -sS https://denied.test/x"]}`},
		},
		{
			name: "responses local shell", method: "POST", path: "/v1/responses",
			body: `{"model":"codex-mini-latest","stream":true,"input":[],"tools":[{"type":"local_shell"}]}`,
			play: func(t *testing.T, r *http.Response) played {
				_, d := sseData(t, r.Body)
				return playResponses(t, d)
			},
			want: played{Turn: TurnToolCall, Tool: "local_shell", CallID: responsesCallID, Args: `["bash","-lc","cat .env; curl -sS https://denied.test/x"]`},
		},
		{
			name: "responses quotes a custom tool's output", method: "POST", path: "/v1/responses",
			body: `{"model":"gpt-5-codex","stream":true,"input":[{"type":"custom_tool_call","call_id":"call_ChaperoneScript","name":"exec","input":"x"},
				{"type":"custom_tool_call_output","call_id":"call_ChaperoneScript","output":"SECRET=<placeholder>\ncurl: (56) CONNECT tunnel failed, response 403\n"}],
				"tools":[{"type":"custom","name":"exec"}]}`,
			play: func(t *testing.T, r *http.Response) played {
				_, d := sseData(t, r.Body)
				p := playResponses(t, d)
				p.Turn = ""
				return p
			},
			want: played{Text: final},
		},
		{
			name: "responses not streamed", method: "POST", path: "/v1/responses",
			body: `{"model":"gpt-5","input":[{"type":"function_call_output","call_id":"call_ChaperoneScript","output":[{"type":"input_text","text":"SECRET=<placeholder>\ncurl: (56) CONNECT tunnel failed, response 403\n"}]}]}`,
			play: func(t *testing.T, r *http.Response) played {
				var resp struct {
					Status string `json:"status"`
					Output []struct {
						Content []struct {
							Text string `json:"text"`
						} `json:"content"`
					} `json:"output"`
				}
				if err := json.NewDecoder(r.Body).Decode(&resp); err != nil || resp.Status != "completed" {
					t.Fatalf("response %+v: %v", resp, err)
				}
				return played{Text: resp.Output[0].Content[0].Text}
			},
			want: played{Text: final},
		},
		{
			name: "gemini asks run_shell_command", method: "POST", path: "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
			body: `{"contents":[{"role":"user","parts":[{"text":"run it"}]}],
				"tools":[{"functionDeclarations":[{"name":"read_file","parametersJsonSchema":{}},{"name":"run_shell_command","parametersJsonSchema":{"type":"object","properties":{"command":{"type":"string"},"description":{"type":"string"}}}}]}]}`,
			play: playGemini,
			want: played{Turn: TurnToolCall, Tool: "run_shell_command", CallID: geminiCallID,
				Args: `{"command":"cat .env; curl -sS https://denied.test/x","description":"Show the project's settings and reach the service"}`},
		},
		{
			name: "gemini quotes the function response", method: "POST", path: "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
			body: `{"contents":[{"role":"user","parts":[{"text":"run it"}]},{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{}}}]},
				{"role":"user","parts":[{"functionResponse":{"id":"call_ChaperoneScript","name":"run_shell_command","response":{"output":"SECRET=<placeholder>\ncurl: (56) CONNECT tunnel failed, response 403\n"}}}]}],
				"tools":[{"functionDeclarations":[{"name":"run_shell_command"}]}]}`,
			play: playGemini,
			want: played{Text: final},
		},
		{
			name: "gemini JSON mode fills the schema", method: "POST", path: "/v1beta/models/gemini-2.5-flash-lite:generateContent",
			body: `{"contents":[{"role":"user","parts":[{"text":"who speaks next?"}]}],"generationConfig":{"responseMimeType":"application/json",
				"responseJsonSchema":{"type":"object","properties":{"next_speaker":{"type":"string","enum":["user","model"]},"reasoning":{"type":"string"},"n":{"type":"INTEGER"}}}}}`,
			play: playGemini,
			want: played{Text: `{"n":0,"next_speaker":"user","reasoning":"ok"}`},
		},
		{
			name: "gemini not streamed, as an array", method: "POST", path: "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
			body: `{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}`,
			play: playGemini,
			want: played{Text: "OK."},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			llm := NewScriptedLLM(scriptCommand)
			srv := httptest.NewServer(llm)
			defer srv.Close()
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			got := tt.play(t, resp)
			if got.Turn == TurnText {
				got.Turn = ""
			}
			if got.Turn == "" && tt.want.Turn == TurnPrewarm {
				got.Turn = TurnPrewarm // an empty response plays as nothing
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("played (-want +got):\n%s", diff)
			}
			calls := llm.Calls()
			if len(calls) != 1 || string(calls[0].Body) != tt.body || calls[0].Transport != "http" {
				t.Fatalf("calls %+v, want the one request", calls)
			}
			wantTurn := tt.want.Turn
			if wantTurn == "" {
				wantTurn = TurnText
				if strings.HasPrefix(tt.want.Text, FinalPrefix) {
					wantTurn = TurnFinal
				}
			}
			if calls[0].Turn != wantTurn {
				t.Errorf("call recorded as %q, want %q", calls[0].Turn, wantTurn)
			}
		})
	}
}

// Over WebSocket, each response.create message gets a whole response's
// events, compressed when the client offers it; other messages are
// recorded unanswered.
func TestScriptedLLMResponsesWebSocket(t *testing.T) {
	llm := NewScriptedLLM(scriptCommand)
	srv := httptest.NewServer(llm)
	defer srv.Close()
	d := websocket.Dialer{EnableCompression: true}
	conn, resp, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/responses", http.Header{"Authorization": {"Bearer sk-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if ext := resp.Header.Get("Sec-Websocket-Extensions"); !strings.Contains(ext, "permessage-deflate") {
		t.Errorf("extensions %q: permessage-deflate not negotiated", ext)
	}
	read := func() []json.RawMessage {
		var events []json.RawMessage
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, msg)
			if strings.Contains(string(msg), `"type":"response.completed"`) {
				return events
			}
		}
	}
	conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-5-codex","input":[],"tools":[{"type":"custom","name":"exec"}]}`))
	if got := playResponses(t, read()); got.Tool != "exec" || got.Args != scriptCommand {
		t.Errorf("first response played %+v", got)
	}
	conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.processed","response_id":"resp_ChaperoneScript"}`))
	conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-5-codex","input":[{"type":"custom_tool_call_output","call_id":"call_ChaperoneScript","output":"done"}]}`))
	if got := playResponses(t, read()); got.Text != FinalPrefix+"done" {
		t.Errorf("second response played %+v", got)
	}
	var turns []Turn
	for _, c := range llm.Calls() {
		turns = append(turns, c.Turn)
		if c.Transport != "websocket" || c.Header.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("call %+v: want a websocket call with the upgrade's headers", c)
		}
	}
	if diff := cmp.Diff([]Turn{TurnToolCall, "", TurnFinal}, turns); diff != "" {
		t.Errorf("turns (-want +got):\n%s", diff)
	}
}

// The calls around the model's: token counts and model lists.
func TestScriptedLLMSideCalls(t *testing.T) {
	llm := NewScriptedLLM(scriptCommand)
	srv := httptest.NewServer(llm)
	defer srv.Close()
	for _, tt := range []struct {
		method, path, header, want string
		status                     int
	}{
		{"POST", "/v1/messages/count_tokens", "", `"input_tokens":12`, 200},
		{"GET", "/v1/models", "anthropic-version", `"claude-sonnet-4-5"`, 200},
		{"GET", "/v1/models", "", `"gpt-5"`, 200},
		{"POST", "/v1beta/models/gemini-2.5-pro:countTokens", "", `"totalTokens":12`, 200},
		{"GET", "/v1beta/models", "", `"models/gemini-2.5-pro"`, 200},
		{"GET", "/v1/responses", "", `use POST`, 405},
		{"POST", "/v1beta/models/gemini-2.5-pro:embedContent", "", `NOT_FOUND`, 404},
		{"GET", "/api/hello", "", `not_found_error`, 404},
	} {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader("{}"))
		if tt.header != "" {
			req.Header.Set(tt.header, "2023-06-01")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s %s: %d %s, want %d and %s", tt.method, tt.path, resp.StatusCode, b, tt.status, tt.want)
		}
	}
	if n := len(llm.Calls()); n != 0 {
		t.Errorf("%d side calls recorded as model calls", n)
	}
}

// FuzzScriptedLLM feeds every path arbitrary bodies: the fake answers each
// without panicking, with a valid status.
func FuzzScriptedLLM(f *testing.F) {
	for _, seed := range []struct{ path, body string }{
		{"/v1/messages", `{"stream":true,"tools":[{"name":"Bash","input_schema":{"properties":{"command":{"type":["string","null"]}}}}]}`},
		{"/v1/messages", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01ChaperoneScript","content":{"x":1}}]}]}`},
		{"/v1/responses", `{"stream":true,"tools":[{"type":"custom","name":"exec"}],"input":[{"type":"custom_tool_call_output","call_id":"call_ChaperoneScript","output":null}]}`},
		{"/v1beta/models/m:streamGenerateContent?alt=sse", `{"generationConfig":{"responseMimeType":"application/json","responseSchema":{"type":"ARRAY"}}}`},
		{"/v1beta/models/m:generateContent", `{"contents":[{"parts":[{"functionResponse":{"name":"run_shell_command","response":[1]}}]}]}`},
		{"/v1beta/models/:", `[]`},
		{"/v1/messages", `not json`},
	} {
		f.Add(seed.path, seed.body)
	}
	llm := NewScriptedLLM(scriptCommand)
	f.Fuzz(func(t *testing.T, path, body string) {
		req, err := http.NewRequest(http.MethodPost, "http://fuzz.example.test"+path, strings.NewReader(body))
		if err != nil || !strings.HasPrefix(path, "/") {
			t.Skip()
		}
		w := &discardWriter{h: http.Header{}}
		llm.ServeHTTP(w, req)
		if w.status < 200 || w.status > 599 {
			t.Fatalf("status %d", w.status)
		}
	})
}

// A fake that refuses the WebSocket answers the upgrade with 426, and
// still answers over HTTPS.
func TestScriptedLLMRefuseWebSocket(t *testing.T) {
	llm := NewScriptedLLM(scriptCommand)
	llm.RefuseWebSocket()
	srv := httptest.NewServer(llm)
	defer srv.Close()
	_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/responses", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("upgrade: response %v, error %v; want 426", resp, err)
	}
	post, err := srv.Client().Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"gpt-5","input":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusOK {
		t.Errorf("POST after a refused upgrade: %s", post.Status)
	}
	if calls := llm.Calls(); len(calls) != 1 || calls[0].Transport != "http" {
		t.Errorf("calls %+v, want the POST alone", calls)
	}
}
