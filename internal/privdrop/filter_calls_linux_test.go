//go:build linux

package privdrop

import (
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
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
				if got := runBPF(t, prog, seccompData(a.arch, a.setns)); got != retAllow {
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

// With ns nsTrack, every ABI hands the calls that make or change mounts,
// and unshare and clone asking for a mount namespace, to the listener, and
// fails the new mount API with ENOSYS; with nsAllow they all run, and
// only a uid-0 program's cgroup namespaces are refused.
func TestSessionFilterTracksMounts(t *testing.T) {
	for goarch, list := range abis {
		for _, a := range list {
			mounts := []uint32{a.mount, a.umount2, a.pivotRoot}
			if a.umount != 0 {
				mounts = append(mounts, a.umount)
			}
			for _, spec := range []filterSpec{
				{notify: true, ns: nsTrack},
				{notify: true, ns: nsTrack, noCgroupNS: true, guard: 4242, pgid: 4240},
				{ns: nsAllow},
				{notify: true, ns: nsAllow, noCgroupNS: true, guard: 4242},
			} {
				prog, err := sessionFilter(goarch, spec)
				if err != nil {
					t.Fatal(err)
				}
				tracked := spec.ns == nsTrack
				want := func(track, other uint32) uint32 {
					if tracked {
						return track
					}
					return other
				}
				check := func(what string, nr uint32, args []uint64, want uint32) {
					t.Helper()
					if got := runBPF(t, prog, seccompData(a.arch, nr, args...)); got != want {
						t.Errorf("%s %#x %s with %+v: filter returned %#x, want %#x", goarch, a.arch, what, spec, got, want)
					}
				}
				for _, nr := range mounts {
					check("mount call "+strconv.Itoa(int(nr)), nr, nil, want(retUserNotif, retAllow))
				}
				for _, nr := range newMountAPI {
					check("new mount API "+strconv.Itoa(int(nr)), nr, nil, want(retErrnoNOSYS, retAllow))
				}
				for _, nr := range []uint32{a.unshare, a.clone} {
					check("mount namespace", nr, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNS}, want(retUserNotif, retAllow))
					check("user namespace", nr, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWPID}, retAllow)
					cg := uint32(retAllow)
					if spec.noCgroupNS {
						cg = want(retUserNotif, retErrnoEPERM)
					}
					check("cgroup namespace", nr, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP}, cg)
				}
				check("setns", a.setns, nil, retAllow)
			}
		}
	}
	if _, err := sessionFilter("amd64", filterSpec{ns: nsTrack}); err == nil {
		t.Error("a filter that tracks mounts without a listener")
	}
}
