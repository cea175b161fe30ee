package telemetry

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chaperone-dev/chaperone/event"
)

// secret stands for a token an agent put on a command line and in a URL.
const secret = "sk-live-0123456789abcdef"

var traceT0 = time.Date(2025, 3, 1, 13, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return traceT0.Add(d) }

func allow() event.Verdict { return event.Verdict{Action: event.Allow} }

// scriptedSession is one session: an agent (node, pid 100) that ran
// bash > curl and python3 before asking the model, which answered with a
// Bash tool call; ls ran after it; python3's connection to port 22 was
// denied.
func scriptedSession() []*event.Event {
	agent := &event.Process{PID: 100, PPID: 1, Exe: "/usr/bin/node", Argv: []string{"node", "/usr/bin/claude"}, LineageNames: []string{"node"}}
	bash := &event.Process{PID: 200, PPID: 100, Exe: "/bin/bash", Argv: []string{"bash", "-c", "curl ..."}, Lineage: []int{100}, LineageNames: []string{"node", "bash"}}
	curl := &event.Process{PID: 201, PPID: 200, Exe: "/usr/bin/curl", Argv: []string{"curl", "-H", "Authorization: Bearer " + secret, "https://api.example.com/v1/items"}, Lineage: []int{200, 100}, LineageNames: []string{"node", "bash", "curl"}}
	py := &event.Process{PID: 300, PPID: 100, Exe: "/usr/bin/python3", Argv: []string{"python3", "x.py"}, Lineage: []int{100}, LineageNames: []string{"node", "python3"}}
	ls := &event.Process{PID: 400, PPID: 100, Exe: "/usr/bin/ls", Argv: []string{"ls", "-la"}, Lineage: []int{100}, LineageNames: []string{"node", "ls"}}
	return []*event.Event{
		{Time: at(0), Kind: event.KindSessionStart, Session: "s1", Verdict: allow(), SessionInfo: &event.Session{
			ID: "s1", Agent: "claude", Command: []string{"claude", "--token", secret}, RootPID: 100, Mode: "transparent"}},
		{Time: at(1 * time.Second), Kind: event.KindExec, Session: "s1", Process: bash, Verdict: allow(),
			Exec: &event.Exec{Path: "/bin/bash", Argv: bash.Argv}},
		{Time: at(2 * time.Second), Kind: event.KindExec, Session: "s1", Process: curl, Verdict: allow(),
			Exec: &event.Exec{Path: "/usr/bin/curl", Argv: curl.Argv}},
		{Time: at(3 * time.Second), Kind: event.KindHTTP, Session: "s1", Process: curl, Verdict: allow(),
			HTTP: &event.HTTP{Method: "GET", URL: "https://api.example.com/v1/items?page=2&token=" + secret, Host: "api.example.com", Proto: "HTTP/2.0", Status: 200}},
		{Time: at(4 * time.Second), Kind: event.KindExec, Session: "s1", Process: py, Verdict: allow(),
			Exec: &event.Exec{Path: "/usr/bin/python3", Argv: py.Argv}},
		{Time: at(5 * time.Second), Kind: event.KindConnect, Session: "s1", Process: py,
			Verdict: event.Verdict{Action: event.Deny, Rule: "no-ssh", Reason: "ssh is not allowed", DecidedBy: event.DecidedByRule},
			Connect: &event.Connect{Dst: netip.MustParseAddrPort("127.0.0.9:22"), Host: "git.example.com", Port: 22, Transport: event.TCP, Via: "transparent"}},
		{Time: at(10 * time.Second), Kind: event.KindHTTP, Session: "s1", Process: agent, Verdict: allow(),
			HTTP: &event.HTTP{Method: "POST", URL: "https://api.anthropic.com/v1/messages", Host: "api.anthropic.com", Status: 200}},
		{Time: at(10 * time.Second), Kind: event.KindLLM, Session: "s1", Process: agent, Verdict: allow(),
			LLM: &event.LLM{Provider: "anthropic", Model: "claude-sonnet-4", Path: "/v1/messages", Operation: "messages", Stream: true,
				Status: 200, ResponseModel: "claude-sonnet-4-20250514", InputTokens: 10, OutputTokens: 20, CacheReadTokens: 100, CacheCreationTokens: 50,
				FinishReasons: []string{"tool_use"}, ToolCalls: []event.ToolCall{{ID: "toolu_1", Name: "Bash"}}}},
		{Time: at(13 * time.Second), Kind: event.KindExec, Session: "s1", Process: ls, Verdict: allow(),
			Exec: &event.Exec{Path: "/usr/bin/ls", Argv: ls.Argv, Cwd: "/work/repo"}},
		{Time: at(13500 * time.Millisecond), Kind: event.KindFile, Session: "s1", Process: ls, Verdict: allow(),
			File: &event.File{Path: "/work/repo/main.go", Access: event.FileRead}},
		{Time: at(20 * time.Second), Kind: event.KindSessionEnd, Session: "s1", Verdict: allow(),
			SessionInfo: &event.Session{ID: "s1", Agent: "claude", ExitCode: 3}},
	}
}

// record runs events through a Tracer over a real bus and returns the
// ended spans by name.
func record(t *testing.T, capture bool, events []*event.Event) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr, err := NewTracer(TracerOptions{Provider: tp, CaptureContent: capture, Now: func() time.Time { return at(12 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	bus := event.NewBus()
	sub := bus.Subscribe("telemetry", event.SubscribeOptions{Queue: 1024})
	done := make(chan error, 1)
	go func() { done <- tr.Run(sub) }()
	for _, e := range events {
		bus.Publish(e)
	}
	bus.Close()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := tr.Dropped(); n != 0 {
		t.Errorf("Dropped() = %d, want 0", n)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if _, dup := spans[s.Name()]; dup {
			t.Errorf("two spans named %q", s.Name())
		}
		spans[s.Name()] = s
	}
	return spans
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// pick returns the values of keys in m, for comparing a subset.
func pick(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

func TestTracerSpanTree(t *testing.T) {
	spans := record(t, false, scriptedSession())

	byID := map[string]string{}
	for name, s := range spans {
		byID[s.SpanContext().SpanID().String()] = name
	}
	parents := map[string]string{}
	for name, s := range spans {
		parents[name] = byID[s.Parent().SpanID().String()]
	}
	wantParents := map[string]string{
		"invoke_agent claude":  "",
		"process node":         "invoke_agent claude",
		"process bash":         "process node",
		"process curl":         "process bash",
		"GET":                  "process curl",
		"process python3":      "process node",
		"POST":                 "process node",
		"chat claude-sonnet-4": "process node",
		"execute_tool Bash":    "chat claude-sonnet-4",
		"process ls":           "process node",
	}
	if d := cmp.Diff(wantParents, parents); d != "" {
		t.Errorf("span tree (-want +got):\n%s", d)
	}
	root := spans["invoke_agent claude"]
	for name, s := range spans {
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s: not in the session's trace", name)
		}
	}

	tests := []struct {
		span string
		want map[string]any
	}{
		{"invoke_agent claude", map[string]any{
			"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "claude", "gen_ai.agent.id": "s1",
			"gen_ai.conversation.id": "s1", "session.id": "s1", "process.exit.code": int64(3),
			"process.command_args": []string{"claude"},
		}},
		{"process curl", map[string]any{
			"process.pid": int64(201), "process.parent_pid": int64(200), "process.executable.path": "/usr/bin/curl",
			"process.command_args": []string{"curl"},
		}},
		{"GET", map[string]any{
			"http.request.method": "GET", "url.full": "https://api.example.com/v1/items?page=REDACTED&token=REDACTED",
			"server.address": "api.example.com", "server.port": int64(443), "http.response.status_code": int64(200),
			"chaperone.verdict": "allow", "chaperone.decided_by": "default",
		}},
		{"chat claude-sonnet-4", map[string]any{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic", "gen_ai.request.model": "claude-sonnet-4",
			"gen_ai.response.model": "claude-sonnet-4-20250514", "gen_ai.usage.input_tokens": int64(160),
			"gen_ai.usage.output_tokens": int64(20), "gen_ai.usage.cache_read.input_tokens": int64(100),
			"gen_ai.usage.cache_creation.input_tokens": int64(50), "gen_ai.response.finish_reasons": []string{"tool_use"},
			"gen_ai.conversation.id": "s1", "chaperone.verdict": "allow",
		}},
		{"execute_tool Bash", map[string]any{
			"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "Bash", "gen_ai.tool.call.id": "toolu_1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.span, func(t *testing.T) {
			s, ok := spans[tt.span]
			if !ok {
				t.Fatalf("no span %q", tt.span)
			}
			keys := make([]string, 0, len(tt.want))
			for k := range tt.want {
				keys = append(keys, k)
			}
			if d := cmp.Diff(tt.want, pick(attrMap(s.Attributes()), keys...)); d != "" {
				t.Errorf("attributes (-want +got):\n%s", d)
			}
		})
	}

	t.Run("times", func(t *testing.T) {
		got := map[string][2]time.Time{}
		for _, n := range []string{"invoke_agent claude", "process curl", "GET", "chat claude-sonnet-4", "execute_tool Bash"} {
			got[n] = [2]time.Time{spans[n].StartTime(), spans[n].EndTime()}
		}
		want := map[string][2]time.Time{
			"invoke_agent claude":  {at(0), at(20 * time.Second)},
			"process curl":         {at(2 * time.Second), at(20 * time.Second)},
			"GET":                  {at(3 * time.Second), at(3 * time.Second)},
			"chat claude-sonnet-4": {at(10 * time.Second), at(12 * time.Second)},
			"execute_tool Bash":    {at(12 * time.Second), at(13500 * time.Millisecond)},
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("start, end (-want +got):\n%s", d)
		}
	})

	t.Run("session status", func(t *testing.T) {
		if got := root.Status().Code; got != codes.Error {
			t.Errorf("root status = %v, want Error for exit code 3", got)
		}
	})

	t.Run("chat links its http request", func(t *testing.T) {
		links := spans["chat claude-sonnet-4"].Links()
		if len(links) != 1 || links[0].SpanContext.SpanID() != spans["POST"].SpanContext().SpanID() {
			t.Errorf("chat links = %v, want the POST span", links)
		}
	})

	t.Run("tool call link", func(t *testing.T) {
		tool := spans["execute_tool Bash"].SpanContext()
		ls := spans["process ls"]
		if len(ls.Links()) != 1 || ls.Links()[0].SpanContext.SpanID() != tool.SpanID() {
			t.Fatalf("process ls links = %v, want execute_tool Bash", ls.Links())
		}
		var got []map[string]any
		for _, ev := range ls.Events() {
			got = append(got, pick(attrMap(ev.Attributes), "gen_ai.tool.call.id", "chaperone.tool.match", "chaperone.tool.span_id", "file.path"))
		}
		want := []map[string]any{
			{"gen_ai.tool.call.id": "toolu_1", "chaperone.tool.match": "kind", "chaperone.tool.span_id": tool.SpanID().String()},
			{"gen_ai.tool.call.id": "toolu_1", "chaperone.tool.match": "lineage", "chaperone.tool.span_id": tool.SpanID().String(), "file.path": "/work/repo/main.go"},
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("ls events (-want +got):\n%s", d)
		}
		for _, n := range []string{"process curl", "process python3", "GET"} {
			if l := spans[n].Links(); len(l) != 0 {
				t.Errorf("%s: links %v; it ran before the tool call", n, l)
			}
		}
	})

	t.Run("denied connect", func(t *testing.T) {
		evs := spans["process python3"].Events()
		var conn map[string]any
		for _, ev := range evs {
			if ev.Name == "connect" {
				conn = attrMap(ev.Attributes)
			}
		}
		want := map[string]any{
			"chaperone.verdict": "deny", "chaperone.rule": "no-ssh", "chaperone.decided_by": "rule",
			"chaperone.reason": "ssh is not allowed", "error.type": "chaperone.denied",
			"server.address": "git.example.com", "server.port": int64(22), "network.peer.address": "127.0.0.9",
		}
		if d := cmp.Diff(want, pick(conn, "chaperone.verdict", "chaperone.rule", "chaperone.decided_by", "chaperone.reason",
			"error.type", "server.address", "server.port", "network.peer.address")); d != "" {
			t.Errorf("connect event (-want +got):\n%s", d)
		}
	})
}

// dump renders every string a span would export.
func dump(spans map[string]sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintln(&b, s.Name(), s.Attributes(), s.Status())
		for _, ev := range s.Events() {
			fmt.Fprintln(&b, ev.Name, ev.Attributes)
		}
		for _, l := range s.Links() {
			fmt.Fprintln(&b, l.Attributes)
		}
	}
	return b.String()
}

func TestTracerCaptureContent(t *testing.T) {
	tests := []struct {
		capture    bool
		wantSecret bool
		curlArgs   []string
	}{
		{false, false, []string{"curl"}},
		{true, true, []string{"curl", "-H", "Authorization: Bearer " + secret, "https://api.example.com/v1/items"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("capture=", tt.capture), func(t *testing.T) {
			spans := record(t, tt.capture, scriptedSession())
			if got := strings.Contains(dump(spans), secret); got != tt.wantSecret {
				t.Errorf("the secret is in the spans: %v, want %v", got, tt.wantSecret)
			}
			got := attrMap(spans["process curl"].Attributes())["process.command_args"]
			if d := cmp.Diff(tt.curlArgs, got); d != "" {
				t.Errorf("process.command_args (-want +got):\n%s", d)
			}
		})
	}
}

func TestTracerMissedStart(t *testing.T) {
	// Events of a session whose start was dropped still make a trace.
	evs := scriptedSession()[1:]
	spans := record(t, false, evs)
	root, ok := spans["invoke_agent"]
	if !ok {
		t.Fatalf("no root span; got %v", keys(spans))
	}
	if got := root.StartTime(); !got.Equal(at(time.Second)) {
		t.Errorf("root start = %v, want the first event's time", got)
	}
	if p := spans["process node"]; p == nil || p.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("process node is not the root's child")
	}
}

func TestTracerHTTPError(t *testing.T) {
	tests := []struct {
		name       string
		verdict    event.Verdict
		h          event.HTTP
		wantStatus codes.Code
		wantDesc   string
		wantType   any // nil: no error.type
	}{
		{"complete", allow(), event.HTTP{Method: "GET", Status: 200}, codes.Unset, "", nil},
		{"upstream reset mid-body", allow(), event.HTTP{Method: "GET", Status: 200, Error: "upstream reset the connection after 10 bytes of the body"},
			codes.Error, "upstream reset the connection after 10 bytes of the body", "chaperone.upstream_error"},
		{"client went away", allow(), event.HTTP{Method: "GET", Status: 200, Error: "client closed the connection after 5 bytes of the body"},
			codes.Error, "client closed the connection after 5 bytes of the body", "chaperone.client_error"},
		{"refused, with an error", event.Verdict{Action: event.Deny, Rule: "header_timeout"}, event.HTTP{Error: "client sent no complete request header within 1s"},
			codes.Error, "denied", "chaperone.denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h
			spans := record(t, false, []*event.Event{
				{Time: at(0), Kind: event.KindSessionStart, Session: "s1", Verdict: allow(), SessionInfo: &event.Session{ID: "s1", Agent: "a"}},
				{Time: at(time.Second), Kind: event.KindHTTP, Session: "s1", Verdict: tt.verdict, HTTP: &h},
				{Time: at(2 * time.Second), Kind: event.KindSessionEnd, Session: "s1", Verdict: allow(), SessionInfo: &event.Session{ID: "s1", Agent: "a"}},
			})
			name := h.Method
			if name == "" {
				name = "HTTP"
			}
			s, ok := spans[name]
			if !ok {
				t.Fatalf("no span %q; got %v", name, keys(spans))
			}
			if got := s.Status(); got.Code != tt.wantStatus || got.Description != tt.wantDesc {
				t.Errorf("status %v %q, want %v %q", got.Code, got.Description, tt.wantStatus, tt.wantDesc)
			}
			if got := attrMap(s.Attributes())["error.type"]; got != tt.wantType {
				t.Errorf("error.type %v, want %v", got, tt.wantType)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestClassifyTool(t *testing.T) {
	tests := map[string]toolKind{
		"Bash": toolExec, "run_shell_command": toolExec, "exec_command": toolExec, "shell": toolExec,
		"Read": toolFile, "Write": toolFile, "Edit": toolFile, "MultiEdit": toolFile, "Glob": toolFile, "Grep": toolFile,
		"LS": toolFile, "apply_patch": toolFile, "read_file": toolFile,
		"WebFetch": toolNet, "web_search": toolNet, "fetch_url": toolNet,
		"TodoWrite": toolOther, "Task": toolOther, "lookup": toolOther,
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			if got := classifyTool(name); got != want {
				t.Errorf("classifyTool(%q) = %d, want %d", name, got, want)
			}
		})
	}
}

func TestToolLinker(t *testing.T) {
	mk := func(id, name string, fromSec int) *toolCall {
		from := time.Duration(fromSec) * time.Second
		return &toolCall{id: id, name: name, kind: classifyTool(name), called: at(from), answered: at(from + time.Second),
			until: at(from + 61*time.Second), callerPID: 100}
	}
	tests := []struct {
		name    string
		calls   []*toolCall
		started map[int]string
		a       action
		want    string
		how     string
	}{
		{"exec matches bash", []*toolCall{mk("b", "Bash", 0), mk("r", "Read", 1)}, nil,
			action{kind: event.KindExec, pid: 400, lineage: []int{100}, t: at(5 * time.Second)}, "b", "kind"},
		{"exec of a grandchild of the agent", []*toolCall{mk("b", "Bash", 0)}, nil,
			action{kind: event.KindExec, pid: 401, lineage: []int{400, 100, 1}, t: at(5 * time.Second)}, "b", "kind"},
		{"exec in another process tree", []*toolCall{mk("b", "Bash", 0)}, nil,
			action{kind: event.KindExec, pid: 500, lineage: []int{1}, t: at(5 * time.Second)}, "", ""},
		{"exec in another process tree, no recent either", []*toolCall{mk("r", "Read", 0)}, nil,
			action{kind: event.KindExec, pid: 500, lineage: []int{1}, t: at(5 * time.Second)}, "", ""},
		{"exec before the call was named", []*toolCall{mk("b", "Bash", 10)}, nil,
			action{kind: event.KindExec, pid: 400, lineage: []int{100}, t: at(9 * time.Second)}, "", ""},
		{"file matches read", []*toolCall{mk("r", "Read", 0), mk("b", "Bash", 1)}, nil,
			action{kind: event.KindFile, pid: 100, t: at(5 * time.Second)}, "r", "kind"},
		{"most recent matching", []*toolCall{mk("b1", "Bash", 0), mk("b2", "Bash", 2)}, nil,
			action{kind: event.KindExec, pid: 400, lineage: []int{100}, t: at(5 * time.Second)}, "b2", "kind"},
		{"connect matches fetch", []*toolCall{mk("w", "WebFetch", 0), mk("b", "Bash", 1)}, nil,
			action{kind: event.KindConnect, pid: 100, t: at(5 * time.Second)}, "w", "kind"},
		{"fallback to recent for a child", []*toolCall{mk("b", "Bash", 0)}, nil,
			action{kind: event.KindConnect, pid: 401, t: at(5 * time.Second)}, "b", "recent"},
		{"no fallback for the caller", []*toolCall{mk("b", "Bash", 0)}, nil,
			action{kind: event.KindConnect, pid: 100, t: at(5 * time.Second)}, "", ""},
		{"before the call", []*toolCall{mk("b", "Bash", 10)}, nil,
			action{kind: event.KindExec, pid: 400, lineage: []int{100}, t: at(5 * time.Second)}, "", ""},
		{"a connection before the call", []*toolCall{mk("w", "WebFetch", 10)}, nil,
			action{kind: event.KindConnect, pid: 100, t: at(9 * time.Second)}, "", ""},
		{"after the window", []*toolCall{mk("b", "Bash", 0)}, nil,
			action{kind: event.KindExec, pid: 400, lineage: []int{100}, t: at(90 * time.Second)}, "", ""},
		{"lineage wins", []*toolCall{mk("b", "Bash", 0), mk("r", "Read", 1)}, map[int]string{400: "b"},
			action{kind: event.KindFile, pid: 401, lineage: []int{400, 100}, t: at(5 * time.Second)}, "b", "lineage"},
		{"lineage outlives the window", []*toolCall{mk("b", "Bash", 0)}, map[int]string{400: "b"},
			action{kind: event.KindConnect, pid: 400, t: at(300 * time.Second)}, "b", "lineage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := toolLinker[int]{calls: tt.calls}
			for pid, id := range tt.started {
				for _, c := range tt.calls {
					if c.id == id {
						if l.started == nil {
							l.started = map[int]*toolCall{}
						}
						l.started[pid] = c
					}
				}
			}
			c, how := l.link(tt.a)
			got := ""
			if c != nil {
				got = c.id
			}
			if got != tt.want || how != tt.how {
				t.Errorf("link = %q by %q, want %q by %q", got, how, tt.want, tt.how)
			}
		})
	}
}

func TestTraceURL(t *testing.T) {
	tests := []struct {
		in      string
		capture bool
		want    string
	}{
		{"https://h/p?a=1&key=" + secret, false, "https://h/p?a=REDACTED&key=REDACTED"},
		{"https://h/p?a=1", true, "https://h/p?a=1"},
		{"https://user:" + secret + "@h/p", true, "https://h/p"},
		{"https://h/p#" + secret, false, "https://h/p"},
		{"https://h/p", false, "https://h/p"},
		{"://bad url?" + secret, false, "://bad url"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := traceURL(tt.in, tt.capture); got != tt.want {
				t.Errorf("traceURL = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	long := make([]string, 40)
	for i := range long {
		long[i] = fmt.Sprint(i)
	}
	tests := []struct {
		name    string
		argv    []string
		capture bool
		want    []string
	}{
		{"none", nil, true, nil},
		{"program only", []string{"curl", secret}, false, []string{"curl"}},
		{"whole", []string{"curl", "x"}, true, []string{"curl", "x"}},
		{"clipped", long, true, append(append([]string{}, long[:32]...), "…8 more")},
		{"long arg", []string{strings.Repeat("é", 200)}, true, []string{strings.Repeat("é", 128) + "…"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, args(tt.argv, tt.capture)); d != "" {
				t.Errorf("args (-want +got):\n%s", d)
			}
		})
	}
}

// What runs above the session's root (the shell and tools that started
// Chaperone) is not the session's: lineages are cut at the root.
func TestTracerCutsLineageAtRoot(t *testing.T) {
	start := &event.Event{Time: at(0), Kind: event.KindSessionStart, Session: "s9", Verdict: allow(),
		SessionInfo: &event.Session{ID: "s9", Agent: "sh", RootPID: 100}}
	// curl (300), child of python3 (200), child of the root sh (100), whose
	// own ancestors 50 (make) and 1 (init) are outside.
	open := &event.Event{Time: at(time.Second), Kind: event.KindFile, Session: "s9", Verdict: allow(),
		Process: &event.Process{PID: 300, PPID: 200, Exe: "/usr/bin/curl", Lineage: []int{200, 100, 50, 1},
			LineageNames: []string{"sh", "python3", "curl"}},
		File: &event.File{Path: "/etc/hosts", Access: event.FileRead}}
	end := &event.Event{Time: at(2 * time.Second), Kind: event.KindSessionEnd, Session: "s9", Verdict: allow(),
		SessionInfo: &event.Session{ID: "s9", Agent: "sh", RootPID: 100}}
	spans := record(t, false, []*event.Event{start, open, end})
	got := keys(spans)
	slices.Sort(got)
	if d := cmp.Diff([]string{"invoke_agent sh", "process curl", "process python3", "process sh"}, got); d != "" {
		t.Fatalf("spans (-want +got):\n%s", d)
	}
	parent := func(name string) string {
		for n, s := range spans {
			if s.SpanContext().SpanID() == spans[name].Parent().SpanID() {
				return n
			}
		}
		return ""
	}
	for child, want := range map[string]string{"process curl": "process python3", "process python3": "process sh", "process sh": "invoke_agent sh"} {
		if got := parent(child); got != want {
			t.Errorf("parent of %s = %q, want %q", child, got, want)
		}
	}
}

// The agent may run the tool before the llm event that asked for it is
// published (the proxy publishes it once the whole answer is passed on):
// the action is linked when the call arrives.
func TestTracerLinksActionsBeforeTheirCall(t *testing.T) {
	sess := &event.Session{ID: "s8", Agent: "claude", RootPID: 10}
	agent := &event.Process{PID: 10, Exe: "/usr/bin/claude"}
	ls := &event.Process{PID: 11, PPID: 10, Exe: "/usr/bin/ls", Lineage: []int{10}, LineageNames: []string{"claude", "ls"}}
	events := []*event.Event{
		{Time: at(0), Kind: event.KindSessionStart, Session: "s8", Verdict: allow(), SessionInfo: sess},
		// The exec happens at 3s; the llm event whose request began at 1s
		// arrives after it.
		{Time: at(3 * time.Second), Kind: event.KindExec, Session: "s8", Verdict: allow(), Process: ls,
			Exec: &event.Exec{Path: "/usr/bin/ls", Argv: []string{"ls"}}},
		{Time: at(1 * time.Second), Kind: event.KindLLM, Session: "s8", Verdict: allow(), Process: agent,
			LLM: &event.LLM{Provider: "anthropic", Model: "m", Status: 200, ToolCalls: []event.ToolCall{{ID: "toolu_9", Name: "Bash"}}}},
		{Time: at(5 * time.Second), Kind: event.KindSessionEnd, Session: "s8", Verdict: allow(), SessionInfo: sess},
	}
	spans := record(t, false, events)
	tool, proc := spans["execute_tool Bash"], spans["process ls"]
	if tool == nil || proc == nil {
		t.Fatalf("spans %v", keys(spans))
	}
	var linked bool
	for _, l := range proc.Links() {
		linked = linked || l.SpanContext.SpanID() == tool.SpanContext().SpanID()
	}
	if !linked {
		t.Error("the exec that came before its call's llm event is not linked to the call")
	}
}

// Only the processes the tool ran are linked to its call: the agent's own
// helper (Claude Code's git, started while the request that asked for the
// tool was in flight) and a process of another tree of the session are
// not, although they are execs in the call's window.
func TestTracerLinksOnlyTheToolsProcesses(t *testing.T) {
	sess := &event.Session{ID: "s9", Agent: "claude", RootPID: 5}
	agent := &event.Process{PID: 10, PPID: 5, Exe: "/usr/bin/claude", Lineage: []int{5}}
	proc := func(pid, ppid int, exe string, lineage ...int) *event.Process {
		return &event.Process{PID: pid, PPID: ppid, Exe: exe, Lineage: lineage}
	}
	git := proc(11, 10, "/usr/bin/git", 10, 5)
	bash := proc(12, 10, "/bin/bash", 10, 5)
	curl := proc(13, 12, "/usr/bin/curl", 12, 10, 5)
	daemon := proc(20, 5, "/usr/bin/sleep", 5)
	exec := func(ms int, p *event.Process) *event.Event {
		return &event.Event{Time: at(time.Duration(ms) * time.Millisecond), Kind: event.KindExec, Session: "s9", Verdict: allow(), Process: p,
			Exec: &event.Exec{Path: p.Exe, Argv: []string{p.Exe}}}
	}
	events := []*event.Event{
		{Time: at(0), Kind: event.KindSessionStart, Session: "s9", Verdict: allow(), SessionInfo: sess},
		exec(2000, git), // the request began at 1s; the answer named Bash at 3s
		exec(3500, bash),
		exec(3600, curl),
		exec(3700, daemon),
		{Time: at(1 * time.Second), Kind: event.KindLLM, Session: "s9", Verdict: allow(), Process: agent,
			LLM: &event.LLM{Provider: "anthropic", Model: "m", Status: 200, ToolCalls: []event.ToolCall{{ID: "toolu_9", Name: "Bash", Time: at(3 * time.Second)}}}},
		{Time: at(5 * time.Second), Kind: event.KindSessionEnd, Session: "s9", Verdict: allow(), SessionInfo: sess},
	}
	spans := record(t, false, events)
	tool := spans["execute_tool Bash"]
	if tool == nil {
		t.Fatalf("spans %v", keys(spans))
	}
	got := map[string]bool{}
	for _, name := range []string{"process git", "process bash", "process curl", "process sleep"} {
		sp := spans[name]
		if sp == nil {
			t.Fatalf("no span %q in %v", name, keys(spans))
		}
		for _, l := range sp.Links() {
			got[name] = got[name] || l.SpanContext.SpanID() == tool.SpanContext().SpanID()
		}
	}
	want := map[string]bool{"process bash": true, "process curl": true}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("processes linked to the Bash call (-want +got):\n%s", d)
	}
}

// A shell forks and the child execs curl: the child's span is named after
// curl, whatever the child did before.
func TestTracerNamesProcessAfterExec(t *testing.T) {
	sess := &event.Session{ID: "s7", Agent: "sh", RootPID: 10}
	child := &event.Process{PID: 20, PPID: 10, Exe: "/usr/bin/dash", Lineage: []int{10}, LineageNames: []string{"dash", "dash"}}
	events := []*event.Event{
		{Time: at(0), Kind: event.KindSessionStart, Session: "s7", Verdict: allow(), SessionInfo: sess},
		{Time: at(time.Second), Kind: event.KindFile, Session: "s7", Verdict: allow(), Process: child,
			File: &event.File{Path: "/etc/passwd", Access: event.FileRead}},
		{Time: at(2 * time.Second), Kind: event.KindExec, Session: "s7", Verdict: allow(), Process: child,
			Exec: &event.Exec{Path: "/usr/bin/curl", Argv: []string{"curl", "https://x"}}},
		{Time: at(3 * time.Second), Kind: event.KindSessionEnd, Session: "s7", Verdict: allow(), SessionInfo: sess},
	}
	spans := record(t, false, events)
	if _, ok := spans["process curl"]; !ok {
		t.Errorf("spans %v: want the child named after curl", keys(spans))
	}
}

// A session in a container carries the container's id, runtime and pod on
// its root span; one outside any carries none of them.
func TestTracerContainerAttributes(t *testing.T) {
	keys := []string{"container.id", "container.runtime.name", "k8s.pod.uid"}
	tests := []struct {
		name string
		info event.Session
		want map[string]any
	}{
		{"pod's container", event.Session{ID: "c1", Agent: "codex", RootPID: 10,
			ContainerID: "8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa", ContainerRuntime: "cri-o",
			PodUID: "fd52ef25-a87d-11e9-9423-0800271a638e"},
			map[string]any{"container.id": "8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa",
				"container.runtime.name": "cri-o", "k8s.pod.uid": "fd52ef25-a87d-11e9-9423-0800271a638e"}},
		{"docker container", event.Session{ID: "c2", Agent: "codex", RootPID: 10,
			ContainerID: "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376", ContainerRuntime: "docker"},
			map[string]any{"container.id": "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376", "container.runtime.name": "docker"}},
		{"no container", event.Session{ID: "c3", Agent: "codex", RootPID: 10}, map[string]any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := &event.Event{Time: at(0), Kind: event.KindSessionStart, Session: tt.info.ID, Verdict: allow(), SessionInfo: &tt.info}
			end := &event.Event{Time: at(time.Second), Kind: event.KindSessionEnd, Session: tt.info.ID, Verdict: allow(), SessionInfo: &tt.info}
			spans := record(t, false, []*event.Event{start, end})
			root, ok := spans["invoke_agent codex"]
			if !ok {
				t.Fatalf("no session span in %v", spans)
			}
			if d := cmp.Diff(tt.want, pick(attrMap(root.Attributes()), keys...)); d != "" {
				t.Errorf("session span's container attributes (-want +got):\n%s", d)
			}
		})
	}
}

// A WebSocket message is a span event of its process with the ws fields
// that have an attribute, never its text, even when content is captured.
func TestTracerWSEvent(t *testing.T) {
	py := &event.Process{PID: 300, PPID: 100, Exe: "/usr/bin/python3", Argv: []string{"python3", "x.py"}, Lineage: []int{100}, LineageNames: []string{"node", "python3"}}
	evs := []*event.Event{
		{Time: at(0), Kind: event.KindSessionStart, Session: "s1", Verdict: allow(), SessionInfo: &event.Session{ID: "s1", Agent: "claude", RootPID: 100}},
		{Time: at(time.Second), Kind: event.KindWS, Session: "s1", Process: py,
			Verdict: event.Verdict{Action: event.Deny, Rule: "no-secrets-over-websocket", DecidedBy: event.DecidedByRule},
			WS: &event.WS{Host: "chat.example.com:443", Path: "/socket", Direction: event.WSSend, Opcode: "text", Size: 40,
				Text: "the text of the message", Secrets: []string{"github-pat"}, MCPMethod: "tools/call", MCPTool: "search"}},
		{Time: at(2 * time.Second), Kind: event.KindSessionEnd, Session: "s1", Verdict: allow(), SessionInfo: &event.Session{ID: "s1", Agent: "claude"}},
	}
	spans := record(t, true, evs)
	var got map[string]any
	for _, ev := range spans["process python3"].Events() {
		if ev.Name == "ws" {
			got = attrMap(ev.Attributes)
		}
	}
	want := map[string]any{
		"chaperone.ws.host": "chat.example.com:443", "url.path": "/socket", "chaperone.ws.direction": "send", "chaperone.ws.opcode": "text",
		"chaperone.ws.size": int64(40), "chaperone.ws.truncated": false, "chaperone.ws.secrets": []string{"github-pat"},
		"chaperone.ws.mcp_method": "tools/call", "chaperone.ws.mcp_tool": "search", "chaperone.verdict": "deny",
	}
	if d := cmp.Diff(want, pick(got, "chaperone.ws.host", "url.path", "chaperone.ws.direction", "chaperone.ws.opcode", "chaperone.ws.size",
		"chaperone.ws.truncated", "chaperone.ws.secrets", "chaperone.ws.mcp_method", "chaperone.ws.mcp_tool", "chaperone.verdict")); d != "" {
		t.Errorf("ws span event (-want +got):\n%s", d)
	}
	if strings.Contains(dump(spans), "the text of the message") {
		t.Error("a trace carries the message's text")
	}
}
