//go:build linux

package privdrop

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

func unsafePointer(p *unix.SockFprog) unsafe.Pointer { return unsafe.Pointer(p) }

// Offsets in struct seccomp_data.
const (
	offNR    = 0
	offArch  = 4
	offArg0  = 16          // low half on little-endian machines, which amd64 and arm64 are
	offArg1  = offArg0 + 8 // args are 64 bits each
	retAllow = 0x7fff0000  // SECCOMP_RET_ALLOW
	// SECCOMP_RET_USER_NOTIF
	retUserNotif  = 0x7fc00000
	retErrnoEPERM = 0x00050000 | uint32(unix.EPERM)
	retErrnoNOSYS = 0x00050000 | uint32(unix.ENOSYS)
	// refusedNS are the namespaces nsRefuse keeps a program from making:
	// a mount namespace (alone, or inside a new user namespace) would
	// give it mounts that no mark watches.
	refusedNS = unix.CLONE_NEWUSER | unix.CLONE_NEWNS
)

// newMountAPI are the system calls of the new mount API, numbered alike
// on every architecture: open_tree, move_mount, fsopen, fsconfig,
// fsmount, fspick, mount_setattr, open_tree_attr. Their mounts can be
// used through a descriptor without ever being attached where a mark
// could be put; mount(8) falls back to mount(2) when they fail with
// ENOSYS.
var newMountAPI = []uint32{428, 429, 430, 431, 432, 433, 442, 467}

// abi lists the system calls the filter looks at for one audit
// architecture.
type abi struct {
	arch                  uint32
	execve, execveat      uint32
	unshare, clone, setns uint32
	clone3                uint32
	// The calls that attach, detach or move mounts: mount, umount2,
	// pivot_root, and the old umount where the ABI has one (0 when not).
	mount, umount2, pivotRoot, umount uint32
	// Calls that name a process in their first argument (ptrace: its
	// second), which the guard rules check against chaperone's pid.
	kill, tkill, tgkill, sigqueue, tgsigqueue uint32
	pidfdOpen, pidfdSend, ptrace              uint32
	vmReadv, vmWritev, prlimit, setpgid       uint32
	x32                                       bool // refuse the x32 ABI's calls (x86-64 only)
	// files are the calls notified besides execs, for fileexec's Calls:
	// link, linkat, rename, renameat, renameat2, truncate (and
	// truncate64), io_uring_setup. The generic ABI (arm64) has no link,
	// rename nor truncate64.
	files []uint32
}

// abis lists the ABIs the kernel runs on each machine: a 32-bit binary
// must not exec unseen either.
var abis = map[string][]abi{
	"amd64": {
		{arch: unix.AUDIT_ARCH_X86_64, execve: 59, execveat: 322, unshare: 272, clone: 56, setns: 308, clone3: 435,
			mount: 165, umount2: 166, pivotRoot: 155,
			kill: 62, tkill: 200, tgkill: 234, sigqueue: 129, tgsigqueue: 297, pidfdOpen: 434, pidfdSend: 424, ptrace: 101,
			vmReadv: 310, vmWritev: 311, prlimit: 302, setpgid: 109, x32: true,
			files: []uint32{86, 265, 82, 264, 316, 76, 425}},
		{arch: unix.AUDIT_ARCH_I386, execve: 11, execveat: 358, unshare: 310, clone: 120, setns: 346, clone3: 435,
			mount: 21, umount2: 52, pivotRoot: 217, umount: 22,
			kill: 37, tkill: 238, tgkill: 270, sigqueue: 178, tgsigqueue: 335, pidfdOpen: 434, pidfdSend: 424, ptrace: 26,
			vmReadv: 347, vmWritev: 348, prlimit: 340, setpgid: 57,
			files: []uint32{9, 303, 38, 302, 353, 92, 193, 425}},
	},
	"arm64": {
		{arch: unix.AUDIT_ARCH_AARCH64, execve: 221, execveat: 281, unshare: 97, clone: 220, setns: 268, clone3: 435,
			mount: 40, umount2: 39, pivotRoot: 41,
			kill: 129, tkill: 130, tgkill: 131, sigqueue: 138, tgsigqueue: 240, pidfdOpen: 434, pidfdSend: 424, ptrace: 117,
			vmReadv: 270, vmWritev: 271, prlimit: 261, setpgid: 154,
			files: []uint32{37, 38, 276, 45, 425}},
		{arch: unix.AUDIT_ARCH_ARM, execve: 11, execveat: 387, unshare: 337, clone: 120, setns: 375, clone3: 435,
			mount: 21, umount2: 52, pivotRoot: 218,
			kill: 37, tkill: 238, tgkill: 268, sigqueue: 178, tgsigqueue: 363, pidfdOpen: 434, pidfdSend: 424, ptrace: 26,
			vmReadv: 376, vmWritev: 377, prlimit: 369, setpgid: 57,
			files: []uint32{9, 330, 38, 329, 382, 92, 193, 425}},
	},
}

// x32SyscallBit marks x32 system calls on x86-64.
const x32SyscallBit = 0x40000000

// program assembles a classic BPF program with forward jumps to labels.
type program struct {
	ins    []unix.SockFilter
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at     int
	jt, jf string // label names; "" = next instruction
}

func (p *program) stmt(code uint16, k uint32) {
	p.ins = append(p.ins, unix.SockFilter{Code: code, K: k})
}

func (p *program) jump(op uint16, k uint32, jt, jf string) {
	p.fixups = append(p.fixups, fixup{at: len(p.ins), jt: jt, jf: jf})
	p.ins = append(p.ins, unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k})
}

func (p *program) label(name string) { p.labels[name] = len(p.ins) }

func (p *program) resolve() ([]unix.SockFilter, error) {
	off := func(from int, name string) (uint8, error) {
		if name == "" {
			return 0, nil
		}
		to, ok := p.labels[name]
		if !ok || to <= from || to-from-1 > 255 {
			return 0, fmt.Errorf("seccomp filter: bad jump to %s", name)
		}
		return uint8(to - from - 1), nil
	}
	for _, f := range p.fixups {
		var err error
		if p.ins[f.at].Jt, err = off(f.at, f.jt); err != nil {
			return nil, err
		}
		if p.ins[f.at].Jf, err = off(f.at, f.jf); err != nil {
			return nil, err
		}
	}
	return p.ins, nil
}

// nsMode is what the session's filter lets a program do with namespaces
// and mounts.
type nsMode uint8

const (
	// nsAllow: new namespaces of every kind (the kernel asks for a user
	// namespace first), setns and mounts, as the kernel allows them.
	// There are no marks to carry into a new mount namespace.
	nsAllow nsMode = iota
	// nsTrack: as nsAllow, but unshare and clone asking for a new mount
	// namespace, and mount, umount2 (umount) and pivot_root, go to the
	// listener, whose supervisor marks the mounts they make before the
	// caller goes on (fileexec's Nested); the new mount API fails with
	// ENOSYS. Needs notify, and a listener that the kernel waits for
	// without letting a signal cancel a call once received
	// (SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV).
	nsTrack
	// nsRefuse: unshare and clone asking for a new user or mount
	// namespace, and setns, fail with EPERM: for a kernel without
	// WAIT_KILLABLE_RECV (before 5.19), where a new mount namespace could
	// not be tracked.
	nsRefuse
)

// filterSpec says what the session's filter does.
type filterSpec struct {
	// notify hands execve and execveat to the listener, and the calls of
	// abi.files (links, renames, truncations by path, io_uring_setup).
	notify bool
	// ns is what the program may do with namespaces and mounts.
	ns nsMode
	// noCgroupNS refuses unshare and clone asking for a new cgroup
	// namespace (EPERM; with nsTrack, they go to the listener, which
	// refuses them with an event that says why): a program of uid 0 could
	// mount its cgroup hierarchies, writable, in one, and move processes,
	// its own and the machine's, from cgroup to cgroup.
	noCgroupNS bool
	// guard, when not 0, is chaperone's pid: the guard rules refuse
	// (EPERM) kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo,
	// pidfd_open, ptrace, process_vm_readv/writev and prlimit64 aimed at
	// it; kill of chaperone's process group (-pgid), of the caller's own
	// (0) and of every process (-1); setpgid into chaperone's group; and
	// pidfd_send_signal (ENOSYS), whose target (a pidfd or a /proc/<pid>
	// directory) a filter cannot see. For a program of chaperone's uid:
	// the kernel lets same-uid processes signal each other.
	guard int
	// pgid is chaperone's process group, with guard.
	pgid int
}

// sessionFilter is the classic BPF program of the session's filter for
// goarch: with f.notify, execve and execveat of every known ABI go to the
// listener, and so do the calls of abi.files; namespaces and mounts as
// f.ns and f.noCgroupNS say; clone3 (whose flags, CLONE_INTO_CGROUP and
// the namespaces among them, a filter cannot read) gets ENOSYS, so that
// the C library falls back to clone; with f.guard, the guard rules;
// unknown ABIs get EPERM; the rest is allowed.
func sessionFilter(goarch string, f filterSpec) ([]unix.SockFilter, error) {
	list, ok := abis[goarch]
	if !ok {
		return nil, fmt.Errorf("the session's seccomp filter is not built for %s", goarch)
	}
	if f.ns == nsTrack && !f.notify {
		return nil, errors.New("the session's seccomp filter tracks mounts only with a listener")
	}
	p := &program{labels: map[string]int{}}
	for i, a := range list {
		next := fmt.Sprintf("abi%d", i+1)
		p.label(fmt.Sprintf("abi%d", i))
		p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
		p.jump(unix.BPF_JEQ, a.arch, "", next)
		p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNR)
		if a.x32 {
			p.jump(unix.BPF_JGE, x32SyscallBit, "eperm", "")
		}
		if f.notify {
			p.jump(unix.BPF_JEQ, a.execve, "notify", "")
			p.jump(unix.BPF_JEQ, a.execveat, "notify", "")
			for _, nr := range a.files {
				p.jump(unix.BPF_JEQ, nr, "notify", "")
			}
		}
		switch f.ns {
		case nsRefuse:
			p.jump(unix.BPF_JEQ, a.setns, "eperm", "")
		case nsTrack:
			for _, nr := range []uint32{a.mount, a.umount2, a.pivotRoot, a.umount} {
				if nr != 0 {
					p.jump(unix.BPF_JEQ, nr, "notify", "")
				}
			}
			for _, nr := range newMountAPI {
				p.jump(unix.BPF_JEQ, nr, "enosys", "")
			}
		}
		p.jump(unix.BPF_JEQ, a.clone3, "enosys", "")
		p.jump(unix.BPF_JEQ, a.unshare, "nsflags", "")
		if f.guard == 0 {
			p.jump(unix.BPF_JEQ, a.clone, "nsflags", "allow")
			continue
		}
		p.jump(unix.BPF_JEQ, a.clone, "nsflags", "")
		p.jump(unix.BPF_JEQ, a.kill, "kill", "")
		for _, nr := range []uint32{a.tkill, a.tgkill, a.sigqueue, a.tgsigqueue, a.pidfdOpen, a.vmReadv, a.vmWritev, a.prlimit} {
			p.jump(unix.BPF_JEQ, nr, "pid0", "")
		}
		p.jump(unix.BPF_JEQ, a.ptrace, "pid1", "")
		if f.pgid > 0 {
			p.jump(unix.BPF_JEQ, a.setpgid, "pgid1", "")
		}
		p.jump(unix.BPF_JEQ, a.pidfdSend, "enosys", "allow")
	}
	p.label(fmt.Sprintf("abi%d", len(list)))
	p.stmt(unix.BPF_RET|unix.BPF_K, retErrnoEPERM) // no known ABI
	if f.guard != 0 {
		// pid_t is 32 bits: the kernel reads the low half of the
		// argument, and so does the filter.
		guard := uint32(int32(f.guard))
		p.label("kill")
		p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
		p.jump(unix.BPF_JEQ, guard, "eperm", "")
		if f.pgid > 0 {
			p.jump(unix.BPF_JEQ, uint32(-int32(f.pgid)), "eperm", "")
		}
		// 0 (the caller's group, which may be chaperone's) and -1
		// (every process the caller may signal), unless the signal is 0
		// (a probe that changes nothing).
		p.jump(unix.BPF_JEQ, 0, "sig", "")
		p.jump(unix.BPF_JEQ, 0xffffffff, "sig", "allow")
		p.label("sig")
		p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg1)
		p.jump(unix.BPF_JEQ, 0, "allow", "eperm")
		p.label("pid0")
		p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
		p.jump(unix.BPF_JEQ, guard, "eperm", "allow")
		p.label("pid1")
		p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg1)
		p.jump(unix.BPF_JEQ, guard, "eperm", "allow")
		if f.pgid > 0 {
			p.label("pgid1")
			p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg1)
			p.jump(unix.BPF_JEQ, uint32(int32(f.pgid)), "eperm", "allow")
		}
	}
	// unshare's and clone's flags, both in the first argument; the
	// namespace flags are all in its low half.
	p.label("nsflags")
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0)
	switch f.ns {
	case nsRefuse:
		p.jump(unix.BPF_JSET, refusedNS, "eperm", "")
	case nsTrack:
		p.jump(unix.BPF_JSET, unix.CLONE_NEWNS, "notify", "")
	}
	if f.noCgroupNS {
		to := "eperm"
		if f.ns == nsTrack {
			to = "notify"
		}
		p.jump(unix.BPF_JSET, unix.CLONE_NEWCGROUP, to, "")
	}
	p.stmt(unix.BPF_RET|unix.BPF_K, retAllow)
	p.label("allow")
	p.stmt(unix.BPF_RET|unix.BPF_K, retAllow)
	p.label("notify")
	p.stmt(unix.BPF_RET|unix.BPF_K, retUserNotif)
	p.label("enosys")
	p.stmt(unix.BPF_RET|unix.BPF_K, retErrnoNOSYS)
	p.label("eperm")
	p.stmt(unix.BPF_RET|unix.BPF_K, retErrnoEPERM)
	return p.resolve()
}
