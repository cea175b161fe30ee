package rewrite

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestDetectAPI(t *testing.T) {
	extra := []string{"127.0.0.1:8080", "LiteLLM.internal", "[::1]:4000", "*.gw.example"}
	tests := []struct {
		host, path string
		want       API
		ok         bool
	}{
		{"api.anthropic.com", "/v1/messages", API{Anthropic, OpMessages}, true},
		{"API.Anthropic.COM:443", "/v1/messages?beta=true", API{Anthropic, OpMessages}, true},
		{"api.anthropic.com", "/v1/messages/count_tokens", API{Anthropic, OpCountTokens}, true},
		{"api.anthropic.com", "/v1/models", API{}, false},
		{"api.anthropic.com", "/v1/messages/batches", API{}, false},
		{"api.anthropic.com.", "/v1/messages", API{Anthropic, OpMessages}, true},
		{"api.anthropic.com", "/v1/chat/completions", API{Anthropic, OpChatCompletions}, true},
		{"api.openai.com", "/v1/chat/completions", API{OpenAI, OpChatCompletions}, true},
		{"api.openai.com", "/v1/responses", API{OpenAI, OpResponses}, true},
		{"api.openai.com", "/v1/responses/resp_123", API{}, false},
		{"api.openai.com", "/v1/embeddings", API{}, false},
		{"myres.openai.azure.com", "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21", API{AzureOpenAI, OpChatCompletions}, true},
		{"myres.openai.azure.com", "/openai/v1/responses", API{AzureOpenAI, OpResponses}, true},
		{"myres.openai.azure.com", "/openai/responses?api-version=preview", API{AzureOpenAI, OpResponses}, true},
		{"myres.services.ai.azure.com", "/anthropic/v1/messages", API{Anthropic, OpMessages}, true},
		{"generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:generateContent", API{Gemini, OpGenerateContent}, true},
		{"generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", API{Gemini, OpStreamGenerateContent}, true},
		{"generativelanguage.googleapis.com", "/v1/models/gemini-2.0-flash:generateContent", API{Gemini, OpGenerateContent}, true},
		{"generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:countTokens", API{}, false},
		{"generativelanguage.googleapis.com", "/v1beta/openai/chat/completions", API{Gemini, OpChatCompletions}, true},
		{"us-central1-aiplatform.googleapis.com", "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent", API{Gemini, OpStreamGenerateContent}, true},
		{"aiplatform.googleapis.com", "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash:generateContent", API{Gemini, OpGenerateContent}, true},
		{"us-east5-aiplatform.googleapis.com", "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict", API{Anthropic, OpMessages}, true},
		{"us-east5-aiplatform.googleapis.com", "/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict", API{Anthropic, OpCountTokens}, true},
		{"bedrock-runtime.us-east-1.amazonaws.com", "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse", API{Bedrock, OpConverse}, true},
		{"bedrock-runtime.us-east-1.amazonaws.com", "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse-stream", API{Bedrock, OpConverseStream}, true},
		{"bedrock-runtime.eu-west-1.amazonaws.com", "/model/us.anthropic.claude-sonnet-4/invoke", API{Bedrock, OpInvoke}, true},
		{"bedrock-runtime.eu-west-1.amazonaws.com", "/model/x/invoke-with-response-stream", API{Bedrock, OpInvokeStream}, true},
		{"bedrock-runtime.eu-west-1.amazonaws.com", "/model//converse", API{}, false},
		{"bedrock.us-east-1.amazonaws.com", "/model/x/converse", API{}, false},
		// Gateways and local servers: by path alone.
		{"127.0.0.1:8080", "/v1/chat/completions", API{OpenAI, OpChatCompletions}, true},
		{"127.0.0.1:8080", "/chat/completions", API{OpenAI, OpChatCompletions}, true},
		{"127.0.0.1:9090", "/v1/chat/completions", API{}, false},
		{"127.0.0.1", "/v1/chat/completions", API{}, false},
		{"litellm.internal:4000", "/anthropic/v1/messages", API{Anthropic, OpMessages}, true},
		{"LITELLM.INTERNAL", "/v1/responses", API{OpenAI, OpResponses}, true},
		{"litellm.internal", "/health", API{}, false},
		{"[::1]:4000", "/v1beta/models/gemini-pro:generateContent", API{Gemini, OpGenerateContent}, true},
		{"a.gw.example", "/openai/deployments/d/chat/completions", API{AzureOpenAI, OpChatCompletions}, true},
		{"gw.example", "/v1/messages", API{}, false},
		{"localhost:8080", "/model/m/converse", API{}, false},
		{"evil.example", "/v1/messages", API{}, false},
		{"api.openai.com.evil.example", "/v1/chat/completions", API{}, false},
		{"api.openai.com", "", API{}, false},
		{"", "/v1/messages", API{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.host+tt.path, func(t *testing.T) {
			got, ok := DetectAPI(tt.host, tt.path, extra)
			if ok != tt.ok || got != tt.want {
				t.Errorf("DetectAPI(%q, %q) = %+v, %v; want %+v, %v", tt.host, tt.path, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestInspect(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/requests/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	long := "a" + strings.Repeat("é", 3000) // a rune straddles byte 4096
	tests := []struct {
		name string
		api  API
		path string
		body []byte
		want Request
	}{
		{
			name: "anthropic text after tool result", api: API{Anthropic, OpMessages}, path: "/v1/messages", body: read("anthropic.json"),
			want: Request{Model: "claude-sonnet-4-5", Stream: true, Task: `now fix the <html> & \escapes\`},
		},
		{
			name: "anthropic tool-result-only message skipped", api: API{Anthropic, OpMessages},
			body: []byte(`{"model":"m","messages":[{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"second"},{"type":"text","text":"part two"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"tool output"}]}]}]}`),
			want: Request{Model: "m", Task: "second\npart two"},
		},
		{
			name: "anthropic count tokens", api: API{Anthropic, OpCountTokens},
			body: []byte(`{"model":"m","messages":[{"role":"user","content":"count me"}]}`),
			want: Request{Model: "m", Task: "count me"},
		},
		{
			name: "vertex anthropic model and stream from path", api: API{Anthropic, OpMessages},
			path: "/v1/projects/p/locations/l/publishers/anthropic/models/claude-x@1:streamRawPredict",
			body: []byte(`{"anthropic_version":"vertex-2023-10-16","messages":[{"role":"user","content":"hi"}]}`),
			want: Request{Model: "claude-x@1", Stream: true, Task: "hi"},
		},
		{
			name: "openai chat", api: API{OpenAI, OpChatCompletions}, body: read("openai-chat.json"),
			want: Request{Model: "gpt-4.1", Stream: true, Task: "use " + marker + " to list buckets"},
		},
		{
			name: "openai chat string content, no stream", api: API{OpenAI, OpChatCompletions},
			body: []byte(`{"model":"gpt-4o","stream":false,"messages":[{"role":"system","content":"sys"},{"role":"user","content":"hello"},{"role":"assistant","content":"hi"}]}`),
			want: Request{Model: "gpt-4o", Task: "hello"},
		},
		{
			name: "responses items", api: API{OpenAI, OpResponses}, body: read("openai-responses.json"),
			want: Request{Model: "gpt-5-codex", Stream: true, Task: "my key is " + marker + ", rotate it"},
		},
		{
			name: "responses string input", api: API{OpenAI, OpResponses},
			body: []byte(`{"model":"o3","input":"write a haiku"}`),
			want: Request{Model: "o3", Task: "write a haiku"},
		},
		{
			name: "responses easy message", api: API{OpenAI, OpResponses},
			body: []byte(`{"model":"o3","input":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"type":"function_call_output","call_id":"x","output":"out"}]}`),
			want: Request{Model: "o3", Task: "c"},
		},
		{
			name: "gemini functionResponse skipped, model from path", api: API{Gemini, OpStreamGenerateContent},
			path: "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", body: read("gemini.json"),
			want: Request{Model: "gemini-2.5-pro", Stream: true, Task: "check " + marker},
		},
		{
			name: "gemini without role", api: API{Gemini, OpGenerateContent}, path: "/v1beta/tunedModels/mine:generateContent",
			body: []byte(`{"contents":[{"parts":[{"text":"a"},{"inlineData":{}},{"text":"b"}]}]}`),
			want: Request{Model: "tunedModels/mine", Task: "a\nb"},
		},
		{
			name: "bedrock converse", api: API{Bedrock, OpConverse}, path: "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse", body: read("bedrock.json"),
			want: Request{Model: "anthropic.claude-3-5-sonnet-20240620-v1:0", Task: "here: " + marker},
		},
		{
			name: "bedrock converse-stream", api: API{Bedrock, OpConverseStream}, path: "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/converse-stream",
			body: []byte(`{"messages":[{"role":"user","content":[{"text":"go"}]}]}`),
			want: Request{Model: "arn:aws:bedrock:us-east-1:1:inference-profile/us.x", Stream: true, Task: "go"},
		},
		{
			name: "bedrock invoke non-chat", api: API{Bedrock, OpInvoke}, path: "/model/amazon.titan-text/invoke",
			body: []byte(`{"inputText":"summarise"}`),
			want: Request{Model: "amazon.titan-text", Task: "summarise"},
		},
		{
			name: "task clipped at a rune boundary", api: API{Anthropic, OpMessages},
			body: []byte(`{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`),
			want: Request{Model: "m", Task: long[:4095], Prompt: long},
		},
		{
			name: "odd shapes give empty fields", api: API{OpenAI, OpChatCompletions},
			body: []byte(`{"model":7,"stream":"yes","messages":"none"}`),
			want: Request{},
		},
		{name: "array body", api: API{OpenAI, OpChatCompletions}, body: []byte(`[1]`), want: Request{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Inspect(tt.api, tt.path, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.API = tt.api
			if tt.want.Prompt == "" {
				tt.want.Prompt = tt.want.Task // not clipped
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Inspect (-want +got):\n%s", diff)
			}
			if len(got.Task) > MaxTaskBytes || !utf8.ValidString(got.Task) {
				t.Errorf("task: %d bytes, valid UTF-8 %v", len(got.Task), utf8.ValidString(got.Task))
			}
		})
	}
}

func TestInspectNotJSON(t *testing.T) {
	for _, body := range []string{"", "model=x", `{"model":`, "\x1f\x8b\x08"} {
		if _, err := Inspect(API{OpenAI, OpChatCompletions}, "", []byte(body)); err == nil {
			t.Errorf("Inspect(%q): no error", body)
		} else if strings.Contains(err.Error(), body) && body != "" {
			t.Errorf("error %q repeats the body", err)
		}
	}
}

func FuzzInspect(f *testing.F) {
	for _, name := range []string{"anthropic.json", "openai-chat.json", "openai-responses.json", "gemini.json", "bedrock.json"} {
		if b, err := os.ReadFile("testdata/requests/" + name); err == nil {
			f.Add(b, uint8(len(name)))
		}
	}
	f.Add([]byte(`{"input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}]}`), uint8(3))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"text":null}]}]}`), uint8(0))
	ops := []API{{Anthropic, OpMessages}, {OpenAI, OpChatCompletions}, {OpenAI, OpResponses}, {Gemini, OpGenerateContent}, {Bedrock, OpConverse}, {Bedrock, OpInvoke}}
	f.Fuzz(func(t *testing.T, body []byte, op uint8) {
		api := ops[int(op)%len(ops)]
		req, err := Inspect(api, "/v1beta/models/m:streamGenerateContent", body)
		if (err == nil) != json.Valid(body) {
			t.Fatalf("err = %v, valid = %v", err, json.Valid(body))
		}
		if len(req.Task) > MaxTaskBytes {
			t.Fatalf("task of %d bytes", len(req.Task))
		}
		if err != nil && req.Prompt != "" {
			t.Fatalf("not JSON, yet a prompt %q", req.Prompt)
		}
		if req.Task != clip(req.Prompt, MaxTaskBytes) {
			t.Fatalf("task %q is not the prompt %q clipped", req.Task, req.Prompt)
		}
		// What encoding/json decodes: each line of the prompt is in the
		// body's strings (its parts are joined by newlines).
		if req.Prompt != "" {
			var tree any
			if json.Unmarshal(body, &tree) != nil {
				t.Fatal("a prompt from a body encoding/json cannot decode")
			}
			all := strings.Join(stringValues(tree, nil), "\n")
			seen := map[string]bool{}
			for _, line := range strings.Split(req.Prompt, "\n") {
				if !seen[line] && !strings.Contains(all, line) {
					t.Fatalf("prompt line %q is in none of the body's strings", line)
				}
				seen[line] = true
			}
		}
	})
}

// stringValues appends the string values of v, decoded by encoding/json,
// to out.
func stringValues(v any, out []string) []string {
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, x := range v {
			out = stringValues(x, out)
		}
	case map[string]any:
		for _, x := range v {
			out = stringValues(x, out)
		}
	}
	return out
}

// wordRedactor finds each "SECRET" followed by letters and digits, as a
// redactor finds a token, and gives its placeholder.
var wordRedactor = RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
	for i := 0; ; {
		j := strings.Index(s[i:], "SECRET")
		if j < 0 {
			return
		}
		start := i + j
		end := start + len("SECRET")
		for end < len(s) && (s[end] >= 'a' && s[end] <= 'z' || s[end] >= '0' && s[end] <= '9') {
			end++
		}
		found(start, end, "word", "[REDACTED:word:0f0f]")
		i = end
	}
})

// wordRedacted is what wordRedactor makes of s, whole.
func wordRedacted(s string) string {
	var b strings.Builder
	last := 0
	wordRedactor(s, func(start, end int, _, ph string) {
		b.WriteString(s[last:start])
		b.WriteString(ph)
		last = end
	})
	return b.String() + s[last:]
}

func TestLogPrompt(t *testing.T) {
	const ph = "[REDACTED:word:0f0f]"
	tests := []struct {
		name, text string
		max        int
		want       string
		cut        bool
	}{
		{"no secret", "list the files", 100, "list the files", false},
		{"a secret", "use SECRETabc123 now", 100, "use " + ph + " now", false},
		{"cut in the text", "0123456789", 4, "0123", true},
		{"a placeholder is whole or not at all", "ab SECRETx", 10, "ab ", true},
		{"a placeholder that fits", "ab SECRETx", 3 + len(ph), "ab " + ph, false},
		{"cut at a rune boundary", "aé", 2, "a", true},
		// The secret beyond the cut is found all the same: the text is
		// searched whole, then cut.
		{"a long secret before the cut", "SECRET" + strings.Repeat("a", 5000) + " x", 100, ph + " x", false},
		{"empty", "", 10, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := LogPrompt(tt.text, wordRedactor, tt.max)
			if got != tt.want || cut != tt.cut {
				t.Errorf("LogPrompt(%q, %d) = %q, %v; want %q, %v", tt.text, tt.max, got, cut, tt.want, tt.cut)
			}
		})
	}
	if got, _ := LogPrompt("SECRETx", nil, 100); got != "" {
		t.Errorf("without a redactor: %q, want nothing", got)
	}
}

// FuzzLogPrompt checks LogPrompt against redacting the whole text and
// cutting it: a prefix of it, never a secret, never a part of a
// placeholder, at most max bytes, valid UTF-8 when the text is.
func FuzzLogPrompt(f *testing.F) {
	f.Add("use SECRETabc now", uint16(10))
	f.Add("é SECRET1 é SECRET2", uint16(23))
	f.Fuzz(func(t *testing.T, text string, max uint16) {
		got, cut := LogPrompt(text, wordRedactor, int(max))
		whole := wordRedacted(text)
		if len(got) > int(max) || !strings.HasPrefix(whole, got) {
			t.Fatalf("LogPrompt(%q, %d) = %q: not a prefix of %q within %d bytes", text, max, got, whole, max)
		}
		if max > 0 && text != "" && cut != (got != whole) {
			t.Fatalf("LogPrompt(%q, %d) = %q, cut %v; whole %q", text, max, got, cut, whole)
		}
		if strings.Contains(got, "SECRET") && !strings.Contains(whole, "SECRET") {
			t.Fatalf("a secret in %q", got)
		}
		if i := strings.LastIndex(got, "[REDACTED:"); i >= 0 && !strings.Contains(got[i:], "]") && strings.Contains(whole[i:], "[REDACTED:word:0f0f]") && strings.HasPrefix(whole[i:], "[REDACTED:word:0f0f]") {
			t.Fatalf("a placeholder cut in %q", got)
		}
		if utf8.ValidString(text) && !utf8.ValidString(got) {
			t.Fatalf("%q is not valid UTF-8", got)
		}
	})
}
