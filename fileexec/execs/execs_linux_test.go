//go:build linux

package execs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: reading /proc/<pid>/mem of the notified processes, and loading the verifier")
	}
}

// published collects the events Serve publishes.
type published struct {
	mu sync.Mutex
	ev []*event.Event
}

func (p *published) add(e *event.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ev = append(p.ev, e)
}

// all returns the events published so far.
func (p *published) all() []*event.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ev)
}

// waitFor returns the first event matching ok, waiting up to 5s.
func (p *published) waitFor(t *testing.T, what string, ok func(*event.Event) bool) *event.Event {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		for _, e := range p.ev {
			if ok(e) {
				p.mu.Unlock()
				return e
			}
		}
		p.mu.Unlock()
	}
	t.Fatalf("no published event %s; got %v", what, p.summary())
	return nil
}

func (p *published) summary() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s []string
	for _, e := range p.ev {
		s = append(s, fmt.Sprintf("%v %q: %s", e.Exec.Argv, e.Exec.Path, e.Verdict))
	}
	return s
}

// testDecide is the tests' policy: /bin/false and "--force" are denied,
// everything else allowed. On argv "echo safe" it first rewrites, in the
// waiting process, "safe" to "evil": what a racing thread would do
// between the check and the kernel's copy.
func testDecide(t *testing.T) func(ctx context.Context, e *event.Event) event.Verdict {
	return func(ctx context.Context, e *event.Event) event.Verdict {
		switch {
		case filepath.Base(e.Exec.Path) == "false":
			return event.Verdict{Action: event.Deny, Rule: "no-false", Reason: "false is not allowed", DecidedBy: event.DecidedByRule}
		case slices.Contains(e.Exec.Argv, "--force"):
			return event.Verdict{Action: event.Deny, Rule: "no-force", Reason: "no forced pushes", DecidedBy: event.DecidedByRule}
		case slices.Equal(e.Exec.Argv, []string{"echo", "safe"}):
			if err := rewriteArg(e.Process.PID, 1, "evil"); err != nil {
				t.Errorf("rewrite the argv of %d: %v", e.Process.PID, err)
			}
		}
		return event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule}
	}
}

// rewriteArg overwrites argv[i] of the exec a thread of process pid is
// blocked in with s (same length), finding the array through
// /proc/pid/task/*/syscall.
func rewriteArg(pid, i int, s string) error {
	execve, execveat := 59, 322 // amd64
	if runtime.GOARCH == "arm64" {
		execve, execveat = 221, 281
	}
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/syscall")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		nr, _ := strconv.Atoi(f[0])
		arg := 0
		switch nr {
		case execve:
			arg = 2 // f[1] is the path
		case execveat:
			arg = 3
		default:
			continue
		}
		argv, err := strconv.ParseUint(strings.TrimPrefix(f[arg], "0x"), 16, 64)
		if err != nil {
			return err
		}
		mem, err := os.OpenFile(filepath.Join(filepath.Dir(task), "mem"), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer mem.Close()
		var p [8]byte
		if _, err := mem.ReadAt(p[:], int64(argv)+int64(8*i)); err != nil {
			return err
		}
		_, err = mem.WriteAt([]byte(s), int64(binary.NativeEndian.Uint64(p[:])))
		return err
	}
	return fmt.Errorf("no thread of %d in an exec", pid)
}

// serveHelper starts a filtered helper and serves its listener.
func serveHelper(t *testing.T, decide func(context.Context, *event.Event) event.Verdict, inSession func(int) bool) (*helper, *Execs, *published) {
	t.Helper()
	needRoot(t)
	h := startHelper(t, true)
	pub := &published{}
	x, err := Serve(h.listener, ExecOptions{
		Session:   "s1",
		InSession: inSession,
		Process:   func(pid int) (*event.Process, error) { return &event.Process{PID: pid}, nil },
		Decider:   event.DeciderFunc(decide),
		Publish:   pub.add,
		Logger:    testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := x.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h, x, pub
}

func always(int) bool { return true }

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func sha256File(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func TestExec(t *testing.T) {
	h, x, pub := serveHelper(t, testDecide(t), always)
	verified := x.Verifier() == nil
	if !verified {
		t.Logf("the verifier is off: %v", x.Verifier())
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.EvalSymlinks("/bin") // /usr/bin where /bin is a link
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho script \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	long := []string{"echo"}
	for i := range 300 {
		long = append(long, fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 300)))
	}
	real := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	unverified := func(r string) string {
		if !verified {
			return withSuffix(r, reasonUnverified)
		}
		return r
	}

	tests := []struct {
		name     string
		cmd      helperCmd
		want     helperResult
		wantExec event.Exec // Digest: checked when set
		verdict  event.Verdict
		killed   string // the reason of the kill event, when the verifier kills it
	}{
		{
			name:     "allowed",
			cmd:      helperCmd{Op: "exec", Path: "/bin/true", Argv: []string{"true"}},
			want:     helperResult{Status: "exit 0"},
			wantExec: event.Exec{Path: "/bin/true", Argv: []string{"true"}, Cwd: cwd, Program: real("/bin/true"), Digest: sha256File(t, "/bin/true")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule, Reason: unverified("")},
		},
		{
			name:     "denied",
			cmd:      helperCmd{Op: "exec", Path: "/bin/false", Argv: []string{"false"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: "/bin/false", Argv: []string{"false"}, Cwd: cwd, Program: real("/bin/false")},
			verdict:  event.Verdict{Action: event.Deny, Rule: "no-false", DecidedBy: event.DecidedByRule, Reason: "false is not allowed (denied with EPERM)"},
		},
		{
			name:     "denied by argv",
			cmd:      helperCmd{Op: "exec", Path: "/bin/echo", Argv: []string{"echo", "push", "--force"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: "/bin/echo", Argv: []string{"echo", "push", "--force"}, Cwd: cwd, Program: real("/bin/echo")},
			verdict:  event.Verdict{Action: event.Deny, Rule: "no-force", DecidedBy: event.DecidedByRule, Reason: "no forced pushes (denied with EPERM)"},
		},
		{
			name:     "relative to the working directory",
			cmd:      helperCmd{Op: "exec", Path: "./echo", Argv: []string{"echo", "hi"}, Dir: "/bin"},
			want:     helperResult{Status: "exit 0", Stdout: "hi\n"},
			wantExec: event.Exec{Path: bin + "/echo", Argv: []string{"echo", "hi"}, Cwd: bin, Program: real(bin + "/echo")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule, Reason: unverified("")},
		},
		{
			name:     "empty argv",
			cmd:      helperCmd{Op: "exec", Path: "/bin/true"},
			want:     helperResult{Status: "exit 0"},
			wantExec: event.Exec{Path: "/bin/true", Cwd: cwd, Program: real("/bin/true")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule, Reason: unverified("")},
		},
		{
			name:     "long argv",
			cmd:      helperCmd{Op: "exec", Path: "/bin/echo", Argv: long},
			want:     helperResult{Status: "exit 0", Stdout: strings.Join(long[1:], " ") + "\n"},
			wantExec: event.Exec{Path: "/bin/echo", Argv: long, Cwd: cwd, Program: real("/bin/echo")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule, Reason: unverified("")},
		},
		{
			name:     "script",
			cmd:      helperCmd{Op: "exec", Path: script, Argv: []string{"whatever", "a", "b"}},
			want:     helperResult{Status: "exit 0", Stdout: "script a b\n"},
			wantExec: event.Exec{Path: script, Argv: []string{"whatever", "a", "b"}, Cwd: cwd, Program: real("/bin/sh"), Interpreter: "/bin/sh", Digest: sha256File(t, "/bin/sh")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule, Reason: unverified("")},
		},
		{
			// find -exec cmd {} + passes thousands of arguments at once:
			// all of them are read and checked.
			name:     "many arguments",
			cmd:      helperCmd{Op: "exec", Path: "/bin/true", Argv: append([]string{"true"}, slices.Repeat([]string{"tree/d00/f0000.go"}, 20000)...)},
			want:     helperResult{Status: "exit 0"},
			wantExec: event.Exec{Path: "/bin/true", Argv: append([]string{"true"}, slices.Repeat([]string{"tree/d00/f0000.go"}, 20000)...), Cwd: cwd, Program: real("/bin/true")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule},
		},
		{
			name:     "argv changed after the check",
			cmd:      helperCmd{Op: "exec", Path: "/bin/echo", Argv: []string{"echo", "safe"}},
			want:     helperResult{Status: "signal killed"},
			wantExec: event.Exec{Path: "/bin/echo", Argv: []string{"echo", "safe"}, Cwd: cwd, Program: real("/bin/echo")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule},
			killed:   reasonKilledArgv,
		},
		{
			// A shell searching PATH: nothing there, nothing decided.
			name: "no such file",
			cmd:  helperCmd{Op: "exec", Path: "/nonexistent/dir/prog", Argv: []string{"prog"}},
			want: helperResult{Errno: "ENOENT"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantExec.Path == "" {
				if got := h.do(t, tt.cmd); got != tt.want {
					t.Errorf("helper result %+v, want %+v", got, tt.want)
				}
				for _, e := range pub.all() {
					if e.Exec.Path == tt.cmd.Path {
						t.Errorf("published %s %v", e.Exec.Path, e.Verdict)
					}
				}
				return
			}
			if tt.killed != "" && !verified {
				t.Skipf("the verifier is off: %v", x.Verifier())
			}
			got := h.do(t, tt.cmd)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("helper result (-want +got):\n%s", diff)
			}
			same := func(e *event.Event) bool {
				return e.Exec.Path == tt.wantExec.Path && slices.Equal(e.Exec.Argv, tt.wantExec.Argv)
			}
			e := pub.waitFor(t, "for "+tt.name, func(e *event.Event) bool {
				return same(e) && !strings.HasSuffix(e.Verdict.Reason, "killed before it ran")
			})
			gotExec := *e.Exec
			if tt.wantExec.Digest == "" {
				gotExec.Digest = ""
			}
			if diff := cmp.Diff(tt.wantExec, gotExec); diff != "" {
				t.Errorf("exec (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.verdict, e.Verdict); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
			if e.Kind != event.KindExec || e.Session != "s1" || e.Process == nil || e.Process.PID <= 0 {
				t.Errorf("event kind %q session %q process %+v", e.Kind, e.Session, e.Process)
			}
			if tt.killed != "" {
				k := pub.waitFor(t, "killed", func(e *event.Event) bool { return same(e) && e.Verdict.Action == event.Deny })
				if diff := cmp.Diff(event.Verdict{Action: event.Deny, Reason: tt.killed}, k.Verdict); diff != "" {
					t.Errorf("kill verdict (-want +got):\n%s", diff)
				}
			}
		})
	}
	if got := x.Stats(); got.Killed == 0 && verified || got.Denied != 2 || got.Outside != 0 {
		t.Errorf("stats %+v", got)
	}
}

// TestExecveat runs execveat(fd, "", AT_EMPTY_PATH) from a thread that is
// not the leader: the thread takes the process's pid as it execs, and the
// verifier must still find what was allowed.
func TestExecveat(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		argv    []string
		want    helperResult // of a failed exec; zero when it replaced the helper
		stdout  string
		verdict event.Action
		killed  bool // by the verifier, after the exec was allowed
	}{
		{name: "allowed", path: "/bin/echo", argv: []string{"echo", "replaced"}, stdout: "nonleader\nreplaced\n", verdict: event.Allow},
		{name: "denied", path: "/bin/false", argv: []string{"false"}, want: helperResult{Errno: "EPERM"}, stdout: "nonleader\n", verdict: event.Deny},
		{name: "argv changed after the check", path: "/bin/echo", argv: []string{"echo", "safe"}, stdout: "nonleader\n", verdict: event.Allow, killed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, x, pub := serveHelper(t, testDecide(t), always)
			if tt.killed && x.Verifier() != nil {
				t.Skipf("the verifier is off: %v", x.Verifier())
			}
			h.send(t, helperCmd{Op: "execveat", Path: tt.path, Argv: tt.argv})
			if tt.want != (helperResult{}) {
				if diff := cmp.Diff(tt.want, h.result(t)); diff != "" {
					t.Errorf("helper result (-want +got):\n%s", diff)
				}
				// The answer comes over the socket, ahead of stdout's copy:
				// only Wait, once the helper is gone, has all of stdout.
				_ = h.cmd.Process.Kill()
				_ = h.cmd.Wait()
			} else {
				err := h.cmd.Wait()
				if got, want := fmt.Sprint(err), map[bool]string{false: "<nil>", true: "signal: killed"}[tt.killed]; got != want {
					t.Errorf("the exec'd helper: %s, want %s", got, want)
				}
			}
			if got := h.stdout.String(); got != tt.stdout {
				t.Errorf("stdout %q, want %q", got, tt.stdout)
			}
			// The kill of a changed exec may be published before its allow.
			e := pub.waitFor(t, "for the execveat", func(e *event.Event) bool {
				return slices.Equal(e.Exec.Argv, tt.argv) && e.Verdict.Action == tt.verdict
			})
			if e.Verdict.Action != tt.verdict || e.Exec.Path != tt.path && !strings.HasSuffix(e.Exec.Path, tt.path) {
				t.Errorf("event %q %s, want %q %s", e.Exec.Path, e.Verdict, tt.path, tt.verdict)
			}
			if tt.killed {
				k := pub.waitFor(t, "killed", func(e *event.Event) bool { return e.Verdict.Reason == reasonKilledArgv })
				if !slices.Equal(k.Exec.Argv, tt.argv) {
					t.Errorf("kill event for %q, want %q", k.Exec.Argv, tt.argv)
				}
			}
			if got, want := x.Stats().Killed, map[bool]uint64{true: 1}[tt.killed]; got != want {
				t.Errorf("%d killed, want %d", got, want)
			}
		})
	}
}

// TestCloseWhileDeciding closes while Decide holds an exec (and never
// returns by itself): the exec fails with EPERM, Close returns, and the
// next exec finds no listener (ENOSYS).
func TestCloseWhileDeciding(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	decide := func(ctx context.Context, e *event.Event) event.Verdict {
		close(entered)
		<-release
		return event.Verdict{Action: event.Allow}
	}
	h, x, pub := serveHelper(t, decide, always)
	h.send(t, helperCmd{Op: "exec", Path: "/bin/true", Argv: []string{"true"}})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Decide was not called")
	}
	if err := x.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if diff := cmp.Diff(helperResult{Errno: "EPERM"}, h.result(t)); diff != "" {
		t.Errorf("exec during Close (-want +got):\n%s", diff)
	}
	e := pub.waitFor(t, "denied by Close", func(*event.Event) bool { return true })
	if want := withSuffix(reasonClosed, reasonDeniedSuffix); e.Verdict.Action != event.Deny || e.Verdict.Reason != want {
		t.Errorf("verdict %s, want deny: %s", e.Verdict, want)
	}
	if diff := cmp.Diff(helperResult{Errno: "ENOSYS"}, h.do(t, helperCmd{Op: "exec", Path: "/bin/true", Argv: []string{"true"}})); diff != "" {
		t.Errorf("exec after Close (-want +got):\n%s", diff)
	}
}

// TestOutsideSession lets an exec of a process outside the session
// through, undecided and unpublished.
func TestOutsideSession(t *testing.T) {
	var decided atomic.Int32
	decide := func(context.Context, *event.Event) event.Verdict { decided.Add(1); return event.Verdict{} }
	h, x, pub := serveHelper(t, decide, func(int) bool { return false })
	if diff := cmp.Diff(helperResult{Status: "exit 0"}, h.do(t, helperCmd{Op: "exec", Path: "/bin/true", Argv: []string{"true"}})); diff != "" {
		t.Errorf("helper result (-want +got):\n%s", diff)
	}
	x.Close()
	if decided.Load() != 0 || len(pub.summary()) != 0 || x.Stats().Outside != 1 {
		t.Errorf("decided %d, published %v, stats %+v", decided.Load(), pub.summary(), x.Stats())
	}
}

// BenchmarkExec spawns /bin/true from the helper, without the filter and
// under it with every exec decided (allowed) and verified.
func BenchmarkExec(b *testing.B) {
	needRoot(b)
	for _, filtered := range []bool{false, true} {
		name := "unfiltered"
		if filtered {
			name = "filtered-allowed"
		}
		b.Run(name, func(b *testing.B) {
			h := startHelper(b, filtered)
			if filtered {
				x, err := Serve(h.listener, ExecOptions{
					InSession: always,
					Decider:   event.DeciderFunc(func(context.Context, *event.Event) event.Verdict { return event.Verdict{Action: event.Allow} }),
				})
				if err != nil {
					b.Fatal(err)
				}
				defer x.Close()
				if err := x.Verifier(); err != nil {
					b.Logf("the verifier is off: %v", err)
				}
			}
			var before, after unix.Rusage
			unix.Getrusage(unix.RUSAGE_SELF, &before)
			b.ResetTimer()
			r := h.do(b, helperCmd{Op: "bench", Path: "/bin/true", Argv: []string{"true"}, N: b.N})
			b.StopTimer()
			unix.Getrusage(unix.RUSAGE_SELF, &after)
			if r.Status != "exit 0" {
				b.Fatalf("%+v", r)
			}
			// The CPU this process (the one that serves) spent per exec:
			// unlike the time, it does not depend on what else the
			// machine runs.
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "serve-cpu-µs/op")
		})
	}
}

// TestLoopEndsWhenNoProcessIsLeft: once the last process under the filter
// exits, the listener hangs up and Serve's loop returns by itself (before
// Close), after answering what came before.
func TestLoopEndsWhenNoProcessIsLeft(t *testing.T) {
	allow := func(context.Context, *event.Event) event.Verdict { return event.Verdict{Action: event.Allow} }
	h, x, _ := serveHelper(t, allow, always)
	if diff := cmp.Diff(helperResult{Status: "exit 0"}, h.do(t, helperCmd{Op: "exec", Path: "/bin/true", Argv: []string{"true"}})); diff != "" {
		t.Errorf("helper result (-want +got):\n%s", diff)
	}
	h.sock.Close() // the helper exits on EOF
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	select {
	case <-x.loopDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop still waits on a listener with no process left")
	}
}
