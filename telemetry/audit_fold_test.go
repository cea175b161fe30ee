package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// foldSession is a session's events: one process's routine reads among
// reads and writes that are not routine, a request of the same process,
// an exec that makes it another program, and the session's end.
func foldSession() (evs []*event.Event, routine []string) {
	info := &event.Session{ID: "s1", Workdir: "/w", Home: "/home/u"}
	sh := &event.Process{PID: 10, PPID: 1, Exe: "/bin/sh", Argv: []string{"sh", "-c", "cat *"}, Cwd: "/w",
		StartTime: t0, LineageNames: []string{"sh"}, ExeDigest: "sha256:ab"}
	// The same process described anew (a cache entry that expired).
	sh2 := *sh
	cat := &event.Process{PID: 10, PPID: 1, Exe: "/bin/cat", Argv: []string{"cat", "a.txt", "b.txt"}, Cwd: "/w", StartTime: t0}
	allow := event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault, Reason: "allowed by default"}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	file := func(ms int, p *event.Process, path string, access event.FileAccess, v event.Verdict) *event.Event {
		return &event.Event{Time: at(ms), Kind: event.KindFile, Session: "s1", Process: p, Verdict: v, SessionInfo: info,
			File: &event.File{Path: path, Access: access}}
	}
	byRule := event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByRule, Rule: "tree-reads", Reason: "the tree is the agent's"}
	deny := event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule, Rule: "no-env", Reason: "no"}
	evs = []*event.Event{
		{Time: at(0), Kind: event.KindSessionStart, Session: "s1", Verdict: allow, SessionInfo: info},
		file(1, sh, "/usr/lib/x86_64-linux-gnu/libc.so.6", event.FileRead, allow),
		file(2, sh, "/etc/ld.so.cache", event.FileRead, allow),
		file(3, &sh2, "/w/a.txt", event.FileRead, allow),
		file(4, sh, "/w/a.txt", event.FileRead, allow),
		file(5, sh, "/w/sub/b.txt", event.FileRead, byRule),
		file(6, sh, "/etc/passwd", event.FileRead, allow),       // not routine: whole
		file(7, sh, "/w/.env", event.FileRead, deny),            // denied: whole
		file(8, sh, "/tmp/out", event.FileWrite, allow),         // a write: whole
		file(9, sh, "/home/u/.npm/x", event.FileUnknown, allow), // unknown access: whole
		{Time: at(10), Kind: event.KindHTTP, Session: "s1", Process: sh, Verdict: allow, HTTP: &event.HTTP{Method: "GET", URL: "https://h/"}},
		{Time: at(11), Kind: event.KindHTTP, Session: "s1", Process: &sh2, Verdict: allow, HTTP: &event.HTTP{Method: "GET", URL: "https://h/2"}},
		{Time: at(12), Kind: event.KindExec, Session: "s1", Process: sh, Verdict: allow, Exec: &event.Exec{Path: "/bin/cat", Argv: cat.Argv}},
		file(13, cat, "/w/a.txt", event.FileRead, allow),
		file(14, cat, "/home/u/.cache/x/y", event.FileRead, allow),
		{Time: at(20), Kind: event.KindSessionEnd, Session: "s1", Verdict: allow, SessionInfo: info},
	}
	routine = []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/etc/ld.so.cache", "/w/a.txt", "/w/a.txt", "/w/sub/b.txt", "/w/a.txt", "/home/u/.cache/x/y"}
	return evs, routine
}

func writeAll(t *testing.T, a *AuditLog, evs []*event.Event) {
	t.Helper()
	for _, e := range evs {
		if err := a.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, b []byte, f Filter) []Record {
	t.Helper()
	var recs []Record
	if err := ReadRecords(bytes.NewReader(b), f, func(r Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return recs
}

// summary is what a test compares of a record: its kind, what it did and
// who did it.
func summary(r Record) string {
	who := "-"
	if r.Process != nil {
		who = fmt.Sprintf("%s[%d]", ProcessName(r.Process), r.Process.PID)
	}
	return fmt.Sprintf("%s %s %s %s", r.Kind, r.Verdict, Describe(r), who)
}

func TestAuditLogFoldsRoutineReads(t *testing.T) {
	evs, _ := foldSession()
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	writeAll(t, a, evs)
	log := buf.String()

	// Each process once, before its first record; sh's two descriptions
	// are one process.
	if n := strings.Count(log, `"kind":"process"`); n != 2 {
		t.Errorf("%d process records, want 2 (sh, then cat after its exec):\n%s", n, log)
	}
	if n := strings.Count(log, `"argv":["sh","-c","cat *"]`); n != 1 {
		t.Errorf("sh's argv written %d times, want once", n)
	}
	recs := readAll(t, buf.Bytes(), Filter{})
	var got []string
	for _, r := range recs {
		got = append(got, summary(r))
	}
	want := []string{
		"session_start allow - -",
		"file allow read /etc/passwd sh[10]",
		"file deny read /w/.env sh[10]",
		"file allow write /tmp/out sh[10]",
		"file allow unknown /home/u/.npm/x sh[10]",
		"http allow GET https://h/ sh[10]",
		"http allow GET https://h/2 sh[10]",
		"exec allow /bin/cat a.txt b.txt sh[10]",
		"file_reads allow 5 routine reads of 4 files in 4 directories: /usr/lib/x86_64-linux-gnu (1), /etc (1), /w (2), /w/sub (1) sh[10]",
		"file_reads allow 2 routine reads of 2 files in 2 directories: /w (1), /home/u/.cache/x (1) cat[10]",
		"session_end allow exit=0 after 0.000s -",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records read back (-want +got):\n%s", diff)
	}
	for _, r := range recs {
		if r.Kind == KindFileReads {
			if r.Process == nil || r.Process.Cwd != "/w" || !r.Process.StartTime.Equal(t0) {
				t.Errorf("file_reads process %+v, want its cwd and start time", r.Process)
			}
		}
	}

	// The reads come back as events, each file once, with their verdicts.
	var paths []string
	for _, r := range recs {
		if r.Kind != KindFileReads {
			continue
		}
		for _, e := range r.Events() {
			paths = append(paths, e.File.Path)
			if e.Kind != event.KindFile || e.File.Access != event.FileRead || e.Verdict.Action != event.Allow || e.Process == nil || e.Process.PID != 10 {
				t.Errorf("read event %+v", e)
			}
			if (e.File.Path == "/w/sub/b.txt") != (e.Verdict.Rule == "tree-reads" && e.Verdict.DecidedBy == event.DecidedByRule) {
				t.Errorf("%s: verdict %+v", e.File.Path, e.Verdict)
			}
		}
	}
	// Each process's reads of a file are one.
	distinct := []string{"/etc/ld.so.cache", "/home/u/.cache/x/y", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/w/a.txt", "/w/a.txt", "/w/sub/b.txt"}
	slices.Sort(paths)
	if diff := cmp.Diff(distinct, paths); diff != "" {
		t.Errorf("routine reads replayed (-want +got):\n%s", diff)
	}

	// Process records are read when asked for.
	procs := readAll(t, buf.Bytes(), Filter{Kinds: []event.Kind{KindProcess}})
	if len(procs) != 2 || procs[0].ProcessID != 1 || procs[1].Process.Exe != "/bin/cat" {
		t.Errorf("process records: %+v", procs)
	}
	// --kind file shows the folded reads too.
	files := readAll(t, buf.Bytes(), Filter{Kinds: []event.Kind{event.KindFile}})
	if len(files) != 6 {
		t.Errorf("%d records of kind file, want 4 whole and 2 folded", len(files))
	}
}

// Reads of the files the session protects are written whole, even where
// reads are routine.
func TestAuditLogWholeReads(t *testing.T) {
	evs, _ := foldSession()
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	a.SetWholeReads(func(path string) bool { return path == "/w/sub/b.txt" })
	writeAll(t, a, evs)
	var whole []string
	for _, r := range readAll(t, buf.Bytes(), Filter{Kinds: []event.Kind{event.KindFile}}) {
		if r.Kind == event.KindFile && strings.HasPrefix(r.Path, "/w/") {
			whole = append(whole, r.Path)
		}
		for _, d := range r.Reads {
			if slices.Contains(d.Files, "b.txt") {
				t.Errorf("b.txt folded in %s", d.Dir)
			}
		}
	}
	if diff := cmp.Diff([]string{"/w/sub/b.txt", "/w/.env"}, whole); diff != "" {
		t.Errorf("whole records in the tree (-want +got):\n%s", diff)
	}
}

func TestAuditLogAllFileReads(t *testing.T) {
	evs, routine := foldSession()
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	a.SetFileReads(true)
	writeAll(t, a, evs)
	var paths []string
	for _, r := range readAll(t, buf.Bytes(), Filter{Kinds: []event.Kind{event.KindFile}}) {
		if r.Kind != event.KindFile {
			t.Errorf("a %s record with file_reads all", r.Kind)
		}
		if r.Process == nil || r.Process.PID != 10 {
			t.Errorf("record %s without its process", summary(r))
		}
		if slices.Contains(routine, r.Path) {
			paths = append(paths, r.Path)
		}
	}
	if diff := cmp.Diff(routine, paths); diff != "" {
		t.Errorf("routine reads recorded (-want +got):\n%s", diff)
	}
}

// Folded reads are written every FoldInterval, at the session's end (before
// it), at Close, and when too many processes have some.
func TestAuditLogWritesFoldedReads(t *testing.T) {
	info := &event.Session{ID: "s", Workdir: "/w"}
	read := func(pid int, path string) *event.Event {
		return &event.Event{Time: t0, Kind: event.KindFile, Session: "s", SessionInfo: info,
			Process: &event.Process{PID: pid, Exe: "/bin/cat"}, Verdict: event.Verdict{Action: event.Allow},
			File: &event.File{Path: path, Access: event.FileRead}}
	}
	folded := func(buf *bytes.Buffer) int { return strings.Count(buf.String(), `"kind":"file_reads"`) }

	t.Run("interval", func(t *testing.T) {
		a, buf, c := syncLog(time.Hour, nil)
		writeAll(t, a, []*event.Event{read(1, "/w/a"), read(1, "/w/b")})
		if folded(buf) != 0 {
			t.Fatal("folded reads written at once")
		}
		if len(c.waits) == 0 || c.waits[0] != FoldInterval {
			t.Fatalf("timers %v, want one of FoldInterval", c.waits)
		}
		c.dues[0]()
		if folded(buf) != 1 {
			t.Fatalf("after FoldInterval: %d file_reads records, want 1:\n%s", folded(buf), buf)
		}
		writeAll(t, a, []*event.Event{read(1, "/w/c")})
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if folded(buf) != 2 {
			t.Errorf("after Close: %d file_reads records, want 2", folded(buf))
		}
	})
	t.Run("interval by the events' clock", func(t *testing.T) {
		var buf bytes.Buffer
		a := newAuditLog(&buf) // not a file: no timer
		later := read(1, "/w/b")
		later.Time = t0.Add(FoldInterval)
		writeAll(t, a, []*event.Event{read(1, "/w/a"), read(2, "/w/a")})
		if folded(&buf) != 0 {
			t.Fatal("folded reads written at once")
		}
		writeAll(t, a, []*event.Event{later})
		if n := folded(&buf); n != 2 {
			t.Errorf("an event FoldInterval later: %d file_reads records, want 2", n)
		}
		if len(a.folds) != 1 {
			t.Errorf("%d folds open, want the later read's", len(a.folds))
		}
	})
	t.Run("many processes", func(t *testing.T) {
		var buf bytes.Buffer
		a := newAuditLog(&buf)
		for pid := range maxFolds + 3 {
			writeAll(t, a, []*event.Event{read(100+pid, "/w/a")})
		}
		if n := folded(&buf); n != 3 {
			t.Errorf("%d file_reads records with %d processes reading, want 3", n, maxFolds+3)
		}
		if len(a.folds) != maxFolds {
			t.Errorf("%d folds kept, want %d", len(a.folds), maxFolds)
		}
	})
	t.Run("big", func(t *testing.T) {
		var buf bytes.Buffer
		a := newAuditLog(&buf)
		for i := range 10000 {
			writeAll(t, a, []*event.Event{read(1, fmt.Sprintf("/w/a-rather-long-file-name-%d.txt", i))})
		}
		if n := folded(&buf); n < 3 {
			t.Errorf("%d file_reads records for 10,000 names, want several", n)
		}
		for _, line := range strings.Split(buf.String(), "\n") {
			if len(line) > 2*foldMaxBytes {
				t.Errorf("a line of %d bytes", len(line))
			}
		}
	})
}

// A log written before processes had records of their own reads as it
// did; a record whose process record is not in the log keeps the id.
func TestReadRecordsProcessShapes(t *testing.T) {
	const log = `{"time":"2025-03-01T13:04:05Z","session":"s","kind":"file","verdict":"allow","decided_by":"default","process":{"pid":7,"ppid":1,"exe":"/bin/cat","argv":["cat","x"]},"path":"/x","access":"read"}
{"time":"2025-03-01T13:04:06Z","session":"s","kind":"file","verdict":"allow","decided_by":"default","process_id":3,"pid":8,"path":"/y","access":"read"}
{"time":"2025-03-01T13:04:07Z","session":"s","kind":"process","verdict":"allow","decided_by":"default","process":{"pid":8,"ppid":1,"exe":"/bin/cp"},"process_id":3}
{"time":"2025-03-01T13:04:08Z","session":"s","kind":"file","verdict":"allow","decided_by":"default","process_id":3,"pid":8,"path":"/z","access":"read"}
{"time":"2025-03-01T13:04:09Z","session":"t","kind":"file","verdict":"allow","decided_by":"default","process_id":3,"pid":9,"path":"/o","access":"read"}
`
	recs := readAll(t, []byte(log), Filter{})
	var got []string
	for _, r := range recs {
		var b bytes.Buffer
		FormatRecord(&b, r)
		_, rest, _ := strings.Cut(b.String(), " allow   ")
		got = append(got, strings.TrimSpace(rest))
	}
	want := []string{
		"read /x  cat[7]",
		"read /y  #3[8]",
		"read /z  cp[8]",
		"read /o  #3[9]", // another session's id 3
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// Follow puts processes back as ReadRecords does, and keeps them when the
// file is replaced (its writer goes on naming the processes it wrote).
func TestFollowResolvesProcesses(t *testing.T) {
	evs, _ := foldSession()
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	writeAll(t, a, evs)
	path := t.TempDir() + "/audit.jsonl"
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	want := len(readAll(t, buf.Bytes(), Filter{}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan Record, 64)
	errc := make(chan error, 1)
	go func() {
		errc <- Follow(ctx, path, Filter{}, time.Millisecond, func(r Record) error { got <- r; return nil })
	}()
	next := func() Record {
		t.Helper()
		select {
		case r := <-got:
			return r
		case err := <-errc:
			t.Fatalf("Follow = %v", err)
		case <-ctx.Done():
			t.Fatal("timed out waiting for a record")
		}
		return Record{}
	}
	for range want {
		if r := next(); r.ProcessID != 0 && r.Process == nil {
			t.Errorf("%s record of process %d without its process", r.Kind, r.ProcessID)
		}
	}
	// The file replaced by one that names sh by id only.
	line := `{"time":"2025-03-01T13:05:00Z","session":"s1","kind":"file","verdict":"allow","decided_by":"default","process_id":1,"pid":10,"path":"/later","access":"write"}` + "\n"
	if err := os.WriteFile(path+".new", []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if r := next(); r.Path != "/later" || r.Process == nil || r.Process.Exe != "/bin/sh" {
		t.Errorf("after the file was replaced: %s %+v", r.Path, r.Process)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Follow = %v", err)
	}
}

// Refused traffic of no session names its process inline: ids are a
// session's.
func TestAuditLogNoSessionProcessInline(t *testing.T) {
	var buf bytes.Buffer
	a := newAuditLog(&buf)
	p := &event.Process{PID: 5, Exe: "/usr/bin/curl"}
	e := &event.Event{Time: t0, Kind: event.KindConnect, Process: p, Connect: &event.Connect{Host: "h"}}
	writeAll(t, a, []*event.Event{e, e})
	want := `{"time":"2025-03-01T13:04:05.123456789Z","session":"","kind":"connect","verdict":"deny","decided_by":"default","process":{"pid":5,"ppid":0,"exe":"/usr/bin/curl"},"host":"h"}` + "\n"
	if diff := cmp.Diff(want+want, buf.String()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}
