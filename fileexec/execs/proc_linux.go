//go:build linux

package execs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// request is one exec as read from the blocked process.
type request struct {
	tid, tgid int
	path      string // as the program passed it
	resolved  string // absolute, against the cwd or the directory descriptor
	argv      []string
	cwd       string
	kernel    string // the file name the kernel will record
	emptyFD   bool   // execveat(fd, "", AT_EMPTY_PATH): the descriptor itself
	args      execArgs
	root      int // the process's root, once opened (request.rootFD); 0: not yet
}

// errNoEntry is an empty path without AT_EMPTY_PATH: the kernel fails the
// exec with ENOENT before looking at anything.
var errNoEntry = errors.New("empty path")

// tgidOf reads the thread group (process) of thread tid.
func tgidOf(tid int) (int, error) {
	// pidfd_open takes only a thread group's leader: the common case (a
	// single-threaded process that execs) costs two system calls.
	if pfd, err := unix.PidfdOpen(tid, 0); err == nil {
		unix.Close(pfd)
		return tid, nil
	}
	f, err := os.Open("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no Tgid in /proc/%d/status", tid)
}

// readRequest reads the exec's path, argv and cwd out of thread tid, which
// is blocked in the system call. With an error, r holds what could be read
// (nil when not even the path). Another thread of the process may change
// that memory at any time: the verifier checks what the kernel copies.
func readRequest(tid int, c execCall, a execArgs) (*request, error) {
	r := &request{tid: tid, args: a}
	fd, err := unix.Open("/proc/"+strconv.Itoa(tid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "/proc/" + strconv.Itoa(tid) + "/mem", Err: err}
	}
	defer unix.Close(fd)
	mem := memFile(fd)
	if a.path == 0 {
		return nil, errFault
	}
	if r.path, err = readString(mem, a.path, maxPath, errPathTooLong); err != nil {
		return nil, err
	}
	proc := "/proc/" + strconv.Itoa(tid)
	r.cwd, _ = os.Readlink(proc + "/cwd")
	r.emptyFD = c.execveat && a.flags&unix.AT_EMPTY_PATH != 0 && r.path == ""
	switch {
	case r.path == "" && !r.emptyFD:
		return nil, errNoEntry
	case r.emptyFD:
		r.resolved, _ = os.Readlink(proc + "/fd/" + strconv.Itoa(int(a.dirfd)))
	case filepath.IsAbs(r.path):
		r.resolved = filepath.Clean(r.path)
	case a.dirfd == atFDCWD:
		r.resolved = joinAbs(r.cwd, r.path)
	default:
		dir, _ := os.Readlink(proc + "/fd/" + strconv.Itoa(int(a.dirfd)))
		r.resolved = joinAbs(dir, r.path)
	}
	if r.resolved == "" {
		r.resolved = r.path
	}
	r.kernel = kernelFilename(a.dirfd, r.path)
	if len(r.kernel) >= maxPath {
		return r, errPathTooLong
	}
	if r.argv, err = readArgv(mem, a.argv, c.ptrSize); err != nil {
		return r, err
	}
	return r, nil
}

// memFile reads a process's memory through its /proc/<pid>/mem descriptor
// with pread, without an *os.File's poller bookkeeping.
type memFile int

func (m memFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := unix.Pread(int(m), b, off)
	if n < 0 {
		n = 0
	}
	if err == nil && n < len(b) {
		err = io.EOF
	}
	return n, err
}

// joinAbs joins rel to dir when dir is an absolute path (not a readlink of
// a deleted directory or a pseudo file); else "".
func joinAbs(dir, rel string) string {
	if !filepath.IsAbs(dir) || strings.HasSuffix(dir, " (deleted)") {
		return ""
	}
	return filepath.Join(dir, rel)
}

// openTarget opens the file the exec names, as the process sees it: the
// descriptor itself, or the path (request.open). An O_PATH descriptor: a
// FIFO cannot hold the answer.
func openTarget(r *request) (int, error) {
	if r.emptyFD {
		return unix.Open("/proc/"+strconv.Itoa(r.tid)+"/fd/"+strconv.Itoa(int(r.args.dirfd)), unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	return r.open(r.path, r.args.dirfd)
}
