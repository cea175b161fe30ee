package fileexec

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"syscall"
)

// Call is a system call of a session process that the session's seccomp
// filter handed to Chaperone and that is not an exec: a link, a rename, a
// truncation by path, or io_uring_setup (see Calls).
type Call struct {
	TID  int    // the calling thread
	Arch uint32 // its ABI, an AUDIT_ARCH_* value
	Nr   int32  // the system call number in that ABI
	Args [6]uint64
}

// CallAnswer answers one Call, exactly once. The consumer's view of a
// seccomp notification (fileexec/execs' Notification).
type CallAnswer interface {
	// Valid reports whether the call still waits: its thread is alive, so
	// what was read of it (its memory, its /proc entries) was its own.
	Valid() bool
	// Continue lets the call run as if no filter were there.
	Continue() error
	// Fail makes the call return -1 with errno.
	Fail(errno syscall.Errno) error
}

// Audit architectures of the ABIs the session's filter notifies.
const (
	auditArchX86_64  = 0xc000003e
	auditArchI386    = 0x40000003
	auditArchAArch64 = 0xc00000b7
	auditArchARM     = 0x40000028
)

// callOp is what a notified call does.
type callOp uint8

const (
	callLink callOp = iota + 1
	callRename
	callTruncate
	callIOURing
)

// Flags of the calls, the same on every architecture.
const (
	atFDCWD         = -100
	atSymlinkFollow = 0x400
	atEmptyPath     = 0x1000
	renameNoReplace = 1 << 0
	renameExchange  = 1 << 1
	renameWhiteout  = 1 << 2
)

// callSpec is a notified call decoded from its registers: for a link or
// rename, the source (oldDir, oldPath) and the target (newDir, newPath);
// for a truncation, the file (oldDir is AT_FDCWD).
type callSpec struct {
	op               callOp
	oldDir, newDir   int32
	oldPath, newPath uint64 // addresses in the caller's memory
	flags            uint32 // AT_SYMLINK_FOLLOW, AT_EMPTY_PATH (linkat); RENAME_* (renameat2)
}

// callKey names a system call of one ABI.
type callKey struct {
	arch uint32
	nr   int32
}

// callNumbers are the calls the session's filter notifies besides execs
// (internal/privdrop's filter lists the same), by ABI.
var callNumbers = map[callKey]string{
	{auditArchX86_64, 86}: "link", {auditArchX86_64, 265}: "linkat",
	{auditArchX86_64, 82}: "rename", {auditArchX86_64, 264}: "renameat", {auditArchX86_64, 316}: "renameat2",
	{auditArchX86_64, 76}: "truncate", {auditArchX86_64, 425}: "io_uring_setup",

	{auditArchI386, 9}: "link", {auditArchI386, 303}: "linkat",
	{auditArchI386, 38}: "rename", {auditArchI386, 302}: "renameat", {auditArchI386, 353}: "renameat2",
	{auditArchI386, 92}: "truncate", {auditArchI386, 193}: "truncate", {auditArchI386, 425}: "io_uring_setup",

	{auditArchAArch64, 37}: "linkat", {auditArchAArch64, 38}: "renameat", {auditArchAArch64, 276}: "renameat2",
	{auditArchAArch64, 45}: "truncate", {auditArchAArch64, 425}: "io_uring_setup",

	{auditArchARM, 9}: "link", {auditArchARM, 330}: "linkat",
	{auditArchARM, 38}: "rename", {auditArchARM, 329}: "renameat", {auditArchARM, 382}: "renameat2",
	{auditArchARM, 92}: "truncate", {auditArchARM, 193}: "truncate", {auditArchARM, 425}: "io_uring_setup",
}

// decodeCall decodes c; ok is false for a call it does not know.
func decodeCall(c Call) (s callSpec, ok bool) {
	name, ok := callNumbers[callKey{c.Arch, c.Nr}]
	if !ok {
		return callSpec{}, false
	}
	a := c.Args
	if c.Arch == auditArchI386 || c.Arch == auditArchARM {
		for i := range a {
			a[i] = uint64(uint32(a[i]))
		}
	}
	fd := func(v uint64) int32 { return int32(uint32(v)) }
	switch name {
	case "link":
		return callSpec{op: callLink, oldDir: atFDCWD, oldPath: a[0], newDir: atFDCWD, newPath: a[1]}, true
	case "linkat":
		return callSpec{op: callLink, oldDir: fd(a[0]), oldPath: a[1], newDir: fd(a[2]), newPath: a[3], flags: uint32(a[4])}, true
	case "rename":
		return callSpec{op: callRename, oldDir: atFDCWD, oldPath: a[0], newDir: atFDCWD, newPath: a[1]}, true
	case "renameat":
		return callSpec{op: callRename, oldDir: fd(a[0]), oldPath: a[1], newDir: fd(a[2]), newPath: a[3]}, true
	case "renameat2":
		return callSpec{op: callRename, oldDir: fd(a[0]), oldPath: a[1], newDir: fd(a[2]), newPath: a[3], flags: uint32(a[4])}, true
	case "truncate":
		return callSpec{op: callTruncate, oldDir: atFDCWD, oldPath: a[0]}, true
	}
	return callSpec{op: callIOURing}, true
}

// errFault is a pointer the caller's memory does not hold: the kernel
// would fail the call with EFAULT.
var errFault = errors.New("bad address")

// errNameTooLong is a path without a NUL in PATH_MAX bytes.
var errNameTooLong = errors.New("file name too long")

// pathMax is PATH_MAX, the NUL included.
const pathMax = 4096

// readPath reads the NUL-terminated path at addr of m (a process's
// memory), as the kernel's getname does: at most pathMax bytes, the NUL
// included. Reads stop at page ends, so that a path just before an
// unmapped page is read whole; the first reads 256 bytes at most.
func readPath(m io.ReaderAt, addr uint64) (string, error) {
	if addr == 0 {
		return "", errFault
	}
	var buf bytes.Buffer
	chunk := make([]byte, 4096)
	want := 256 // most paths are short: a first small read, then whole pages
	for buf.Len() < pathMax {
		if addr > math.MaxInt64-4096 {
			return "", errFault
		}
		n := min(4096-int(addr%4096), pathMax-buf.Len(), want)
		want = 4096
		got, _ := m.ReadAt(chunk[:n], int64(addr))
		if i := bytes.IndexByte(chunk[:got], 0); i >= 0 {
			buf.Write(chunk[:i])
			return buf.String(), nil
		}
		if got < n {
			return "", errFault
		}
		buf.Write(chunk[:got])
		addr += uint64(got)
	}
	return "", errNameTooLong
}

// ownDescriptor returns N when path is /proc/self/fd/N, /proc/TGID/fd/N,
// /proc/thread-self/fd/N or /proc/TGID/task/TID/fd/N of the caller.
func ownDescriptor(path string, tid, tgid int) (string, bool) {
	for _, pre := range []string{
		"/proc/self/fd/", "/proc/" + strconv.Itoa(tgid) + "/fd/",
		"/proc/thread-self/fd/", "/proc/" + strconv.Itoa(tgid) + "/task/" + strconv.Itoa(tid) + "/fd/",
	} {
		if n, ok := strings.CutPrefix(path, pre); ok {
			if v, err := strconv.Atoi(n); err == nil && v >= 0 && strconv.Itoa(v) == n {
				return n, true
			}
		}
	}
	return "", false
}

// splitLast splits a path into its directory and its last name, as the
// kernel's parent lookup does: trailing slashes are not a name.
func splitLast(p string) (dir, name string) {
	t := strings.TrimRight(p, "/")
	if t == "" {
		return "/", ""
	}
	i := strings.LastIndexByte(t, '/')
	switch {
	case i < 0:
		return ".", t
	case i == 0:
		return "/", t[1:]
	}
	return t[:i], t[i+1:]
}
