//go:build linux

package privdrop

import (
	"testing"
)

// With notify, the calls fileexec decides besides execs (links, renames,
// truncations by path, io_uring_setup) go to the listener, in every ABI;
// without it, they run.
func TestSessionFilterNotifiesFileCalls(t *testing.T) {
	names := map[string][]string{
		"x86_64":  {"link", "linkat", "rename", "renameat", "renameat2", "truncate", "io_uring_setup"},
		"i386":    {"link", "linkat", "rename", "renameat", "renameat2", "truncate", "truncate64", "io_uring_setup"},
		"aarch64": {"linkat", "renameat", "renameat2", "truncate", "io_uring_setup"},
		"arm":     {"link", "linkat", "rename", "renameat", "renameat2", "truncate", "truncate64", "io_uring_setup"},
	}
	for goarch, list := range abis {
		for i, a := range list {
			abiName := map[string][]string{"amd64": {"x86_64", "i386"}, "arm64": {"aarch64", "arm"}}[goarch][i]
			if len(a.files) != len(names[abiName]) {
				t.Errorf("%s: %d file calls notified, want %v", abiName, len(a.files), names[abiName])
			}
			for _, spec := range []filterSpec{{notify: true}, {notify: true, guard: 4242, pgid: 4240}} {
				prog, err := sessionFilter(goarch, spec)
				if err != nil {
					t.Fatal(err)
				}
				for _, nr := range a.files {
					if got := runBPF(t, prog, seccompData(a.arch, nr)); got != retUserNotif {
						t.Errorf("%s call %d with %+v: filter returned %#x, want it notified", abiName, nr, spec, got)
					}
				}
				if got := runBPF(t, prog, seccompData(a.arch, a.setns)); got != retErrnoEPERM {
					t.Errorf("%s setns: %#x", abiName, got)
				}
			}
			prog, err := sessionFilter(goarch, filterSpec{guard: 4242})
			if err != nil {
				t.Fatal(err)
			}
			for _, nr := range a.files {
				if got := runBPF(t, prog, seccompData(a.arch, nr)); got != retAllow {
					t.Errorf("%s call %d without notify: filter returned %#x, want allowed", abiName, nr, got)
				}
			}
		}
	}
}
