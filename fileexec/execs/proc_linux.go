//go:build linux

package execs

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

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
// descriptor itself, or the resolved path inside the process's root
// (RESOLVE_IN_ROOT keeps absolute symlinks inside it too). An O_PATH
// descriptor: a FIFO cannot hold the answer.
func openTarget(r *request) (*os.File, error) {
	proc := "/proc/" + strconv.Itoa(r.tid)
	// O_PATH: opened without reading it, so no fanotify permission event
	// (the session's mounts are watched, by this process); digests.of
	// reopens it for reading only to hash a file not seen before.
	const flags = unix.O_PATH | unix.O_CLOEXEC
	if r.emptyFD {
		return os.OpenFile(proc+"/fd/"+strconv.Itoa(int(r.args.dirfd)), flags, 0)
	}
	if !filepath.IsAbs(r.resolved) {
		return nil, fmt.Errorf("no absolute path for %q", r.path)
	}
	root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, r.resolved, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_IN_ROOT})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), r.resolved), nil
}

// fileKey names a version of a file: a write changes ctime, and ctime
// cannot be set back from user space.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

// digests caches sha256 digests of executables by fileKey. Bounded: when
// full, an arbitrary entry goes.
type digests struct {
	mu  sync.Mutex
	max int
	m   map[fileKey]string
}

func newDigests(max int) *digests { return &digests{max: max, m: make(map[fileKey]string)} }

// of returns "sha256:<hex>" of the regular file f, an O_PATH descriptor:
// a version seen before costs an fstat, a new one is reopened to be read.
func (d *digests) of(f *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", errors.New("not a regular file")
	}
	k := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
	d.mu.Lock()
	s, ok := d.m[k]
	d.mu.Unlock()
	if ok {
		return s, nil
	}
	rf, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	defer rf.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rf); err != nil {
		return "", err
	}
	s = "sha256:" + hex.EncodeToString(h.Sum(nil))
	d.mu.Lock()
	if len(d.m) >= d.max {
		for old := range d.m {
			delete(d.m, old)
			break
		}
	}
	d.m[k] = s
	d.mu.Unlock()
	return s, nil
}
