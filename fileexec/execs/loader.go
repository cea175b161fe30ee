package execs

import "strings"

// loaderRun is what a dynamic loader run as a command ("ld.so PROGRAM
// ARGS…") runs.
type loaderRun struct {
	// program is the program operand as written, "" when the loader runs
	// none (it refuses its options, or prints and exits).
	program string
	// argv is what program receives: its argv[0] (program as written, or
	// --argv0's value) and the arguments after it.
	argv []string
}

// The options of glibc's ld.so (elf/rtld.c dl_main) and musl's
// (ldso/dynlink.c __dls3) when run as a command. glibc matches them
// exactly and refuses any other "--…" argument; one that takes a value
// needs one after it. musl also takes --library-path=, --preload= and
// --argv0= with the value inside. Both end their options at "--" (a newer
// glibc; 2.36 refuses it) and at the first argument that does not start
// with "--". loaderValueOpt and loaderFlag name glibc's options that take
// a value and those that do not; loaderInlineOpts are musl's forms.
func loaderValueOpt(a string) bool {
	switch a {
	case "--library-path", "--inhibit-rpath", "--audit", "--preload", "--argv0", "--glibc-hwcaps-prepend", "--glibc-hwcaps-mask":
		return true
	}
	return false
}

func loaderFlag(a string) bool {
	switch a {
	case "--list", "--verify", "--inhibit-cache", "--list-tunables", "--list-diagnostics", "--help":
		return true
	}
	return false
}

var loaderInlineOpts = [...]string{"--library-path=", "--preload=", "--argv0="}

// parseLoaderArgv reads the argv of a dynamic loader run as a command and
// returns the program it runs, as glibc's or musl's would: where the two
// read an argv differently, one of them refuses it, so there is at most
// one program. A program the loader only lists or verifies (--list,
// --verify, --help) is returned too: it counts as run.
func parseLoaderArgv(argv []string) loaderRun {
	var argv0 string
	hasArgv0 := false
	i := 1
	for ; i < len(argv); i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "--") {
			break
		}
		switch {
		case a == "--":
			i++
			return loaderProgram(argv[i:], argv0, hasArgv0)
		case a == "--version":
			return loaderRun{} // glibc prints its version and exits; musl refuses it
		case loaderFlag(a):
		case loaderValueOpt(a):
			if i+1 >= len(argv) {
				return loaderRun{} // no value: refused
			}
			i++
			if a == "--argv0" {
				argv0, hasArgv0 = argv[i], true
			}
		default:
			inline := false
			for _, p := range loaderInlineOpts {
				if v, ok := strings.CutPrefix(a, p); ok {
					inline = true
					if p == "--argv0=" {
						argv0, hasArgv0 = v, true
					}
				}
			}
			if !inline {
				return loaderRun{} // an option neither knows: refused
			}
		}
	}
	return loaderProgram(argv[min(i, len(argv)):], argv0, hasArgv0)
}

// loaderProgram is the run of rest[0] with rest[1:], argv[0] replaced
// when hasArgv0.
func loaderProgram(rest []string, argv0 string, hasArgv0 bool) loaderRun {
	if len(rest) == 0 {
		return loaderRun{}
	}
	r := loaderRun{program: rest[0], argv: append([]string(nil), rest...)}
	if hasArgv0 {
		r.argv[0] = argv0
	}
	return r
}
