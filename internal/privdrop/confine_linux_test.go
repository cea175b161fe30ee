//go:build linux

package privdrop

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// runBPF interprets the classic BPF subset the filters use on one
// struct seccomp_data.
func runBPF(t *testing.T, prog []unix.SockFilter, data []byte) uint32 {
	t.Helper()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			a = binary.LittleEndian.Uint32(data[ins.K:])
		case unix.BPF_RET | unix.BPF_K:
			return ins.K
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var taken bool
			switch ins.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case unix.BPF_JEQ:
				taken = a == ins.K
			case unix.BPF_JGE:
				taken = a >= ins.K
			default:
				taken = a&ins.K != 0
			}
			if taken {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		default:
			t.Fatalf("instruction %d: unknown code %#x", pc, ins.Code)
		}
	}
	t.Fatal("ran off the end of the program")
	return 0
}

// seccompData is struct seccomp_data for a call on arch.
func seccompData(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], nr)
	binary.LittleEndian.PutUint32(b[4:], arch)
	for i, v := range args {
		binary.LittleEndian.PutUint64(b[16+8*i:], v)
	}
	return b
}

func TestSessionFilterDecisions(t *testing.T) {
	const guard, pgid = 4242, 4240
	neg := func(n int) uint64 { return uint64(uint32(int32(-n))) }
	hi := uint64(0xdead) << 32 // garbage in the high half the kernel ignores for a pid_t
	x86 := abis["amd64"][0]
	i386 := abis["amd64"][1]
	a64 := abis["arm64"][0]
	track := filterSpec{notify: true, ns: nsTrack}
	trackRoot := filterSpec{notify: true, ns: nsTrack, noCgroupNS: true, guard: guard, pgid: pgid}
	tests := []struct {
		name   string
		spec   filterSpec
		goarch string
		arch   uint32
		nr     uint32
		args   []uint64
		want   uint32
	}{
		{"execve notified", filterSpec{notify: true}, "amd64", x86.arch, x86.execve, nil, retUserNotif},
		{"execve allowed without notify", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.execve, nil, retAllow},
		{"execveat i386 notified", filterSpec{notify: true}, "amd64", i386.arch, i386.execveat, nil, retUserNotif},
		{"setns", filterSpec{}, "amd64", x86.arch, x86.setns, nil, retAllow},
		{"setns tracked", track, "amd64", x86.arch, x86.setns, nil, retAllow},
		{"setns refused", filterSpec{notify: true, ns: nsRefuse}, "amd64", x86.arch, x86.setns, nil, retErrnoEPERM},
		{"clone3", filterSpec{}, "amd64", x86.arch, x86.clone3, nil, retErrnoNOSYS},
		{"clone3 arm64", filterSpec{guard: guard}, "arm64", a64.arch, a64.clone3, nil, retErrnoNOSYS},
		{"unshare newns", filterSpec{}, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWNS}, retAllow},
		{"unshare newuser newns", filterSpec{guard: guard, noCgroupNS: true}, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNS}, retAllow},
		{"unshare newns tracked", track, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNS}, retUserNotif},
		{"unshare newns tracked, high bits", track, "amd64", x86.arch, x86.unshare, []uint64{hi | unix.CLONE_NEWNS}, retUserNotif},
		{"unshare newuser tracked", track, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET}, retAllow},
		{"unshare newns refused", filterSpec{notify: true, ns: nsRefuse}, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWNS}, retErrnoEPERM},
		{"unshare newuser refused", filterSpec{notify: true, ns: nsRefuse}, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWUSER}, retErrnoEPERM},
		{"unshare newnet", filterSpec{}, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWNET}, retAllow},
		{"unshare newcgroup", filterSpec{}, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP}, retAllow},
		{"unshare newcgroup as root", filterSpec{noCgroupNS: true}, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP}, retErrnoEPERM},
		{"unshare newcgroup as root tracked", trackRoot, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP}, retUserNotif},
		{"unshare newcgroup tracked", track, "amd64", x86.arch, x86.unshare, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP}, retAllow},
		{"clone newuser with guard", filterSpec{guard: guard, noCgroupNS: true}, "amd64", x86.arch, x86.clone, []uint64{unix.CLONE_NEWUSER}, retAllow},
		{"clone newcgroup with guard", filterSpec{guard: guard, noCgroupNS: true}, "amd64", x86.arch, x86.clone, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP | unix.CLONE_NEWPID}, retErrnoEPERM},
		{"clone bwrap tracked", trackRoot, "amd64", x86.arch, x86.clone, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | uint64(unix.SIGCHLD)}, retUserNotif},
		{"clone i386 tracked", track, "amd64", i386.arch, i386.clone, []uint64{unix.CLONE_NEWNS}, retUserNotif},
		{"clone arm64 tracked", track, "arm64", a64.arch, a64.clone, []uint64{unix.CLONE_NEWNS}, retUserNotif},
		{"clone thread with guard", filterSpec{guard: guard}, "amd64", x86.arch, x86.clone, []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, retAllow},
		{"clone thread tracked", trackRoot, "amd64", x86.arch, x86.clone, []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_FS}, retAllow},
		{"mount", filterSpec{guard: guard}, "amd64", x86.arch, x86.mount, nil, retAllow},
		{"mount tracked", track, "amd64", x86.arch, x86.mount, nil, retUserNotif},
		{"umount2 tracked", trackRoot, "amd64", x86.arch, x86.umount2, nil, retUserNotif},
		{"pivot_root tracked", track, "amd64", x86.arch, x86.pivotRoot, nil, retUserNotif},
		{"i386 umount tracked", track, "amd64", i386.arch, i386.umount, nil, retUserNotif},
		{"i386 pivot_root tracked", track, "amd64", i386.arch, i386.pivotRoot, nil, retUserNotif},
		{"arm64 mount tracked", track, "arm64", a64.arch, a64.mount, nil, retUserNotif},
		{"arm32 pivot_root tracked", track, "arm64", abis["arm64"][1].arch, abis["arm64"][1].pivotRoot, nil, retUserNotif},
		{"fsopen", filterSpec{}, "amd64", x86.arch, 430, nil, retAllow},
		{"fsopen tracked", track, "amd64", x86.arch, 430, nil, retErrnoNOSYS},
		{"open_tree tracked", trackRoot, "amd64", x86.arch, 428, nil, retErrnoNOSYS},
		{"move_mount i386 tracked", track, "amd64", i386.arch, 429, nil, retErrnoNOSYS},
		{"mount_setattr arm64 tracked", track, "arm64", a64.arch, 442, nil, retErrnoNOSYS},
		{"open_tree_attr tracked", track, "amd64", x86.arch, 467, nil, retErrnoNOSYS},
		{"chroot tracked", track, "amd64", x86.arch, 161, nil, retAllow},
		{"x32", filterSpec{}, "amd64", x86.arch, x32SyscallBit | 1, nil, retErrnoEPERM},
		{"unknown arch", filterSpec{}, "amd64", unix.AUDIT_ARCH_AARCH64, 1, nil, retErrnoEPERM},

		{"kill chaperone", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{guard, 15}, retErrnoEPERM},
		{"kill chaperone high bits", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{hi | guard, 9}, retErrnoEPERM},
		{"kill chaperone probe", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{guard, 0}, retErrnoEPERM},
		{"kill chaperone unguarded", filterSpec{}, "amd64", x86.arch, x86.kill, []uint64{guard, 15}, retAllow},
		{"kill other", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{guard + 1, 15}, retAllow},
		{"kill own group", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{0, 15}, retErrnoEPERM},
		{"kill own group probe", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{0, 0}, retAllow},
		{"kill all", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{neg(1), 9}, retErrnoEPERM},
		{"kill all probe", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{neg(1), 0}, retAllow},
		{"kill chaperone's group", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{neg(pgid), 2}, retErrnoEPERM},
		{"kill another group", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.kill, []uint64{neg(pgid + 7), 2}, retAllow},
		{"kill i386 chaperone", filterSpec{guard: guard, pgid: pgid}, "amd64", i386.arch, i386.kill, []uint64{guard, 9}, retErrnoEPERM},
		{"tkill", filterSpec{guard: guard}, "amd64", x86.arch, x86.tkill, []uint64{guard, 9}, retErrnoEPERM},
		{"tgkill", filterSpec{guard: guard}, "amd64", x86.arch, x86.tgkill, []uint64{guard, guard + 3, 9}, retErrnoEPERM},
		{"tgkill other", filterSpec{guard: guard}, "amd64", x86.arch, x86.tgkill, []uint64{99, 99, 9}, retAllow},
		{"rt_sigqueueinfo", filterSpec{guard: guard}, "amd64", x86.arch, x86.sigqueue, []uint64{guard, 9}, retErrnoEPERM},
		{"rt_tgsigqueueinfo", filterSpec{guard: guard}, "amd64", x86.arch, x86.tgsigqueue, []uint64{guard, guard, 9}, retErrnoEPERM},
		{"pidfd_open chaperone", filterSpec{guard: guard}, "amd64", x86.arch, x86.pidfdOpen, []uint64{guard, 0}, retErrnoEPERM},
		{"pidfd_open other", filterSpec{guard: guard}, "amd64", x86.arch, x86.pidfdOpen, []uint64{77, 0}, retAllow},
		{"pidfd_send_signal", filterSpec{guard: guard}, "amd64", x86.arch, x86.pidfdSend, []uint64{3, 9}, retErrnoNOSYS},
		{"pidfd_send_signal unguarded", filterSpec{notify: true}, "amd64", x86.arch, x86.pidfdSend, []uint64{3, 9}, retAllow},
		{"ptrace chaperone", filterSpec{guard: guard}, "amd64", x86.arch, x86.ptrace, []uint64{unix.PTRACE_ATTACH, guard}, retErrnoEPERM},
		{"ptrace other", filterSpec{guard: guard}, "amd64", x86.arch, x86.ptrace, []uint64{unix.PTRACE_ATTACH, 77}, retAllow},
		{"ptrace request equal to the pid", filterSpec{guard: guard}, "amd64", x86.arch, x86.ptrace, []uint64{guard, 77}, retAllow},
		{"process_vm_readv", filterSpec{guard: guard}, "amd64", x86.arch, x86.vmReadv, []uint64{guard}, retErrnoEPERM},
		{"process_vm_writev", filterSpec{guard: guard}, "amd64", x86.arch, x86.vmWritev, []uint64{guard}, retErrnoEPERM},
		{"prlimit64 chaperone", filterSpec{guard: guard}, "amd64", x86.arch, x86.prlimit, []uint64{guard, unix.RLIMIT_CPU}, retErrnoEPERM},
		{"prlimit64 self", filterSpec{guard: guard}, "amd64", x86.arch, x86.prlimit, []uint64{0, unix.RLIMIT_CPU}, retAllow},
		{"setpgid into chaperone's group", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.setpgid, []uint64{0, pgid}, retErrnoEPERM},
		{"setpgid own group", filterSpec{guard: guard, pgid: pgid}, "amd64", x86.arch, x86.setpgid, []uint64{0, 0}, retAllow},
		{"setpgid without a known group", filterSpec{guard: guard}, "amd64", x86.arch, x86.setpgid, []uint64{0, 0}, retAllow},
		{"arm64 kill", filterSpec{guard: guard, pgid: pgid}, "arm64", a64.arch, a64.kill, []uint64{guard, 9}, retErrnoEPERM},
		{"arm64 ptrace", filterSpec{guard: guard}, "arm64", a64.arch, a64.ptrace, []uint64{unix.PTRACE_SEIZE, guard}, retErrnoEPERM},
		{"arm32 tgkill", filterSpec{guard: guard}, "arm64", abis["arm64"][1].arch, abis["arm64"][1].tgkill, []uint64{guard, guard, 9}, retErrnoEPERM},
		{"getpid", filterSpec{notify: true, guard: guard, pgid: pgid}, "amd64", x86.arch, 39, nil, retAllow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prog, err := sessionFilter(tt.goarch, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := runBPF(t, prog, seccompData(tt.arch, tt.nr, tt.args...)); got != tt.want {
				t.Errorf("filter returned %#x, want %#x", got, tt.want)
			}
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	in := "31 23 0:28 / /sys/fs/cgroup rw,nosuid,nodev,noexec - tmpfs tmpfs rw,mode=755\n" +
		"41 31 0:38 / /sys/fs/cgroup/uni\\040fied rw,relatime shared:9 - cgroup2 cgroup2 rw\n" +
		"32 31 0:29 / /sys/fs/cgroup/cpu ro,relatime master:3 - cgroup cgroup rw,cpu\n"
	got, err := parseMountinfo([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountEntry{
		{ID: 31, Point: "/sys/fs/cgroup", Opts: []string{"rw", "nosuid", "nodev", "noexec"}, FSType: "tmpfs"},
		{ID: 41, Point: "/sys/fs/cgroup/uni fied", Opts: []string{"rw", "relatime"}, FSType: "cgroup2"},
		{ID: 32, Point: "/sys/fs/cgroup/cpu", Opts: []string{"ro", "relatime"}, FSType: "cgroup"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseMountinfo (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"31 23 0:28 / /x rw tmpfs tmpfs rw", "x 23 0:28 / /x rw - tmpfs t rw", "1 2 3 - tmpfs"} {
		if _, err := parseMountinfo([]byte(bad)); err == nil {
			t.Errorf("parseMountinfo(%q) accepted a bad line", bad)
		}
	}
	if f, want := remountFlags(got[0]), uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); f != want {
		t.Errorf("remountFlags = %#x, want %#x (the other flags kept)", f, want)
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte("41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n"))
	f.Add([]byte("1 0 0:1 / / rw - ext4 /dev/sda rw\n\n"))
	f.Add([]byte("- \\0 \\777"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := parseMountinfo(b)
		if err != nil {
			return
		}
		for _, m := range ms {
			if len(m.Opts) == 0 || m.FSType == "" {
				t.Errorf("entry %+v without options or type", m)
			}
		}
	})
}

func TestRunsAsRoot(t *testing.T) {
	tests := []struct {
		o    Options
		euid int
		want bool
	}{
		{Keep(), 0, true},
		{Keep(), 1000, false},
		{Options{UID: 0, GID: 0}, 0, true},
		{Options{UID: 1000, GID: 1000}, 0, false},
	}
	for _, tt := range tests {
		if got := runsAsRoot(tt.o, tt.euid); got != tt.want {
			t.Errorf("runsAsRoot(uid %d, euid %d) = %v, want %v", tt.o.UID, tt.euid, got, tt.want)
		}
	}
}

func TestProtectSelf(t *testing.T) {
	needRoot(t)
	dumpable := func() int {
		n, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := dumpable()
	undo, err := ProtectSelf(Options{UID: 65534, GID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	if got := dumpable(); got != before {
		t.Errorf("dumpable %d for an ordinary-user program, want %d unchanged", got, before)
	}
	undo()
	undo, err = ProtectSelf(Keep())
	if err != nil {
		t.Fatal(err)
	}
	if got := dumpable(); got != 0 {
		t.Errorf("dumpable %d while a uid-0 program runs, want 0", got)
	}
	undo()
	if got := dumpable(); got != before {
		t.Errorf("dumpable %d after undo, want %d", got, before)
	}
}

// attack is the helper run under Confine: it tries what a uid-0 program
// could do to its parent (chaperone, here the test binary) and to the
// session's cgroup, and reports each call's errno ("ok" for success).
// Signals that get through are 0 or SIGURG, which a Go program ignores.
func attack() map[string]string {
	res := map[string]string{}
	errno := func(e unix.Errno) string {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	call := func(name string, nr uintptr, args ...uintptr) {
		var a [6]uintptr
		copy(a[:], args)
		_, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		res[name] = errno(e)
	}
	ppid := uintptr(os.Getppid())
	pgid, _ := unix.Getpgid(0)
	urg := uintptr(unix.SIGURG)
	neg := func(n int) uintptr { return uintptr(-n) }
	call("kill parent", unix.SYS_KILL, ppid, 0)
	call("tkill parent", unix.SYS_TKILL, ppid, 0)
	call("tgkill parent", unix.SYS_TGKILL, ppid, ppid, 0)
	var info [128]byte
	binary.LittleEndian.PutUint32(info[8:], uint32(0xffffffff)) // si_code SI_QUEUE
	call("rt_sigqueueinfo parent", unix.SYS_RT_SIGQUEUEINFO, ppid, 0, uintptr(unsafe.Pointer(&info)))
	call("pidfd_open parent", unix.SYS_PIDFD_OPEN, ppid, 0)
	var lim unix.Rlimit
	call("prlimit64 parent", unix.SYS_PRLIMIT64, ppid, unix.RLIMIT_NOFILE, 0, uintptr(unsafe.Pointer(&lim)))
	call("ptrace parent", unix.SYS_PTRACE, unix.PTRACE_ATTACH, ppid)
	call("kill group", unix.SYS_KILL, 0, urg)
	call("kill group probe", unix.SYS_KILL, 0, 0)
	call("kill all", unix.SYS_KILL, neg(1), urg)
	call("kill parent's group", unix.SYS_KILL, neg(pgid), urg)
	call("kill self probe", unix.SYS_KILL, uintptr(os.Getpid()), 0)
	call("prlimit64 self", unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, 0, uintptr(unsafe.Pointer(&lim)))
	if fd, err := unix.Open("/proc/"+strconv.Itoa(int(ppid)), unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		call("pidfd_send_signal /proc/parent", unix.SYS_PIDFD_SEND_SIGNAL, uintptr(fd), 0, 0, 0)
	} else {
		res["pidfd_send_signal /proc/parent"] = "open: " + err.Error()
	}
	call("clone3", unix.SYS_CLONE3, 0, 0)
	call("unshare mount", unix.SYS_UNSHARE, unix.CLONE_NEWNS)
	if u := os.Getenv(unshareEnv); u != "" {
		nested(res, u)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		ms, _ := parseMountinfo(b)
		for _, m := range ms {
			if !isCgroupFS(m.FSType) {
				continue
			}
			res["mount "+m.Point] = m.Opts[0]
			fd, err := unix.Open(filepath.Join(m.Point, "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			var e unix.Errno
			errors.As(err, &e)
			res["write "+m.Point] = errno(e)
		}
	}
	return res
}

// unshareEnv names unshare(1) for the attack helper, whose environment
// has no PATH.
const unshareEnv = "PRIVDROP_TEST_UNSHARE"

// nestedScript runs in a user and mount namespace of the program's own:
// for each cgroup mount it prints its options, whether a process could be
// moved through it, and whether it could be made writable again.
const nestedScript = `PATH=/usr/sbin:/usr/bin:/sbin:/bin
for d in $(awk '$0 ~ / - cgroup2? / {print $5}' /proc/self/mountinfo); do
	echo "mount $d $(awk -v d=$d '$5 == d {split($6, o, ","); print o[1]}' /proc/self/mountinfo)"
	if (echo $$ > $d/cgroup.procs) 2>/dev/null; then echo "write $d ok"; else echo "write $d refused"; fi
	if mount -o remount,bind,rw $d 2>/dev/null; then echo "remount $d ok"; else echo "remount $d refused"; fi
done`

// nested reports, in res, what a user and mount namespace the program
// makes with unshare(1) gives it over the cgroups ("nested mount P",
// "nested write P", "nested remount P"), and whether it may make a cgroup
// namespace ("nested cgroupns": unshare's exit status).
func nested(res map[string]string, unshare string) {
	out, err := exec.Command(unshare, "--user", "--mount", "--propagation", "unchanged", "/bin/sh", "-c", nestedScript).Output()
	if err != nil {
		res["nested"] = err.Error()
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 3 {
			res["nested "+f[0]+" "+f[1]] = f[2]
		}
	}
	code := "0"
	if err := exec.Command(unshare, "--user", "--cgroup", "/bin/true").Run(); err != nil {
		code = err.Error()
	}
	res["nested cgroupns"] = code
}

// runAttack runs the attack helper wrapped with o and returns its report.
func runAttack(t *testing.T, o Options) map[string]string {
	t.Helper()
	cmd := exec.Command(selfExe)
	cmd.Env = []string{helperEnv + "=attack"}
	if u, err := exec.LookPath("unshare"); err == nil {
		cmd.Env = append(cmd.Env, unshareEnv+"="+u)
	}
	out, errOut, code := run(t, cmd, o)
	if code != 0 {
		t.Fatalf("helper exit %d: %s", code, errOut)
	}
	var res map[string]string
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("helper printed %q: %v", out, err)
	}
	return res
}

// cgroupMounts lists this process's cgroup mounts.
func cgroupMounts(t *testing.T) []mountEntry {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parseMountinfo(b)
	if err != nil {
		t.Fatal(err)
	}
	var out []mountEntry
	for _, m := range ms {
		if isCgroupFS(m.FSType) {
			out = append(out, m)
		}
	}
	return out
}

func TestConfineRootProgram(t *testing.T) {
	needRoot(t)
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("no filter for %s", runtime.GOARCH)
	}
	o := Keep()
	o.Confine = true
	got := runAttack(t, o)
	want := map[string]string{
		"kill parent":                    "EPERM",
		"tkill parent":                   "EPERM",
		"tgkill parent":                  "EPERM",
		"rt_sigqueueinfo parent":         "EPERM",
		"pidfd_open parent":              "EPERM",
		"prlimit64 parent":               "EPERM",
		"ptrace parent":                  "EPERM",
		"kill group":                     "EPERM",
		"kill group probe":               "ok",
		"kill all":                       "EPERM",
		"kill parent's group":            "EPERM",
		"kill self probe":                "ok",
		"prlimit64 self":                 "ok",
		"pidfd_send_signal /proc/parent": "ENOSYS",
		"clone3":                         "ENOSYS",
		"unshare mount":                  "EPERM",
	}
	mounts := cgroupMounts(t)
	for _, m := range mounts {
		want["mount "+m.Point] = "ro"
		want["write "+m.Point] = "EROFS"
	}
	if _, ok := got["nested cgroupns"]; ok {
		// A sandbox of its own: the copies of the cgroup mounts stay
		// read-only, and a cgroup namespace (where it could mount them
		// afresh) is refused to uid 0.
		want["nested cgroupns"] = "exit status 1"
		for _, m := range mounts {
			want["nested mount "+m.Point] = "ro"
			want["nested write "+m.Point] = "refused"
			want["nested remount "+m.Point] = "refused"
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a uid-0 program under Confine (-want +got):\n%s", diff)
	}
	// Only the program's namespace changed.
	for _, m := range cgroupMounts(t) {
		for _, before := range mounts {
			if before.ID == m.ID && before.Opts[0] != m.Opts[0] {
				t.Errorf("chaperone's own mount %s changed from %s to %s", m.Point, before.Opts[0], m.Opts[0])
			}
		}
	}
}

// An ordinary user is kept in the cgroup by the files' owner already, and
// may signal its own process group: no guard rules.
func TestConfineOrdinaryUser(t *testing.T) {
	needRoot(t)
	o := Options{UID: 65534, GID: 65534, Confine: true}
	got := runAttack(t, o)
	for k, want := range map[string]string{"kill group": "ok", "kill parent": "EPERM", "clone3": "ENOSYS", "unshare mount": "EPERM"} {
		if got[k] != want {
			t.Errorf("%s: %s, want %s", k, got[k], want)
		}
	}
	_, sandboxed := got["nested cgroupns"]
	if sandboxed && got["nested cgroupns"] != "0" {
		t.Errorf("an ordinary user's cgroup namespace: %s, want it made", got["nested cgroupns"])
	}
	for _, m := range cgroupMounts(t) {
		if got["mount "+m.Point] != "ro" {
			t.Errorf("%s is %s in the program's namespace, want ro", m.Point, got["mount "+m.Point])
		}
		if !sandboxed {
			continue
		}
		for k, want := range map[string]string{"nested mount ": "ro", "nested write ": "refused", "nested remount ": "refused"} {
			if got[k+m.Point] != want {
				t.Errorf("%s%s: %q in a namespace of the program's own, want %s", k, m.Point, got[k+m.Point], want)
			}
		}
	}
}
