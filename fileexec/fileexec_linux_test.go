//go:build linux

package fileexec

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// seen is what a test checks of a published event.
type seen struct {
	Path   string
	Access event.FileAccess
	Action event.Action
	PID    int
}

func seenOf(evs []*event.Event, path string) []seen {
	var out []seen
	for _, e := range evs {
		if e.File == nil || e.File.Path != path {
			continue
		}
		s := seen{Path: e.File.Path, Access: e.File.Access, Action: e.Verdict.Action}
		if e.Process != nil {
			s.PID = e.Process.PID
		}
		out = append(out, s)
	}
	return out
}

// waitFor polls cond until it holds; a minute without it fails the test.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			tb.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func denyWrites(_ context.Context, e *event.Event) event.Verdict {
	if e.File.Access == event.FileWrite {
		return event.Verdict{Action: event.Deny}
	}
	return event.Verdict{Action: event.Allow}
}

func TestOpenDecided(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name    string
		decide  func(*testing.T, string) func(context.Context, *event.Event) event.Verdict
		mode    string
		special string // "fifo" or "chardev" (a copy of /dev/null)
		create  bool
		reply   string
		want    []seen // PID filled in with the child's
	}{
		{name: "read allowed", mode: "r", reply: "ok", want: []seen{{Access: event.FileRead, Action: event.Allow}}},
		{name: "read denied", mode: "r", reply: "err EPERM", want: []seen{{Access: event.FileRead, Action: event.Deny}},
			decide: func(_ *testing.T, p string) func(context.Context, *event.Event) event.Verdict { return denyPaths(p) }},
		{name: "write only", mode: "w", reply: "ok", want: []seen{{Access: event.FileWrite, Action: event.Allow}}},
		{name: "read write", mode: "rw", reply: "ok", want: []seen{{Access: event.FileWrite, Action: event.Allow}}},
		{name: "append", mode: "a", reply: "ok", want: []seen{{Access: event.FileWrite, Action: event.Allow}}},
		{name: "truncate", mode: "t", reply: "ok", want: []seen{{Access: event.FileWrite, Action: event.Allow}}},
		{name: "create", mode: "c", create: true, reply: "ok", want: []seen{{Access: event.FileWrite, Action: event.Allow}}},
		{name: "write denied by access", mode: "w", reply: "err EPERM", want: []seen{{Access: event.FileWrite, Action: event.Deny}},
			decide: func(*testing.T, string) func(context.Context, *event.Event) event.Verdict { return denyWrites }},
		{name: "read allowed by access", mode: "r", reply: "ok", want: []seen{{Access: event.FileRead, Action: event.Allow}},
			decide: func(*testing.T, string) func(context.Context, *event.Event) event.Verdict { return denyWrites }},
		// The kernel reports permission events on regular files only
		// (6.18): FIFOs and device nodes pass undecided.
		{name: "fifo", mode: "rw", special: "fifo", reply: "ok"},
		{name: "char device", mode: "rw", special: "chardev", reply: "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "file")
			switch {
			case tt.special == "fifo":
				if err := unix.Mkfifo(path, 0o644); err != nil {
					t.Fatal(err)
				}
			case tt.special == "chardev":
				if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
					t.Fatal(err)
				}
			case !tt.create:
				if err := os.WriteFile(path, []byte("data\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			decide := allowAll
			if tt.decide != nil {
				decide = tt.decide(t, path)
			}
			c := startChild(t)
			f, r := watch(t, c, decide)
			if got := c.do(t, "open "+path+" "+tt.mode); got != tt.reply {
				t.Errorf("open %s: child got %q, want %q", tt.mode, got, tt.reply)
			}
			for i := range tt.want {
				tt.want[i].Path, tt.want[i].PID = path, c.pid
			}
			if diff := cmp.Diff(tt.want, seenOf(r.events(), path)); diff != "" {
				t.Errorf("published (-want +got):\n%s", diff)
			}
			if st := f.Stats(); st.Mounts == 0 || st.Events != uint64(len(tt.want)) {
				t.Errorf("stats %+v: want mounts marked and %d events", st, len(tt.want))
			}
		})
	}
}

func TestExec(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skipf("no /bin/true to copy: %v", err)
	}
	denied, allowed := filepath.Join(dir, "denied"), filepath.Join(dir, "allowed")
	for _, p := range []string{denied, allowed} {
		if err := os.WriteFile(p, bin, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := startChild(t)
	f, r := watch(t, c, denyPaths(denied))
	tests := []struct {
		path, reply string
		action      event.Action
	}{
		{denied, "err EPERM", event.Deny},
		{allowed, "ok", event.Allow},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			if got := c.do(t, "exec "+tt.path); got != tt.reply {
				t.Errorf("exec: child got %q, want %q", got, tt.reply)
			}
			evs := seenOf(r.events(), tt.path)
			if len(evs) != 1 {
				t.Fatalf("published %+v, want one exec event", evs)
			}
			if evs[0].Access != event.FileExec || evs[0].Action != tt.action {
				t.Errorf("published %+v, want access exec and verdict %v", evs[0], tt.action)
			}
			if evs[0].PID == c.pid || evs[0].PID == 0 {
				t.Errorf("exec attributed to pid %d, want the child's child", evs[0].PID)
			}
		})
	}
	// execve opens the program twice (FAN_OPEN_EXEC_PERM, then
	// FAN_OPEN_PERM); the second follows an allowed first and is let past
	// without a decision.
	var calls int
	for _, d := range r.decideCalls() {
		if d.Path == allowed {
			calls++
			if d.Access != event.FileExec {
				t.Errorf("decided %+v, want access exec", d)
			}
		}
	}
	if calls != 1 {
		t.Errorf("decided %d times for the allowed program, want 1", calls)
	}
	if f.Stats().ExecOpens == 0 {
		t.Errorf("stats %+v: want the second open of the exec let past", f.Stats())
	}
}

// TestOutsideNotSeen checks that the marks hold the namespace's mounts and
// not the caller's: the same file opened by the test process, outside the
// namespace, while the child's open of it waits for a decision, is neither
// seen nor delayed.
func TestOutsideNotSeen(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "shared")
	release := make(chan struct{})
	c := startChild(t)
	f, r := watch(t, c, func(ctx context.Context, e *event.Event) event.Verdict {
		if e.File.Path == path {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return event.Verdict{Action: event.Allow}
	})
	c.send(t, "open "+path+" r")
	waitFor(t, "the child's open to be decided", func() bool { return len(r.decideCalls()) == 1 })
	before := f.Stats()
	for range 10 {
		if err := openClose(path, unix.O_RDWR); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(before, f.Stats()); diff != "" {
		t.Errorf("the test's own opens changed the stats (-before +after):\n%s", diff)
	}
	close(release)
	if got := c.line(t); got != "ok" {
		t.Errorf("child got %q, want ok", got)
	}
	if got := f.Stats().Events; got != before.Events+1 {
		t.Errorf("events = %d, want %d", got, before.Events+1)
	}
	if diff := cmp.Diff([]seen{{Path: path, Access: event.FileRead, Action: event.Allow, PID: c.pid}}, seenOf(r.events(), path)); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
}

// TestPseudoFSUnmarked checks the choice to leave /proc, /dev and the like
// unmarked.
func TestPseudoFSUnmarked(t *testing.T) {
	requireRoot(t)
	c := startChild(t)
	f, r := watch(t, c, func(context.Context, *event.Event) event.Verdict { return event.Verdict{} })
	for _, cmd := range []string{"open /proc/self/status r", "open /dev/null rw"} {
		if got := c.do(t, cmd); got != "ok" {
			t.Errorf("%s: child got %q, want ok", cmd, got)
		}
	}
	if got := r.decideCalls(); len(got) != 0 {
		t.Errorf("decided %+v, want nothing", got)
	}
	if st := f.Stats(); st.Events != 0 {
		t.Errorf("stats %+v, want no events", st)
	}
}

func TestCache(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name, cmd, reply string
		repeat           int
		decide           func(string) func(context.Context, *event.Event) event.Verdict
		wantHits         uint64
		wantDenied       uint64
	}{
		{name: "allow", cmd: "openn %s 1000", repeat: 1, reply: "ok", wantHits: 999,
			decide: func(string) func(context.Context, *event.Event) event.Verdict { return allowAll }},
		{name: "deny", cmd: "open %s r", repeat: 10, reply: "err EPERM", wantHits: 9, wantDenied: 10,
			decide: func(p string) func(context.Context, *event.Event) event.Verdict { return denyPaths(p) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "cached")
			c := startChild(t)
			f, r := watch(t, c, tt.decide(path))
			for range tt.repeat {
				if got := c.do(t, strings.Replace(tt.cmd, "%s", path, 1)); got != tt.reply {
					t.Fatalf("child got %q, want %q", got, tt.reply)
				}
			}
			if got := r.decideCalls(); len(got) != 1 {
				t.Errorf("decided %d times, want once", len(got))
			}
			if got := seenOf(r.events(), path); len(got) != 1 {
				t.Errorf("published %d events, want only the decision", len(got))
			}
			st := f.Stats()
			if st.CacheHits != tt.wantHits || st.Denied != tt.wantDenied {
				t.Errorf("stats %+v, want %d cache hits and %d denied", st, tt.wantHits, tt.wantDenied)
			}
		})
	}
}

// TestConcurrentOpensDecidedOnce: opens of one file at once, on several
// threads, wait for the one decision instead of each asking.
func TestConcurrentOpensDecidedOnce(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "burst")
	c := startChild(t)
	f, r := watch(t, c, func(context.Context, *event.Event) event.Verdict {
		time.Sleep(200 * time.Millisecond) // let the other opens arrive meanwhile
		return event.Verdict{Action: event.Allow}
	})
	if got := c.do(t, "popen "+path+" 8"); got != "ok" {
		t.Fatalf("child got %q, want ok", got)
	}
	if got := r.decideCalls(); len(got) != 1 {
		t.Errorf("decided %d times, want once", len(got))
	}
	if st := f.Stats(); st.CacheHits != 7 {
		t.Errorf("stats %+v, want 7 answers shared", st)
	}
}

func TestCloseWhileDeciding(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name      string
		honourCtx bool
	}{
		{"decide returns on cancel", true},
		{"decide ignores cancel", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "held")
			hold := make(chan struct{})
			t.Cleanup(func() { close(hold) })
			c := startChild(t)
			f, r := watch(t, c, func(ctx context.Context, _ *event.Event) event.Verdict {
				if tt.honourCtx {
					<-ctx.Done()
				} else {
					<-hold
				}
				return event.Verdict{Action: event.Allow}
			})
			c.send(t, "open "+path+" r")
			waitFor(t, "the open to be decided", func() bool { return len(r.decideCalls()) == 1 })
			closed := make(chan error, 1)
			go func() { closed <- f.Close() }()
			if got := c.line(t); got != "err EPERM" {
				t.Errorf("child got %q, want err EPERM", got)
			}
			select {
			case err := <-closed:
				if err != nil {
					t.Errorf("Close: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Close did not return within a minute")
			}
			evs := r.events()
			if len(evs) != 1 || evs[0].Verdict != stoppedVerdict() {
				t.Errorf("published %+v, want one event denied because mediation stopped", evs)
			}
			// Unwatched now.
			if got := c.do(t, "open "+path+" r"); got != "ok" {
				t.Errorf("after Close: child got %q, want ok", got)
			}
			if err := f.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

func TestIgnore(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "ignored")
	c := startChild(t)
	f, r := watch(t, c, denyPaths(path), func(o *FileOptions) {
		o.Ignore = func(p string) bool { return p == path }
	})
	if got := c.do(t, "open "+path+" rw"); got != "ok" {
		t.Errorf("child got %q, want ok", got)
	}
	if got := r.decideCalls(); len(got) != 0 {
		t.Errorf("decided %+v, want nothing", got)
	}
	if st := f.Stats(); st.Ignored != 1 || len(r.events()) != 0 {
		t.Errorf("stats %+v, published %d: want one ignored, nothing published", st, len(r.events()))
	}
}

func TestProcessFailureDenies(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "file")
	c := startChild(t)
	_, r := watch(t, c, allowAll, func(o *FileOptions) {
		o.Process = func(int) (*event.Process, error) { return nil, errors.New("gone") }
	})
	if got := c.do(t, "open "+path+" r"); got != "err EPERM" {
		t.Errorf("child got %q, want err EPERM", got)
	}
	if diff := cmp.Diff([]seen{{Path: path, Access: event.FileRead, Action: event.Deny}}, seenOf(r.events(), path)); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
	if got := r.decideCalls(); len(got) != 0 {
		t.Errorf("decided %+v, want nothing", got)
	}
}

func TestWatchMountsOptions(t *testing.T) {
	tests := []struct {
		name string
		o    FileOptions
	}{
		{"no decide", FileOptions{InSession: func(int) bool { return true }, Process: processOf}},
		{"no process", FileOptions{InSession: func(int) bool { return true }, Decider: event.DeciderFunc(allowAll)}},
		{"no in session", FileOptions{Process: processOf, Decider: event.DeciderFunc(allowAll)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := WatchMounts(os.Getpid(), tt.o)
			if err == nil {
				f.Close()
				t.Fatal("WatchMounts accepted incomplete options")
			}
			if errors.Is(err, ErrUnavailable) {
				t.Errorf("error %v wraps ErrUnavailable, want an options error", err)
			}
		})
	}
}

// TestOwnOpensAnswered: Chaperone opening files in the watched namespace
// while it decides (hashing the executable through /proc/<pid>/exe, reading
// the file through /proc/<pid>/root) is answered at once, not decided.
func TestOwnOpensAnswered(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "file")
	c := startChild(t)
	read := func(p string) error {
		b := make([]byte, 16)
		fh, err := os.Open(p)
		if err != nil {
			return err
		}
		defer fh.Close()
		_, err = fh.Read(b)
		return err
	}
	f, r := watch(t, c, func(context.Context, *event.Event) event.Verdict {
		if err := read("/proc/" + strconv.Itoa(c.pid) + "/root" + path); err != nil {
			return event.Verdict{Action: event.Deny, Reason: err.Error()}
		}
		return event.Verdict{Action: event.Allow}
	}, func(o *FileOptions) {
		o.Process = func(pid int) (*event.Process, error) {
			if err := read("/proc/" + strconv.Itoa(pid) + "/exe"); err != nil {
				return nil, err
			}
			return processOf(pid)
		}
	})
	if got := c.do(t, "open "+path+" r"); got != "ok" {
		t.Errorf("child got %q, want ok", got)
	}
	if got := r.decideCalls(); len(got) != 1 {
		t.Errorf("decided %+v, want only the child's open", got)
	}
	// The exe (on the root mount) and the file, opened by this process.
	if st := f.Stats(); st.Outside < 2 {
		t.Errorf("stats %+v, want this process's own opens answered as outside", st)
	}
}

func TestTgidOf(t *testing.T) {
	f := &Files{tgids: map[int]int{}}
	tids := make(chan int)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		tids <- unix.Gettid()
		<-stop
	}()
	thread := <-tids
	if thread == os.Getpid() {
		t.Skip("the locked goroutine runs on the main thread; no other thread to look up")
	}
	tests := []struct {
		name  string
		tid   int
		stale bool
	}{
		{"leader", os.Getpid(), false},
		{"thread", thread, false},
		{"thread remembered", thread, false},
		{"thread remembered wrongly", thread, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.stale {
				f.tgids[tt.tid] = 1
			}
			got, err := f.tgidOf(tt.tid)
			if err != nil || got != os.Getpid() {
				t.Errorf("tgidOf(%d) = %d, %v; want %d", tt.tid, got, err, os.Getpid())
			}
		})
	}
	if got := f.tgids[thread]; got != os.Getpid() {
		t.Errorf("thread %d remembered as %d, want %d", thread, got, os.Getpid())
	}
}

// Many threads opening many files for reading at once, while other opens
// are answered all the time: every open is decided as the read it is.
// Every answer to any event of the group wakes every opener still waiting
// (they share one wait queue), and a woken opener that has not run yet
// shows no registers ("running" in /proc/<tid>/syscall): on a loaded
// machine the flags of an open could not be read, and it was taken for a
// write.
func TestConcurrentReadsAreReads(t *testing.T) {
	requireRoot(t)
	storm := writeFile(t, "storm")
	// Busy processes keep a woken opener from running at once, as a loaded
	// machine does.
	for range 2 * runtime.NumCPU() {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	}
	c := startChild(t)
	_, r := watch(t, c, allowAll)
	const files, rounds = 1500, 3
	for round := range rounds {
		dir := t.TempDir()
		for i := range files {
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Meanwhile 32 threads open another file in a loop: answered from
		// the cache, each answer wakes every waiter.
		if got := c.do(t, "pdir "+dir+" 64 "+storm+" 32"); got != "ok" {
			t.Fatalf("child got %q", got)
		}
		counts := map[event.FileAccess]int{}
		for _, f := range r.decideCalls() {
			if strings.HasPrefix(f.Path, dir+"/") {
				counts[f.Access]++
			}
		}
		if counts[event.FileRead] != files || len(counts) != 1 {
			t.Fatalf("round %d: %d opens for reading were decided as %v", round, files, counts)
		}
	}
}
