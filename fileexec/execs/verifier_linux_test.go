//go:build linux

package execs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func loadTestVerifier(t *testing.T) *verifier {
	t.Helper()
	needRoot(t)
	v, err := loadVerifier()
	if err != nil {
		t.Skipf("the verifier cannot load here: %v", err)
	}
	t.Cleanup(func() {
		if err := v.close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return v
}

// withFile adds to e the inode of path (the file the kernel will load),
// changed by change.
func withFile(t *testing.T, e expectation, path string, change func(*expectation)) expectation {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	e.Flags |= expectInode | expectDevice
	e.Ino, e.Size, e.CtimeSec, e.CtimeNsec = st.Ino, st.Size, st.Ctim.Sec, uint32(st.Ctim.Nsec)
	e.Dev = unix.Major(st.Dev)<<20 | unix.Minor(st.Dev)
	if change != nil {
		change(&e)
	}
	return e
}

// TestVerifier arms an expectation for a shell that then runs "exec
// /bin/true" (or a script), as if the exec had been allowed with it.
func TestVerifier(t *testing.T) {
	v := loadTestVerifier(t)
	script := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(script, []byte("#!/bin/echo hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	scriptArgs := scriptArgv(shebang{name: "/bin/echo", arg: "hi", hasArg: true}, script, []string{script, "x"})
	tests := []struct {
		name   string
		run    string // what the shell execs; /bin/true when empty
		want   func(t *testing.T) expectation
		status string
		reason uint32 // of the kill record; 0: none
	}{
		{name: "as allowed", want: func(*testing.T) expectation { return expect([]string{"/bin/true"}, "/bin/true") }, status: "exit status 0"},
		{name: "argv differs", want: func(*testing.T) expectation { return expect([]string{"/bin/true", "x"}, "/bin/true") }, status: "signal: killed", reason: killedArgv},
		{name: "argv[0] differs", want: func(*testing.T) expectation { return expect([]string{"/bin/truE"}, "/bin/true") }, status: "signal: killed", reason: killedArgv},
		{name: "path differs", want: func(*testing.T) expectation { return expect([]string{"/bin/true"}, "/bin/false") }, status: "signal: killed", reason: killedFilename},
		{name: "the file as allowed", want: func(t *testing.T) expectation {
			return withFile(t, expect([]string{"/bin/true"}, "/bin/true"), "/bin/true", nil)
		}, status: "exit status 0"},
		{name: "another file", want: func(t *testing.T) expectation {
			return withFile(t, expect([]string{"/bin/true"}, "/bin/true"), "/bin/false", nil)
		}, status: "signal: killed", reason: killedProgram},
		{name: "another version of the file", want: func(t *testing.T) expectation {
			return withFile(t, expect([]string{"/bin/true"}, "/bin/true"), "/bin/true", func(e *expectation) { e.CtimeNsec ^= 1 })
		}, status: "signal: killed", reason: killedProgram},
		{name: "the file on another device", want: func(t *testing.T) expectation {
			return withFile(t, expect([]string{"/bin/true"}, "/bin/true"), "/bin/true", func(e *expectation) { e.Dev++ })
		}, status: "signal: killed", reason: killedProgram},
		{name: "script as allowed", run: script + " x", want: func(t *testing.T) expectation {
			return withFile(t, expect(scriptArgs, script).withInterp("/bin/echo"), "/bin/echo", nil)
		}, status: "exit status 0"},
		{name: "script with another interpreter", run: script + " x", want: func(*testing.T) expectation {
			return expect(scriptArgs, script).withInterp("/bin/cat")
		}, status: "signal: killed", reason: killedInterp},
		{name: "a script where a binary was allowed", run: script + " x", want: func(*testing.T) expectation {
			return expect(scriptArgs, script)
		}, status: "signal: killed", reason: killedInterp},
		{name: "a binary where a script was allowed", want: func(*testing.T) expectation {
			return expect([]string{"/bin/true"}, "/bin/true").withInterp("/bin/sh")
		}, status: "signal: killed", reason: killedInterp},
		{name: "script argv differs", run: script + " x", want: func(*testing.T) expectation {
			return expect(scriptArgv(shebang{name: "/bin/echo"}, script, []string{script, "x"}), script).withInterp("/bin/echo")
		}, status: "signal: killed", reason: killedArgv},
		{name: "lenient: an unknown handler's argv[1:]", run: script + " x", want: func(*testing.T) expectation {
			e := expect([]string{script, "x"}, script)
			e.Flags |= expectLenient
			return e
		}, status: "exit status 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := tt.run
			if run == "" {
				run = "/bin/true"
			}
			// Armed only once the shell runs: Start returns before the
			// tracepoint of the shell's own exec has fired.
			cmd := exec.Command("/bin/sh", "-c", "echo ready; read x; exec "+run)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := out.Read(make([]byte, 6)); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			if err := v.arm(pid, tt.want(t)); err != nil {
				t.Fatal(err)
			}
			in.Write([]byte("\n"))
			go io.Copy(io.Discard, out)
			err = cmd.Wait()
			status := "exit status 0"
			if err != nil {
				status = err.Error()
			}
			if status != tt.status {
				t.Errorf("shell: %s, want %s", status, tt.status)
			}
			if tt.reason != 0 {
				v.killed.SetDeadline(time.Now().Add(5 * time.Second))
				r, err := v.next()
				if err != nil {
					t.Fatal(err)
				}
				want := verifyKilledRec{Pid: uint32(pid), Tgid: uint32(pid), Reason: tt.reason}
				if diff := cmp.Diff(fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", r)); diff != "" {
					t.Errorf("kill record (-want +got):\n%s", diff)
				}
			}
			var e verifyExpectation
			if err := v.objs.Expect.Lookup(uint32(pid), &e); !errors.Is(err, ebpf.ErrKeyNotExist) {
				t.Errorf("the expectation is still there after the exec: %v", err)
			}
		})
	}
}

// TestVerifierForgetsExited drops the expectation of a thread that exits
// without exec'ing, so that its id, reused, is not checked.
func TestVerifierForgetsExited(t *testing.T) {
	v := loadTestVerifier(t)
	cmd := exec.Command("/bin/sh", "-c", "echo ready; read x")
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Read(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	if err := v.arm(int(pid), expect([]string{"x"}, "x")); err != nil {
		t.Fatal(err)
	}
	var e verifyExpectation
	if err := v.objs.Expect.Lookup(pid, &e); err != nil {
		t.Fatalf("not armed: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := v.objs.Expect.Lookup(pid, &e); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("the expectation outlived its thread: %v", err)
	}
}
