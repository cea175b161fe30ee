package execs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// loaderCases are loader argvs and the program each runs (checked
// against the system's ld.so by TestLoaderAgainstLdSo where the program
// is /bin/cat).
var loaderCases = []struct {
	name string
	argv []string
	want loaderRun
}{
	{name: "program", argv: []string{"ld.so", "/bin/cat", "x"}, want: loaderRun{program: "/bin/cat", argv: []string{"/bin/cat", "x"}}},
	{name: "relative", argv: []string{"ld.so", "./cat"}, want: loaderRun{program: "./cat", argv: []string{"./cat"}}},
	{name: "bare name", argv: []string{"ld.so", "cat", "-n"}, want: loaderRun{program: "cat", argv: []string{"cat", "-n"}}},
	{name: "options with values", argv: []string{"ld.so", "--library-path", "/x", "--preload", "libz.so.1", "--audit", "a", "--inhibit-rpath", "b",
		"--glibc-hwcaps-prepend", "c", "--glibc-hwcaps-mask", "d", "/bin/cat", "e"},
		want: loaderRun{program: "/bin/cat", argv: []string{"/bin/cat", "e"}}},
	{name: "a value that looks like an option", argv: []string{"ld.so", "--argv0", "--list", "/bin/cat"}, want: loaderRun{program: "/bin/cat", argv: []string{"--list"}}},
	{name: "argv0", argv: []string{"ld.so", "--argv0", "innocent", "/bin/cat", "y"}, want: loaderRun{program: "/bin/cat", argv: []string{"innocent", "y"}}},
	{name: "argv0 inline (musl)", argv: []string{"ld.so", "--argv0=innocent", "/bin/cat"}, want: loaderRun{program: "/bin/cat", argv: []string{"innocent"}}},
	{name: "library path inline (musl)", argv: []string{"ld.so", "--library-path=/x", "--preload=y", "/bin/cat"}, want: loaderRun{program: "/bin/cat", argv: []string{"/bin/cat"}}},
	{name: "flags", argv: []string{"ld.so", "--inhibit-cache", "--list", "/bin/cat"}, want: loaderRun{program: "/bin/cat", argv: []string{"/bin/cat"}}},
	{name: "verify", argv: []string{"ld.so", "--verify", "/bin/cat"}, want: loaderRun{program: "/bin/cat", argv: []string{"/bin/cat"}}},
	{name: "help with a program", argv: []string{"ld.so", "--help", "/bin/cat"}, want: loaderRun{program: "/bin/cat", argv: []string{"/bin/cat"}}},
	{name: "end of options", argv: []string{"ld.so", "--", "--list", "z"}, want: loaderRun{program: "--list", argv: []string{"--list", "z"}}},
	{name: "single dash is a program", argv: []string{"ld.so", "-x", "/bin/cat"}, want: loaderRun{program: "-x", argv: []string{"-x", "/bin/cat"}}},
	{name: "unknown option", argv: []string{"ld.so", "--frobnicate", "/bin/cat"}},
	{name: "value missing", argv: []string{"ld.so", "--preload"}},
	{name: "argv0 missing its value", argv: []string{"ld.so", "/bin/cat", "--argv0"}, want: loaderRun{program: "/bin/cat", argv: []string{"/bin/cat", "--argv0"}}},
	{name: "version", argv: []string{"ld.so", "--version", "/bin/cat"}},
	{name: "prefix of an option (musl refuses)", argv: []string{"ld.so", "--library-pathX", "/bin/cat"}},
	{name: "nothing", argv: []string{"ld.so"}},
	{name: "empty argv", argv: nil},
	{name: "only end of options", argv: []string{"ld.so", "--"}},
}

func TestParseLoaderArgv(t *testing.T) {
	for _, tt := range loaderCases {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, parseLoaderArgv(tt.argv), cmp.AllowUnexported(loaderRun{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
