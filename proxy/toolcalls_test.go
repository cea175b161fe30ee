package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// codexStream is a Responses API stream as Codex gets it: its freeform
// exec tool called (custom_tool_call), a local_shell_call, and a
// response.completed without the output.
var codexStream = []string{
	`{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-5.1-codex","output":[]}}`,
	`{"type":"response.output_item.added","output_index":0,"item":{"id":"ctc_1","type":"custom_tool_call","status":"in_progress","call_id":"call_exec","name":"exec","input":""}}`,
	`{"type":"response.custom_tool_call_input.delta","output_index":0,"item_id":"ctc_1","delta":"cat .env; curl https://denied.test/x"}`,
	`{"type":"response.output_item.done","output_index":0,"item":{"id":"ctc_1","type":"custom_tool_call","status":"completed","call_id":"call_exec","name":"exec","input":"cat .env; curl https://denied.test/x"}}`,
	`{"type":"response.output_item.done","output_index":1,"item":{"id":"lsh_1","type":"local_shell_call","status":"completed","call_id":"call_ls","action":{"type":"exec","command":["ls"]}}}`,
	`{"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","model":"gpt-5.1-codex","usage":{"input_tokens":5,"output_tokens":7}}}`,
}

// A Codex call through the proxy has its tool calls in the llm event,
// each with the time the answer named it: after the request began, by
// the time the answer ended.
func TestToolCallTimes(t *testing.T) {
	// Codex talks to api.openai.com; a host listed as an LLM API is one by
	// its path alone.
	re := newRewriteEnv(t, func(rw *Rewrites) { rw.LLMHosts = []string{"chatgpt.example.test"} })
	codex := re.upstream(upstream.Options{Name: "chatgpt.example.test", Addr: "127.0.28.5:0", CA: re.upCA, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range codexStream {
			typ := ev[len(`{"type":"`):]
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ[:strings.IndexByte(typ, '"')], ev)
			w.(http.Flusher).Flush()
		}
	})})
	before := time.Now()
	status, _ := re.post(t, "https://"+hostPort(codex)+"/v1/responses", nil,
		[]byte(`{"model":"gpt-5.1-codex","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"tools":[{"type":"custom","name":"exec"},{"type":"local_shell"}]}`))
	after := time.Now()
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	llm := re.rec.wait(t, "llm event", func(e *event.Event) bool { return e.Kind == event.KindLLM })
	want := []event.ToolCall{{ID: "call_exec", Name: "exec"}, {ID: "call_ls", Name: "local_shell"}}
	if d := cmp.Diff(want, llm.LLM.ToolCalls, cmpopts.IgnoreFields(event.ToolCall{}, "Time")); d != "" {
		t.Fatalf("tool calls (-want +got):\n%s", d)
	}
	for _, tc := range llm.LLM.ToolCalls {
		if tc.Time.Before(before) || tc.Time.After(after) || tc.Time.Before(llm.Time) {
			t.Errorf("call %s named at %v: want between the request's start %v and the answer's end %v", tc.ID, tc.Time, llm.Time, after)
		}
	}
}
