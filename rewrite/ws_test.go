package rewrite

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestDetectWebSocketAPI(t *testing.T) {
	tests := []struct {
		host, path string
		extra      []string
		want       API
		ok         bool
	}{
		{"api.openai.com", "/v1/responses", nil, API{OpenAI, OpResponses}, true},
		{"api.openai.com:443", "/v1/realtime?model=gpt-realtime", nil, API{OpenAI, OpRealtime}, true},
		{"my.openai.azure.com", "/openai/realtime?api-version=2025-04-01-preview&deployment=gpt", nil, API{AzureOpenAI, OpRealtime}, true},
		{"generativelanguage.googleapis.com", "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=k", nil, API{Gemini, OpBidiGenerateContent}, true},
		{"generativelanguage.googleapis.com", "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained", nil, API{Gemini, OpBidiGenerateContent}, true},
		{"us-central1-aiplatform.googleapis.com", "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent", nil, API{Gemini, OpBidiGenerateContent}, true},
		{"api.openai.com", "/v1/something-new", nil, API{OpenAI, OpWebSocket}, true}, // every WebSocket to an LLM host
		{"gw.internal:4000", "/v1/responses", []string{"gw.internal:4000"}, API{OpenAI, OpResponses}, true},
		{"gw.internal:4000", "/chat", []string{"gw.internal:4000"}, API{"", OpWebSocket}, true},
		{"echo.example", "/v1/responses", nil, API{}, false},
	}
	for _, tt := range tests {
		got, ok := DetectWebSocketAPI(tt.host, tt.path, tt.extra)
		if ok != tt.ok || got != tt.want {
			t.Errorf("DetectWebSocketAPI(%q, %q) = %v %v, want %v %v", tt.host, tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

func TestInspectWSMessage(t *testing.T) {
	responses, realtime, live := API{OpenAI, OpResponses}, API{OpenAI, OpRealtime}, API{Gemini, OpBidiGenerateContent}
	tests := []struct {
		name string
		api  API
		msg  string
		want WSMessage
	}{
		// Codex's, as codex-rs sends them: the request's fields beside its type.
		{"codex response.create", responses, `{"type":"response.create","model":"gpt-5-codex","instructions":"be brief","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"cat .env"}]},{"type":"function_call_output","call_id":"c1","output":"KEY=x"}],"tools":[],"stream":true,"store":false}`,
			WSMessage{Kind: WSRequest, Type: "response.create", Model: "gpt-5-codex", Task: "cat .env"}},
		{"response.create, string input", responses, `{"type":"response.create","model":"m","input":"hi"}`, WSMessage{Kind: WSRequest, Type: "response.create", Model: "m", Task: "hi"}},
		{"response.processed", responses, `{"type":"response.processed","response_id":"resp_1"}`, WSMessage{Kind: WSControl, Type: "response.processed"}},
		{"response.append", responses, `{"type":"response.append","input":[{"role":"user","content":"more"}]}`, WSMessage{Kind: WSContext, Type: "response.append", Task: "more"}},
		{"unknown type", responses, `{"type":"response.teleport","input":"x"}`, WSMessage{Type: "response.teleport"}},
		{"not JSON", responses, `hello`, WSMessage{}},
		{"JSON array", responses, `[1]`, WSMessage{}},

		{"session.update", realtime, `{"type":"session.update","session":{"type":"realtime","model":"gpt-realtime","instructions":"x"}}`, WSMessage{Kind: WSContext, Type: "session.update", Model: "gpt-realtime"}},
		{"conversation.item.create", realtime, `{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"read my .env"}]}}`,
			WSMessage{Kind: WSContext, Type: "conversation.item.create", Task: "read my .env"}},
		{"function_call_output", realtime, `{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":"c","output":"{}"}}`,
			WSMessage{Kind: WSContext, Type: "conversation.item.create"}},
		{"realtime response.create", realtime, `{"type":"response.create","response":{"instructions":"answer"}}`, WSMessage{Kind: WSRequest, Type: "response.create"}},
		{"audio", realtime, `{"type":"input_audio_buffer.append","audio":"AAAA"}`, WSMessage{Kind: WSControl, Type: "input_audio_buffer.append"}},

		{"setup", live, `{"setup":{"model":"models/gemini-2.0-flash-live-001","systemInstruction":{"parts":[{"text":"x"}]}}}`, WSMessage{Kind: WSContext, Type: "setup", Model: "gemini-2.0-flash-live-001"}},
		{"clientContent, turn complete", live, `{"clientContent":{"turns":[{"role":"user","parts":[{"text":"hello"}]}],"turnComplete":true}}`, WSMessage{Kind: WSRequest, Type: "clientContent", Task: "hello"}},
		{"client_content, turn open", live, `{"client_content":{"turns":[{"role":"user","parts":[{"text":"a"}]}]}}`, WSMessage{Kind: WSContext, Type: "client_content", Task: "a"}},
		{"realtimeInput text", live, `{"realtimeInput":{"text":"what now"}}`, WSMessage{Kind: WSRequest, Type: "realtimeInput", Task: "what now"}},
		{"realtimeInput audio", live, `{"realtimeInput":{"audio":{"data":"AAAA","mimeType":"audio/pcm;rate=16000"}}}`, WSMessage{Kind: WSControl, Type: "realtimeInput"}},
		{"toolResponse", live, `{"toolResponse":{"functionResponses":[{"id":"f1","name":"bash","response":{"output":"x"}}]}}`, WSMessage{Kind: WSRequest, Type: "toolResponse"}},
		{"live unknown", live, `{"somethingNew":{}}`, WSMessage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Prompt = tt.want.Task // none is clipped
			if diff := cmp.Diff(tt.want, InspectWSMessage(tt.api, []byte(tt.msg))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// wsRun passes msgs through a WSAnswer and returns what came out, each
// answer's info, and the events.
func wsRun(api API, restore func(string) (string, bool), msgs []string) (out []string, infos []ResponseInfo, evs []WSEvent) {
	a := NewWSAnswer(api, restore)
	for _, m := range msgs {
		o, ev := a.Message([]byte(m))
		for _, b := range o {
			out = append(out, string(b))
		}
		evs = append(evs, ev)
		if ev.Done {
			infos = append(infos, a.Take())
		}
	}
	for _, b := range a.Flush() {
		out = append(out, string(b))
	}
	return out, infos, evs
}

// A placeholder split across two deltas is restored in one message, over
// Responses, Realtime and Gemini Live; what each answer says is gathered.
func TestWSAnswer(t *testing.T) {
	esc := jsonEsc(secret)
	tests := []struct {
		name  string
		api   API
		in    []string
		out   []string
		infos []ResponseInfo
		evs   []WSEvent
	}{
		{
			name: "responses",
			api:  API{OpenAI, OpResponses},
			in: []string{
				`{"type":"response.created","response":{"id":"r1","model":"gpt-5-codex","status":"in_progress"}}`,
				`{"type":"response.output_text.delta","item_id":"m1","output_index":0,"content_index":0,"delta":"key: [REDA"}`,
				`{"type":"response.output_text.delta","item_id":"m1","output_index":0,"content_index":0,"delta":"CTED:aws-access-token:7f3a] ok"}`,
				`{"type":"response.output_text.delta","item_id":"m1","output_index":0,"content_index":0,"delta":"[REDACTED:aws-"}`,
				`{"type":"response.output_item.done","output_index":1,"item":{"type":"custom_tool_call","call_id":"call_1","name":"shell","input":"cat .env"}}`,
				`{"type":"response.completed","response":{"id":"r1","model":"gpt-5-codex","status":"completed","usage":{"input_tokens":12,"output_tokens":34,"input_tokens_details":{"cached_tokens":5}}}}`,
				`{"type":"codex.rate_limits","primary":{}}`,
				`{"type":"error","status":429,"error":{"message":"slow down"}}`,
				`[REDACTED:aws-access-token:7f3a] in plain text`,
			},
			out: []string{
				`{"type":"response.created","response":{"id":"r1","model":"gpt-5-codex","status":"in_progress"}}`,
				`{"content_index":0,"delta":"key: ` + esc + ` ok","item_id":"m1","output_index":0,"type":"response.output_text.delta"}`,
				`{"type":"response.output_text.delta","item_id":"m1","output_index":0,"content_index":0,"delta":"[REDACTED:aws-"}`,
				`{"type":"response.output_item.done","output_index":1,"item":{"type":"custom_tool_call","call_id":"call_1","name":"shell","input":"cat .env"}}`,
				`{"type":"response.completed","response":{"id":"r1","model":"gpt-5-codex","status":"completed","usage":{"input_tokens":12,"output_tokens":34,"input_tokens_details":{"cached_tokens":5}}}}`,
				`{"type":"codex.rate_limits","primary":{}}`,
				`{"type":"error","status":429,"error":{"message":"slow down"}}`,
				secret + ` in plain text`,
			},
			infos: []ResponseInfo{
				{Model: "gpt-5-codex", InputTokens: 12, OutputTokens: 34, CacheReadTokens: 5, FinishReasons: []string{"completed"}, ToolCalls: []ToolCall{{ID: "call_1", Name: "shell"}}},
				{FinishReasons: []string{"error"}},
			},
			evs: []WSEvent{{true, false}, {true, false}, {true, false}, {true, false}, {true, false}, {true, true}, {true, false}, {true, true}, {false, false}},
		},
		{
			name: "realtime",
			api:  API{OpenAI, OpRealtime},
			in: []string{
				`{"type":"session.created","session":{"model":"gpt-realtime"}}`,
				`{"type":"response.output_audio_transcript.delta","item_id":"i","output_index":0,"content_index":0,"delta":"[REDACTED:aws-acc"}`,
				`{"type":"response.output_audio_transcript.delta","item_id":"i","output_index":0,"content_index":0,"delta":"ess-token:7f3a]"}`,
				`{"type":"response.done","response":{"status":"completed","output":[{"type":"function_call","call_id":"c9","name":"bash"}],"usage":{"input_tokens":7,"output_tokens":8,"input_token_details":{"cached_tokens":1}}}}`,
			},
			out: []string{
				`{"type":"session.created","session":{"model":"gpt-realtime"}}`,
				`{"content_index":0,"delta":"` + esc + `","item_id":"i","output_index":0,"type":"response.output_audio_transcript.delta"}`,
				`{"type":"response.done","response":{"status":"completed","output":[{"type":"function_call","call_id":"c9","name":"bash"}],"usage":{"input_tokens":7,"output_tokens":8,"input_token_details":{"cached_tokens":1}}}}`,
			},
			infos: []ResponseInfo{{Model: "gpt-realtime", InputTokens: 7, OutputTokens: 8, CacheReadTokens: 1, FinishReasons: []string{"completed"}, ToolCalls: []ToolCall{{ID: "c9", Name: "bash"}}}},
			evs:   []WSEvent{{true, false}, {true, false}, {true, false}, {true, true}},
		},
		{
			name: "gemini live",
			api:  API{Gemini, OpBidiGenerateContent},
			in: []string{
				`{"setupComplete":{}}`,
				`{"serverContent":{"modelTurn":{"parts":[{"text":"it is [REDACTED:aws"}]}}}`,
				`{"serverContent":{"modelTurn":{"parts":[{"text":"-access-token:7f3a]."}]}}}`,
				`{"toolCall":{"functionCalls":[{"id":"f1","name":"run","args":{}}]}}`,
				`{"serverContent":{"turnComplete":true},"usageMetadata":{"promptTokenCount":3,"responseTokenCount":4}}`,
			},
			out: []string{
				`{"setupComplete":{}}`,
				`{"serverContent":{"modelTurn":{"parts":[{"text":"it is ` + esc + `."}]}}}`,
				`{"toolCall":{"functionCalls":[{"id":"f1","name":"run","args":{}}]}}`,
				`{"serverContent":{"turnComplete":true},"usageMetadata":{"promptTokenCount":3,"responseTokenCount":4}}`,
			},
			infos: []ResponseInfo{{ToolCalls: []ToolCall{{ID: "f1", Name: "run"}}}, {InputTokens: 3, OutputTokens: 4}},
			evs:   []WSEvent{{true, false}, {true, false}, {true, false}, {true, true}, {true, true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, infos, evs := wsRun(tt.api, restoreFn, tt.in)
			if diff := cmp.Diff(tt.out, out); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.infos, infos, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("infos (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.evs, evs); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			// Without restoring, every message passes as it came, and
			// the infos are the same.
			out, infos2, _ := wsRun(tt.api, nil, tt.in)
			if diff := cmp.Diff(tt.in, out); diff != "" {
				t.Errorf("without restoring (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(infos, infos2, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("infos without restoring (-restoring +not):\n%s", diff)
			}
		})
	}
}

// InspectWSMessage and WSAnswer take any bytes: a message they understand
// is JSON, a placeholder whole in a message never survives it, and
// without restoring every message passes unchanged.
func FuzzWSMessages(f *testing.F) {
	f.Add(uint8(0), []byte(`{"type":"response.output_text.delta","item_id":"m","delta":"[REDA"}`+"\x00"+`{"type":"response.output_text.delta","item_id":"m","delta":"CTED:aws-access-token:7f3a]"}`))
	f.Add(uint8(1), []byte(`{"type":"response.done","response":{"output":[{"type":"function_call","call_id":"c","name":"n"}]}}`))
	f.Add(uint8(2), []byte(`{"serverContent":{"modelTurn":{"parts":[{"text":"[REDACTED:aws-access-token:7f3a]"}]},"turnComplete":true}}`+"\x00"+`{"clientContent":{"turns":[{"role":"user","parts":[{"text":"x"}]}],"turnComplete":true}}`))
	f.Add(uint8(0), []byte(`{"type":"response.create","model":"m","input":[{"role":"user","content":"hi"}]}`))
	apis := []API{{OpenAI, OpResponses}, {OpenAI, OpRealtime}, {Gemini, OpBidiGenerateContent}, {"", OpWebSocket}}
	f.Fuzz(func(t *testing.T, sel uint8, in []byte) {
		api := apis[int(sel)%len(apis)]
		msgs := bytes.Split(in, []byte{0})
		for _, m := range msgs {
			got := InspectWSMessage(api, m)
			if got.Kind != WSUnknown && !json.Valid(m) {
				t.Fatalf("%q understood as %v, but it is not JSON", m, got.Kind)
			}
			if got.Prompt != "" && !json.Valid(m) || got.Task != clip(got.Prompt, MaxTaskBytes) {
				t.Fatalf("%q: prompt %q, task %q", m, got.Prompt, got.Task)
			}
		}
		plain := NewWSAnswer(api, nil)
		restoring := NewWSAnswer(api, restoreFn)
		var got [][]byte
		for _, m := range msgs {
			out, _ := plain.Message(m)
			if len(out) != 1 || !bytes.Equal(out[0], m) {
				t.Fatalf("without restoring, %q came out as %q", m, out)
			}
			out, _ = restoring.Message(m)
			got = append(got, out...)
			if json.Valid(m) && bytes.Contains(m, []byte(markerPH)) {
				// Whole in the message: it must not come out, in it or
				// in a message held before it.
				for _, o := range out {
					if bytes.Contains(o, []byte(markerPH)) {
						t.Fatalf("%q: the placeholder survived in %q", m, o)
					}
				}
			}
		}
		got = append(got, restoring.Flush()...)
		if allValid(msgs) {
			for i, o := range got {
				if !json.Valid(o) {
					t.Fatalf("message %d came out as invalid JSON: %q", i, o)
				}
			}
		}
		if len(got) > len(msgs) {
			t.Fatalf("%d messages came out of %d", len(got), len(msgs))
		}
	})
}

func allValid(msgs [][]byte) bool {
	for _, m := range msgs {
		if !json.Valid(m) {
			return false
		}
	}
	return true
}

// BenchmarkWSAnswer: a server message of a Responses stream through
// WSAnswer, parsed only and parsed and restored.
func BenchmarkWSAnswer(b *testing.B) {
	msg := []byte(`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Here is some streamed text, a few tokens long."}`)
	for _, tc := range []struct {
		name    string
		restore func(string) (string, bool)
	}{{"parse", nil}, {"restore", restoreFn}} {
		b.Run(tc.name, func(b *testing.B) {
			a := NewWSAnswer(API{OpenAI, OpResponses}, tc.restore)
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				a.Message(msg)
			}
		})
	}
}
