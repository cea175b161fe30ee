//go:build linux

package execs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// argvPython is a dynamically linked program that prints the argv it got
// (not /proc/self/cmdline, which under a loader still holds the loader's).
const argvPython = "/usr/bin/python3"

var argvPythonCode = []string{"-c", `import sys; sys.stdout.write("RAN\0" + "\0".join(sys.orig_argv))`}

// systemLoader is the dynamic loader argvPython names, which the tests
// run as a command.
func systemLoader(t testing.TB) string {
	t.Helper()
	f, err := os.Open(argvPython)
	if err != nil {
		t.Skipf("no %s: %v", argvPython, err)
	}
	defer f.Close()
	h, ok := readELFHeader(f)
	if !ok || !h.hasInterp {
		t.Skipf("%s is not a dynamically linked ELF program", argvPython)
	}
	return h.interp
}

// checkAgainstLdSo runs the system's loader with opts, then argvPython:
// when that ran (it prints "RAN" and its argv), the parser must have said
// it would, with that argv; when the parser says no program runs, it must
// not have.
func checkAgainstLdSo(t *testing.T, ldso string, opts []string) {
	t.Helper()
	argv := append(append(append([]string{ldso}, opts...), argvPython), argvPythonCode...)
	want := parseLoaderArgv(argv)
	cmd := exec.Command(ldso, argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	got, ran := strings.CutPrefix(string(out), "RAN\x00")
	ran = ran && err == nil
	switch {
	case ran && want.program != argvPython:
		t.Fatalf("%q: the loader ran %s (%q), the parser says %+v", opts, argvPython, got, want)
	case ran && got != strings.Join(want.argv, "\x00"):
		t.Fatalf("%q: %s got argv %q, the parser says %q", opts, argvPython, strings.Split(got, "\x00"), want.argv)
	}
}

// TestLoaderAgainstLdSo runs the loader cases with the system's loader,
// argvPython in place of /bin/cat.
func TestLoaderAgainstLdSo(t *testing.T) {
	ldso := systemLoader(t)
	for _, tt := range loaderCases {
		if len(tt.argv) < 2 {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			var opts []string
			for _, a := range tt.argv[1:] {
				if a == "/bin/cat" {
					break
				}
				opts = append(opts, a)
			}
			checkAgainstLdSo(t, ldso, opts)
		})
	}
}

// FuzzLoaderAgainstLdSo runs the system's loader with fuzzed options
// (NUL-separated) before argvPython: the loader is the reference parser. A "/" in the input becomes "_", so that no fuzzed
// argument names a program the loader could run.
func FuzzLoaderAgainstLdSo(f *testing.F) {
	for _, c := range loaderCases {
		if len(c.argv) > 1 {
			f.Add(strings.ReplaceAll(strings.Join(c.argv[1:], "\x00"), "/bin/cat", ""))
		}
	}
	f.Add("--argv0\x00x\x00--")
	f.Add("--list\x00--argv0=y")
	f.Fuzz(func(t *testing.T, in string) {
		ldso := systemLoader(t)
		var opts []string
		for a := range strings.SplitSeq(strings.ReplaceAll(in, "/", "_"), "\x00") {
			if a != "" {
				opts = append(opts, a)
			}
		}
		checkAgainstLdSo(t, ldso, opts)
	})
}
