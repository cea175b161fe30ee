//go:build linux

package privdrop

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

func unsafePointer(p *unix.SockFprog) unsafe.Pointer { return unsafe.Pointer(p) }

// Offsets in struct seccomp_data.
const (
	offNR   = 0
	offArch = 4
)

// Return values of a seccomp filter.
const (
	retAllow      = 0x7fff0000 // SECCOMP_RET_ALLOW
	retUserNotif  = 0x7fc00000 // SECCOMP_RET_USER_NOTIF
	retErrnoEPERM = 0x00050000 | uint32(unix.EPERM)
)

// execSyscalls lists, per audit architecture, the execve and execveat
// numbers the filter notifies. Another ABI the kernel runs on the same
// machine (i386 on x86-64, arm on arm64) is notified too: a 32-bit binary
// must not exec unseen.
var execSyscalls = map[string][]struct {
	arch uint32
	nrs  []uint32
}{
	"amd64": {{unix.AUDIT_ARCH_X86_64, []uint32{59, 322}}, {unix.AUDIT_ARCH_I386, []uint32{11, 358}}},
	"arm64": {{unix.AUDIT_ARCH_AARCH64, []uint32{221, 281}}, {unix.AUDIT_ARCH_ARM, []uint32{11, 387}}},
}

// x32SyscallBit marks x32 system calls on x86-64; the filter refuses them
// (nothing uses that ABI, and its exec numbers differ).
const x32SyscallBit = 0x40000000

// execFilter is the classic BPF program of the exec notification filter
// for goarch: execve and execveat of every known ABI go to the listener,
// unknown ABIs get EPERM, the rest is allowed.
func execFilter(goarch string) ([]unix.SockFilter, error) {
	abis, ok := execSyscalls[goarch]
	if !ok {
		return nil, fmt.Errorf("exec notification is not built for %s", goarch)
	}
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	var p []unix.SockFilter
	p = append(p, stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch))
	for _, abi := range abis {
		// if arch != abi.arch: skip this block
		block := 1 + 2*len(abi.nrs) + 1 // load nr, (jeq, ret)… , allow
		if goarch == "amd64" && abi.arch == unix.AUDIT_ARCH_X86_64 {
			block += 2 // the x32 check
		}
		p = append(p, jeq(abi.arch, 0, uint8(block)))
		p = append(p, stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNR))
		if goarch == "amd64" && abi.arch == unix.AUDIT_ARCH_X86_64 {
			p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: x32SyscallBit, Jt: 0, Jf: 1})
			p = append(p, stmt(unix.BPF_RET|unix.BPF_K, retErrnoEPERM))
		}
		for _, nr := range abi.nrs {
			p = append(p, jeq(nr, 0, 1))
			p = append(p, stmt(unix.BPF_RET|unix.BPF_K, retUserNotif))
		}
		p = append(p, stmt(unix.BPF_RET|unix.BPF_K, retAllow))
		// The next block starts by reloading the arch.
		p = append(p, stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch))
	}
	p[len(p)-1] = stmt(unix.BPF_RET|unix.BPF_K, retErrnoEPERM) // no known ABI
	return p, nil
}
