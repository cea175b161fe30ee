//go:build linux

package fileexec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// staticPaths is a Static that holds for the given paths. It fails the
// test when asked about an open that was decided and not allowed (one
// with no access was not decided: a file marked ahead, an exec's second
// open).
func staticPaths(t *testing.T, paths ...string) func(*FileOptions) {
	return func(o *FileOptions) {
		o.Static = func(p string, access event.FileAccess, v event.Verdict) bool {
			if access != "" && !v.Allowed() {
				t.Errorf("Static(%q) asked after an open for %q given %+v", p, access, v)
			}
			for _, s := range paths {
				if p == s {
					return true
				}
			}
			return false
		}
	}
}

// delta is what a test checks of the stats between two points.
type delta struct{ Events, CacheHits, Static uint64 }

func deltaOf(before, after FileStats) delta {
	return delta{after.Events - before.Events, after.CacheHits - before.CacheHits, after.Static - before.Static}
}

// TestStatic: the first open of a file is decided; when Static holds for
// it, allowed, and it has one link, the next thousand opens (and an open
// for writing) raise no event at all.
func TestStatic(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name   string
		static bool
		link   bool // a second link to the file, elsewhere
		linked bool // StaticLinked holds
		deny   bool
		reply  string
		// After the first open: ten rounds of 100 reads (a denied round
		// stops at its first open), then one open for writing.
		want        delta
		wantMarks   uint64 // by the first open
		wantDecided int
	}{
		{name: "static", static: true, reply: "ok", wantMarks: 1, want: delta{}, wantDecided: 1},
		{name: "not static", reply: "ok", want: delta{Events: 1001, CacheHits: 1000}, wantDecided: 2},
		{name: "hard link", static: true, link: true, reply: "ok", want: delta{Events: 1001, CacheHits: 1000}, wantDecided: 2},
		{name: "hard link, StaticLinked", static: true, link: true, linked: true, reply: "ok", wantMarks: 1, want: delta{}, wantDecided: 1},
		{name: "denied", static: true, deny: true, reply: "err EPERM", want: delta{Events: 11, CacheHits: 10}, wantDecided: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "file")
			if tt.link {
				if err := os.Link(path, filepath.Join(t.TempDir(), "link")); err != nil {
					t.Fatal(err)
				}
			}
			decide := allowAll
			if tt.deny {
				decide = denyPaths(path)
			}
			var opts []func(*FileOptions)
			if tt.static {
				opts = append(opts, staticPaths(t, path))
			}
			var askedLinked []string
			if tt.linked {
				opts = append(opts, func(o *FileOptions) {
					o.StaticLinked = func(p string, access event.FileAccess) bool {
						askedLinked = append(askedLinked, p+" "+string(access))
						return true
					}
				})
			}
			c := startChild(t)
			f, r := watch(t, c, decide, opts...)
			if got := c.do(t, "open "+path+" r"); got != tt.reply {
				t.Fatalf("first open: child got %q, want %q", got, tt.reply)
			}
			first := f.Stats()
			if first.Events != 1 || first.Static != tt.wantMarks {
				t.Errorf("after the first open: stats %+v, want one event and %d ignore marks", first, tt.wantMarks)
			}
			for range 10 {
				if got := c.do(t, "openn "+path+" 100"); got != tt.reply {
					t.Fatalf("child got %q, want %q", got, tt.reply)
				}
			}
			if got := c.do(t, "open "+path+" rw"); got != tt.reply {
				t.Fatalf("open for writing: child got %q, want %q", got, tt.reply)
			}
			if diff := cmp.Diff(tt.want, deltaOf(first, f.Stats())); diff != "" {
				t.Errorf("stats after the first open (-want +got):\n%s", diff)
			}
			if got := len(r.decideCalls()); got != tt.wantDecided {
				t.Errorf("decided %d times, want %d", got, tt.wantDecided)
			}
			if want := []string{path + " "}; tt.linked && !cmp.Equal(askedLinked, want) {
				t.Errorf("StaticLinked asked %q, want %q", askedLinked, want)
			}
		})
	}
}

// TestStaticModified: modifying a marked file clears its mark; its next
// open is an event again (answered from the cache) and marks it again.
func TestStaticModified(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "file")
	c := startChild(t)
	f, _ := watch(t, c, allowAll, staticPaths(t, path))
	steps := []struct {
		name   string
		modify bool
		want   delta
	}{
		{"first open", false, delta{Events: 1, Static: 1}},
		{"marked", false, delta{}},
		{"modified", true, delta{Events: 1, CacheHits: 1, Static: 1}},
		{"marked again", false, delta{}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.modify {
				// By this process, outside the namespace: no event, but
				// the kernel clears the inode's ignore mask.
				fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := fh.WriteString("more\n"); err != nil {
					t.Fatal(err)
				}
				fh.Close()
			}
			before := f.Stats()
			if got := c.do(t, "openn "+path+" 100"); got != "ok" {
				t.Fatalf("child got %q, want ok", got)
			}
			if diff := cmp.Diff(s.want, deltaOf(before, f.Stats())); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestForget: Forget removes the ignore marks and the cached verdicts, and
// leaves the mount marks: a marked file is decided again, a denied file is
// still denied (decided again too).
func TestForget(t *testing.T) {
	requireRoot(t)
	allowed, denied := writeFile(t, "allowed"), writeFile(t, "denied")
	c := startChild(t)
	f, r := watch(t, c, denyPaths(denied), staticPaths(t, allowed, denied))
	decided := func(p string) int {
		n := 0
		for _, d := range r.decideCalls() {
			if d.Path == p {
				n++
			}
		}
		return n
	}
	for round := 1; round <= 2; round++ {
		if round == 2 {
			if err := f.Forget(); err != nil {
				t.Fatalf("Forget: %v", err)
			}
		}
		if got := c.do(t, "open "+allowed+" r"); got != "ok" {
			t.Fatalf("round %d: open %s: child got %q, want ok", round, allowed, got)
		}
		before := f.Stats()
		if got := c.do(t, "openn "+allowed+" 100"); got != "ok" {
			t.Fatalf("round %d: child got %q, want ok", round, got)
		}
		if diff := cmp.Diff(delta{}, deltaOf(before, f.Stats())); diff != "" {
			t.Errorf("round %d: opens of the marked file (-want +got):\n%s", round, diff)
		}
		if got := c.do(t, "open "+denied+" r"); got != "err EPERM" {
			t.Errorf("round %d: open %s: child got %q, want err EPERM", round, denied, got)
		}
		if got := [2]int{decided(allowed), decided(denied)}; got != [2]int{round, round} {
			t.Errorf("round %d: decided the allowed and denied files %v times, want %d each", round, got, round)
		}
	}
	if st := f.Stats(); st.Static != 2 {
		t.Errorf("stats %+v, want 2 ignore marks (one per round)", st)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Forget(); err != nil {
		t.Errorf("Forget after Close: %v", err)
	}
}

// TestStaticExec: an allowed exec whose file Static holds for gets an
// ignore mark of its own (FAN_OPEN_EXEC_PERM), so the next exec of it
// raises no event; a denied one is decided (or answered from the cache)
// every time. An exec's FAN_OPEN_PERM, which the kernel raises only after
// its FAN_OPEN_EXEC_PERM was allowed, is never decided.
func TestStaticExec(t *testing.T) {
	requireRoot(t)
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skipf("no /bin/true to copy: %v", err)
	}
	denyExec := func(_ context.Context, e *event.Event) event.Verdict {
		if e.File.Access == event.FileExec {
			return event.Verdict{Action: event.Deny}
		}
		return event.Verdict{Action: event.Allow}
	}
	tests := []struct {
		name   string
		decide func(context.Context, *event.Event) event.Verdict
		static bool
		reply  string
		// Events of prog decided or looked up over two execs: its
		// FAN_OPEN_EXEC_PERMs (its FAN_OPEN_PERMs are let past at once,
		// counted in ExecOpens).
		wantEvents int
		wantMarks  uint64 // prog's read mark and its exec mark
		// Not opened before the execs: its read mark comes from the first
		// exec's FAN_OPEN_PERM, and the second exec raises only the
		// loader's (the loader is not static here).
		execOnly bool
	}{
		{"allowed, static", allowAll, true, "ok", 1, 2, false},
		{"denied, static", denyExec, true, "err EPERM", 2, 1, false},
		{"allowed, not static", allowAll, false, "ok", 2, 0, false},
		{"allowed, static, only run", allowAll, true, "ok", 1, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prog := filepath.Join(t.TempDir(), "prog")
			if err := os.WriteFile(prog, bin, 0o755); err != nil {
				t.Fatal(err)
			}
			c := startChild(t)
			static := []string{"/nothing"}
			if tt.static {
				static = []string{prog}
			}
			var mu sync.Mutex
			progEvents := 0
			countProg := func(o *FileOptions) {
				o.Ignore = func(p string) bool { // asked of every event from the session
					if p == prog {
						mu.Lock()
						progEvents++
						mu.Unlock()
					}
					return false
				}
			}
			f, r := watch(t, c, tt.decide, staticPaths(t, static...), countProg)
			if !tt.execOnly {
				if got := c.do(t, "openn "+prog+" 100"); got != "ok" {
					t.Fatalf("child got %q, want ok", got)
				}
			}
			before := f.Stats()
			mu.Lock()
			progEvents = 0
			mu.Unlock()
			for i := range 2 {
				if got := c.do(t, "exec "+prog); got != tt.reply {
					t.Errorf("exec %d: child got %q, want %q", i, got, tt.reply)
				}
			}
			var decided int
			for _, d := range r.decideCalls() {
				if d.Path == prog && d.Access == event.FileExec {
					decided++
				}
			}
			if decided != 1 {
				t.Errorf("decided the exec of %s %d times, want once (then cached or marked)", prog, decided)
			}
			after := f.Stats()
			if after.Static != tt.wantMarks {
				t.Errorf("%d ignore marks, want %d", after.Static, tt.wantMarks)
			}
			// The loader's exec FAN_OPEN_PERMs count too: at least prog's.
			if execOpens := after.ExecOpens - before.ExecOpens; !tt.static && execOpens < 2 {
				t.Errorf("%d exec FAN_OPEN_PERMs let past, want at least prog's two", execOpens)
			}
			if execOpens := after.ExecOpens - before.ExecOpens; tt.execOnly && execOpens != 3 {
				t.Errorf("%d exec FAN_OPEN_PERMs let past, want 3: prog's first and the loader's two", execOpens)
			}
			mu.Lock()
			defer mu.Unlock()
			if progEvents != tt.wantEvents {
				t.Errorf("%d events of %s reached user space, want %d", progEvents, prog, tt.wantEvents)
			}
		})
	}
}

// TestStaticBounded: past CacheSize marked files, every mark is removed and
// marking starts over.
func TestStaticBounded(t *testing.T) {
	requireRoot(t)
	a, b, cc := writeFile(t, "a"), writeFile(t, "b"), writeFile(t, "c")
	c := startChild(t)
	f, _ := watch(t, c, allowAll, staticPaths(t, a, b, cc), func(o *FileOptions) { o.CacheSize = 2 })
	steps := []struct {
		path string
		want delta
	}{
		{a, delta{Events: 1, Static: 1}},
		{b, delta{Events: 1, Static: 1}},
		{a, delta{}},
		{cc, delta{Events: 1, Static: 1}}, // the third: a and b lose their marks
		{cc, delta{}},
		{a, delta{Events: 1, Static: 1}}, // an event again (a cache hit), marked again
	}
	for i, s := range steps {
		before := f.Stats()
		if got := c.do(t, "openn "+s.path+" 10"); got != "ok" {
			t.Fatalf("step %d: child got %q, want ok", i, got)
		}
		got := deltaOf(before, f.Stats())
		got.CacheHits = 0 // depends on the LRU, not checked here
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("step %d (%s) (-want +got):\n%s", i, filepath.Base(s.path), diff)
		}
	}
}

// TestCacheHitNeedsNoProcess: an open answered from the cache does not ask
// for the process's description, only its executable.
func TestCacheHitNeedsNoProcess(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "file")
	c := startChild(t)
	var mu sync.Mutex
	calls := 0
	f, _ := watch(t, c, allowAll, func(o *FileOptions) {
		process := o.Process
		o.Process = func(pid int) (*event.Process, error) {
			mu.Lock()
			calls++
			mu.Unlock()
			return process(pid)
		}
	})
	if got := c.do(t, "open "+path+" r"); got != "ok" {
		t.Fatalf("first open: child got %q", got)
	}
	mu.Lock()
	first := calls
	mu.Unlock()
	if first == 0 {
		t.Fatal("the first open was decided without the process")
	}
	if got := c.do(t, "openn "+path+" 50"); got != "ok" {
		t.Fatalf("child got %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != first {
		t.Errorf("Process called %d more times for 50 cached opens, want 0", calls-first)
	}
	if st := f.Stats(); st.CacheHits < 50 {
		t.Errorf("stats %+v, want 50 cache hits", st)
	}
}

// TestStaticAskedOnce: a file Static says no for is not asked about again
// on every cached open, until Forget.
func TestStaticAskedOnce(t *testing.T) {
	requireRoot(t)
	path := writeFile(t, "file")
	c := startChild(t)
	var mu sync.Mutex
	asked := 0
	f, _ := watch(t, c, allowAll, func(o *FileOptions) {
		o.Static = func(p string, _ event.FileAccess, _ event.Verdict) bool {
			if p == path {
				mu.Lock()
				asked++
				mu.Unlock()
			}
			return false
		}
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return asked }
	if got := c.do(t, "openn "+path+" 20"); got != "ok" {
		t.Fatalf("child got %q", got)
	}
	if n := count(); n != 1 {
		t.Errorf("Static asked %d times over 20 opens, want 1", n)
	}
	if err := f.Forget(); err != nil {
		t.Fatal(err)
	}
	if got := c.do(t, "openn "+path+" 20"); got != "ok" {
		t.Fatalf("child got %q", got)
	}
	if n := count(); n != 2 {
		t.Errorf("Static asked %d times in all, want once more after Forget", n)
	}
}

// TestAlias: a protected file opened through a hard link, or after a
// rename, is decided as itself, whatever the path says, and whatever was
// cached for that path before.
func TestAlias(t *testing.T) {
	requireRoot(t)
	secret := writeFile(t, "credentials")
	var st unix.Stat_t
	if err := unix.Stat(secret, &st); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	link, moved, plain := filepath.Join(dir, "link"), filepath.Join(dir, "moved"), filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startChild(t)
	_, r := watch(t, c, denyPaths(secret), func(o *FileOptions) {
		o.Alias = func(dev, ino uint64, path string) (string, bool) {
			if dev == uint64(st.Dev) && ino == st.Ino && path != secret {
				return secret, true
			}
			return "", false
		}
	})
	// link: first a plain file, allowed (and cached); then the secret
	// linked over it.
	if err := os.WriteFile(link, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := c.do(t, "open "+link+" r"); got != "ok" {
		t.Fatalf("plain file at %s: %q", link, got)
	}
	os.Remove(link)
	if err := os.Link(secret, link); err != nil {
		t.Fatal(err)
	}
	if got := c.do(t, "open "+link+" r"); got != "err EPERM" {
		t.Errorf("the secret through a hard link: child got %q, want err EPERM", got)
	}
	if err := os.Rename(secret, moved); err != nil {
		t.Fatal(err)
	}
	if got := c.do(t, "open "+moved+" r"); got != "err EPERM" {
		t.Errorf("the secret renamed: child got %q, want err EPERM", got)
	}
	if got := c.do(t, "open "+plain+" r"); got != "ok" {
		t.Errorf("a plain file: child got %q, want ok", got)
	}
	var denied []*event.Event
	for _, e := range r.events() {
		if e.Verdict.Action == event.Deny {
			denied = append(denied, e)
		}
	}
	if len(denied) != 2 || denied[0].File.Path != link || denied[1].File.Path != moved {
		t.Fatalf("denied events %v, want the link's and the moved file's", denied)
	}
	for _, e := range denied {
		if !strings.Contains(e.Verdict.Reason, secret) || e.Verdict.Rule != "test-deny" {
			t.Errorf("verdict %+v: want the rule and a reason naming %s", e.Verdict, secret)
		}
	}
}
