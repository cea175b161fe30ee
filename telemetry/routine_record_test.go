package telemetry

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// TestRoutineRecord applies the routine rule to records as the log holds
// them (JSON lines), with the working tree and home that the session's
// session_start record says.
func TestRoutineRecord(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 13, 4, 5, 0, time.UTC)
	start := RecordOf(&event.Event{Time: t0, Kind: event.KindSessionStart, Session: "s1", Verdict: event.Verdict{Action: event.Allow},
		SessionInfo: &event.Session{ID: "s1", Agent: "claude", Workdir: "/work/repo", Home: "/home/u"}})
	line, err := json.Marshal(start)
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := json.Unmarshal(line, &back); err != nil {
		t.Fatal(err)
	}
	if back.Workdir != "/work/repo" || back.Home != "/home/u" {
		t.Fatalf("session_start record %s: workdir %q, home %q, want /work/repo and /home/u", line, back.Workdir, back.Home)
	}
	// Other kinds do not repeat them, though their events carry them.
	read := RecordOf(&event.Event{Time: t0, Kind: event.KindFile, Session: "s1", Verdict: event.Verdict{Action: event.Allow},
		SessionInfo: &event.Session{ID: "s1", Workdir: "/work/repo", Home: "/home/u"},
		File:        &event.File{Path: "/work/repo/a.go", Access: event.FileRead}})
	if read.Workdir != "" || read.Home != "" {
		t.Errorf("a file record holds the session's workdir %q and home %q", read.Workdir, read.Home)
	}

	tests := []struct {
		name          string
		line          string
		workdir, home string
		want          bool
	}{
		{"a library", `{"kind":"file","verdict":"allow","decided_by":"default","path":"/usr/lib/x86_64-linux-gnu/libc.so.6","access":"read"}`, "", "", true},
		{"the working tree", `{"kind":"file","verdict":"allow","decided_by":"default","path":"/work/repo/a.go","access":"read"}`, "/work/repo", "/home/u", true},
		{"the working tree, unknown", `{"kind":"file","verdict":"allow","decided_by":"default","path":"/work/repo/a.go","access":"read"}`, "", "", false},
		{"a cache of the home", `{"kind":"file","verdict":"allow","decided_by":"rule","rule":"r","path":"/home/u/.cache/go-build/x","access":"read"}`, "/work/repo", "/home/u", true},
		{"credentials in the tree", `{"kind":"file","verdict":"allow","decided_by":"default","path":"/work/repo/.env","access":"read"}`, "/work/repo", "/home/u", false},
		{"aws credentials", `{"kind":"file","verdict":"deny","decided_by":"rule","rule":"creds","path":"/home/u/.aws/credentials","access":"read"}`, "/work/repo", "/home/u", false},
		{"a write", `{"kind":"file","verdict":"allow","decided_by":"default","path":"/work/repo/a.go","access":"write"}`, "/work/repo", "/home/u", false},
		{"a rename", `{"kind":"file","verdict":"allow","decided_by":"default","path":"/work/repo/a.go","access":"read","op":"rename","target":"/work/repo/b.go"}`, "/work/repo", "/home/u", false},
		{"asked and allowed by a person", `{"kind":"file","verdict":"allow","decided_by":"human","path":"/work/repo/a.go","access":"read"}`, "/work/repo", "/home/u", false},
		{"denied", `{"kind":"file","verdict":"deny","decided_by":"default","path":"/usr/lib/libc.so.6","access":"read"}`, "", "", false},
		{"folded reads", `{"kind":"file_reads","verdict":"allow","decided_by":"default","count":2,"reads":[{"dir":"/usr/lib","count":2,"files":["libc.so.6"]}]}`, "", "", true},
		{"an exec of a library path", `{"kind":"exec","verdict":"allow","decided_by":"default","path":"/usr/lib/x/tool"}`, "", "", false},
		{"an http request", `{"kind":"http","verdict":"allow","decided_by":"default","url":"http://x/usr/lib/a.so"}`, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Record
			if err := json.Unmarshal([]byte(tt.line), &r); err != nil {
				t.Fatal(err)
			}
			if got := RoutineRecord(&r, tt.workdir, tt.home); got != tt.want {
				t.Errorf("RoutineRecord(%s, %q, %q) = %v, want %v", tt.line, tt.workdir, tt.home, got, tt.want)
			}
		})
	}
}

// TestRecordSessionPlaces checks that Event gives session_start's working
// tree and home back, for readers that rebuild the event.
func TestRecordSessionPlaces(t *testing.T) {
	var r Record
	if err := json.Unmarshal([]byte(`{"kind":"session_start","session":"s1","verdict":"allow","decided_by":"default","workdir":"/w","home":"/h"}`), &r); err != nil {
		t.Fatal(err)
	}
	e := r.Event()
	if e.SessionInfo == nil {
		t.Fatal("no session info")
	}
	if diff := cmp.Diff(event.Session{ID: "s1", Workdir: "/w", Home: "/h"}, *e.SessionInfo); diff != "" {
		t.Errorf("session (-want +got):\n%s", diff)
	}
}
