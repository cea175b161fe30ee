//go:build linux

package execs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kernelScript runs a script made of head (with "@" replaced by the path
// of the test binary, which then prints its argv) with the arguments
// "a b", and returns the argv its interpreter got, or the exec's errno.
func kernelScript(t *testing.T, dir string, head []byte) ([]string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, bytes.Replace(head, []byte("@"), []byte(self), 1), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, "a", "b")
	cmd.Env = append(os.Environ(), argvPrinterEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return nil, errno
		}
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"), nil
}

// checkAgainstKernel runs head as a script and compares what the kernel
// did with what parseShebang says it does.
func checkAgainstKernel(t *testing.T, dir string, head []byte) {
	t.Helper()
	self, _ := os.Executable()
	real := bytes.Replace(head, []byte("@"), []byte(self), 1)
	sb, ok := parseShebang(real)
	got, err := kernelScript(t, dir, head)
	script := filepath.Join(dir, "script")
	switch {
	case errors.Is(err, syscall.ENOEXEC):
		if ok {
			t.Fatalf("%q: the kernel refused it (ENOEXEC), parsed as %+v", real, sb)
		}
	case err != nil:
		// Parsed, but the interpreter it names cannot run.
		if !ok {
			t.Fatalf("%q: not a script, but the kernel tried an interpreter: %v", real, err)
		}
		if sb.name == self {
			t.Fatalf("%q: the interpreter is the test binary, but the exec failed: %v", real, err)
		}
	default:
		if !ok {
			t.Fatalf("%q: not a script, but the kernel ran %q", real, got)
		}
		if diff := cmp.Diff(scriptArgv(sb, script, []string{script, "a", "b"}), got); diff != "" {
			t.Fatalf("%q: argv (-parsed +kernel):\n%s", real, diff)
		}
	}
}

// TestShebangAgainstKernel runs each case as a real script: parseShebang
// must read the line as the running kernel does.
func TestShebangAgainstKernel(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range shebangCases {
		t.Run(tt.name, func(t *testing.T) {
			checkAgainstKernel(t, dir, []byte(tt.head))
		})
	}
}

// FuzzShebangAgainstKernel execs every input as a script whose
// interpreter ("@" in it) prints its argv: the kernel is the reference
// parser. About a thousand inputs a second.
func FuzzShebangAgainstKernel(f *testing.F) {
	for _, c := range shebangCases {
		f.Add([]byte(c.head))
	}
	f.Add([]byte("#!\t@\t\t-\t \t\n"))
	f.Add([]byte("#!@ \x00\n"))
	f.Add([]byte("#! @" + strings.Repeat(" ", 260)))
	f.Add([]byte("#!@" + strings.Repeat("\t", 200) + "x"))
	f.Fuzz(func(t *testing.T, head []byte) {
		checkAgainstKernel(t, t.TempDir(), head)
	})
}
