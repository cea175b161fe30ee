//go:build linux

package fileexec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// testCgroup makes a cgroup v2 directory for one test, removed (its
// processes killed) when the test ends.
func testCgroup(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parseMountinfo(b)
	if err != nil {
		t.Fatal(err)
	}
	root := ""
	for _, m := range ms {
		if m.FSType == "cgroup2" {
			root = m.Point
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup v2 mount")
	}
	dir := filepath.Join(root, "fileexec-test-"+strconv.Itoa(os.Getpid())+"-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err != nil {
		os.Remove(dir)
		t.Skipf("no cgroup freezer: %v", err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
		os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		deadline := time.Now().Add(10 * time.Second)
		for os.Remove(dir) != nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	})
	return dir
}

// inCgroup says whether pid is in cgroup dir (a path under the cgroup v2
// mount), or in the mount namespace mnt.
func inCgroup(dir, mnt string) func(int) bool {
	return func(pid int) bool {
		if inNamespace(mnt)(pid) {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		return err == nil && strings.HasSuffix(strings.TrimSpace(string(b)), "/"+filepath.Base(dir))
	}
}

// serveNested answers l's notifications with n, or lets them run, until
// the test ends.
func serveNested(t testing.TB, l *os.File, n *Nested) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		for ctx.Err() == nil {
			fds := []unix.PollFd{{Fd: int32(l.Fd()), Events: unix.POLLIN}}
			if k, err := unix.Poll(fds, 100); err != nil || k == 0 || fds[0].Revents&unix.POLLIN == 0 {
				if fds[0].Revents&unix.POLLHUP != 0 {
					return
				}
				continue
			}
			buf := make([]uint64, 16)
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, l.Fd(), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&buf[0])))
			if errno == unix.ENOENT || errno == unix.EINTR {
				continue
			}
			if errno != 0 {
				return
			}
			no := *(*testNotif)(unsafe.Pointer(&buf[0]))
			a := testAnswer{l: int(l.Fd()), id: no.ID}
			c := Call{TID: int(no.Pid), Arch: no.Arch, Nr: no.Nr, Args: no.Args}
			wg.Go(func() {
				if n.Handles(c) {
					n.Handle(ctx, c, a)
				} else {
					a.Continue()
				}
			})
		}
	})
}

// nestedSession is a helper process under the namespace filter in a cgroup
// of its own, its opens watched and its namespace calls answered by
// Nested.
type nestedSession struct {
	c     *child
	cg    string
	files *recorder
	calls *recorder // what Nested published
}

// startNested starts the session; edit may change Nested's options
// (whose Files are the session's).
func startNested(t *testing.T, decide func(context.Context, *event.Event) event.Verdict, edit func(*NestedOptions)) *nestedSession {
	t.Helper()
	return startNestedHook(t, decide, edit, nil)
}

// startNestedHook is startNested with Nested's cloned hook.
func startNestedHook(t *testing.T, decide func(context.Context, *event.Event) event.Verdict, edit func(*NestedOptions), cloned func(*nestedSession)) *nestedSession {
	t.Helper()
	requireRoot(t)
	cg := testCgroup(t)
	c, l := startChildWith(t, "ns", cg)
	f, files := watch(t, c, decide, func(o *FileOptions) { o.InSession = inCgroup(cg, c.mnt) })
	s := &nestedSession{c: c, cg: cg, files: files, calls: &recorder{}}
	o := NestedOptions{
		Session: "s1", InSession: inCgroup(cg, c.mnt), Process: processOf,
		Publish: func(e *event.Event) {
			s.calls.mu.Lock()
			s.calls.published = append(s.calls.published, e)
			s.calls.mu.Unlock()
		},
		Files: f, Cgroup: cg, Patience: 20 * time.Second,
	}
	if edit != nil {
		edit(&o)
	}
	n, err := NewNested(o)
	if err != nil {
		t.Fatal(err)
	}
	if cloned != nil {
		n.cloned = func() { cloned(s) }
	}
	serveNested(t, l, n)
	return s
}

// nestedTree is a secret, a file allowed to read next to it, and the
// directories the helper binds and mounts over, under a fresh directory.
type nestedTree struct {
	secret, alias, tmp string
}

func makeNestedTree(t *testing.T) nestedTree {
	t.Helper()
	dir := t.TempDir()
	tr := nestedTree{secret: dir + "/home/.aws/credentials", alias: dir + "/work/alias", tmp: dir + "/work/tmp"}
	for _, d := range []string{filepath.Dir(tr.secret), tr.alias, tr.tmp} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(tr.secret, []byte("secret\n"), 0o644))
	return tr
}

// A process that makes a mount namespace for itself and opens a file at
// once finds it decided, by its path in the session: through a bind mount
// of its directory elsewhere it is still the file the policy denies,
// published under its own path; a tmpfs it mounts is its own, its files
// allowed undecided.
func TestNestedMountNamespace(t *testing.T) {
	tr := makeNestedTree(t)
	s := startNested(t, denyPaths(tr.secret), nil)
	got := s.c.do(t, "nested "+tr.secret+" "+tr.alias+" "+tr.tmp)
	// unshare, bind mount, open through the alias, open by its path,
	// tmpfs, write in it.
	if want := "ok ok err EPERM err EPERM ok ok"; got != want {
		t.Errorf("nested: %q, want %q", got, want)
	}
	var paths []string
	for _, e := range s.files.events() {
		if e.Verdict.Action == event.Deny {
			paths = append(paths, e.File.Path)
		}
	}
	// The alias's open is decided first, as the secret; the second open
	// is answered from the cache.
	if diff := cmp.Diff([]string{tr.secret}, paths); diff != "" {
		t.Errorf("denied opens published (-want +got):\n%s", diff)
	}
	for _, f := range s.files.decideCalls() {
		if strings.HasPrefix(f.Path, tr.alias) || strings.HasPrefix(f.Path, tr.tmp) {
			t.Errorf("decided %+v: a path of the nested namespace", f)
		}
	}
	if b, err := os.ReadFile(filepath.Join(tr.tmp, "own")); err == nil {
		t.Errorf("the helper's tmpfs is in the session's namespace: %q", b)
	}
}

// An overlay mounted in a nested namespace shows other files under its
// own names, which no path of the session's has: its opens are refused,
// whatever the policy, and published with the reason.
func TestNestedOverlayRefused(t *testing.T) {
	tr := makeNestedTree(t)
	s := startNested(t, allowAll, nil)
	empty := t.TempDir()
	if got := s.c.do(t, "ovl "+filepath.Dir(tr.secret)+" "+empty+" "+tr.alias+" "+filepath.Base(tr.secret)); got != "err EPERM" {
		t.Errorf("open through an overlay: %q, want err EPERM", got)
	}
	evs := s.files.events()
	if len(evs) != 1 || evs[0].Verdict.Rule != RuleNestedPath || evs[0].File.Path != tr.alias+"/"+filepath.Base(tr.secret) || !strings.Contains(evs[0].Verdict.Reason, "overlay") {
		t.Errorf("published %+v", evs)
	}
}

// A child clone puts in a mount namespace of its own (CLONE_NEWNS) opens
// the file before any mark is put on its copies of the mounts (the test
// holds the marking back until the child has exited): the open is decided.
func TestNestedCloneChild(t *testing.T) {
	tr := makeNestedTree(t)
	s := startNestedHook(t, denyPaths(tr.secret), nil, func(s *nestedSession) {
		// Until the helper has no child left running: cat ran and exited.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && helperChildRuns(s.c.pid) {
			time.Sleep(time.Millisecond)
		}
	})
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat")
	}
	if got := s.c.do(t, "nsexec "+cat+" "+tr.secret); got != "ok 1" {
		t.Errorf("cat in a namespace of its own: %q, want it refused (ok 1)", got)
	}
	var denied []string
	for _, e := range s.files.events() {
		if e.Verdict.Action == event.Deny && e.Process != nil {
			denied = append(denied, e.File.Path+" "+filepath.Base(e.Process.Exe))
		}
	}
	if diff := cmp.Diff([]string{tr.secret + " cat"}, denied); diff != "" {
		t.Errorf("denied opens (-want +got):\n%s", diff)
	}
}

// A mount made through a directory held open under a mount that hides it
// is where no path from the namespace's root leads, so no mark could be
// put on it: the session is killed before the mounting thread runs again,
// and that is published.
func TestNestedHiddenMountKillsTheSession(t *testing.T) {
	tr := makeNestedTree(t)
	s := startNested(t, allowAll, nil)
	dir := filepath.Dir(tr.alias) // work/, hidden under a tmpfs
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	s.c.send(t, "hidden "+dir+" sub "+filepath.Dir(tr.secret)+" "+filepath.Base(tr.secret))
	select {
	case <-waitExit(s.c):
	case <-time.After(time.Minute):
		t.Fatal("the session was not killed")
	}
	found := false
	for _, e := range s.calls.events() {
		found = found || (e.Verdict.Rule == RuleNestedMounts && strings.Contains(e.Verdict.Reason, "killed"))
	}
	if !found {
		t.Errorf("no event of the kill: %+v", s.calls.events())
	}
	for _, e := range s.files.events() {
		if e.File.Path == tr.secret {
			t.Errorf("the secret was opened: %+v", e)
		}
	}
}

// waitExit returns a channel closed when the helper's process exits.
func waitExit(c *child) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		c.cmd.Wait()
		close(done)
	}()
	return done
}

// Refusals: a cgroup namespace for a uid-0 agent; a mount namespace
// without a cgroup to freeze. Each fails with EPERM and is published with
// its rule and a reason that says what to do.
func TestNestedRefusals(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*NestedOptions)
		flags int
		rule  string
	}{
		{"cgroup namespace as uid 0", func(o *NestedOptions) { o.NoCgroupNS = true }, unix.CLONE_NEWCGROUP, RuleCgroupNS},
		{"mount namespace without a cgroup", func(o *NestedOptions) { o.Cgroup = "" }, unix.CLONE_NEWNS, RuleNestedMounts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startNested(t, allowAll, tt.edit)
			if got := s.c.do(t, "unshare "+strconv.Itoa(tt.flags)); got != "err EPERM" {
				t.Errorf("unshare: %q, want err EPERM", got)
			}
			evs := s.calls.events()
			if len(evs) != 1 || evs[0].Verdict.Rule != tt.rule || evs[0].Verdict.Action != event.Deny || evs[0].File.Op != "unshare" || evs[0].Process == nil {
				t.Fatalf("published %+v", evs)
			}
			if r := evs[0].Verdict.Reason; !strings.Contains(r, "denied with EPERM") || !strings.Contains(r, ";") {
				t.Errorf("reason %q: want why and what to do instead", r)
			}
		})
	}
	// Without the refusal, the same cgroup namespace is made.
	t.Run("cgroup namespace", func(t *testing.T) {
		s := startNested(t, allowAll, nil)
		if got := s.c.do(t, "unshare "+strconv.Itoa(unix.CLONE_NEWCGROUP)); got != "ok" {
			t.Errorf("unshare: %q", got)
		}
	})
}

// helperChildRuns says whether a child of process pid (of any of its
// threads) has not exited.
func helperChildRuns(pid int) bool {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, k := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(k); err == nil {
				if st := threadState(n); st != 0 && st != 'Z' && st != 'X' {
					return true
				}
			}
		}
	}
	return false
}
