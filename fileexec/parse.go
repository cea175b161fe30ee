package fileexec

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
)

// mount is one line of /proc/<pid>/mountinfo.
type mount struct {
	ID     int    // the mount id, as statx's STATX_MNT_ID reports it
	Parent int    // the parent mount's id (its own for a namespace's root)
	Dev    string // the filesystem's device, "major:minor"
	Root   string // the directory of the filesystem mounted, unescaped
	Point  string // the mount point, relative to the process's root, unescaped
	FSType string
}

// parseMountinfo reads proc_pid_mountinfo(5) lines:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
func parseMountinfo(b []byte) ([]mount, error) {
	var out []mount
	for n, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, " ")
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			return nil, fmt.Errorf("fileexec: mountinfo line %d: no filesystem type", n+1)
		}
		id, err := strconv.Atoi(f[0])
		if err != nil || id < 0 {
			return nil, fmt.Errorf("fileexec: mountinfo line %d: bad mount id %q", n+1, f[0])
		}
		parent, err := strconv.Atoi(f[1])
		if err != nil || parent < 0 {
			return nil, fmt.Errorf("fileexec: mountinfo line %d: bad parent id %q", n+1, f[1])
		}
		point := unescapeOctal(f[4])
		if !strings.HasPrefix(point, "/") {
			return nil, fmt.Errorf("fileexec: mountinfo line %d: mount point %q is not absolute", n+1, point)
		}
		// The root is a path in the filesystem, or what a pseudo
		// filesystem's show_path says ("net:[4026531840]").
		out = append(out, mount{ID: id, Parent: parent, Dev: f[2], Root: unescapeOctal(f[3]), Point: point, FSType: unescapeOctal(f[sep+1])})
	}
	return out, nil
}

// unescapeOctal undoes the kernel's \ooo escaping of space, tab, newline
// and backslash in mountinfo fields.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// pseudoFS reports whether mounts of this filesystem type are left
// unmarked. Their files are not data an agent could take or change through
// an open that matters here, opening their device nodes in Chaperone's own
// context (the kernel does, to hand an event its fd) has side effects or
// fails (/dev/tty), and /proc is opened all the time. Files reached through
// their magic links (/proc/self/root/..., /proc/<pid>/fd/N) are still seen:
// the open lands on the marked mount of the file itself.
func pseudoFS(fstype string) bool {
	switch fstype {
	case "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs",
		"debugfs", "tracefs", "bpf", "mqueue", "pstore", "configfs", "fusectl",
		"binfmt_misc", "efivarfs", "autofs", "rpc_pipefs", "nsfs", "selinuxfs",
		"hugetlbfs":
		return true
	}
	return false
}

// syscallNrs are the numbers of the system calls that open files, for one
// architecture; -1 where the architecture has no such call.
type syscallNrs struct {
	open, creat, openat, openat2, openByHandleAt, execve, execveat, uselib int64
}

// syscallsFor returns the table of GOARCH goarch; ok is false for an
// architecture without one, whose table matches nothing.
func syscallsFor(goarch string) (nrs syscallNrs, ok bool) {
	switch goarch {
	case "amd64":
		return syscallNrs{open: 2, creat: 85, openat: 257, openat2: 437, openByHandleAt: 304, execve: 59, execveat: 322, uselib: 134}, true
	case "arm64":
		return syscallNrs{open: -1, creat: -1, openat: 56, openat2: 437, openByHandleAt: 265, execve: 221, execveat: 281, uselib: -1}, true
	}
	return syscallNrs{-1, -1, -1, -1, -1, -1, -1, -1}, false
}

// Open flags, the same on every Linux architecture Chaperone supports
// (asm-generic/fcntl.h values, which amd64 shares).
const (
	oWronly = 0o1
	oRdwr   = 0o2
	oCreat  = 0o100
	oTrunc  = 0o1000
	oAppend = 0o2000
	oWrite  = oWronly | oRdwr | oCreat | oTrunc | oAppend
)

// accessFromSyscall tells how a blocked thread opens a file from its
// /proc/<tid>/syscall line ("nr arg0 … arg5 sp pc", arguments in hex): the
// open flags are in its registers, which the thread cannot change while it
// waits. open, openat and open_by_handle_at with any of O_WRONLY, O_RDWR,
// O_CREAT, O_TRUNC or O_APPEND, and creat, are writes; without them, reads.
// execve, execveat and uselib open the program (or its interpreter): exec.
// Anything else is unknown: openat2, whose flags the kernel copied from
// memory the process can change again before they could be read here; an
// io_uring request (the thread is in io_uring_enter, or is an io_uring
// worker, and the request's flags live in memory shared with the process);
// a line without registers ("running") or one that cannot be parsed.
func accessFromSyscall(nrs syscallNrs, line []byte) event.FileAccess {
	f := strings.Fields(string(line))
	if len(f) < 7 {
		return event.FileUnknown // "running", or "-1 sp pc" (not in a system call)
	}
	nr, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || nr < 0 {
		return event.FileUnknown
	}
	flagsAt := -1
	switch nr {
	case nrs.execve, nrs.execveat, nrs.uselib:
		return event.FileExec
	case nrs.creat:
		return event.FileWrite
	case nrs.open:
		flagsAt = 1
	case nrs.openat, nrs.openByHandleAt:
		flagsAt = 2
	default: // openat2, io_uring_enter and the rest
		return event.FileUnknown
	}
	flags, err := strconv.ParseUint(strings.TrimPrefix(f[1+flagsAt], "0x"), 16, 64)
	if err != nil {
		return event.FileUnknown
	}
	if flags&oWrite != 0 {
		return event.FileWrite
	}
	return event.FileRead
}

// parseTgid returns the Tgid of a /proc/<tid>/status file.
func parseTgid(status []byte) (int, error) {
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("fileexec: bad Tgid %q", bytes.TrimSpace(v))
			}
			return n, nil
		}
	}
	return 0, errors.New("fileexec: no Tgid in status")
}
