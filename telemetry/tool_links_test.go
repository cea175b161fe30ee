package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chaperone-dev/chaperone/event"
)

// linkScript builds a session's events: proc makes a process of pid
// under ppid, with the lineage attribution would give it (parent first,
// up to root).
type linkScript struct {
	session string
	root    int
	procs   map[int]*event.Process
	events  []*event.Event
}

func newLinkScript(session string, root int) *linkScript {
	s := &linkScript{session: session, root: root, procs: map[int]*event.Process{}}
	s.procs[root] = &event.Process{PID: root, PPID: 1, Exe: "/usr/bin/agent", Argv: []string{"agent"}}
	s.add(&event.Event{Time: at(0), Kind: event.KindSessionStart,
		SessionInfo: &event.Session{ID: session, Agent: "agent", RootPID: root}})
	return s
}

func (s *linkScript) proc(pid, ppid int, exe string) *event.Process {
	p := &event.Process{PID: pid, PPID: ppid, Exe: exe, Argv: []string{exe}}
	if pp := s.procs[ppid]; pp != nil {
		p.Lineage = append([]int{ppid}, pp.Lineage...)
	} else {
		p.Lineage = []int{ppid}
	}
	s.procs[pid] = p
	return p
}

func (s *linkScript) add(e *event.Event) *event.Event {
	e.Session = s.session
	if e.Verdict.Action == event.Deny && e.Verdict.DecidedBy == event.DecidedByDefault {
		e.Verdict = allow()
	}
	s.events = append(s.events, e)
	return e
}

func ms(n int) time.Time { return at(time.Duration(n) * time.Millisecond) }

func (s *linkScript) exec(t, pid, ppid int, exe string) *event.Event {
	p := s.proc(pid, ppid, exe)
	return s.add(&event.Event{Time: ms(t), Kind: event.KindExec, Process: p, Exec: &event.Exec{Path: exe, Argv: p.Argv}})
}

func (s *linkScript) file(t, pid int, path string, access event.FileAccess) *event.Event {
	return s.add(&event.Event{Time: ms(t), Kind: event.KindFile, Process: s.procs[pid], File: &event.File{Path: path, Access: access}})
}

func (s *linkScript) connect(t, pid int, host string) *event.Event {
	return s.add(&event.Event{Time: ms(t), Kind: event.KindConnect, Process: s.procs[pid],
		Connect: &event.Connect{Dst: netip.MustParseAddrPort("127.0.0.9:443"), Host: host, Port: 443, Transport: event.TCP, Via: "transparent"}})
}

func (s *linkScript) dns(t, pid int, name string) *event.Event {
	return s.add(&event.Event{Time: ms(t), Kind: event.KindDNS, Process: s.procs[pid], DNS: &event.DNS{Name: name, Type: "A", Rcode: "NOERROR"}})
}

func (s *linkScript) http(t, pid int, url string) *event.Event {
	return s.add(&event.Event{Time: ms(t), Kind: event.KindHTTP, Process: s.procs[pid], HTTP: &event.HTTP{Method: "GET", URL: url, Status: 200}})
}

// llm adds an llm event of a request that began at t and was answered
// latency later, naming calls ("id:Name").
func (s *linkScript) llm(t, latency, pid int, calls ...string) *event.Event {
	var tcs []event.ToolCall
	for _, c := range calls {
		id, name, _ := strings.Cut(c, ":")
		tcs = append(tcs, event.ToolCall{ID: id, Name: name})
	}
	return s.add(&event.Event{Time: ms(t), Kind: event.KindLLM, Process: s.procs[pid], LLM: &event.LLM{
		Provider: "anthropic", Model: "m", Path: "/v1/messages", Operation: "messages", Status: 200,
		ToolCalls: tcs, Latency: time.Duration(latency) * time.Millisecond}})
}

func (s *linkScript) end(t int) {
	s.add(&event.Event{Time: ms(t), Kind: event.KindSessionEnd, SessionInfo: &event.Session{ID: s.session, Agent: "agent"}})
}

// logged writes events through an audit log and reads its records back,
// as a reader of the log gets them.
func logged(t *testing.T, events []*event.Event) []Record {
	t.Helper()
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	for _, e := range events {
		if err := a.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	var recs []Record
	if err := ReadRecords(&buf, Filter{Kinds: append([]event.Kind{KindProcess, KindFileReads}, event.Kinds...)}, func(r Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return recs
}

// linksOf returns LinkToolCalls' links of recs, as "kind@ms" → "id by match".
func linksOf(recs []Record) map[string]string {
	got := map[string]string{}
	for i, l := range LinkToolCalls(recs) {
		if l == (ToolLink{}) {
			continue
		}
		r := recs[i]
		got[fmt.Sprintf("%s@%d", r.Kind, r.Time.Sub(traceT0).Milliseconds())] = l.ID + ":" + l.Name + " by " + l.Match
	}
	return got
}

func TestLinkToolCalls(t *testing.T) {
	tests := []struct {
		name   string
		script func(s *linkScript)
		want   map[string]string
	}{{
		name: "kind, lineage and window",
		script: func(s *linkScript) {
			s.llm(1000, 2000, 100, "b:Bash", "r:Read", "w:WebFetch")
			s.exec(4000, 200, 100, "/bin/bash")     // kind
			s.exec(4500, 201, 200, "/usr/bin/curl") // lineage
			s.connect(5000, 201, "api.example.com") // lineage
			s.http(5500, 201, "https://api.example.com/")
			s.file(6000, 100, "/work/repo/a.go", event.FileRead)  // kind, by the agent
			s.dns(6500, 100, "example.org")                       // kind
			s.exec(8000, 500, 1, "/usr/bin/sleep")                // another tree
			s.file(70000, 100, "/work/repo/b.go", event.FileRead) // the window closed at 63 s
			s.connect(71000, 201, "api.example.com")              // lineage outlives it
			s.end(80000)
		},
		want: map[string]string{
			"exec@4000": "b:Bash by kind", "exec@4500": "b:Bash by lineage", "connect@5000": "b:Bash by lineage",
			"http@5500": "b:Bash by lineage", "file@6000": "r:Read by kind", "dns@6500": "w:WebFetch by kind",
			"connect@71000": "b:Bash by lineage",
		},
	}, {
		name: "recent, never the caller's own",
		script: func(s *linkScript) {
			s.llm(1000, 1000, 100, "t:TodoWrite")
			s.exec(3000, 200, 100, "/usr/bin/python3")
			s.connect(3500, 200, "pypi.org")  // its process: the exec's call
			s.connect(3600, 100, "claude.ai") // the agent's own traffic
			s.dns(3700, 400, "example.org")   // of no process known
			s.end(10000)
		},
		want: map[string]string{"exec@3000": "t:TodoWrite by recent", "connect@3500": "t:TodoWrite by lineage", "dns@3700": "t:TodoWrite by recent"},
	}, {
		name: "actions before their call's llm record are linked late",
		script: func(s *linkScript) {
			s.exec(3000, 200, 100, "/bin/ls") // the answer named Bash before its llm record was written
			s.llm(1000, 2500, 100, "b:Bash")
			s.exec(500, 300, 100, "/usr/bin/git") // before the request began: not the call's
			s.end(10000)
		},
		want: map[string]string{"exec@3000": "b:Bash by kind (late)"},
	}, {
		name: "a repeated answer adds no call",
		script: func(s *linkScript) {
			s.llm(1000, 1000, 100, "b:Bash")
			s.llm(1500, 1000, 100, "b:Bash", "r:Read")
			s.file(3000, 100, "/work/repo/a.go", event.FileRead)
			s.exec(3100, 200, 100, "/bin/bash")
			s.end(10000)
		},
		want: map[string]string{"file@3000": "r:Read by kind", "exec@3100": "b:Bash by kind"},
	}, {
		name: "folded reads are one action",
		script: func(s *linkScript) {
			s.llm(1000, 1000, 100, "b:Bash")
			s.exec(3000, 200, 100, "/usr/bin/cat")
			s.file(3100, 200, "/usr/lib/x86_64-linux-gnu/libc.so.6", event.FileRead)
			s.file(3200, 200, "/usr/lib/locale/C.utf8/LC_CTYPE", event.FileRead)
			s.end(10000)
		},
		want: map[string]string{"exec@3000": "b:Bash by kind", "file_reads@3100": "b:Bash by lineage"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newLinkScript("s1", 100)
			tt.script(s)
			got := linksOf(logged(t, s.events))
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("links (-want +got):\n%s", d)
			}
		})
	}
}

// TestLinkToolCallsSessionsApart: a session's calls link only its own
// actions, and a session started again under the same id starts afresh.
func TestLinkToolCallsSessionsApart(t *testing.T) {
	a, b := newLinkScript("sa", 100), newLinkScript("sb", 900)
	a.llm(1000, 1000, 100, "b:Bash")
	b.exec(3000, 901, 900, "/bin/bash") // sb has no calls
	a.exec(3100, 200, 100, "/bin/bash")
	events := []*event.Event{a.events[0], b.events[0], a.events[1], b.events[1], a.events[2]}
	again := &event.Event{Time: ms(3200), Kind: event.KindSessionStart, Session: "sa", Verdict: allow(),
		SessionInfo: &event.Session{ID: "sa", Agent: "agent", RootPID: 100}}
	events = append(events, again, &event.Event{Time: ms(3300), Kind: event.KindExec, Session: "sa", Verdict: allow(),
		Process: a.proc(201, 100, "/bin/bash"), Exec: &event.Exec{Path: "/bin/bash"}})
	got := linksOf(logged(t, events))
	if d := cmp.Diff(map[string]string{"exec@3100": "b:Bash by kind"}, got); d != "" {
		t.Errorf("links (-want +got):\n%s", d)
	}
}

// TestLinkToolCallsAgreesWithTracer feeds one session to the tracer and,
// through the audit log, to LinkToolCalls: every action the tracer links
// as it comes (its span event's or span's tool attributes) is linked to
// the same call by the same rule, and no other.
func TestLinkToolCallsAgreesWithTracer(t *testing.T) {
	s := newLinkScript("s1", 100)
	s.dns(500, 100, "api.anthropic.com") // before any call
	s.llm(1000, 2000, 100, "b:Bash", "r:Read", "w:WebFetch")
	s.exec(4000, 200, 100, "/bin/bash")
	s.exec(4500, 201, 200, "/usr/bin/curl")
	s.connect(5000, 201, "api.example.com")
	s.http(5500, 201, "https://api.example.com/")
	s.file(6000, 100, "/work/repo/a.go", event.FileRead)
	s.dns(6500, 100, "example.org")
	s.exec(7000, 300, 100, "/usr/bin/python3")
	s.connect(7500, 300, "pypi.org")
	s.exec(8000, 500, 1, "/usr/bin/sleep")
	s.llm(9000, 1000, 100, "t:TodoWrite")
	s.connect(11000, 300, "files.pythonhosted.org")
	s.connect(11500, 100, "api.anthropic.com")
	s.file(70000, 100, "/work/repo/b.go", event.FileWrite)
	s.connect(71000, 201, "api.example.com")
	s.end(80000)

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr, err := NewTracer(TracerOptions{Provider: tp, Now: func() time.Time { return at(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.events {
		tr.Handle(e)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // tool call id → name
	for _, sp := range rec.Ended() {
		if m := attrMap(sp.Attributes()); m[keyOperation] == "execute_tool" {
			names[fmt.Sprint(m[keyToolCallID])] = fmt.Sprint(m[keyToolName])
		}
	}
	want := map[string]string{}
	note := func(kind string, t time.Time, m map[string]any) {
		if id, ok := m[keyToolCallID]; ok {
			want[fmt.Sprintf("%s@%d", kind, t.Sub(traceT0).Milliseconds())] = fmt.Sprintf("%v:%s by %v", id, names[fmt.Sprint(id)], m[keyToolMatch])
		}
	}
	for _, sp := range rec.Ended() {
		if sp.Name() == "GET" {
			note("http", sp.StartTime(), attrMap(sp.Attributes()))
		}
		for _, ev := range sp.Events() {
			note(ev.Name, ev.Time, attrMap(ev.Attributes))
		}
	}
	if len(want) < 8 {
		t.Fatalf("the tracer linked only %v", want)
	}
	if d := cmp.Diff(want, linksOf(logged(t, s.events))); d != "" {
		t.Errorf("LinkToolCalls against the tracer's links (-tracer +LinkToolCalls):\n%s", d)
	}
}
