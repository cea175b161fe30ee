//go:build linux

package execs

import (
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
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

// TestVerifier arms an expectation for a shell that then runs
// "exec /bin/true", as if the exec had been allowed with argv and file.
func TestVerifier(t *testing.T) {
	v := loadTestVerifier(t)
	tests := []struct {
		name   string
		argv   []string
		file   string
		status string
		reason uint32 // of the kill record; 0: none
	}{
		{name: "as allowed", argv: []string{"/bin/true"}, file: "/bin/true", status: "exit status 0"},
		{name: "argv differs", argv: []string{"/bin/true", "x"}, file: "/bin/true", status: "signal: killed", reason: killedArgv},
		{name: "argv[0] differs", argv: []string{"/bin/truE"}, file: "/bin/true", status: "signal: killed", reason: killedArgv},
		{name: "path differs", argv: []string{"/bin/true"}, file: "/bin/false", status: "signal: killed", reason: killedFilename},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Armed only once the shell runs: Start returns before the
			// tracepoint of the shell's own exec has fired.
			cmd := exec.Command("/bin/sh", "-c", "echo ready; read x; exec /bin/true")
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
			if _, err := out.Read(make([]byte, 16)); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			if err := v.arm(pid, expect(tt.argv, tt.file)); err != nil {
				t.Fatal(err)
			}
			in.Write([]byte("\n"))
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
