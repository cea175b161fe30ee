//go:build linux

package fileexec

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/chaperone-dev/chaperone/event"
)

// pidSet is the session of a WatchFiles test: the processes put in it.
type pidSet struct {
	mu        sync.Mutex
	in        map[int]bool
	described map[int]int // Process calls, by pid
}

func newPIDSet() *pidSet { return &pidSet{in: map[int]bool{}, described: map[int]int{}} }

func (s *pidSet) add(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.in[pid] = true
}

func (s *pidSet) has(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.in[pid]
}

func (s *pidSet) process(pid int) (*event.Process, error) {
	s.mu.Lock()
	s.described[pid]++
	s.mu.Unlock()
	return processOf(pid)
}

func (s *pidSet) descriptions(pid int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.described[pid]
}

// watchFiles starts WatchFiles on paths with decide and the session s,
// skipping the test where fanotify permission events are not available.
func watchFiles(tb testing.TB, paths []string, s *pidSet, decide func(context.Context, *event.Event) event.Verdict) (*Files, *recorder) {
	tb.Helper()
	requireRoot(tb)
	r := &recorder{}
	f, err := WatchFiles(paths, FileOptions{
		Session:   "daemon-1",
		InSession: s.has,
		Process:   s.process,
		Decider: event.DeciderFunc(func(ctx context.Context, e *event.Event) event.Verdict {
			r.mu.Lock()
			r.decided = append(r.decided, *e.File)
			r.mu.Unlock()
			return decide(ctx, e)
		}),
		Publish: func(e *event.Event) {
			r.mu.Lock()
			r.published = append(r.published, e)
			r.mu.Unlock()
		},
	})
	if errors.Is(err, ErrUnavailable) {
		tb.Skipf("fanotify permission events unavailable: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f, r
}

// catResult is how a cat run by runCat ended.
type catResult struct {
	OK     bool   // exit status 0
	Out    string // what it printed
	Denied bool   // its error says EPERM
}

// runCat runs cat on path in a process of its own, put in s (when s is not
// nil) before cat starts: the process is a shell that waits for a line and
// then becomes cat, keeping its pid.
func runCat(tb testing.TB, s *pidSet, path string) (catResult, int) {
	tb.Helper()
	cat, err := exec.LookPath("cat")
	if err != nil {
		tb.Skipf("no cat: %v", err)
	}
	return runGated(tb, s, cat, path)
}

// runGated runs prog with args as runCat runs cat.
func runGated(tb testing.TB, s *pidSet, prog string, args ...string) (catResult, int) {
	tb.Helper()
	cmd := exec.Command("sh", append([]string{"-c", `read _ && exec "$0" "$@"`, prog}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	if s != nil {
		s.add(cmd.Process.Pid)
	}
	in.Write([]byte("go\n"))
	in.Close()
	err = cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		tb.Fatal(err)
	}
	return catResult{OK: err == nil, Out: out.String(), Denied: strings.Contains(stderr.String(), "Operation not permitted")}, cmd.Process.Pid
}

// writeAt writes a small file at path, making its directories.
func writeAt(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// TestWatchFilesCredentials marks a home's credential files: a cat in the
// session is refused each and published; a cat outside it reads them,
// undescribed, undecided and unpublished; a cat in the session opening a
// file that is not marked raises no event at all.
func TestWatchFilesCredentials(t *testing.T) {
	requireRoot(t)
	home := t.TempDir()
	const content = "test credential, not a real one\n"
	key, aws, notes := home+"/.ssh/id_ed25519", home+"/.aws/credentials", home+"/notes.txt"
	for _, p := range []string{key, aws, key + ".pub", notes} {
		writeAt(t, p, content)
	}
	paths := CredentialFiles([]string{home})
	if d := cmp.Diff([]string{aws, key}, paths); d != "" {
		t.Fatalf("CredentialFiles (-want +got):\n%s", d)
	}
	s := newPIDSet()
	f, r := watchFiles(t, paths, s, denyPaths(key, aws))
	if got := f.Stats().Files; got != 2 {
		t.Errorf("Stats().Files = %d, want 2", got)
	}
	tests := []struct {
		name    string
		path    string
		session bool
		want    catResult
		event   bool // a denied read published, with cat's pid
	}{
		{"ssh key in session", key, true, catResult{Denied: true}, true},
		{"aws credentials in session", aws, true, catResult{Denied: true}, true},
		{"ssh key outside", key, false, catResult{OK: true, Out: content}, false},
		{"aws credentials outside", aws, false, catResult{OK: true, Out: content}, false},
		{"unmarked in session", notes, true, catResult{OK: true, Out: content}, false},
		{"public key in session", key + ".pub", true, catResult{OK: true, Out: content}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, nEvents := f.Stats(), len(r.events())
			set := s
			if !tt.session {
				set = nil
			}
			got, pid := runCat(t, set, tt.path)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("cat %s (-want +got):\n%s", tt.path, d)
			}
			after := f.Stats()
			var want []seen
			if tt.event {
				want = []seen{{Path: tt.path, Access: event.FileRead, Action: event.Deny, PID: pid}}
			}
			if d := cmp.Diff(want, seenOf(r.events()[nEvents:], tt.path)); d != "" {
				t.Errorf("events published (-want +got):\n%s", d)
			}
			switch {
			case !tt.session:
				if n := s.descriptions(pid); n != 0 {
					t.Errorf("the opener outside the session was described %d times", n)
				}
				if after.Outside == before.Outside {
					t.Errorf("the marked file's open outside the session was not seen (Stats %+v)", after)
				}
			case !tt.event:
				if after.Events != before.Events {
					t.Errorf("opening an unmarked file raised %d permission events", after.Events-before.Events)
				}
			}
		})
	}
	for _, d := range r.decideCalls() {
		if d.Path != key && d.Path != aws {
			t.Errorf("decided an open of %s, which is not marked", d.Path)
		}
	}
}

// TestWatchFilesDirectory marks a state directory: the opens of its files,
// those below it and one made after it was marked, by a process in the
// session, are decided; a process outside opens them undecided.
func TestWatchFilesDirectory(t *testing.T) {
	requireRoot(t)
	state := t.TempDir()
	ca, ask := state+"/ca-key.pem", state+"/ask/deep/pending.json"
	writeAt(t, ca, "key\n")
	writeAt(t, ask, "{}\n")
	tool := state + "/bin/tool" // a program kept there: its exec is decided
	writeAt(t, tool, "#!/bin/sh\necho ran\n")
	if err := os.Chmod(tool, 0o755); err != nil {
		t.Fatal(err)
	}
	sibling := filepath.Dir(state) + "/" + filepath.Base(state) + ".sibling"
	writeAt(t, sibling, "x\n")
	t.Cleanup(func() { os.Remove(sibling) })
	deny := func(_ context.Context, e *event.Event) event.Verdict {
		if strings.HasPrefix(e.File.Path, state+"/") {
			return event.Verdict{Action: event.Deny, Rule: "no-chaperone-state"}
		}
		return event.Verdict{Action: event.Allow}
	}
	s := newPIDSet()
	f, r := watchFiles(t, []string{state}, s, deny)
	if got := f.Stats().Files; got != 4 { // state, ask, ask/deep, bin
		t.Errorf("Stats().Files = %d, want 4 (the directory and the three below it)", got)
	}
	later := state + "/ask/made-later.json"
	writeAt(t, later, "{}\n")
	tests := []struct {
		name    string
		path    string
		content string
		session bool
		decided bool
		exec    bool // run path instead of cat
	}{
		{"file in it, session", ca, "", true, true, false},
		{"file two levels down, session", ask, "", true, true, false},
		{"file made after the mark, session", later, "", true, true, false},
		{"file beside it, session", sibling, "x\n", true, false, false},
		{"file in it, outside", ca, "key\n", false, false, false},
		{"file two levels down, outside", ask, "{}\n", false, false, false},
		{"program in it run, session", tool, "", true, true, true},
		{"program in it run, outside", tool, "ran\n", false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(r.decideCalls())
			set := s
			if !tt.session {
				set = nil
			}
			var got catResult
			var pid int
			access := event.FileRead
			if tt.exec {
				got, pid = runGated(t, set, tt.path)
				access = event.FileExec
			} else {
				got, pid = runCat(t, set, tt.path)
			}
			want := catResult{OK: true, Out: tt.content}
			var wantDecided []event.File
			if tt.decided {
				want = catResult{Denied: true}
				wantDecided = []event.File{{Path: tt.path, Access: access}}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("cat %s (-want +got):\n%s", tt.path, d)
			}
			if d := cmp.Diff(wantDecided, r.decideCalls()[n:], cmpopts.EquateEmpty()); d != "" {
				t.Errorf("decided (-want +got):\n%s", d)
			}
			if !tt.session && s.descriptions(pid) != 0 {
				t.Errorf("the opener outside the session was described")
			}
		})
	}
}

// TestWatchFilesDirectoryBound checks that a directory with more
// directories below it than maxDirMarks gets that many marks, no more.
func TestWatchFilesDirectoryBound(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	for i := range maxDirMarks + 50 {
		if err := os.MkdirAll(filepath.Join(dir, strconv.Itoa(i%10), strconv.Itoa(i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := watchFiles(t, []string{dir}, newPIDSet(), allowAll)
	if got := f.Stats().Files; got != maxDirMarks {
		t.Errorf("Stats().Files = %d, want %d", got, maxDirMarks)
	}
}

// TestWatchFilesAddPaths checks that a file made after WatchFiles is not
// covered until AddPaths names it, and is then; that naming it again, or a
// path that does not exist, is harmless (the second open is answered from
// the cached verdict, unpublished).
func TestWatchFilesAddPaths(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	first, added := dir+"/first", dir+"/home/alice/.netrc"
	writeAt(t, first, "1\n")
	s := newPIDSet()
	f, r := watchFiles(t, []string{first, dir + "/missing"}, s, denyPaths(first, added))
	writeAt(t, added, "machine example.invalid\n")

	if got, _ := runCat(t, s, added); !got.OK {
		t.Fatalf("cat of a file not marked yet: %+v", got)
	}
	if n := len(r.decideCalls()); n != 0 {
		t.Fatalf("%d decisions before the file was added", n)
	}
	for i := range 2 { // the second time re-marks it
		if err := f.AddPaths([]string{added, dir + "/missing/too"}); err != nil {
			t.Fatalf("AddPaths #%d: %v", i+1, err)
		}
		if got := f.Stats().Files; got != 2 {
			t.Errorf("after AddPaths #%d, Stats().Files = %d, want 2", i+1, got)
		}
		hits := f.Stats().CacheHits
		got, pid := runCat(t, s, added)
		if d := cmp.Diff(catResult{Denied: true}, got); d != "" {
			t.Errorf("cat after AddPaths #%d (-want +got):\n%s", i+1, d)
		}
		if i == 0 {
			want := []seen{{Path: added, Access: event.FileRead, Action: event.Deny, PID: pid}}
			if d := cmp.Diff(want, seenOf(r.events(), added)); d != "" {
				t.Errorf("events after AddPaths #%d (-want +got):\n%s", i+1, d)
			}
		} else if f.Stats().CacheHits == hits {
			t.Errorf("the open after AddPaths #%d was not answered from the cache", i+1)
		}
	}
}

// TestWatchFilesClose checks that Close leaves no fanotify group behind:
// none among this process's fds, and the marked file's opens are no
// longer decided.
func TestWatchFilesClose(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "credentials")
	groups := fanotifyFDs(t)
	s := newPIDSet()
	f, r := watchFiles(t, []string{path}, s, denyPaths(path))
	if got := fanotifyFDs(t); got != groups+1 {
		t.Fatalf("%d fanotify groups open while watching, want %d", got, groups+1)
	}
	if got, _ := runCat(t, s, path); !got.Denied {
		t.Fatalf("cat while watching: %+v, want denied", got)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fanotifyFDs(t); got != groups {
		t.Errorf("%d fanotify groups open after Close, want %d", got, groups)
	}
	n := len(r.decideCalls())
	if got, _ := runCat(t, s, path); !got.OK {
		t.Errorf("cat after Close: %+v, want read", got)
	}
	if got := len(r.decideCalls()); got != n {
		t.Errorf("%d decisions after Close", got-n)
	}
	if err := f.AddPaths([]string{path}); err == nil {
		t.Error("AddPaths after Close succeeded")
	}
}

// TestWatchFilesNotMounts checks that a Files watching files is not taken
// for one watching a session's mounts.
func TestWatchFilesNotMounts(t *testing.T) {
	f, _ := watchFiles(t, nil, newPIDSet(), allowAll)
	if _, err := NewNested(NestedOptions{InSession: func(int) bool { return false }, Files: f}); err == nil {
		t.Error("NewNested took a Files made by WatchFiles")
	}
	if err := f.Forget(); err != nil {
		t.Errorf("Forget: %v", err)
	}
}

// fanotifyFDs counts this process's open fanotify groups.
func fanotifyFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:[fanotify]" {
			n++
		}
	}
	return n
}
