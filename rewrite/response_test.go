package rewrite

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// secret needs escaping in JSON, twice inside tool arguments.
const secret = `AKIA"Q\Z</x>`

func restoreFn(p string) (string, bool) {
	if p == markerPH {
		return secret, true
	}
	return "", false
}

func jsonEsc(s string) string { return string(appendEscaped(nil, s)) }

// chunkReader returns 1..max bytes per Read, at random from a fixed seed.
type chunkReader struct {
	r   io.Reader
	rng *rand.Rand
	max int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	n := 1 + c.rng.IntN(c.max)
	return c.r.Read(p[:min(n, len(p))])
}

type splitter struct {
	name string
	wrap func(io.Reader) io.Reader
}

func splitters() []splitter {
	s := []splitter{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one-byte", iotest.OneByteReader},
		{"half", iotest.HalfReader},
	}
	for seed := range uint64(8) {
		s = append(s, splitter{"random", func(r io.Reader) io.Reader {
			return &chunkReader{r: r, rng: rand.New(rand.NewPCG(seed, 7)), max: 7}
		}})
	}
	return s
}

func readAll(t testing.TB, api API, ct string, r io.Reader, restore func(string) (string, bool)) ([]byte, ResponseInfo) {
	t.Helper()
	rr := NewResponseReader(api, ct, io.NopCloser(r), restore)
	out, err := io.ReadAll(rr)
	if err != nil {
		t.Fatal(err)
	}
	if err := rr.Close(); err != nil {
		t.Fatal(err)
	}
	return out, rr.Info()
}

type streamCase struct {
	file string
	api  API
	ct   string
	info ResponseInfo
	text map[string]string // per block: the text its deltas add up to, restored
}

func streamCases() []streamCase {
	return []streamCase{
		{
			file: "anthropic.sse", api: API{Anthropic, OpMessages}, ct: "text/event-stream; charset=utf-8",
			info: ResponseInfo{Model: "claude-sonnet-4-5-20250929", InputTokens: 25, OutputTokens: 89, CacheReadTokens: 2000, CacheCreationTokens: 100,
				FinishReasons: []string{"tool_use"}, ToolCalls: []ToolCall{{ID: "toolu_01A", Name: "Bash"}}},
			text: map[string]string{
				"b0": "Your key is " + secret + ". See [README] and " + secret + ", [",
				"b1": `{"command": "echo ` + jsonEsc(secret) + ` [REDACTED:unknown-rule:0000]"}`,
			},
		},
		{
			file: "openai-chat.sse", api: API{OpenAI, OpChatCompletions}, ct: "text/event-stream",
			info: ResponseInfo{Model: "gpt-4.1-2025-04-14", InputTokens: 120, OutputTokens: 30, CacheReadTokens: 64,
				FinishReasons: []string{"tool_calls"}, ToolCalls: []ToolCall{{ID: "call_abc", Name: "shell"}}},
			text: map[string]string{
				"c0":   "Key: " + secret + " ok <b>&</b>",
				"t0.0": `{"cmd":"` + jsonEsc(secret) + `"}`,
			},
		},
		{
			file: "openai-responses.sse", api: API{OpenAI, OpResponses}, ct: "text/event-stream",
			info: ResponseInfo{Model: "gpt-5-codex", InputTokens: 500, OutputTokens: 42, CacheReadTokens: 128,
				FinishReasons: []string{"completed"}, ToolCalls: []ToolCall{{ID: "call_xyz", Name: "shell"}}},
			text: map[string]string{
				"response.output_text.delta/msg_1/0/0/<nil>":                "The key " + secret + " works",
				"response.function_call_arguments.delta/fc_1/1/<nil>/<nil>": `{"command":["echo","` + jsonEsc(secret) + `"]}`,
			},
		},
		{
			// Codex: its freeform tools (custom_tool_call), a local_shell_call
			// and a remote MCP server's mcp_call.
			file: "openai-responses-codex.sse", api: API{OpenAI, OpResponses}, ct: "text/event-stream",
			info: ResponseInfo{Model: "gpt-5.1-codex", InputTokens: 900, OutputTokens: 60, CacheReadTokens: 512,
				FinishReasons: []string{"completed"}, ToolCalls: []ToolCall{
					{ID: "call_exec1", Name: "exec"}, {ID: "call_patch1", Name: "apply_patch"},
					{ID: "call_ls1", Name: "local_shell"}, {ID: "mcp_1", Name: "create_issue"},
				}},
			text: map[string]string{
				"response.custom_tool_call_input.delta/ctc_1/1/<nil>/<nil>": `await tools.exec_command({cmd: "echo ` + secret + `; curl https://denied.test/x"})`,
				"response.custom_tool_call_input.delta/ctc_2/2/<nil>/<nil>": "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n",
			},
		},
		{
			file: "gemini.sse", api: API{Gemini, OpStreamGenerateContent}, ct: "text/event-stream",
			info: ResponseInfo{Model: "gemini-2.5-pro", InputTokens: 10, OutputTokens: 30, CacheReadTokens: 4,
				FinishReasons: []string{"STOP"}, ToolCalls: []ToolCall{{ID: "", Name: "run_shell_command"}}},
			text: map[string]string{"g0.0": "Use " + secret + " now"},
		},
	}
}

// sseTexts checks that every event of an SSE body is well formed and adds up
// the text of its deltas per block.
func sseTexts(t *testing.T, api API, body []byte) map[string]string {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("\n\n")) && !bytes.HasSuffix(body, []byte("\r\n\r\n")) {
		t.Errorf("body does not end with a blank line")
	}
	r := &ResponseReader{api: api}
	texts := map[string]string{}
	var s sseSplitter
	s.feed(body, func(ev []byte, whole bool) {
		if !whole {
			t.Fatal("event too large")
		}
		_, data := sseFields(ev)
		if len(data) == 0 || string(data) == "[DONE]" {
			return
		}
		if !json.Valid(data) {
			t.Errorf("event data is not JSON: %s", data)
		}
		_, slots := r.deltaSlots(data)
		for _, sl := range slots {
			texts[sl.key] += sl.text
		}
	})
	if len(s.rest()) != 0 {
		t.Errorf("trailing bytes after the last event: %q", s.rest())
	}
	return texts
}

func TestResponseReaderSSE(t *testing.T) {
	for _, tc := range streamCases() {
		t.Run(tc.file, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata/responses", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata/responses", strings.TrimSuffix(tc.file, ".sse")+".restored")
			var wantOut []byte
			for _, sp := range splitters() {
				// Passthrough: byte for byte, and the same Info.
				out, info := readAll(t, tc.api, tc.ct, sp.wrap(bytes.NewReader(in)), nil)
				if !bytes.Equal(out, in) {
					t.Fatalf("%s: restore nil changed the body", sp.name)
				}
				if diff := cmp.Diff(tc.info, info); diff != "" {
					t.Errorf("%s: passthrough info (-want +got):\n%s", sp.name, diff)
				}
				// Restoring: the same bytes however the body is split.
				out, info = readAll(t, tc.api, tc.ct, sp.wrap(bytes.NewReader(in)), restoreFn)
				if diff := cmp.Diff(tc.info, info); diff != "" {
					t.Errorf("%s: restoring info (-want +got):\n%s", sp.name, diff)
				}
				if wantOut == nil {
					wantOut = out
					continue
				}
				if !bytes.Equal(out, wantOut) {
					t.Fatalf("%s: output differs from whole reads:\n%s\nwant:\n%s", sp.name, out, wantOut)
				}
			}
			if bytes.Contains(wantOut, []byte(markerPH)) {
				t.Errorf("a known placeholder survived:\n%s", wantOut)
			}
			if diff := cmp.Diff(tc.text, sseTexts(t, tc.api, wantOut)); diff != "" {
				t.Errorf("delta texts (-want +got):\n%s", diff)
			}
			if *update {
				if err := os.WriteFile(golden, wantOut, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(want), string(wantOut)); diff != "" {
				t.Errorf("restored stream (-want +got):\n%s", diff)
			}
		})
	}
}

// A text held for a possible placeholder goes out before the block's stop.
func TestResponseReaderHeldTextOrder(t *testing.T) {
	in := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a [REDACTED:x\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
	out, _ := readAll(t, API{Anthropic, OpMessages}, "text/event-stream", strings.NewReader(in), restoreFn)
	if string(out) != in {
		t.Errorf("out:\n%s\nwant the input unchanged:\n%s", out, in)
	}
	// A ping or a comment between two deltas does not end the block.
	in = "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"k [REDA\"}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n: keep-alive\n\n" +
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"CTED:aws-access-token:7f3a]\"}}\n\n"
	out, _ = readAll(t, API{Anthropic, OpMessages}, "text/event-stream", strings.NewReader(in), restoreFn)
	want := "event: ping\ndata: {\"type\": \"ping\"}\n\n: keep-alive\n\n" +
		"data: {\"delta\":{\"text\":\"k " + jsonEsc(secret) + "\",\"type\":\"text_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n"
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Two blocks interleaved: the held text of one is not merged into the other.
	in = "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"[REDA\"}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"CTED:aws-access-token:7f3a]\"}}\n\n"
	out, _ = readAll(t, API{Anthropic, OpMessages}, "text/event-stream", strings.NewReader(in), restoreFn)
	if string(out) != in {
		t.Errorf("out:\n%s\nwant the input unchanged:\n%s", out, in)
	}
	// The stream ends while a delta is held: it still goes out.
	in = "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"[REDA\"}}\n\n"
	out, _ = readAll(t, API{Anthropic, OpMessages}, "text/event-stream", strings.NewReader(in), restoreFn)
	if string(out) != in {
		t.Errorf("out:\n%s\nwant the input unchanged:\n%s", out, in)
	}
	// A stream cut in the middle of an event: its bytes still go out.
	in = "data: {\"type\":\"message_stop\"}\n\ndata: {\"type\":\"mess"
	out, _ = readAll(t, API{Anthropic, OpMessages}, "text/event-stream", iotest.OneByteReader(strings.NewReader(in)), restoreFn)
	if string(out) != in {
		t.Errorf("out:\n%s\nwant the input unchanged:\n%s", out, in)
	}
}

func TestResponseReaderJSON(t *testing.T) {
	tests := []struct {
		name string
		api  API
		ct   string
		body string
		info ResponseInfo
	}{
		{
			name: "anthropic message", api: API{Anthropic, OpMessages}, ct: "application/json",
			body: `{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-1","content":[{"type":"text","text":"k=[REDACTED:aws-access-token:7f3a]"},{"type":"tool_use","id":"toolu_1","name":"Read","input":{"p":"[REDACTED:aws-access-token:7f3a]"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":3,"cache_creation_input_tokens":2}}`,
			info: ResponseInfo{Model: "claude-opus-4-1", InputTokens: 10, OutputTokens: 5, CacheReadTokens: 3, CacheCreationTokens: 2, FinishReasons: []string{"tool_use"}, ToolCalls: []ToolCall{{ID: "toolu_1", Name: "Read"}}},
		},
		{
			name: "anthropic count tokens", api: API{Anthropic, OpCountTokens}, ct: "application/json",
			body: `{"input_tokens":2095}`, info: ResponseInfo{InputTokens: 2095},
		},
		{
			name: "bedrock invoke claude", api: API{Bedrock, OpInvoke}, ct: "application/json",
			body: `{"id":"msg_b","type":"message","model":"claude-3-5","content":[{"type":"text","text":"[REDACTED:aws-access-token:7f3a]"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}}`,
			info: ResponseInfo{Model: "claude-3-5", InputTokens: 1, OutputTokens: 2, FinishReasons: []string{"end_turn"}},
		},
		{
			name: "openai chat", api: API{OpenAI, OpChatCompletions}, ct: "application/json",
			body: `{"id":"c","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"[REDACTED:aws-access-token:7f3a]","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"},{"index":1,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"prompt_tokens_details":{"cached_tokens":0}}}`,
			info: ResponseInfo{Model: "gpt-4o-2024-08-06", InputTokens: 9, OutputTokens: 12, FinishReasons: []string{"tool_calls", "stop"}, ToolCalls: []ToolCall{{ID: "call_1", Name: "f"}}},
		},
		{
			name: "responses", api: API{OpenAI, OpResponses}, ct: "application/json",
			body: `{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"model":"o3","output":[{"type":"function_call","call_id":"call_9","name":"g","arguments":"{}"},{"type":"message","content":[{"type":"output_text","text":"[REDACTED:aws-access-token:7f3a]"}]}],"usage":{"input_tokens":7,"output_tokens":8,"input_tokens_details":{"cached_tokens":2}}}`,
			info: ResponseInfo{Model: "o3", InputTokens: 7, OutputTokens: 8, CacheReadTokens: 2, FinishReasons: []string{"max_output_tokens"}, ToolCalls: []ToolCall{{ID: "call_9", Name: "g"}}},
		},
		{
			name: "gemini", api: API{Gemini, OpGenerateContent}, ct: "application/json; charset=UTF-8",
			body: `{"candidates":[{"content":{"parts":[{"text":"[REDACTED:aws-access-token:7f3a]"},{"functionCall":{"id":"fc1","name":"ls","args":{}}}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":6,"cachedContentTokenCount":1},"modelVersion":"gemini-2.0-flash"}`,
			info: ResponseInfo{Model: "gemini-2.0-flash", InputTokens: 4, OutputTokens: 6, CacheReadTokens: 1, FinishReasons: []string{"STOP"}, ToolCalls: []ToolCall{{ID: "fc1", Name: "ls"}}},
		},
		{
			name: "gemini streamed array", api: API{Gemini, OpStreamGenerateContent}, ct: "application/json",
			body: "[{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a [REDACTED:aws-access-token:7f3a]\"}]}}],\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":1},\"modelVersion\":\"gemini-2.5-flash\"}\r\n,\r\n" +
				"{\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"ls\",\"args\":{}}}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":9,\"thoughtsTokenCount\":3},\"modelVersion\":\"gemini-2.5-flash\"}]",
			info: ResponseInfo{Model: "gemini-2.5-flash", InputTokens: 4, OutputTokens: 12, FinishReasons: []string{"STOP"}, ToolCalls: []ToolCall{{ID: "", Name: "ls"}}},
		},
		{
			name: "bedrock converse", api: API{Bedrock, OpConverse}, ct: "application/json",
			body: `{"output":{"message":{"role":"assistant","content":[{"text":"[REDACTED:aws-access-token:7f3a]"},{"toolUse":{"toolUseId":"tooluse_1","name":"bash","input":{}}}]}},"stopReason":"tool_use","usage":{"inputTokens":30,"outputTokens":40,"totalTokens":70,"cacheReadInputTokens":5,"cacheWriteInputTokens":6},"metrics":{"latencyMs":100}}`,
			info: ResponseInfo{InputTokens: 30, OutputTokens: 40, CacheReadTokens: 5, CacheCreationTokens: 6, FinishReasons: []string{"tool_use"}, ToolCalls: []ToolCall{{ID: "tooluse_1", Name: "bash"}}},
		},
		{
			name: "error body", api: API{Anthropic, OpMessages}, ct: "application/json",
			body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := strings.ReplaceAll(tt.body, markerPH, jsonEsc(secret))
			for _, sp := range splitters() {
				out, info := readAll(t, tt.api, tt.ct, sp.wrap(strings.NewReader(tt.body)), nil)
				if string(out) != tt.body {
					t.Fatalf("%s: restore nil changed the body", sp.name)
				}
				if diff := cmp.Diff(tt.info, info); diff != "" {
					t.Errorf("%s: info (-want +got):\n%s", sp.name, diff)
				}
				out, info = readAll(t, tt.api, tt.ct, sp.wrap(strings.NewReader(tt.body)), restoreFn)
				if diff := cmp.Diff(want, string(out)); diff != "" {
					t.Fatalf("%s: restored body (-want +got):\n%s", sp.name, diff)
				}
				if !json.Valid(out) {
					t.Fatalf("%s: restored body is not JSON", sp.name)
				}
				if diff := cmp.Diff(tt.info, info); diff != "" {
					t.Errorf("%s: restoring info (-want +got):\n%s", sp.name, diff)
				}
			}
		})
	}
}

func TestResponseReaderOtherBodies(t *testing.T) {
	body := "plain [REDACTED:aws-access-token:7f3a] text [REDACTED:aws-access-token:7f3"
	tests := []struct {
		name string
		api  API
		ct   string
		want string
	}{
		{"text restored raw", API{OpenAI, OpChatCompletions}, "text/plain", strings.ReplaceAll(body, markerPH, secret)},
		{"converse-stream untouched", API{Bedrock, OpConverseStream}, "application/vnd.amazon.eventstream", body},
		{"event-stream content type untouched", API{Bedrock, OpInvoke}, "application/vnd.amazon.eventstream", body},
		{"invoke stream untouched", API{Bedrock, OpInvokeStream}, "", body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sp := range splitters() {
				out, info := readAll(t, tt.api, tt.ct, sp.wrap(strings.NewReader(body)), restoreFn)
				if diff := cmp.Diff(tt.want, string(out)); diff != "" {
					t.Fatalf("%s: (-want +got):\n%s", sp.name, diff)
				}
				if diff := cmp.Diff(ResponseInfo{}, info); diff != "" {
					t.Errorf("%s: info (-want +got):\n%s", sp.name, diff)
				}
			}
		})
	}
}

// Read hands over what has arrived without waiting for the rest of the body.
func TestResponseReaderDoesNotWait(t *testing.T) {
	events := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	}
	tests := []struct {
		name    string
		ct      string
		restore func(string) (string, bool)
		chunks  []string
		want    []string // what must be readable after each chunk is written
	}{
		{name: "sse passthrough", ct: "text/event-stream", chunks: events, want: events},
		{name: "sse restoring", ct: "text/event-stream", restore: restoreFn, chunks: events, want: events},
		{name: "sse restoring, partial event held", ct: "text/event-stream", restore: restoreFn,
			chunks: []string{events[0] + "event: ping\n", "data: {}\n\n"}, want: []string{events[0], "event: ping\ndata: {}\n\n"}},
		{name: "json restoring holds only a placeholder's start", ct: "application/json", restore: restoreFn,
			chunks: []string{`{"text":"hello [REDA`, `CTED:aws-access-token:7f3a] bye"}`},
			want:   []string{`{"text":"hello `, jsonEsc(secret) + ` bye"}`}},
		{name: "json passthrough", ct: "application/json", chunks: []string{`{"text":"hello [REDA`, `CTED"}`}, want: []string{`{"text":"hello [REDA`, `CTED"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			rr := NewResponseReader(API{Anthropic, OpMessages}, tt.ct, pr, tt.restore)
			defer rr.Close()
			got := make(chan []byte)
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := rr.Read(buf)
					if n > 0 {
						got <- bytes.Clone(buf[:n])
					}
					if err != nil {
						close(got)
						return
					}
				}
			}()
			for i, c := range tt.chunks {
				if _, err := pw.Write([]byte(c)); err != nil {
					t.Fatal(err)
				}
				var have []byte
				for len(have) < len(tt.want[i]) {
					select {
					case b := <-got:
						have = append(have, b...)
					case <-time.After(10 * time.Second):
						t.Fatalf("chunk %d: Read still waiting after the writer paused; have %q, want %q", i, have, tt.want[i])
					}
				}
				if string(have) != tt.want[i] {
					t.Fatalf("chunk %d: read %q, want %q", i, have, tt.want[i])
				}
			}
			pw.Close()
			for b := range got {
				t.Errorf("unexpected bytes after the end: %q", b)
			}
		})
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestResponseReaderError(t *testing.T) {
	boom := errors.New("connection reset")
	in := "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"[RED\"}}\n\n"
	for _, restore := range []func(string) (string, bool){nil, restoreFn} {
		rr := NewResponseReader(API{Anthropic, OpMessages}, "text/event-stream",
			io.NopCloser(io.MultiReader(strings.NewReader(in), errReader{boom})), restore)
		out, err := io.ReadAll(rr)
		if !errors.Is(err, boom) {
			t.Errorf("err = %v, want %v", err, boom)
		}
		if string(out) != in {
			t.Errorf("out = %q, want what arrived before the error, %q", out, in)
		}
		if _, err := rr.Read(make([]byte, 10)); !errors.Is(err, boom) {
			t.Errorf("second Read err = %v, want the same error", err)
		}
	}
}

// An SSE event larger than the parse bound passes through, restored byte-wise.
func TestResponseReaderHugeEvent(t *testing.T) {
	huge := "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
		strings.Repeat("x", maxParseBytes+64<<10) + " [REDACTED:aws-access-token:7f3a]\"}}\n\n"
	in := huge + "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n"
	for _, restore := range []func(string) (string, bool){nil, restoreFn} {
		out, info := readAll(t, API{Anthropic, OpMessages}, "text/event-stream", bufio.NewReaderSize(strings.NewReader(in), 4096), restore)
		want := in
		if restore != nil {
			want = strings.ReplaceAll(in, markerPH, jsonEsc(secret))
		}
		if string(out) != want {
			i := 0
			for i < len(out) && i < len(want) && out[i] == want[i] {
				i++
			}
			t.Errorf("restore %v: output differs at %d: %q, want %q", restore != nil, i, out[max(0, i-20):min(len(out), i+60)], want[max(0, i-20):min(len(want), i+60)])
		}
		if diff := cmp.Diff(ResponseInfo{OutputTokens: 3, FinishReasons: []string{"end_turn"}}, info); diff != "" {
			t.Errorf("info (-want +got):\n%s", diff)
		}
	}
}

// A JSON body larger than the parse bound still passes through, unparsed.
func TestResponseReaderHugeJSON(t *testing.T) {
	in := `{"type":"message","model":"m","content":[{"type":"text","text":"` + strings.Repeat("x", maxParseBytes) + ` [REDACTED:aws-access-token:7f3a]"}]}`
	out, info := readAll(t, API{Anthropic, OpMessages}, "application/json", strings.NewReader(in), restoreFn)
	if want := strings.ReplaceAll(in, markerPH, jsonEsc(secret)); string(out) != want {
		t.Errorf("output differs (%d bytes, want %d)", len(out), len(want))
	}
	if diff := cmp.Diff(ResponseInfo{}, info); diff != "" {
		t.Errorf("info (-want +got):\n%s", diff)
	}
}

func FuzzResponseReader(f *testing.F) {
	for _, tc := range streamCases() {
		if b, err := os.ReadFile(filepath.Join("testdata/responses", tc.file)); err == nil {
			f.Add(b, uint8(0), uint64(1))
		}
	}
	f.Add([]byte(`{"content":[{"type":"text","text":"[REDACTED:aws-access-token:7f3a]"}]}`), uint8(1), uint64(2))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"[REDA\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"CTED:aws-access-token:7f3a]\"}}]}\n\n"), uint8(6), uint64(3))
	apis := []API{{Anthropic, OpMessages}, {OpenAI, OpChatCompletions}, {OpenAI, OpResponses}, {Gemini, OpStreamGenerateContent}, {Bedrock, OpConverse}, {Bedrock, OpConverseStream}}
	cts := []string{"text/event-stream", "application/json", "text/plain"}
	f.Fuzz(func(t *testing.T, body []byte, sel uint8, seed uint64) {
		api, ct := apis[int(sel)%len(apis)], cts[int(sel/8)%len(cts)]
		split := func() io.Reader {
			return &chunkReader{r: bytes.NewReader(body), rng: rand.New(rand.NewPCG(seed, 1)), max: 1 + int(seed%64)}
		}
		out, _ := readAll(t, api, ct, split(), nil)
		if !bytes.Equal(out, body) {
			t.Fatal("restore nil changed the body")
		}
		a, ia := readAll(t, api, ct, split(), restoreFn)
		b, ib := readAll(t, api, ct, bytes.NewReader(body), restoreFn)
		if !bytes.Equal(a, b) {
			t.Fatalf("output depends on how the body is split:\n%q\n%q", a, b)
		}
		if diff := cmp.Diff(ib, ia); diff != "" {
			t.Fatalf("info depends on how the body is split (-whole +split):\n%s", diff)
		}
	})
}

// sseStream repeats Anthropic text deltas to about size bytes.
func sseStream(size int) []byte {
	var b bytes.Buffer
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
	for b.Len() < size {
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Here is some streamed text, a few tokens long.\"}}\n\n")
	}
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":900}}\n\n")
	return b.Bytes()
}

func BenchmarkResponseReader(b *testing.B) {
	stream := sseStream(1 << 20)
	body := anthropicBody(1<<20, 0)
	run := func(b *testing.B, in []byte, mk func(io.Reader) io.Reader) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			if _, err := io.Copy(io.Discard, mk(bytes.NewReader(in))); err != nil {
				b.Fatal(err)
			}
		}
	}
	plain := func(r io.Reader) io.Reader { return struct{ io.Reader }{r} } // no WriterTo shortcut
	reader := func(ct string, restore func(string) (string, bool)) func(io.Reader) io.Reader {
		return func(r io.Reader) io.Reader {
			return NewResponseReader(API{Anthropic, OpMessages}, ct, io.NopCloser(r), restore)
		}
	}
	b.Run("sse/baseline-io-copy", func(b *testing.B) { run(b, stream, plain) })
	b.Run("sse/passthrough", func(b *testing.B) { run(b, stream, reader("text/event-stream", nil)) })
	b.Run("sse/restoring", func(b *testing.B) { run(b, stream, reader("text/event-stream", restoreFn)) })
	b.Run("json/baseline-io-copy", func(b *testing.B) { run(b, body, plain) })
	b.Run("json/passthrough", func(b *testing.B) { run(b, body, reader("application/json", nil)) })
	b.Run("json/restoring", func(b *testing.B) { run(b, body, reader("application/json", restoreFn)) })
}

func sseBody(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return b.String()
}

// Every form of tool call each API has is found, streamed and not, each
// call once, in order.
func TestResponseReaderToolCalls(t *testing.T) {
	tests := []struct {
		name string
		api  API
		ct   string
		body string
		want []ToolCall
	}{
		{
			name: "responses: every item that is a tool call", api: API{OpenAI, OpResponses}, ct: "application/json",
			body: `{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[` +
				`{"type":"reasoning","id":"rs_1","summary":[]},` +
				`{"type":"function_call","id":"fc_1","call_id":"call_f","name":"shell","arguments":"{\"command\":[\"ls\"]}"},` +
				`{"type":"custom_tool_call","id":"ctc_1","call_id":"call_c","name":"apply_patch","input":"*** Begin Patch"},` +
				`{"type":"local_shell_call","id":"lsh_1","call_id":"call_l","status":"completed","action":{"type":"exec","command":["ls"]}},` +
				`{"type":"shell_call","id":"sh_1","call_id":"call_s","action":{"commands":["ls"]},"status":"completed"},` +
				`{"type":"apply_patch_call","id":"ap_1","call_id":"call_a","operation":{"type":"create_file","path":"a","diff":"+x"},"status":"completed"},` +
				`{"type":"computer_call","id":"cu_1","call_id":"call_u","action":{"type":"click","x":1,"y":2},"status":"completed"},` +
				`{"type":"mcp_call","id":"mcp_1","server_label":"gh","name":"create_issue","arguments":"{}"},` +
				`{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}},` +
				`{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"done"}]}]}`,
			want: []ToolCall{{ID: "call_f", Name: "shell"}, {ID: "call_c", Name: "apply_patch"}, {ID: "call_l", Name: "local_shell"},
				{ID: "call_s", Name: "shell"}, {ID: "call_a", Name: "apply_patch"}, {ID: "call_u", Name: "computer"}, {ID: "mcp_1", Name: "create_issue"}},
		},
		{
			// As Codex's own test servers answer: the items, then a
			// response.completed whose response has no output.
			name: "responses streamed, no output at the end", api: API{OpenAI, OpResponses}, ct: "text/event-stream",
			body: sseBody(
				`{"type":"response.output_item.added","output_index":0,"item":{"id":"ctc_1","type":"custom_tool_call","status":"in_progress","call_id":"call_1","name":"exec","input":""}}`,
				`{"type":"response.custom_tool_call_input.delta","output_index":0,"item_id":"ctc_1","delta":"cat .env"}`,
				`{"type":"response.output_item.done","output_index":0,"item":{"id":"ctc_1","type":"custom_tool_call","status":"completed","call_id":"call_1","name":"exec","input":"cat .env"}}`,
				`{"type":"response.output_item.done","output_index":1,"item":{"id":"fc_2","type":"function_call","call_id":"call_2","name":"shell_command","arguments":"{}"}}`,
				`{"type":"response.completed","response":{"id":"resp_1"}}`),
			want: []ToolCall{{ID: "call_1", Name: "exec"}, {ID: "call_2", Name: "shell_command"}},
		},
		{
			name: "chat: function, custom and the older function_call", api: API{OpenAI, OpChatCompletions}, ct: "application/json",
			body: `{"id":"c","object":"chat.completion","model":"gpt-5","choices":[` +
				`{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_2","type":"custom","custom":{"name":"exec","input":"ls"}}]},"finish_reason":"tool_calls"},` +
				`{"index":1,"message":{"role":"assistant","function_call":{"name":"old","arguments":"{}"}},"finish_reason":"function_call"}]}`,
			want: []ToolCall{{ID: "call_1", Name: "f"}, {ID: "call_2", Name: "exec"}, {Name: "old"}},
		},
		{
			name: "chat streamed custom tool", api: API{OpenAI, OpChatCompletions}, ct: "text/event-stream",
			body: sseBody(
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_c","type":"custom","custom":{"name":"exec","input":""}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"custom":{"input":"cat .env"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"function_call":{"name":"old","arguments":""}}}]}`,
				`{"choices":[{"index":0,"delta":{"function_call":{"arguments":"{}"}}}]}`,
				`[DONE]`),
			want: []ToolCall{{ID: "call_c", Name: "exec"}, {Name: "old"}},
		},
		{
			name: "anthropic: client, server and MCP tools", api: API{Anthropic, OpMessages}, ct: "text/event-stream",
			body: sseBody(
				`{"type":"message_start","message":{"type":"message","model":"claude","content":[]}}`,
				`{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`,
				`{"type":"content_block_start","index":1,"content_block":{"type":"mcp_tool_use","id":"mcptoolu_1","name":"echo","server_name":"s","input":{}}}`,
				`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}}`,
				`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"command\":\"ls\"}"}}`,
				`{"type":"message_stop"}`),
			want: []ToolCall{{ID: "srvtoolu_1", Name: "web_search"}, {ID: "mcptoolu_1", Name: "echo"}, {ID: "toolu_1", Name: "Bash"}},
		},
		{
			name: "gemini streamed function calls", api: API{Gemini, OpStreamGenerateContent}, ct: "text/event-stream",
			body: sseBody(
				`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}}},{"functionCall":{"id":"g2","name":"read_file","args":{}}}]}}]}`,
				`{"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP"}]}`),
			want: []ToolCall{{Name: "run_shell_command"}, {ID: "g2", Name: "read_file"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, restore := range []func(string) (string, bool){nil, restoreFn} {
				for _, sp := range splitters() {
					_, info := readAll(t, tt.api, tt.ct, sp.wrap(strings.NewReader(tt.body)), restore)
					if d := cmp.Diff(tt.want, info.ToolCalls); d != "" {
						t.Fatalf("%s, restoring %v: tool calls (-want +got):\n%s", sp.name, restore != nil, d)
					}
				}
			}
		})
	}
}

// A stamped call has the time the event that names it was read, before
// the end of the event is handed on: the client acts on whole events.
func TestResponseReaderStampsToolCalls(t *testing.T) {
	body := sseBody(
		`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_2","name":"Read","input":{}}}`)
	for _, restore := range []func(string) (string, bool){nil, restoreFn} {
		rr := NewResponseReader(API{Anthropic, OpMessages}, "text/event-stream", io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), restore)
		var clock time.Time
		var got []byte
		seen := map[string]int{} // call id → bytes handed on when it was stamped
		rr.StampToolCalls(func() time.Time {
			clock = clock.Add(time.Second)
			return clock
		})
		buf := make([]byte, 1)
		for {
			n, err := rr.Read(buf)
			got = append(got, buf[:n]...)
			for _, tc := range rr.Info().ToolCalls {
				if _, ok := seen[tc.ID]; !ok {
					seen[tc.ID] = len(got)
				}
			}
			if err != nil {
				break
			}
		}
		calls := rr.Info().ToolCalls
		if len(calls) != 2 || !calls[0].Seen.Equal(time.Time{}.Add(time.Second)) || !calls[1].Seen.Equal(time.Time{}.Add(2*time.Second)) {
			t.Errorf("restoring %v: calls %+v, want stamped 1s and 2s", restore != nil, calls)
		}
		for id, at := range seen {
			i := strings.Index(string(got), id)
			end := i + strings.Index(string(got[i:]), "\n\n") + 2 // the end of the event naming it
			if i < 0 || at > end {
				t.Errorf("restoring %v: %s was recorded %d bytes in, after its event ended at %d", restore != nil, id, at, end)
			}
		}
	}
}
