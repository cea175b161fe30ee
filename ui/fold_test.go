package ui

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// writeLogAll is writeLog with every file read recorded whole
// (audit.file_reads: all).
func writeLogAll(tb testing.TB, path string, events ...*event.Event) {
	tb.Helper()
	a, err := telemetry.OpenAuditLog(path)
	if err != nil {
		tb.Fatal(err)
	}
	a.SetFileReads(true)
	for _, e := range events {
		if err := a.Write(e); err != nil {
			tb.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		tb.Fatal(err)
	}
}

func readEv(id string, at time.Time, p *event.Process, path string) *event.Event {
	return &event.Event{Time: at, Kind: event.KindFile, Session: id, Process: p, Verdict: event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault},
		File: &event.File{Path: path, Access: event.FileRead}}
}

// In a log that records every read, routine reads come folded: a run of
// one process's routine file records is one line, unless all=1.
func TestFoldRoutineReads(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	a, b := proc(30, 1, "/usr/bin/python3"), proc(31, 30, "/bin/sh")
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	start := sessionStart("f", t0, 30)
	start.SessionInfo.Workdir, start.SessionInfo.Home = "/work/proj", "/home/u"
	creds := readEv("f", at(5), a, "/home/u/.aws/credentials")
	creds.Verdict = event.Verdict{Action: event.Deny, Rule: "creds", DecidedBy: event.DecidedByRule}
	writeLogAll(t, log,
		start, // 1: with the session's workdir and home
		readEv("f", at(1), a, "/usr/lib/x86_64-linux-gnu/libc.so.6"), // 2
		readEv("f", at(2), a, "/usr/lib/x86_64-linux-gnu/libm.so.6"), // 3
		readEv("f", at(3), a, "/etc/ld.so.cache"),                    // 4
		creds, // 5
		readEv("f", at(6), a, "/work/proj/main.py"),                  // 6: the working tree is routine
		readEv("f", at(7), a, "/usr/lib/python3.13/os.py"),           // 7
		readEv("f", at(8), b, "/usr/lib/x86_64-linux-gnu/libc.so.6"), // 8: another process
		dnsEv("f", at(9), a, "x.example", false),                     // 9
	)
	srv := newTestServer(t, Options{Logs: []string{log}})
	type row struct {
		Seq     int    `json:"seq"`
		Kind    string `json:"kind"`
		Count   int    `json:"count"`
		LastSeq int    `json:"last_seq"`
		Folded  bool   `json:"folded"`
		Routine bool   `json:"routine"`
		PID     int    `json:"pid"`
	}
	get := func(q string) ([]row, int) {
		var got struct {
			Events []row `json:"events"`
			Total  int   `json:"total"`
		}
		srv.getJSON(t, "/api/sessions/f/events?"+q, 200, &got)
		return got.Events, got.Total
	}
	tests := []struct {
		query string
		want  []row
		total int
	}{
		{"", []row{
			{Seq: 1, Kind: "session_start"},
			{Seq: 2, Kind: "file_reads", Count: 3, LastSeq: 4, Folded: true, Routine: true, PID: 30},
			{Seq: 5, Kind: "file"},
			{Seq: 6, Kind: "file_reads", Count: 2, LastSeq: 7, Folded: true, Routine: true, PID: 30},
			{Seq: 8, Kind: "file", Routine: true}, // one read: nothing to fold
			{Seq: 9, Kind: "dns"},
		}, 6},
		{"limit=2", []row{
			{Seq: 8, Kind: "file", Routine: true}, // one read: nothing to fold
			{Seq: 9, Kind: "dns"},
		}, 6},
		{"limit=2&before=8", []row{
			{Seq: 5, Kind: "file"},
			{Seq: 6, Kind: "file_reads", Count: 2, LastSeq: 7, Folded: true, Routine: true, PID: 30},
		}, 6},
		{"kind=file&after=1&limit=1", []row{
			{Seq: 2, Kind: "file_reads", Count: 3, LastSeq: 4, Folded: true, Routine: true, PID: 30},
		}, 4},
		{"pid=30&kind=file", []row{
			{Seq: 2, Kind: "file_reads", Count: 3, LastSeq: 4, Folded: true, Routine: true, PID: 30},
			{Seq: 5, Kind: "file"},
			{Seq: 6, Kind: "file_reads", Count: 2, LastSeq: 7, Folded: true, Routine: true, PID: 30},
		}, 3},
		{"kind=file&all=1", []row{
			{Seq: 2, Kind: "file", Routine: true}, {Seq: 3, Kind: "file", Routine: true}, {Seq: 4, Kind: "file", Routine: true},
			{Seq: 5, Kind: "file"},
			{Seq: 6, Kind: "file", Routine: true}, {Seq: 7, Kind: "file", Routine: true}, {Seq: 8, Kind: "file", Routine: true},
		}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got, total := get(tt.query)
			for i := range got {
				if !got[i].Folded {
					got[i].PID = 0 // a whole record's pid is in its process
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || total != tt.total {
				t.Errorf("total %d, want %d; lines (-want +got):\n%s", total, tt.total, diff)
			}
		})
	}
}

// A folded line is ViewFold's file_reads record: the reads by directory.
func TestFoldedLineReads(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	a := proc(30, 1, "/usr/bin/python3")
	writeLogAll(t, log, sessionStart("f", t0, 30),
		readEv("f", t0.Add(1), a, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
		readEv("f", t0.Add(2), a, "/usr/lib/x86_64-linux-gnu/libm.so.6"),
		readEv("f", t0.Add(3), a, "/etc/ld.so.cache"))
	srv := newTestServer(t, Options{Logs: []string{log}})
	var got struct{ Events []telemetry.Record }
	srv.getJSON(t, "/api/sessions/f/events", 200, &got)
	if len(got.Events) != 2 {
		t.Fatalf("events %+v", got.Events)
	}
	want := []telemetry.DirReads{{Dir: "/usr/lib/x86_64-linux-gnu", Count: 2, Files: []string{"libc.so.6", "libm.so.6"}}, {Dir: "/etc", Count: 1, Files: []string{"ld.so.cache"}}}
	f := got.Events[1]
	if diff := cmp.Diff(want, f.Reads); diff != "" || f.Count != 3 || !f.Until.Equal(t0.Add(3)) || f.Process == nil || f.Process.PID != 30 {
		t.Errorf("folded %+v; reads (-want +got):\n%s", f, diff)
	}
}

// An action caused by a tool call comes with the call's id and name.
func TestToolLinks(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	claude, bash := proc(10, 1, "/usr/bin/claude"), proc(11, 10, "/bin/bash", "claude", "bash")
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	llm := &event.Event{Time: at(1), Kind: event.KindLLM, Session: "l", Process: claude, Verdict: event.Verdict{Action: event.Allow},
		LLM: &event.LLM{Provider: "anthropic", Model: "claude-x", Operation: "messages", ToolCalls: []event.ToolCall{{ID: "toolu_01", Name: "Bash"}}}}
	writeLog(t, log, sessionStart("l", t0, 10), llm, execEv("l", at(2), bash, "git", "status"))
	srv := newTestServer(t, Options{Logs: []string{log}})
	var got struct {
		Events []struct {
			Seq  int                 `json:"seq"`
			Kind string              `json:"kind"`
			Tool *telemetry.ToolLink `json:"tool"`
		} `json:"events"`
	}
	srv.getJSON(t, "/api/sessions/l/events", 200, &got)
	if len(got.Events) != 3 {
		t.Fatalf("events %+v", got.Events)
	}
	exec := got.Events[2]
	if exec.Kind != "exec" || exec.Tool == nil || exec.Tool.ID != "toolu_01" || exec.Tool.Name != "Bash" || exec.Tool.Match == "" {
		t.Errorf("exec's tool %+v, want toolu_01 Bash", exec.Tool)
	}
	if got.Events[1].Tool != nil || got.Events[0].Tool != nil {
		t.Errorf("the llm record or the start linked: %+v", got.Events)
	}
	if exec.Tool != nil && exec.Tool.Match != "kind" {
		t.Errorf("exec's tool matched by %q, want kind (a Bash call, an exec)", exec.Tool.Match)
	}
	// The same on a page of the exec alone, after the call.
	srv.getJSON(t, "/api/sessions/l/events?after=2", 200, &got)
	if len(got.Events) != 1 || got.Events[0].Tool == nil || got.Events[0].Tool.ID != "toolu_01" {
		t.Errorf("exec alone: %+v", got.Events)
	}
}

// A page's actions are linked from the records around the page: curl,
// a child of a process a Bash call started, is that call's by lineage,
// though a WebFetch call is more recent and of its kind.
func TestToolLinksAroundThePage(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	claude, bash, curl := proc(10, 1, "/usr/bin/claude"), proc(11, 10, "/bin/bash"), proc(12, 11, "/usr/bin/curl")
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	call := func(s int, id, name string) *event.Event {
		return &event.Event{Time: at(s), Kind: event.KindLLM, Session: "l", Process: claude, Verdict: event.Verdict{Action: event.Allow},
			LLM: &event.LLM{Provider: "anthropic", Model: "claude-x", Operation: "messages", ToolCalls: []event.ToolCall{{ID: id, Name: name}}}}
	}
	writeLog(t, log, sessionStart("l", t0, 10),
		execEv("l", at(60), claude, "git", "status"), // long before: claude's own
		call(1200, "toolu_02", "Bash"),
		execEv("l", at(1201), bash, "sh", "-c", "curl https://x.example/"),
		call(1202, "toolu_03", "WebFetch"),
		httpEv("l", at(1203), curl, "https://x.example/", false))
	srv := newTestServer(t, Options{Logs: []string{log}})
	var got struct {
		Events []struct {
			Kind string              `json:"kind"`
			Tool *telemetry.ToolLink `json:"tool"`
		} `json:"events"`
	}
	srv.getJSON(t, "/api/sessions/l/events?after=5", 200, &got)
	if len(got.Events) != 1 || got.Events[0].Kind != "http" {
		t.Fatalf("events %+v", got.Events)
	}
	if tl := got.Events[0].Tool; tl == nil || tl.ID != "toolu_02" || tl.Match != "lineage" {
		t.Errorf("curl's tool %+v, want toolu_02 by lineage", tl)
	}
}

// A record streamed live names its tool call too.
func TestStreamToolLinks(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	writeLog(t, log, sessionStart("l", t0, 10))
	ts := startTestServer(t, Options{Logs: []string{log}})
	base := ts.base
	events, _ := openStream(t, ts.client, base+"/api/stream?session=l")

	claude, bash := proc(10, 1, "/usr/bin/claude"), proc(11, 10, "/bin/bash", "claude", "bash")
	llm := &event.Event{Time: t0.Add(time.Second), Kind: event.KindLLM, Session: "l", Process: claude, Verdict: event.Verdict{Action: event.Allow},
		LLM: &event.LLM{Provider: "anthropic", Model: "claude-x", Operation: "messages", ToolCalls: []event.ToolCall{{ID: "toolu_live", Name: "Bash"}}}}
	writeLog(t, log, llm)
	waitEvent(t, events, "the llm record", func(e sseEvent) bool { return e.name == "record" && strings.Contains(e.data, `"kind":"llm"`) })
	writeLog(t, log, execEv("l", t0.Add(2*time.Second), bash, "ls"))
	rec := waitEvent(t, events, "the exec record", func(e sseEvent) bool { return e.name == "record" && strings.Contains(e.data, `"kind":"exec"`) })
	var got struct {
		Seq  int                 `json:"seq"`
		Tool *telemetry.ToolLink `json:"tool"`
	}
	if err := json.Unmarshal([]byte(rec.data), &got); err != nil {
		t.Fatal(err)
	}
	if got.Seq != 3 || got.Tool == nil || got.Tool.ID != "toolu_live" || got.Tool.Name != "Bash" {
		t.Errorf("streamed exec %s, want seq 3 linked to toolu_live", rec.data)
	}
}

// The links a page shows are those LinkToolCalls finds over the whole
// session, page after page, though a page reads only the llm and exec
// records around it.
func TestToolLinksAsOverTheWholeSession(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	rng := rand.New(rand.NewPCG(1, 2))
	claude := proc(10, 1, "/usr/bin/claude")
	procs := []*event.Process{claude}
	evs := []*event.Event{sessionStart("w", t0, 10)}
	tools := []string{"Bash", "WebFetch", "Read", "TodoWrite"}
	at := t0
	for i := 0; i < 1500; i++ {
		at = at.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		p := procs[rng.IntN(len(procs))]
		switch r := rng.IntN(20); {
		case r == 0:
			evs = append(evs, &event.Event{Time: at, Kind: event.KindLLM, Session: "w", Process: claude, Verdict: event.Verdict{Action: event.Allow},
				LLM: &event.LLM{Provider: "anthropic", Model: "m", Operation: "messages", Latency: time.Duration(rng.IntN(5000)) * time.Millisecond,
					ToolCalls: []event.ToolCall{{ID: fmt.Sprintf("toolu_%d", i), Name: tools[rng.IntN(len(tools))]}}}})
		case r < 4:
			pid := 100 + len(procs)
			child := proc(pid, p.PID, "/usr/bin/tool")
			procs = append(procs, child)
			evs = append(evs, execEv("w", at, child, "tool", fmt.Sprint(i)))
		case r < 10:
			evs = append(evs, httpEv("w", at, p, fmt.Sprintf("https://h%d.example/", i%7), false))
		case r < 14:
			evs = append(evs, dnsEv("w", at, p, fmt.Sprintf("h%d.example", i%7), false))
		default:
			evs = append(evs, readEv("w", at, p, fmt.Sprintf("/work/f%d", i)))
		}
	}
	writeLog(t, log, evs...)

	var recs []telemetry.Record
	f := must(os.Open(log))
	defer f.Close()
	if err := telemetry.ReadRecords(f, telemetry.Filter{Session: "w"}, func(r telemetry.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[int]string{}
	for i, tl := range telemetry.LinkToolCalls(recs) {
		if tl.ID != "" {
			want[i+1] = tl.ID + " " + tl.Match
		}
	}
	if len(want) < 100 {
		t.Fatalf("only %d actions linked over the whole session: the test log links too little", len(want))
	}

	srv := newTestServer(t, Options{Logs: []string{log}})
	got := map[int]string{}
	before := 0
	for pages := 0; ; pages++ {
		var page struct {
			Events []struct {
				Seq  int                 `json:"seq"`
				Tool *telemetry.ToolLink `json:"tool"`
			} `json:"events"`
			More bool `json:"more"`
		}
		q := "/api/sessions/w/events?all=1&limit=37"
		if before > 0 {
			q += fmt.Sprintf("&before=%d", before)
		}
		srv.getJSON(t, q, 200, &page)
		for _, e := range page.Events {
			if e.Tool != nil {
				got[e.Seq] = e.Tool.ID + " " + e.Tool.Match
			}
		}
		if !page.More || len(page.Events) == 0 {
			break
		}
		before = page.Events[0].Seq
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("links by seq (-whole session +pages):\n%s", diff)
	}
}
