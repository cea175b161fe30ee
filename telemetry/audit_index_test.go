package telemetry

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// indexTestLog writes n http records of sessions a and b (alternating,
// three processes) to the log at path with the real writer.
func indexTestLog(t *testing.T, path string, from, n int) {
	t.Helper()
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i := from; i < from+n; i++ {
		sess := []string{"a", "b"}[i%2]
		v := event.Verdict{Action: event.Allow}
		if i%5 == 0 {
			v = event.Verdict{Action: event.Deny, Rule: "r", DecidedBy: event.DecidedByRule}
		}
		e := &event.Event{Time: base.Add(time.Duration(i) * time.Second), Kind: event.KindHTTP, Session: sess, Verdict: v,
			Process: &event.Process{PID: 100 + i%3, PPID: 1, Exe: "/usr/bin/curl", Argv: []string{"curl", "x"}},
			HTTP:    &event.HTTP{Method: "GET", URL: "https://h.example/" + string(rune('a'+i%26)), Host: "h.example"}}
		if err := a.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

// readSession is what ReadRecords reads of session id (process records aside).
func readSession(t *testing.T, path, id string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Record
	if err := ReadRecords(f, Filter{Session: id}, func(r Record) error {
		if r.Session == id {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// indexed reads every record the index holds of session id from disk.
func indexed(t *testing.T, x *LogIndex, id string) []Record {
	t.Helper()
	var es []IndexEntry
	gen, ok := x.Entries(id, func(e []IndexEntry) { es = append(es, e...) })
	if !ok {
		t.Fatalf("no session %q in the index", id)
	}
	recs, err := x.Read(gen, es)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestLogIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	x := NewLogIndex(path)
	defer x.Close()

	// Not there yet: nothing, no error.
	if res, err := x.Poll(true); err != nil || len(res.Records) != 0 || res.Reset {
		t.Fatalf("Poll of a missing log = %+v, %v", res, err)
	}

	indexTestLog(t, path, 0, 10)
	res, err := x.Poll(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 10 || res.Records[0].Seq != 1 || res.Records[1].Seq != 1 || res.Records[9].Seq != 5 {
		t.Fatalf("first Poll: %d records, seqs %d %d %d", len(res.Records), res.Records[0].Seq, res.Records[1].Seq, res.Records[9].Seq)
	}
	// Appended: only the new ones, their seqs going on.
	indexTestLog(t, path, 10, 4)
	res, err = x.Poll(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 4 || res.Records[0].Seq != 6 || res.Records[0].Record.Session != "a" {
		t.Fatalf("second Poll: %+v", res.Records)
	}
	for _, id := range []string{"a", "b"} {
		if diff := cmp.Diff(readSession(t, path, id), indexed(t, x, id)); diff != "" {
			t.Errorf("session %s read through the index (-ReadRecords +index):\n%s", id, diff)
		}
	}
	f, _ := os.Open(path)
	want, err := Sessions(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, x.Sessions()); diff != "" {
		t.Errorf("summaries (-Sessions +index):\n%s", diff)
	}

	// A line still being written waits for its newline; a bad line is
	// skipped and counted.
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	line := `{"time":"2026-12-02T11:00:00Z","session":"a","kind":"dns","verdict":"allow","decided_by":"default","name":"late.example"}`
	fh.WriteString("not a record\n" + line[:40])
	res, err = x.Poll(true)
	if err != nil || len(res.Records) != 0 {
		t.Fatalf("Poll with a torn last line: %+v, %v", res.Records, err)
	}
	fh.WriteString(line[40:] + "\n")
	fh.Close()
	res, err = x.Poll(true)
	if err != nil || len(res.Records) != 1 || res.Records[0].Record.Name != "late.example" || res.Records[0].Seq != 8 {
		t.Fatalf("Poll once the line is whole: %+v, %v", res.Records, err)
	}
	if x.Skipped() != 1 {
		t.Errorf("Skipped = %d, want 1", x.Skipped())
	}

	// Truncated: starts over.
	var es []IndexEntry
	gen, _ := x.Entries("a", func(e []IndexEntry) { es = append(es, e...) })
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	indexTestLog(t, path, 100, 2)
	res, err = x.Poll(true)
	if err != nil || !res.Reset || len(res.Records) != 2 || res.Records[0].Seq != 1 {
		t.Fatalf("Poll after truncation: %+v, %v", res, err)
	}
	if _, err := x.Read(gen, es); !errors.Is(err, ErrIndexReset) {
		t.Errorf("Read of entries from before = %v, want ErrIndexReset", err)
	}
	if len(x.Sessions()) != 2 {
		t.Errorf("sessions after truncation: %+v", x.Sessions())
	}

	// Replaced (a new file renamed over it): starts over on the new one.
	other := filepath.Join(filepath.Dir(path), "new.jsonl")
	indexTestLog(t, other, 200, 3)
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	res, err = x.Poll(true)
	if err != nil || !res.Reset || len(res.Records) != 3 {
		t.Fatalf("Poll after replacement: %+v, %v", res, err)
	}
	if diff := cmp.Diff(readSession(t, path, "b"), indexed(t, x, "b")); diff != "" {
		t.Errorf("after replacement (-ReadRecords +index):\n%s", diff)
	}

	// Removed: forgotten.
	os.Remove(path)
	res, err = x.Poll(true)
	if err != nil || !res.Reset || len(x.Sessions()) != 0 {
		t.Fatalf("Poll after removal: %+v, %v, %d sessions", res, err, len(x.Sessions()))
	}
}

// The tree from the index's first records per process is ProcessTree's
// over every record, with the same counts.
func TestLogIndexTree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	indexTestLog(t, path, 0, 30)
	x := NewLogIndex(path)
	defer x.Close()
	if _, err := x.Poll(true); err != nil {
		t.Fatal(err)
	}
	sum, _ := x.Session("a")
	full := ProcessTree(sum, readSession(t, path, "a"))
	tops, count, ok := x.Tree("a")
	if !ok {
		t.Fatal("no tree")
	}
	type node struct {
		PID, Actions, Denials int
		Names                 []string
	}
	var flat func([]*ProcNode, bool) []node
	flat = func(ns []*ProcNode, counted bool) []node {
		var out []node
		for _, n := range ns {
			o := node{PID: n.PID, Names: n.Names}
			for _, r := range n.Records {
				if counted {
					a, d := count(r)
					o.Actions += a
					o.Denials += d
				} else {
					o.Actions++
					if r.Verdict == event.Deny {
						o.Denials++
					}
				}
			}
			out = append(out, o)
			out = append(out, flat(n.Children, counted)...)
		}
		return out
	}
	if diff := cmp.Diff(flat(full, false), flat(tops, true)); diff != "" {
		t.Errorf("tree (-ProcessTree +index):\n%s", diff)
	}
}
