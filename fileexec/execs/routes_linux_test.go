//go:build linux

package execs

import (
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/chaperone-dev/chaperone/event"
)

// routeFiles are the programs the route tests run, in a temporary
// directory.
type routeFiles struct {
	dir, ldso, myld, notFalse, script, chain, envScript, ldScript, interpELF string
}

func makeRouteFiles(t *testing.T) routeFiles {
	t.Helper()
	ldso := systemLoader(t)
	dir := t.TempDir()
	f := routeFiles{dir: dir, ldso: ldso,
		myld: filepath.Join(dir, "myld"), notFalse: filepath.Join(dir, "not-false"),
		script: filepath.Join(dir, "script"), chain: filepath.Join(dir, "chain"),
		envScript: filepath.Join(dir, "env-script"), ldScript: filepath.Join(dir, "ld-script"),
		interpELF: filepath.Join(dir, "interp-elf")}
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(ldso, f.myld)
	copyFile("/bin/false", f.notFalse)
	for path, body := range map[string]string{
		f.script:    "#!/bin/false\n",
		f.chain:     "#!" + f.script + " -x\n",
		f.envScript: "#!/usr/bin/env false\n",
		f.ldScript:  "#!" + ldso + " /bin/false\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(f.interpELF, tinyELF(elf.ET_EXEC, []byte("/bin/false\x00")), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// decisions records the events Decide is asked about.
type decisions struct {
	mu sync.Mutex
	ev []event.Exec
}

func (d *decisions) add(e *event.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ev = append(d.ev, *e.Exec)
}

func (d *decisions) paths() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var p []string
	for _, e := range d.ev {
		p = append(p, e.Path)
	}
	return p
}

func (d *decisions) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ev = nil
}

func realPath(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestExecRoutes runs /bin/false by every route around a rule on its
// path, and by name: the dynamic loader (the system's, a copy of it, with
// options, a #! line naming it), a #! script and a chain of them, an ELF
// interpreter, a memfd and a descriptor. Each is denied before it runs,
// with the event naming the program that runs; the same routes to
// /bin/true run.
func TestExecRoutes(t *testing.T) {
	f := makeRouteFiles(t)
	var seen decisions
	decide := func(_ context.Context, e *event.Event) event.Verdict {
		seen.add(e)
		if filepath.Base(e.Exec.Path) == "false" {
			return event.Verdict{Action: event.Deny, Rule: "no-false", Reason: "false is not allowed", DecidedBy: event.DecidedByRule}
		}
		return event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule}
	}
	h, x, pub := serveHelper(t, decide, always)
	falseReal, trueReal := realPath(t, "/bin/false"), realPath(t, "/bin/true")
	falseDigest := sha256File(t, "/bin/false")
	denied := func(reason string) event.Verdict {
		return event.Verdict{Action: event.Deny, Rule: "no-false", DecidedBy: event.DecidedByRule, Reason: "false is not allowed " + reason + " (denied with EPERM)"}
	}
	tests := []struct {
		name     string
		cmd      helperCmd
		want     helperResult
		wantExec event.Exec // Path "" : the published event is not checked by path
		verdict  event.Verdict
		decided  []string // the paths decided, in order; nil: not checked
	}{
		{
			name:     "loader",
			cmd:      helperCmd{Op: "exec", Path: f.ldso, Argv: []string{f.ldso, "/bin/false"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: f.ldso, Argv: []string{f.ldso, "/bin/false"}, Program: falseReal, Digest: falseDigest},
			verdict:  denied("(as /bin/false: the program the dynamic loader runs)"),
			decided:  []string{f.ldso, "/bin/false"},
		},
		{
			name:     "loader with options",
			cmd:      helperCmd{Op: "exec", Path: f.ldso, Argv: []string{"ld.so", "--argv0", "true", "--library-path", "/nowhere", "/bin/false"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: f.ldso, Argv: []string{"ld.so", "--argv0", "true", "--library-path", "/nowhere", "/bin/false"}, Program: falseReal, Digest: falseDigest},
			verdict:  denied("(as /bin/false: the program the dynamic loader runs)"),
		},
		{
			name:     "a copy of the loader",
			cmd:      helperCmd{Op: "exec", Path: f.myld, Argv: []string{"myld", "/bin/false"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: f.myld, Argv: []string{"myld", "/bin/false"}, Program: falseReal, Digest: falseDigest},
			verdict:  denied("(as /bin/false: the program the dynamic loader runs)"),
		},
		{
			name:     "loader, program by a bare name in the cwd (musl)",
			cmd:      helperCmd{Op: "exec", Path: f.ldso, Argv: []string{"ld.so", "false"}, Dir: "/bin"},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: f.ldso, Argv: []string{"ld.so", "false"}, Program: falseReal, Digest: falseDigest},
			verdict:  denied("(as " + realPath(t, "/bin") + "/false: the program the dynamic loader runs)"),
		},
		{
			name:     "loader runs an allowed program",
			cmd:      helperCmd{Op: "exec", Path: f.ldso, Argv: []string{f.ldso, "/bin/true"}},
			want:     helperResult{Status: "exit 0"},
			wantExec: event.Exec{Path: f.ldso, Argv: []string{f.ldso, "/bin/true"}, Program: trueReal, Digest: sha256File(t, "/bin/true")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule},
			decided:  []string{f.ldso, "/bin/true"},
		},
		{
			name:     "#! script",
			cmd:      helperCmd{Op: "exec", Path: f.script, Argv: []string{"script", "a"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: f.script, Argv: []string{"script", "a"}, Program: falseReal, Interpreter: "/bin/false", Digest: falseDigest},
			verdict:  denied("(as /bin/false: the #! interpreter)"),
			decided:  []string{f.script, "/bin/false"},
		},
		{
			name:     "#! chain",
			cmd:      helperCmd{Op: "exec", Path: f.chain, Argv: []string{"chain"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: f.chain, Argv: []string{"chain"}, Program: falseReal, Interpreter: "/bin/false", Digest: falseDigest},
			verdict:  denied("(as /bin/false: the #! interpreter)"),
			decided:  []string{f.chain, f.script, "/bin/false"},
		},
		{
			name:     "#! line naming the loader",
			cmd:      helperCmd{Op: "exec", Path: f.ldScript, Argv: []string{"ld-script"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: f.ldScript, Argv: []string{"ld-script"}, Program: falseReal, Interpreter: f.ldso, Digest: falseDigest},
			verdict:  denied("(as /bin/false: the program the dynamic loader runs)"),
			decided:  []string{f.ldScript, f.ldso, "/bin/false"},
		},
		{
			name:     "ELF interpreter",
			cmd:      helperCmd{Op: "exec", Path: f.interpELF, Argv: []string{"interp-elf"}},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Path: f.interpELF, Argv: []string{"interp-elf"}, Program: f.interpELF, Interpreter: "/bin/false", Digest: sha256File(t, f.interpELF)},
			verdict:  denied("(as /bin/false: the ELF interpreter)"),
		},
		{
			name:     "memfd",
			cmd:      helperCmd{Op: "exec", Path: "/bin/false", Argv: []string{"innocent"}, Via: "/proc/self/fd/%d", Memfd: true},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Argv: []string{"innocent"}, Program: "memfd:payload", Digest: falseDigest},
			verdict:  denied("(as /usr/local/sbin/false: an installed program with the same content)"),
		},
		{
			name:     "memfd through /dev/fd",
			cmd:      helperCmd{Op: "exec", Path: "/bin/false", Argv: []string{"innocent"}, Via: "/dev/fd/%d", Memfd: true},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Argv: []string{"innocent"}, Program: "memfd:payload", Digest: falseDigest},
		},
		{
			name:     "memfd of an allowed program",
			cmd:      helperCmd{Op: "exec", Path: "/bin/true", Argv: []string{"innocent"}, Via: "/proc/self/fd/%d", Memfd: true},
			want:     helperResult{Status: "exit 0"},
			wantExec: event.Exec{Argv: []string{"innocent"}, Program: "memfd:payload", Digest: sha256File(t, "/bin/true")},
			verdict:  event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule},
		},
		{
			name:     "descriptor of a file",
			cmd:      helperCmd{Op: "exec", Path: "/bin/false", Argv: []string{"innocent"}, Via: "/proc/self/fd/%d"},
			want:     helperResult{Errno: "EPERM"},
			wantExec: event.Exec{Argv: []string{"innocent"}, Program: falseReal, Digest: falseDigest},
			verdict:  denied("(as " + falseReal + ": the file the descriptor names)"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen.reset()
			if got := h.do(t, tt.cmd); got != tt.want {
				t.Errorf("helper result %+v, want %+v", got, tt.want)
			}
			e := pub.waitFor(t, "for "+tt.name, func(e *event.Event) bool {
				return slices.Equal(e.Exec.Argv, tt.wantExec.Argv) && (tt.wantExec.Path == "" || e.Exec.Path == tt.wantExec.Path)
			})
			opts := []cmp.Option{cmpopts.IgnoreFields(event.Exec{}, "Cwd")}
			if tt.wantExec.Path == "" {
				opts = append(opts, cmpopts.IgnoreFields(event.Exec{}, "Path"))
			}
			if diff := cmp.Diff(tt.wantExec, *e.Exec, opts...); diff != "" {
				t.Errorf("exec (-want +got):\n%s", diff)
			}
			if tt.verdict != (event.Verdict{}) {
				v := e.Verdict
				if x.Verifier() != nil {
					v.Reason = strings.TrimSuffix(strings.TrimSuffix(v.Reason, reasonUnverified), " ")
				}
				if tt.verdict.Action == event.Deny && strings.Contains(tt.verdict.Reason, "installed program") {
					// Which copy is found first depends on the system's directories.
					if !strings.Contains(v.Reason, "/false: an installed program with the same content") {
						t.Errorf("verdict %s, want a deny as an installed copy of false", v)
					}
				} else if diff := cmp.Diff(tt.verdict, v); diff != "" {
					t.Errorf("verdict (-want +got):\n%s", diff)
				}
			}
			if tt.decided != nil {
				if diff := cmp.Diff(tt.decided, seen.paths()); diff != "" {
					t.Errorf("decided (-want +got):\n%s", diff)
				}
			}
			pub.clear()
		})
	}
	t.Run("a symlink to a /proc link", func(t *testing.T) {
		// Followed by Chaperone, /proc/self would be Chaperone's: refused.
		link := filepath.Join(f.dir, "link")
		if err := os.Symlink("/proc/self/exe", link); err != nil {
			t.Fatal(err)
		}
		if got := h.do(t, helperCmd{Op: "exec", Path: link, Argv: []string{"link"}}); got != (helperResult{Errno: "EPERM"}) {
			t.Errorf("helper result %+v, want EPERM", got)
		}
		e := pub.waitFor(t, "the link", func(e *event.Event) bool { return e.Exec.Path == link })
		if e.Verdict.Action != event.Deny || !strings.Contains(e.Verdict.Reason, errMagicLink.Error()) {
			t.Errorf("verdict %s", e.Verdict)
		}
	})
	t.Run("#!/usr/bin/env: env's own exec is decided", func(t *testing.T) {
		got := h.do(t, helperCmd{Op: "exec", Path: f.envScript, Argv: []string{"env-script"}})
		if got.Status != "exit 126" {
			t.Errorf("helper result %+v, want env to fail with 126 (its exec refused)", got)
		}
		e := pub.waitFor(t, "env's exec of false", func(e *event.Event) bool {
			return len(e.Exec.Argv) > 0 && e.Exec.Argv[0] == "false" && e.Verdict.Action == event.Deny
		})
		if filepath.Base(e.Exec.Path) != "false" || e.Exec.Interpreter != "" {
			t.Errorf("env's exec: %+v", e.Exec)
		}
		s := pub.waitFor(t, "the script", func(e *event.Event) bool { return e.Exec.Path == f.envScript })
		if s.Verdict.Action != event.Allow || s.Exec.Interpreter != "/usr/bin/env" {
			t.Errorf("the script's event: %+v %s", s.Exec, s.Verdict)
		}
	})
}

// TestExecDigestRoutes denies by digest (a rule on exec.digest): a
// renamed copy is denied, run directly, through the loader or from a
// memfd.
func TestExecDigestRoutes(t *testing.T) {
	f := makeRouteFiles(t)
	falseDigest := sha256File(t, "/bin/false")
	decide := func(_ context.Context, e *event.Event) event.Verdict {
		if e.Exec.Digest == falseDigest {
			return event.Verdict{Action: event.Deny, Rule: "no-false-content", DecidedBy: event.DecidedByRule}
		}
		return event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule}
	}
	h, _, pub := serveHelper(t, decide, always)
	for _, tt := range []struct {
		name string
		cmd  helperCmd
	}{
		{name: "renamed copy", cmd: helperCmd{Op: "exec", Path: f.notFalse, Argv: []string{"not-false"}}},
		{name: "renamed copy through the loader", cmd: helperCmd{Op: "exec", Path: f.ldso, Argv: []string{"ld.so", f.notFalse}}},
		{name: "renamed copy in a memfd", cmd: helperCmd{Op: "exec", Path: f.notFalse, Argv: []string{"x"}, Via: "/proc/self/fd/%d", Memfd: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := h.do(t, tt.cmd); got != (helperResult{Errno: "EPERM"}) {
				t.Errorf("helper result %+v, want EPERM", got)
			}
			e := pub.waitFor(t, tt.name, func(e *event.Event) bool { return slices.Equal(e.Exec.Argv, tt.cmd.Argv) })
			if e.Verdict.Rule != "no-false-content" || e.Exec.Digest != falseDigest {
				t.Errorf("event %+v %s", e.Exec, e.Verdict)
			}
		})
	}
}

// TestExecSwappedAfterCheck changes what an allowed exec runs while it
// is decided: a script's #! line, the program file (renamed over, or
// written in place), the interpreter's file. The verifier kills each
// before it runs.
func TestExecSwappedAfterCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyTo := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		tmp := to + ".tmp"
		write(tmp, string(b))
		if err := os.Rename(tmp, to); err != nil {
			t.Fatal(err)
		}
	}
	script, prog, interp, interpScript := filepath.Join(dir, "script"), filepath.Join(dir, "prog"), filepath.Join(dir, "interp"), filepath.Join(dir, "interp-script")
	var mu sync.Mutex
	swaps := map[string]func(){} // by the exec's path: done once while it is decided
	decide := func(_ context.Context, e *event.Event) event.Verdict {
		mu.Lock()
		swap := swaps[e.Exec.Path]
		delete(swaps, e.Exec.Path)
		mu.Unlock()
		if swap != nil {
			swap()
		}
		return event.Verdict{Action: event.Allow, Rule: "ok", DecidedBy: event.DecidedByRule}
	}
	h, x, pub := serveHelper(t, decide, always)
	if x.Verifier() != nil {
		t.Skipf("the verifier is off: %v", x.Verifier())
	}
	tests := []struct {
		name   string
		setup  func()
		path   string
		swap   func()
		reason string
	}{
		{name: "the #! line", setup: func() { write(script, "#!/bin/echo\n") }, path: script,
			swap: func() { write(script, "#!/bin/cat\n") }, reason: reasonKilledInterp},
		{name: "the program renamed over", setup: func() { copyTo("/bin/echo", prog) }, path: prog,
			swap: func() { copyTo("/bin/true", prog) }, reason: reasonKilledProg},
		{name: "the program written in place", setup: func() { copyTo("/bin/echo", prog) }, path: prog,
			swap: func() {
				f, err := os.OpenFile(prog, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Error(err)
					return
				}
				f.Write([]byte{0})
				f.Close()
			}, reason: reasonKilledProg},
		{name: "the interpreter renamed over", setup: func() { copyTo("/bin/echo", interp); write(interpScript, "#!"+interp+"\n") }, path: interpScript,
			swap: func() { copyTo("/bin/true", interp) }, reason: reasonKilledProg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup()
			mu.Lock()
			swaps[tt.path] = tt.swap
			mu.Unlock()
			if got := h.do(t, helperCmd{Op: "exec", Path: tt.path, Argv: []string{"x", "swapped"}}); got.Status != "signal killed" {
				t.Errorf("helper result %+v, want killed", got)
			}
			k := pub.waitFor(t, "killed", func(e *event.Event) bool { return e.Exec.Path == tt.path && e.Verdict.Action == event.Deny })
			if k.Verdict.Reason != tt.reason {
				t.Errorf("kill reason %q, want %q", k.Verdict.Reason, tt.reason)
			}
			pub.clear()
		})
	}
}

// clear forgets the events published so far.
func (p *published) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ev = nil
}
