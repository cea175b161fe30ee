package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/telemetry"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/sessions")

// sessionsLog is a hand-written audit log: a finished session with a
// process tree, denials, redactions and LLM calls; a running one; one
// whose log begins after its start and that ends the next day; a record of
// no session; and a last line torn by a crash.
var sessionsLog = filepath.Join("testdata", "sessions", "audit.jsonl")

// readsLog is a session's log written with audit.file_reads: all: runs of
// routine reads (libraries, locale data, the working tree, a cache of the
// home) by three processes, a file_reads record, a denied read of
// ~/.aws/credentials.
var readsLog = filepath.Join("testdata", "sessions", "audit_reads.jsonl")

type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs chaperone in-process with an empty environment but vars.
func runCLI(t *testing.T, vars map[string]string, args ...string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := env{
		stdin:   strings.NewReader(""),
		stdout:  &stdout,
		stderr:  &stderr,
		getenv:  func(k string) string { return vars[k] },
		environ: func() []string { return nil },
	}
	code := execute(context.Background(), e, args)
	return cliResult{code, stdout.String(), stderr.String()}
}

func TestSessionsGolden(t *testing.T) {
	tests := []struct {
		golden string
		args   []string
	}{
		{"sessions.golden", []string{"sessions"}},
		{"sessions_json.golden", []string{"sessions", "--json"}},
		{"show_finished.golden", []string{"sessions", "show", "7f3a9c01e5d2"}},
		{"show_finished.golden", []string{"sessions", "show", "7f3a"}},
		{"show_running.golden", []string{"sessions", "show", "7f3b"}},
		{"show_no_start.golden", []string{"sessions", "show", "c"}},
		{"show_json.golden", []string{"sessions", "show", "--json", "7f3b"}},
		{"events.golden", []string{"events"}},
		{"events_deny.golden", []string{"events", "--verdict", "deny"}},
		{"events_ask_rewrite.golden", []string{"events", "--verdict", "ask", "--verdict", "rewrite"}},
		{"events_window.golden", []string{"events", "--since", "2025-03-01T13:04:07Z", "--until", "2025-03-01T13:04:08.010Z", "--kind", "connect", "--kind", "tls", "--json"}},
		{"events_window_session.golden", []string{"events", "--since", "2025-03-01T13:04:30Z", "--session", "7f3a"}},
		// Routine reads: one counted line, unless --all.
		{"reads_events.golden", []string{"events", "--log", readsLog}},
		{"reads_events_all.golden", []string{"events", "--all", "--log", readsLog}},
		{"reads_events_file.golden", []string{"events", "--kind", "file", "--log", readsLog}},
		{"reads_show.golden", []string{"sessions", "show", "9d1e", "--log", readsLog}},
		{"reads_show_all.golden", []string{"sessions", "show", "--all", "9d1e", "--log", readsLog}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := tt.args
			if !slices.Contains(args, "--log") {
				args = append(args, "--log", sessionsLog)
			}
			r := runCLI(t, nil, args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			path := filepath.Join("testdata", "sessions", tt.golden)
			if *update {
				if err := os.WriteFile(path, []byte(r.stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), r.stdout); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if tt.args[0] == "sessions" && !slices.Contains(tt.args, "--json") {
				for i, line := range strings.Split(r.stdout, "\n") {
					if n := utf8.RuneCountInString(line); n > showWidth {
						t.Errorf("line %d is %d columns wide: %s", i+1, n, line)
					}
				}
			}
		})
	}
}

// Without --log, both commands read the configured audit log.
func TestSessionsConfiguredLog(t *testing.T) {
	data, err := os.ReadFile(sessionsLog)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"sessions"}, {"sessions", "show", "c0ffee"}, {"events", "--verdict", "ask"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			want := runCLI(t, nil, append(args, "--log", sessionsLog)...)
			got := runCLI(t, map[string]string{"CHAPERONE_LOG": path}, args...)
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(cliResult{})); diff != "" {
				t.Errorf("with CHAPERONE_LOG (-want +got):\n%s", diff)
			}
			if got.code != 0 || got.stdout == "" {
				t.Errorf("exit %d, output %q", got.code, got.stdout)
			}
		})
	}
}

func TestSessionsErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.jsonl")
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"kind\":\"http\",\"time\":\"2025-03-01T13:04:05Z\",\"session\":\"s\",\"verdict\":\"allow\",\"decided_by\":\"default\"}\ngarbage\n{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"ambiguous prefix", []string{"sessions", "show", "7f3", "--log", sessionsLog}, 2, `"7f3" names 2 sessions (7f3a9c01e5d2, 7f3b00aa11bb)`},
		{"unknown session", []string{"sessions", "show", "beef", "--log", sessionsLog}, 2, `no session "beef"`},
		{"escaped id", []string{"sessions", "show", "\x1b[2J", "--log", sessionsLog}, 2, `no session "\\x1b[2J"`},
		{"no id", []string{"sessions", "show", "--log", sessionsLog}, 1, "accepts 1 arg"},
		{"missing log", []string{"sessions", "--log", missing}, 1, "sessions: open " + missing},
		{"bad line", []string{"sessions", "--log", bad}, 1, "audit log line 2"},
		{"bad verdict", []string{"events", "--verdict", "maybe", "--log", sessionsLog}, 2, `--verdict "maybe"`},
		{"bad kind", []string{"events", "--kind", "nope", "--log", sessionsLog}, 2, `--kind "nope"`},
		{"bad since", []string{"events", "--since", "yesterday", "--log", sessionsLog}, 2, `--since: "yesterday" is neither`},
		{"negative until", []string{"events", "--until", "-5m", "--log", sessionsLog}, 2, "cannot be negative"},
		{"until before since", []string{"events", "--since", "2025-03-01T13:04:07Z", "--until", "2025-03-01T13:04:06Z", "--log", sessionsLog}, 2, "--until is before --since"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, nil, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tt.code, tt.stderr)
			}
			if strings.ContainsRune(r.stderr, 0x1b) {
				t.Errorf("stderr holds an escape character: %q", r.stderr)
			}
		})
	}
}

func TestParseTimeFlag(t *testing.T) {
	now := time.Date(2025, 3, 1, 13, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"", time.Time{}, false},
		{"10m", now.Add(-10 * time.Minute), false},
		{" 1h30m ", now.Add(-90 * time.Minute), false},
		{"0s", now, false},
		{"2025-03-01T12:00:00Z", time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), false},
		{"2025-03-01T14:00:00.5+02:00", time.Date(2025, 3, 1, 12, 0, 0, 5e8, time.UTC), false},
		{"-10m", time.Time{}, true},
		{"10", time.Time{}, true},
		{"2025-03-01", time.Time{}, true},
		{"yesterday", time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTimeFlag(tt.in, now)
			if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
				t.Errorf("parseTimeFlag(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// The log's last line is cut mid-record: events reads it whole, without
// the torn line; a line broken in the middle is still an error.
func TestEventsTornLog(t *testing.T) {
	data, err := os.ReadFile(sessionsLog)
	if err != nil {
		t.Fatal(err)
	}
	if data[len(data)-1] == '\n' {
		t.Fatal("the test log must end in a torn line")
	}
	lines := bytes.Count(data, []byte("\n"))
	r := runCLI(t, nil, "events", "--json", "--log", sessionsLog)
	if r.code != 0 {
		t.Fatalf("events on a torn log: exit %d, %s", r.code, r.stderr)
	}
	if got := strings.Count(r.stdout, "\n"); got != lines {
		t.Errorf("events printed %d records, want %d (every complete line)", got, lines)
	}

	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	i := bytes.IndexByte(data, '\n')
	broken := append(append(bytes.Clone(data[:i]), `"oops`...), data[i:]...)
	if err := os.WriteFile(cut, broken, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, nil, "events", "--log", cut); r.code == 0 || !strings.Contains(r.stderr, "audit log line 1") {
		t.Errorf("a broken first line: exit %d, stderr %q", r.code, r.stderr)
	}
}

// Whatever a log holds, sessions and show neither panic nor loop, and show
// keeps to its width.
func FuzzSessionsShow(f *testing.F) {
	data, err := os.ReadFile(sessionsLog)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	for _, line := range bytes.Split(data, []byte("\n")) {
		f.Add(line)
	}
	f.Add([]byte(`{"time":"2025-03-01T13:04:05Z","session":"s","kind":"exec","verdict":"allow","decided_by":"default","process":{"pid":2,"ppid":2,"lineage":["a","b"]}}` + "\n" +
		`{"time":"2025-03-01T13:04:05Z","session":"s","kind":"session_start","verdict":"allow","decided_by":"default","root_pid":2}`))
	f.Add([]byte(`{"time":"2025-03-01T13:04:05Z","session":"s","kind":"file","verdict":"deny","decided_by":"default","process":{"pid":3,"ppid":4,"lineage":["\u001b","x"]},"reason":"` + strings.Repeat("é", 200) + `"}`))
	f.Add([]byte(`{"time":"2025-03-01T13:04:05Z","session":"s","kind":"process","verdict":"allow","decided_by":"default","process":{"pid":3,"ppid":2,"exe":"/bin/\u001b[31m"},"process_id":1}` + "\n" +
		`{"time":"2025-03-01T13:04:06Z","session":"s","kind":"file_reads","verdict":"allow","decided_by":"default","process_id":1,"pid":3,"count":3,"reads":[{"dir":"/w/\u001b]0;x","count":2,"files":["a","\u001b"]},{"dir":"/x","rule":"r\u001b","count":1}]}` + "\n" +
		`{"time":"2025-03-01T13:04:07Z","session":"s","kind":"file","verdict":"deny","decided_by":"default","process_id":9,"pid":4,"path":"/p"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := telemetry.Sessions(bytes.NewReader(data))
		if err != nil {
			return
		}
		var table, tree strings.Builder
		printSessions(&table, list)
		for _, s := range list {
			var recs []telemetry.Record
			telemetry.ReadRecords(bytes.NewReader(data), telemetry.Filter{}, func(r telemetry.Record) error {
				if r.Session == s.ID {
					recs = append(recs, r)
				}
				return nil
			})
			printSessionTree(&tree, s, recs)
		}
		for _, line := range strings.Split(tree.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > showWidth {
				t.Errorf("a %d-column line: %q", n, line)
			}
		}
		for _, line := range strings.Split(table.String()+tree.String(), "\n") {
			if strings.ContainsRune(line, 0x1b) {
				t.Errorf("an escape character reached the output: %q", line)
			}
		}
	})
}
