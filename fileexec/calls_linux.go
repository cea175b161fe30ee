//go:build linux

package fileexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// Rules of the refusals Calls makes itself.
const (
	// RuleIOURing: io_uring is refused in a session.
	RuleIOURing = "io_uring"
	// RuleMagicLink: a link, rename or truncation whose path goes through a
	// /proc magic link (other than one of the caller's descriptors) is
	// refused: resolved here, it would lead to Chaperone's own files.
	RuleMagicLink = "proc_magic_link"
)

// Calls decides the links, renames and truncations by path of a session's
// processes, which its seccomp filter hands over before they happen, and
// refuses io_uring (whose requests link, rename and remove files without
// a system call any filter sees):
//
//   - link, linkat, rename, renameat and renameat2 are decided as a read
//     of the source (event.File{Path: source, Access: read, Op: "link" or
//     "rename", Target: new name}), so that giving a file the policy
//     denies reading an allowed name needs a read the policy allows; with
//     RENAME_EXCHANGE the target, which moves too, is decided the same way.
//   - truncate is decided as a write of the file (Op "truncate").
//   - one that touches a protected file (FileOptions.Protected) is refused
//     whatever the policy.
//   - io_uring_setup fails with EPERM.
//
// The source is the file the call names as the calling thread would
// resolve it (its working directory or directory descriptor, its root,
// symbolic links followed as the call does); the event names its real
// path. A denied call fails with EPERM; a path that does not resolve
// fails, undecided, as the kernel would fail it. Every decision is
// published, before the call is answered.
//
// The paths are read from the caller's memory, which another thread (or
// process) may change before the kernel reads them again once the call
// continues: what the kernel links or renames then is not what was
// decided. That race cannot be closed from user space on a kernel without
// a BPF LSM; protected files do not depend on it (their mounts, see
// MountProtection), nor do files the policy knows by inode (Alias).
type Calls struct {
	o     FileOptions
	log   *slog.Logger
	files *Files
}

// NewCalls returns the Calls of a session. InSession, Process and Decider
// are required, as for WatchMounts; Protected is used when set. files,
// when not nil, is the session's file mediation: a call made in a mount
// namespace a session process made names its files by their paths in the
// session's own namespace, as an open does (see Nested).
func NewCalls(o FileOptions, files *Files) (*Calls, error) {
	if o.InSession == nil || o.Process == nil || o.Decider == nil {
		return nil, errors.New("fileexec: calls: InSession, Process and Decider are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Calls{o: o, log: o.Logger, files: files}, nil
}

// Handle answers c through a, always (unless the thread died): it may
// wait for a decision (a person may be asked) until ctx ends, which
// denies. It is called on its own goroutine for each call.
func (k *Calls) Handle(ctx context.Context, c Call, a CallAnswer) {
	log := k.log.With("session", k.o.Session, "tid", c.TID)
	answer := func(err error) {
		if err != nil && !errors.Is(err, unix.ENOENT) {
			log.Warn("fileexec: answer a system call", "err", err)
		}
	}
	spec, ok := decodeCall(c)
	if !ok {
		answer(a.Continue())
		return
	}
	at := k.o.Now()
	tgid, err := tgidOfThread(c.TID)
	if !a.Valid() {
		return
	}
	if err != nil {
		log.Warn("fileexec: find the process of a thread", "err", err)
		answer(a.Fail(unix.EPERM))
		return
	}
	if !k.o.InSession(tgid) {
		answer(a.Continue())
		return
	}
	e := &event.Event{Time: at, Kind: event.KindFile, Session: k.o.Session, File: &event.File{}}
	if p, err := k.o.Process(tgid); err == nil {
		e.Process = p
	}
	if spec.op == callIOURing {
		e.File.Access, e.File.Op = event.FileUnknown, "io_uring"
		e.Verdict = event.Verdict{Action: event.Deny, Rule: RuleIOURing, DecidedBy: event.DecidedByRule,
			Reason: "io_uring is refused in a session: its requests open, link, rename and remove files without a system call the sandbox sees (denied with EPERM)"}
		k.publish(e)
		answer(a.Fail(unix.EPERM))
		return
	}
	r, errno := k.read(c.TID, tgid, spec)
	defer r.close()
	if !a.Valid() {
		return // the thread died: what was read may be another's
	}
	if errno == unix.EPERM && r != nil && r.magic {
		e.File.Path, e.File.Access, e.File.Op, e.File.Target = r.given[0], event.FileRead, spec.opName(), r.given[1]
		if spec.op == callTruncate {
			e.File.Access = event.FileWrite
		}
		e.Verdict = event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule, Rule: RuleMagicLink,
			Reason: errMagicLink.Error() + " (/proc/self and the like lead elsewhere from Chaperone): not decided, denied with EPERM"}
		k.publish(e)
		answer(a.Fail(unix.EPERM))
		return
	}
	if errno != 0 {
		answer(a.Fail(errno))
		return
	}
	if k.files != nil && k.files.nestedSeen.Load() {
		if reason := k.sessionPaths(r); reason != "" {
			e.File.Path, e.File.Access, e.File.Op, e.File.Target = r.src.path, event.FileRead, spec.opName(), r.dstPath
			if spec.op == callTruncate {
				e.File.Access = event.FileWrite
			}
			e.Verdict = event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule, Rule: RuleNestedPath, Reason: reason}
			k.publish(e)
			answer(a.Fail(unix.EPERM))
			return
		}
	}
	switch spec.op {
	case callTruncate:
		e.File.Path, e.File.Access, e.File.Op = r.src.path, event.FileWrite, "truncate"
	case callLink, callRename:
		e.File.Path, e.File.Access, e.File.Op, e.File.Target = r.src.path, event.FileRead, spec.opName(), r.dstPath
	}
	v, ok := k.o.Protected.change(change{
		op: e.File.Op, src: r.src.id, srcPath: r.src.path,
		dst: r.dst.id, dstPath: r.dstPath, dstExists: r.dstExists,
	})
	if !ok {
		v = k.decide(ctx, e)
		if v.Allowed() && spec.op == callRename && spec.flags&renameExchange != 0 && r.dstExists {
			// The target moves to the source's name: a read of it too.
			x := *e
			xf := event.File{Path: r.dst.path, Access: event.FileRead, Op: "rename", Target: r.src.path}
			x.File = &xf
			if xv := k.decide(ctx, &x); !xv.Allowed() {
				v = xv
				e = &x
			}
		}
	}
	if !a.Valid() {
		return
	}
	// Recorded before the call goes on: nothing happens without a record.
	if !v.Allowed() {
		v.Action = event.Deny
	}
	e.Verdict = v
	k.publish(e)
	if v.Allowed() {
		answer(a.Continue())
	} else {
		answer(a.Fail(unix.EPERM))
	}
}

// sessionPaths names the files of r by their paths in the session's own
// mount namespace (Files.sessionPath), or says why one has none.
func (k *Calls) sessionPaths(r *callFiles) string {
	sp, _, reason := k.files.sessionPath(r.src.fd, r.src.path)
	if reason != "" {
		return reason
	}
	r.src.path = sp
	if r.dstExists {
		if sp, _, reason := k.files.sessionPath(r.dst.fd, r.dst.path); reason == "" {
			r.dst.path, r.dstPath = sp, sp
		}
	}
	return ""
}

// decide asks Decide about e, giving up (deny) when ctx ends first.
func (k *Calls) decide(ctx context.Context, e *event.Event) event.Verdict {
	ch := make(chan event.Verdict, 1)
	c := *e // Decide may keep it after ctx ends
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- event.Verdict{Action: event.Deny, Reason: fmt.Sprintf("deciding failed: %v", r)}
			}
		}()
		ch <- k.o.Decider.Decide(ctx, &c)
	}()
	select {
	case v := <-ch:
		return v.Enforced()
	case <-ctx.Done():
		return stoppedVerdict()
	}
}

func (k *Calls) publish(e *event.Event) {
	if k.o.Publish != nil {
		k.o.Publish(e)
	}
}

// resolved is a file a call names, opened O_PATH.
type resolved struct {
	fd   int
	id   fileID
	path string // its real path
}

// opName is the event's Op for the call.
func (s callSpec) opName() string {
	switch s.op {
	case callLink:
		return "link"
	case callRename:
		return "rename"
	case callTruncate:
		return "truncate"
	}
	return "io_uring"
}

// callFiles is what a link, rename or truncation acts on.
type callFiles struct {
	src       resolved
	dst       resolved // the target, when it exists
	dstExists bool
	dstPath   string    // the target's directory resolved, and its name
	given     [2]string // the paths as the caller wrote them
	magic     bool      // a path went through a magic link: refused
}

func (r *callFiles) close() {
	if r == nil {
		return
	}
	for _, fd := range []int{r.src.fd, r.dst.fd} {
		if fd > 0 {
			unix.Close(fd)
		}
	}
}

// read reads the paths of a call of thread tid out of its memory and
// resolves them. A non-zero errno is what the kernel would fail the call
// with (a path it cannot resolve), or EPERM for a path that goes through
// a /proc magic link other than one of the process's own descriptors.
func (k *Calls) read(tid, tgid int, s callSpec) (*callFiles, unix.Errno) {
	mem, err := unix.Open("/proc/"+strconv.Itoa(tid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, unix.EPERM
	}
	defer unix.Close(mem)
	m := memAt(mem)
	oldPath, err := readPath(m, s.oldPath)
	if err != nil {
		return nil, pathErrno(err)
	}
	r := &callFiles{src: resolved{fd: -1}, dst: resolved{fd: -1}, given: [2]string{oldPath}}
	newPath := ""
	if s.op != callTruncate {
		if newPath, err = readPath(m, s.newPath); err != nil {
			return nil, pathErrno(err)
		}
		r.given[1] = newPath
	}
	follow := s.op == callTruncate || (s.op == callLink && s.flags&atSymlinkFollow != 0)
	emptyPath := s.op == callLink && s.flags&atEmptyPath != 0 && oldPath == ""
	if r.src, err = k.resolve(tid, tgid, s.oldDir, oldPath, follow, emptyPath); err != nil {
		r.src.fd = -1
		r.magic = errors.Is(err, errMagicLink)
		return r, resolveErrno(err)
	}
	if s.op == callTruncate {
		return r, 0
	}
	dir, name := splitLast(newPath)
	parent, err := k.resolve(tid, tgid, s.newDir, dir, true, false)
	if err != nil {
		r.magic = errors.Is(err, errMagicLink)
		return r, resolveErrno(err)
	}
	defer unix.Close(parent.fd)
	r.dstPath = strings.TrimSuffix(parent.path, "/") + "/" + name
	if name == "" || name == "." || name == ".." {
		return r, 0 // the kernel refuses these itself
	}
	if fd, err := unix.Openat(parent.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			r.dst = resolved{fd: fd, id: fileID{uint64(st.Dev), st.Ino}, path: r.dstPath}
			r.dstExists = true
		} else {
			unix.Close(fd)
		}
	}
	return r, 0
}

// errMagicLink is a path through a /proc magic link that is not one of
// the caller's own descriptors.
var errMagicLink = errors.New("the path goes through a /proc magic link")

// resolve opens, O_PATH, the file that thread tid of process tgid names
// by path relative to dirfd (AT_FDCWD: its working directory), as it
// would resolve it: absolute paths from its root, symbolic links followed
// on the way and, with follow, at the end. emptyPath: dirfd itself.
//
// It resolves in this process: a symbolic link to /proc/self would lead
// here rather than to the caller, so magic links are not followed, except
// a path that is exactly one of the caller's descriptors (/proc/self/fd/N,
// the way to link a file held open).
func (k *Calls) resolve(tid, tgid int, dirfd int32, path string, follow, emptyPath bool) (resolved, error) {
	proc := "/proc/" + strconv.Itoa(tid)
	if emptyPath {
		return openResolved(unix.AT_FDCWD, proc+"/fd/"+strconv.Itoa(int(dirfd)), 0, 0)
	}
	if path == "" {
		return resolved{}, unix.ENOENT
	}
	flags := unix.O_PATH | unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	if strings.HasPrefix(path, "/") {
		if fd, ok := ownDescriptor(path, tid, tgid); ok {
			if !follow {
				return openResolved(unix.AT_FDCWD, "/proc/"+strconv.Itoa(tgid)+"/fd/"+fd, unix.O_NOFOLLOW, 0)
			}
			return openResolved(unix.AT_FDCWD, "/proc/"+strconv.Itoa(tgid)+"/fd/"+fd, 0, 0)
		}
		root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return resolved{}, err
		}
		defer unix.Close(root)
		return openResolved(root, path, flags, unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
	}
	base := proc + "/cwd"
	if dirfd != atFDCWD {
		base = proc + "/fd/" + strconv.Itoa(int(dirfd))
	}
	dir, err := unix.Open(base, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) && dirfd != atFDCWD {
			return resolved{}, unix.EBADF
		}
		return resolved{}, err
	}
	defer unix.Close(dir)
	return openResolved(dir, path, flags, unix.RESOLVE_NO_MAGICLINKS)
}

// openResolved opens path under dir with flags and resolve (openat2),
// and describes what it reached.
func openResolved(dir int, path string, flags int, resolve uint64) (resolved, error) {
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: uint64(flags | unix.O_PATH | unix.O_CLOEXEC), Resolve: resolve})
	if errors.Is(err, unix.ELOOP) && resolve&unix.RESOLVE_NO_MAGICLINKS != 0 {
		// A symbolic link loop, or a magic link: tell them apart.
		fd2, err2 := unix.Openat2(dir, path, &unix.OpenHow{Flags: uint64(flags | unix.O_PATH | unix.O_CLOEXEC), Resolve: resolve &^ unix.RESOLVE_NO_MAGICLINKS})
		if err2 == nil {
			unix.Close(fd2)
		}
		if !errors.Is(err2, unix.ELOOP) {
			return resolved{}, errMagicLink
		}
	}
	if err != nil {
		return resolved{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return resolved{}, err
	}
	real, err := readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		unix.Close(fd)
		return resolved{}, err
	}
	return resolved{fd: fd, id: fileID{uint64(st.Dev), st.Ino}, path: real}, nil
}

// pathErrno is the kernel's errno for a path that cannot be read.
func pathErrno(err error) unix.Errno {
	if errors.Is(err, errNameTooLong) {
		return unix.ENAMETOOLONG
	}
	return unix.EFAULT
}

// resolveErrno is the errno a call fails with when its path does not
// resolve: the kernel's own (ENOENT, ENOTDIR, ELOOP, …), or EPERM.
func resolveErrno(err error) unix.Errno {
	var errno unix.Errno
	if errors.As(err, &errno) && errno != 0 {
		return errno
	}
	return unix.EPERM
}

// tgidOfThread returns the process of thread tid.
func tgidOfThread(tid int) (int, error) {
	if pfd, err := unix.PidfdOpen(tid, 0); err == nil {
		unix.Close(pfd)
		return tid, nil
	}
	var buf [1024]byte
	status, err := readProc("/proc/"+strconv.Itoa(tid)+"/status", buf[:])
	if err != nil {
		return 0, err
	}
	return parseTgid(status)
}

// memAt reads a process's memory through its /proc/<tid>/mem descriptor.
type memAt int

func (m memAt) ReadAt(b []byte, off int64) (int, error) {
	n, err := unix.Pread(int(m), b, off)
	if n < 0 {
		n = 0
	}
	if err == nil && n < len(b) {
		err = io.EOF
	}
	return n, err
}
