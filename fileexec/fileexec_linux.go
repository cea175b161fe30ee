//go:build linux

package fileexec

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

const (
	// FAN_REPORT_TID: the event names the thread that opens, whose
	// /proc/<tid>/syscall holds the open flags. FAN_UNLIMITED_QUEUE: a
	// permission event that does not fit a bounded queue is dropped, and a
	// dropped permission event is allowed.
	initFlags = unix.FAN_CLASS_CONTENT | unix.FAN_CLOEXEC | unix.FAN_NONBLOCK |
		unix.FAN_REPORT_TID | unix.FAN_UNLIMITED_QUEUE | unix.FAN_UNLIMITED_MARKS
	// The kernel opens each event's file for the reader with these flags.
	// O_NONBLOCK keeps that open of a FIFO from waiting for a writer.
	eventFlags = unix.O_RDONLY | unix.O_LARGEFILE | unix.O_CLOEXEC | unix.O_NONBLOCK
	// No FAN_ONDIR: opening a directory (to list it) is not decided.
	markMask = unix.FAN_OPEN_PERM | unix.FAN_OPEN_EXEC_PERM

	metadataLen = 24 // sizeof(struct fanotify_event_metadata)

	// An ignore mark for Static, for FAN_OPEN_PERM or FAN_OPEN_EXEC_PERM
	// (each as its own Static answer says). Without
	// FAN_MARK_IGNORED_SURV_MODIFY the kernel clears it when the file is
	// modified. FAN_MARK_EVICTABLE (5.19) keeps the mark from pinning the
	// inode in memory: an evicted inode loses its mark and is decided
	// again.
	staticMarkFlags = unix.FAN_MARK_ADD | unix.FAN_MARK_IGNORED_MASK | unix.FAN_MARK_EVICTABLE

	maxThreadsRemembered = 4096
)

// Files answers the fanotify permission events of the mounts of one mount
// namespace. Its methods are safe for concurrent use.
type Files struct {
	o        FileOptions
	log      *slog.Logger
	group    *os.File // the fanotify group, read through the poller
	fd       int      // its number, for marks and answers
	stopping atomic.Bool
	self     int
	nrs      syscallNrs

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	sem    chan struct{} // running Decide calls

	cache *lru.Cache[cacheKey, event.Verdict]
	// notStatic remembers the files Static said no for (per access kind),
	// so an open answered from the cache does not ask again.
	notStatic *lru.Cache[staticKey, struct{}]
	flightMu  sync.Mutex
	flights   map[cacheKey]*flight

	tgidMu sync.Mutex
	tgids  map[int]int // thread → its group, for threads that are not leaders

	respMu     sync.Mutex
	handlers   sync.WaitGroup
	readerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error

	// markMu orders ignore marks and cached verdicts against Forget: gen
	// counts Forget calls, and a verdict or mark made under an older gen
	// is dropped.
	markMu      sync.Mutex
	gen         atomic.Uint64
	marked      map[inodeKey]struct{} // inodes ignore-marked, to bound them
	noEvictable bool                  // the kernel refused FAN_MARK_EVICTABLE
	groupClosed bool
	staticMarks atomic.Uint64
	// byInode: made by WatchFiles, whose marks are the inodes in watched
	// (markMu), not mounts.
	byInode bool
	watched map[inodeKey]struct{}
	closing bool // Close began: AddPaths marks nothing more (markMu)
	// ahead: the directories whose files are marked ahead, by path
	// (ahead_linux.go; markMu).
	ahead map[string]*aheadDir

	mounts                                            int
	events, outside, ignored, hits, denied, execOpens atomic.Uint64

	// The session's own mount namespace (WatchMounts's) and, since a
	// session process made one, the mounts of the nested namespaces
	// (nested_linux.go), by mount id.
	procFD     int // O_PATH: Chaperone's /proc/self/fd, to mark from any namespace
	mainNS     uint64
	mainRoot   int // O_PATH: the session namespace's root
	mainMounts map[int]mount
	mainByDev  map[string][]mount // its mounts of each filesystem
	nsMu       sync.RWMutex
	nested     map[int]mount
	nestedSeen atomic.Bool
	nsStates   map[uint64]*nsState // by namespace id (NS_GET_MNTNS_ID); markMu
}

// staticKey names a file and an access Static was asked about.
type staticKey struct {
	path string
	exec bool
}

// inodeKey names an inode ignore-marked for Static.
type inodeKey struct{ dev, ino uint64 }

// flight is a decision in progress that other opens with the same key wait
// for, so that a burst of identical opens asks once.
type flight struct {
	done chan struct{}
	v    event.Verdict
	gen  uint64 // Forget calls when the decision began
}

// rawEvent is one permission event as read from the group.
type rawEvent struct {
	mask uint64
	fd   int
	tid  int
	at   time.Time
}

// WatchMounts marks, with FAN_OPEN_PERM and FAN_OPEN_EXEC_PERM, every mount
// of the mount namespace process pid is in, as listed in
// /proc/<pid>/mountinfo and reached through /proc/<pid>/root, except those
// of pseudo filesystems (proc, sysfs, devtmpfs, devpts, cgroup, …) and
// mounts hidden under another mount; then it starts the reader. Mounts
// that cannot be marked are skipped with a debug line; it fails when the
// root mount cannot be. Its error wraps ErrUnavailable when the fanotify
// group cannot be made.
func WatchMounts(pid int, o FileOptions) (*Files, error) {
	f, err := newFiles(o, "watch mounts")
	if err != nil {
		return nil, err
	}
	if f.mounts, err = f.markMounts(pid); err != nil {
		unix.Close(f.procFD)
		unix.Close(f.fd)
		return nil, err
	}
	if err := f.start(); err != nil {
		return nil, err
	}
	return f, nil
}

// WatchFiles marks, with inode marks for FAN_OPEN_PERM and
// FAN_OPEN_EXEC_PERM, each of paths that exists (symbolic links followed),
// and starts the reader: the daemon's file mediation, for agents found
// running in the machine's own namespaces, where marking whole mounts
// would make every process on the machine wait for Chaperone on every
// open. Only the opens of the marked files raise an event; any other open,
// by any process, costs what it costs without Chaperone.
//
// A directory is marked for the files in it (FAN_EVENT_ON_CHILD), and so
// is each directory below it, walked when it is marked (symbolic links not
// followed), up to maxDirMarks directories per path: a directory made
// later, or beyond that bound, is not covered until AddPaths names it.
// Opening a directory itself (to list it) is not an event. A file marked
// is known by its inode: another name for it (a hard link) is covered; a
// file replaced by a new one (renamed over the path, or removed and made
// again) is not, unless its directory is marked, until AddPaths names it
// again. Paths that do not exist are skipped with a debug line; one that
// cannot be marked fails WatchFiles (WatchFiles(nil, o) and then AddPaths
// marks what it can).
//
// The events are handled as WatchMounts's are, through the same options:
// an open by a process for which InSession is false (or by Chaperone) is
// allowed at once, without describing the process, a decision or an
// event. FileOptions.Static is not used (no ignore marks: the marked files
// are the few the policy protects), nor can the Files be given to Nested.
// Its error wraps ErrUnavailable when the fanotify group cannot be made.
func WatchFiles(paths []string, o FileOptions) (*Files, error) {
	o.Static = nil
	f, err := newFiles(o, "watch files")
	if err != nil {
		return nil, err
	}
	f.byInode = true
	if err := f.markPaths(paths); err != nil {
		unix.Close(f.procFD)
		unix.Close(f.fd)
		return nil, err
	}
	if err := f.start(); err != nil {
		return nil, err
	}
	return f, nil
}

// AddPaths marks paths as WatchFiles does (a new user's home, a tree's
// .env made since): marking a file or directory again is harmless. The
// error names the paths that could not be marked; the others are. It
// fails on a Files made by WatchMounts, and after Close.
func (f *Files) AddPaths(paths []string) error {
	if !f.byInode {
		return errors.New("fileexec: add paths: the files watch mounts, not files")
	}
	return f.markPaths(paths)
}

// maxDirMarks bounds the directories marked for one path named to
// WatchFiles or AddPaths, itself included.
const maxDirMarks = 1024

// markPaths marks each of paths that exists with an inode mark, a
// directory and the directories below it for their files.
func (f *Files) markPaths(paths []string) error {
	var errs []error
	for _, p := range paths {
		if err := f.markPath(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f *Files) markPath(p string) error {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		f.log.Debug("fileexec: a path to mark does not exist", "path", p)
		return nil
	}
	if err != nil {
		return fmt.Errorf("fileexec: mark %s: %w", p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fileexec: mark %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := f.markInode(fd, st, markMask); err != nil {
			return fmt.Errorf("fileexec: mark %s: %w", p, err)
		}
		return nil
	}
	if err := f.markInode(fd, st, markMask|unix.FAN_EVENT_ON_CHILD); err != nil {
		return fmt.Errorf("fileexec: mark %s: %w", p, err)
	}
	// The directories below, walked from the one just marked (its path as
	// the kernel names it: p may have been a symbolic link).
	root, err := readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Errorf("fileexec: mark %s: %w", p, err)
	}
	var errs []error
	n := 1
	filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			f.log.Debug("fileexec: directory to mark not read", "path", dir, "err", err)
			return nil
		case !d.IsDir() || dir == root:
			return nil
		case n >= maxDirMarks:
			f.log.Warn("fileexec: too many directories below a marked one: the rest are not marked", "path", root, "marked", n)
			return filepath.SkipAll
		}
		if err := f.markDir(dir); err != nil {
			errs = append(errs, fmt.Errorf("fileexec: mark %s: %w", dir, err))
			return filepath.SkipDir
		}
		n++
		return nil
	})
	return errors.Join(errs...)
}

// markDir marks directory dir, not following a symbolic link (one put
// there since it was listed), for its files.
func (f *Files) markDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	return f.markInode(fd, st, markMask|unix.FAN_EVENT_ON_CHILD)
}

// markInode adds an inode mark for mask on the file open (O_PATH) as fd,
// whose stat is st, through its magic link (fanotify_mark takes no O_PATH
// fd as its object), and counts the inode. Not once Close began: its
// flush would miss the mark, and the group's fd number may be another
// file's by then.
func (f *Files) markInode(fd int, st unix.Stat_t, mask uint64) error {
	f.markMu.Lock()
	defer f.markMu.Unlock()
	if f.closing {
		return errors.New("file mediation closed")
	}
	if err := unix.FanotifyMark(f.fd, unix.FAN_MARK_ADD, mask, f.procFD, strconv.Itoa(fd)); err != nil {
		return fmt.Errorf("fanotify_mark: %w", err)
	}
	f.watched[inodeKey{dev: uint64(st.Dev), ino: st.Ino}] = struct{}{}
	return nil
}

// newFiles makes the group and everything but its marks. what names the
// caller in errors.
func newFiles(o FileOptions, what string) (*Files, error) {
	if o.InSession == nil || o.Process == nil || o.Decider == nil {
		return nil, fmt.Errorf("fileexec: %s: InSession, Process and Decider are required", what)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CacheSize <= 0 {
		o.CacheSize = defaultCacheSize
	}
	cache, err := lru.New[cacheKey, event.Verdict](o.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("fileexec: cache: %w", err)
	}
	notStatic, err := lru.New[staticKey, struct{}](o.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("fileexec: cache: %w", err)
	}
	nrs, ok := syscallsFor(runtime.GOARCH)
	if !ok {
		o.Logger.Warn("fileexec: no system call table for this architecture: the access of every open is unknown (decided as a read and as a write)", "goarch", runtime.GOARCH)
	}
	fd, err := unix.FanotifyInit(initFlags, eventFlags)
	if err != nil {
		return nil, fmt.Errorf("fileexec: fanotify_init: %w: %w", err, ErrUnavailable)
	}
	f := &Files{
		o: o, log: o.Logger, fd: fd, self: os.Getpid(), nrs: nrs,
		sem: make(chan struct{}, maxDeciding), cache: cache, notStatic: notStatic, flights: map[cacheKey]*flight{},
		tgids: map[int]int{}, marked: map[inodeKey]struct{}{}, watched: map[inodeKey]struct{}{}, ahead: map[string]*aheadDir{},
		readerDone: make(chan struct{}), mainRoot: -1,
	}
	if f.procFD, err = unix.Open("/proc/self/fd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fileexec: open /proc/self/fd: %w", err)
	}
	return f, nil
}

// start starts the reader of f, marked; on failure f is closed.
func (f *Files) start() error {
	// The fd is non-blocking, so the File is read through the poller;
	// Close relies on that to wake the reader with a deadline.
	f.group = os.NewFile(uintptr(f.fd), "fanotify")
	if err := f.group.SetReadDeadline(time.Time{}); err != nil {
		f.group.Close()
		unix.Close(f.procFD)
		if f.mainRoot >= 0 {
			unix.Close(f.mainRoot)
		}
		return fmt.Errorf("fileexec: fanotify fd not pollable: %w", err)
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	go f.read()
	return nil
}

// markMounts marks the mounts of pid's namespace, the session's own, and
// returns how many. Each mount point is opened (O_PATH) under pid's root
// with RESOLVE_IN_ROOT, so absolute symlinks and ".." stay inside that
// namespace's tree; the mount reached is checked by its id against
// mountinfo before it is marked through that same fd, so what is marked is
// the namespace's mount and not the caller's mount at the same path. The
// namespace, its root and its mounts are kept: a file opened through a
// nested namespace's mount is named by its path in this one
// (sessionPath).
func (f *Files) markMounts(pid int) (int, error) {
	proc := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(proc + "/mountinfo")
	if err != nil {
		return 0, fmt.Errorf("fileexec: read mounts of pid %d: %w", pid, err)
	}
	mounts, err := parseMountinfo(b)
	if err != nil {
		return 0, err
	}
	var ns unix.Stat_t
	if err := unix.Stat(proc+"/ns/mnt", &ns); err != nil {
		return 0, fmt.Errorf("fileexec: mount namespace of pid %d: %w", pid, err)
	}
	root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("fileexec: open root of pid %d: %w", pid, err)
	}
	marked, rootMarked := 0, false
	var rootErr error
	for _, m := range mounts {
		if pseudoFS(m.FSType) {
			f.log.Debug("fileexec: mount of a pseudo filesystem left unmarked", "mount", m.Point, "fstype", m.FSType)
			continue
		}
		if err := f.markMount(root, m, 0); err != nil {
			if m.Point == "/" {
				rootErr = err
			}
			f.log.Debug("fileexec: mount left unmarked", "mount", m.Point, "fstype", m.FSType, "err", err)
			continue
		}
		if m.Point == "/" {
			rootMarked = true
		}
		marked++
	}
	// Without the root mount almost nothing would be seen.
	if !rootMarked {
		unix.Close(root)
		if rootErr == nil {
			rootErr = errors.New("no usable mount at /")
		}
		return 0, fmt.Errorf("fileexec: mark the root mount of pid %d: %w", pid, rootErr)
	}
	f.mainNS, f.mainRoot = ns.Ino, root
	f.mainMounts, f.mainByDev = map[int]mount{}, map[string][]mount{}
	for _, m := range mounts {
		f.mainMounts[m.ID] = m
		if !pseudoFS(m.FSType) {
			f.mainByDev[m.Dev] = append(f.mainByDev[m.Dev], m)
		}
	}
	return marked, nil
}

// markMount marks m, reached from root (a namespace's root directory) by
// its mount point, with the resolve flags extra besides RESOLVE_IN_ROOT
// and RESOLVE_NO_MAGICLINKS, when the mount reached is m.
func (f *Files) markMount(root int, m mount, extra uint64) error {
	mfd, err := openMount(root, m, extra)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	return f.markFD(mfd)
}

// openMount opens (O_PATH) m's mount point from root, a namespace's root
// directory, with the resolve flags extra besides RESOLVE_IN_ROOT and
// RESOLVE_NO_MAGICLINKS, and checks that the mount reached is m: an
// error wrapping errHidden when another mount hides it.
func openMount(root int, m mount, extra uint64) (int, error) {
	mfd, err := unix.Openat2(root, m.Point, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | extra,
	})
	if err != nil {
		return -1, fmt.Errorf("open: %w", err)
	}
	var st unix.Statx_t
	// AT_STATX_DONT_SYNC: a FUSE server is not asked (it may be frozen).
	err = unix.Statx(mfd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &st)
	switch {
	case err != nil:
		err = fmt.Errorf("statx: %w", err)
	case st.Mask&unix.STATX_MNT_ID == 0:
		err = errors.New("statx: no mount id")
	case int(st.Mnt_id) != m.ID:
		err = fmt.Errorf("path reaches mount %d, not %d (hidden under another mount): %w", st.Mnt_id, m.ID, errHidden)
	}
	if err != nil {
		unix.Close(mfd)
		return -1, err
	}
	return mfd, nil
}

// errHidden is a mount whose mount point leads to another mount.
var errHidden = errors.New("hidden")

// markFD marks the mount of the file open as fd. fanotify_mark takes no
// O_PATH fd as its object; the fd's magic link names exactly the path it
// holds, mount included. It is looked up in Chaperone's own /proc, from
// whatever namespace the calling thread is in.
func (f *Files) markFD(fd int) error {
	if err := unix.FanotifyMark(f.fd, unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, markMask, f.procFD, strconv.Itoa(fd)); err != nil {
		return fmt.Errorf("fanotify_mark: %w", err)
	}
	return nil
}

// read is the one reader. It only reads events and starts their handlers;
// it calls none of the options' functions, so it never waits on a
// decision, and an open by Chaperone itself while a decision is made is
// always answered. The group is read through the runtime's poller, so the
// reader parks instead of holding a thread in a system call, and the
// handler it starts runs at once on the same thread.
func (f *Files) read() {
	defer close(f.readerDone)
	buf := make([]byte, 64<<10)
	for {
		n, err := f.group.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && f.stopping.Load() {
				f.drain(buf)
				return
			}
			f.readFailed(err)
			continue
		}
		f.dispatch(buf[:n])
	}
}

// drain answers what is still queued once the marks are gone, until the
// group stays quiet for a moment: closing the group would allow it.
func (f *Files) drain(buf []byte) {
	for {
		f.group.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := f.group.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, os.ErrClosed) {
				return
			}
			f.readFailed(err)
			continue
		}
		f.dispatch(buf[:n])
	}
}

func (f *Files) readFailed(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	// The kernel could not give an event its fd (too many open files, a
	// file root cannot open) and has denied that open.
	f.log.Warn("fileexec: read fanotify event; the kernel denied it", "err", err)
	time.Sleep(time.Millisecond)
}

// dispatch hands each event of one read to its own goroutine.
func (f *Files) dispatch(b []byte) {
	at := f.o.Now()
	evs, err := parseEvents(b)
	if err != nil {
		f.log.Error("fileexec: fanotify events", "err", err)
	}
	for _, ev := range evs {
		if ev.fd < 0 {
			if ev.mask&unix.FAN_Q_OVERFLOW != 0 {
				f.log.Error("fileexec: fanotify queue overflowed")
			}
			continue
		}
		if ev.mask&markMask == 0 {
			unix.Close(ev.fd)
			continue
		}
		ev.at = at
		f.handlers.Add(1)
		go f.handle(ev)
	}
}

// parseEvents splits a read of the group into its events.
func parseEvents(b []byte) ([]rawEvent, error) {
	var out []rawEvent
	for len(b) > 0 {
		if len(b) < metadataLen {
			return out, fmt.Errorf("fileexec: short event metadata (%d bytes)", len(b))
		}
		evLen := binary.NativeEndian.Uint32(b[0:4])
		if v := b[4]; v != unix.FANOTIFY_METADATA_VERSION {
			return out, fmt.Errorf("fileexec: event metadata version %d, want %d", v, unix.FANOTIFY_METADATA_VERSION)
		}
		if evLen < metadataLen || uint64(evLen) > uint64(len(b)) {
			return out, fmt.Errorf("fileexec: event length %d out of range", evLen)
		}
		out = append(out, rawEvent{
			mask: binary.NativeEndian.Uint64(b[8:16]),
			fd:   int(int32(binary.NativeEndian.Uint32(b[16:20]))),
			tid:  int(int32(binary.NativeEndian.Uint32(b[20:24]))),
		})
		b = b[evLen:]
	}
	return out, nil
}

// handle answers one event, always, and closes its fd.
func (f *Files) handle(ev rawEvent) {
	defer f.handlers.Done()
	allow := f.answer(ev)
	f.events.Add(1)
	if !allow {
		f.denied.Add(1)
	}
	resp := uint32(unix.FAN_DENY)
	if allow {
		resp = unix.FAN_ALLOW
	}
	var b [8]byte // struct fanotify_response
	binary.NativeEndian.PutUint32(b[0:4], uint32(int32(ev.fd)))
	binary.NativeEndian.PutUint32(b[4:8], resp)
	f.respMu.Lock()
	_, err := unix.Write(f.fd, b[:])
	f.respMu.Unlock()
	if err != nil {
		// ENOENT: the opener was killed while it waited.
		f.log.Debug("fileexec: answer event", "tid", ev.tid, "err", err)
	}
	unix.Close(ev.fd) // only after answering: the kernel matches answers by fd number
}

// answer decides whether the open of ev may go ahead. Any failure to learn
// what a session process opens, or how, denies.
func (f *Files) answer(ev rawEvent) bool {
	// Who opens first: a process outside the session is let through
	// without its registers read (which may mean waiting for them).
	tgid, err := f.tgidOf(ev.tid)
	if err != nil {
		// A thread blocked in open exists; not finding it means it was
		// killed and the answer no longer matters.
		f.log.Debug("fileexec: thread of event", "tid", ev.tid, "err", err)
		return false
	}
	if tgid == f.self || !f.o.InSession(tgid) {
		f.outside.Add(1)
		return true
	}
	var access event.FileAccess
	if ev.mask&unix.FAN_OPEN_EXEC_PERM == 0 {
		if access = f.access(ev); access == event.FileExec {
			// The kernel raises an exec's FAN_OPEN_PERM only after its
			// FAN_OPEN_EXEC_PERM for the same open was allowed (decided,
			// or let past by an ignore mark Static put): nothing left to
			// decide.
			f.execOpens.Add(1)
			f.markExecOpen(ev)
			return true
		}
	}
	gen := f.gen.Load() // before any verdict is looked up
	e := &event.Event{Time: ev.at, Kind: event.KindFile, Session: f.o.Session, File: &event.File{}}
	path, err := readlink("/proc/self/fd/" + strconv.Itoa(ev.fd))
	if err != nil {
		return f.fail(e, "the opened file's path could not be read", err)
	}
	if f.nestedSeen.Load() {
		// Opened, maybe, in a mount namespace a session process made: the
		// policy knows files by their paths in the session's own.
		sp, own, reason := f.sessionPath(ev.fd, path)
		if own {
			// A tmpfs (or FUSE filesystem) the agent mounted for
			// itself: only what it put there. Its execs are still
			// decided, by the execs package.
			f.ignored.Add(1)
			return true
		}
		if reason != "" {
			e.File.Path, e.File.Access = path, access
			if access == "" {
				e.File.Access = event.FileExec
			}
			return f.refused(e, tgid, event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule, Rule: RuleNestedPath, Reason: reason})
		}
		path = sp
	}
	if f.o.Ignore != nil && f.o.Ignore(path) {
		f.ignored.Add(1)
		f.markStatic(ev, path, gen, nil, nil)
		return true
	}
	if access == "" {
		access = event.FileExec // FAN_OPEN_EXEC_PERM
	}
	e.File.Path, e.File.Access = path, access
	var st *unix.Stat_t // the opened file, when examined already
	if f.o.Alias != nil || f.o.Protected != nil {
		st = new(unix.Stat_t)
		if err := unix.Fstat(ev.fd, st); err != nil {
			return f.fail(e, "the opened file could not be examined", err)
		}
		if v, refused := f.o.Protected.Open(fileID{uint64(st.Dev), st.Ino}, path, access); refused {
			return f.refused(e, tgid, v)
		}
		if f.o.Alias != nil {
			if orig, ok := f.o.Alias(uint64(st.Dev), st.Ino, path); ok {
				return f.aliased(e, tgid, orig)
			}
		}
	}
	// A cached verdict needs only the executable, not the whole process
	// description (its lineage, argv, digest), which a new process would
	// otherwise cost on its first opens of files already decided.
	if exe, err := readlink("/proc/" + strconv.Itoa(tgid) + "/exe"); err == nil {
		if v, ok := f.cache.Get(cacheKey{path: path, access: access, exe: exe}); ok {
			f.hits.Add(1)
			return f.allowed(ev, path, access, v, gen, st)
		}
	}
	if e.Process, err = f.o.Process(tgid); err != nil || e.Process == nil {
		e.Process = nil
		return f.fail(e, "the opening process could not be identified", err)
	}
	v, shared, gen := f.verdict(cacheKey{path: path, access: access, exe: e.Process.Exe}, e, gen)
	if shared {
		f.hits.Add(1)
	}
	return f.allowed(ev, path, access, v, gen, st)
}

// markExecOpen ignore-marks, for FAN_OPEN_PERM, the program of an exec
// whose second open ev is, when Static holds for opening it: otherwise
// every exec of it raises this event too, only to be let past.
func (f *Files) markExecOpen(ev rawEvent) {
	if f.o.Static == nil || f.nestedSeen.Load() {
		return
	}
	gen := f.gen.Load()
	path, err := readlink("/proc/self/fd/" + strconv.Itoa(ev.fd))
	if err != nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(ev.fd, &st) != nil {
		return
	}
	if f.o.Alias != nil {
		if _, ok := f.o.Alias(uint64(st.Dev), st.Ino, path); ok {
			return
		}
	}
	// No open was decided: Static answers for every access.
	f.allowed(ev, path, "", event.Verdict{Action: event.Allow}, gen, &st)
}

// refused publishes e, an open of a protected file, denied with v whatever
// the policy says, and returns false. Not cached: the verdict costs nothing.
func (f *Files) refused(e *event.Event, tgid int, v event.Verdict) bool {
	if p, err := f.o.Process(tgid); err == nil {
		e.Process = p
	}
	e.Verdict = v
	f.publish(e)
	return false
}

// aliased decides e, an open of the file that is orig by another path, as
// an open of orig, and publishes it under its own path with the verdict.
// Not cached: the path says nothing of the file it leads to.
func (f *Files) aliased(e *event.Event, tgid int, orig string) bool {
	var err error
	if e.Process, err = f.o.Process(tgid); err != nil || e.Process == nil {
		e.Process = nil
		return f.fail(e, "the opening process could not be identified", err)
	}
	as := *e
	file := *e.File
	file.Path = orig
	as.File = &file
	v, _ := f.decide(&as, false)
	if v.Reason != "" {
		v.Reason = "the file is " + orig + " (a hard link to it or moved): " + v.Reason
	} else {
		v.Reason = "the file is " + orig + " (a hard link to it or moved)"
	}
	e.Verdict = v
	f.publish(e)
	return v.Allowed()
}

// allowed reports whether v allows ev's open, ignore-marking the file first
// when it does and Static says so.
func (f *Files) allowed(ev rawEvent, path string, access event.FileAccess, v event.Verdict, gen uint64, st *unix.Stat_t) bool {
	if !v.Allowed() {
		return false
	}
	f.markStatic(ev, path, gen, func() bool {
		k := staticKey{path: path, exec: ev.mask&unix.FAN_OPEN_EXEC_PERM != 0}
		if f.notStatic.Contains(k) {
			return false
		}
		if f.o.Static(path, access, v) {
			return true
		}
		f.markMu.Lock()
		if f.gen.Load() == gen { // not under a policy Forget dropped
			f.notStatic.Add(k, struct{}{})
		}
		f.markMu.Unlock()
		return false
	}, st)
	return true
}

// markStatic puts an ignore mark on the inode of ev's allowed open, for the
// event's kind (FAN_OPEN_PERM, or FAN_OPEN_EXEC_PERM for an exec), when
// static says path's opens of that kind are always allowed (nil: Ignore
// said so), before the open is answered, so the next such open of the
// file raises no event. Only a regular file with one link is marked: the
// mark holds the inode, and a second path to it may have another verdict.
// Nothing is marked when Forget ran since the verdict was looked up (it
// may be stale). At most CacheSize inodes are marked; one more removes
// them all first. st is the opened file's stat when the caller has it
// (nil: it is read here).
func (f *Files) markStatic(ev rawEvent, path string, gen uint64, static func() bool, st *unix.Stat_t) {
	mask := uint64(unix.FAN_OPEN_PERM)
	if ev.mask&unix.FAN_OPEN_EXEC_PERM != 0 {
		mask = unix.FAN_OPEN_EXEC_PERM
	}
	if f.o.Static == nil || ev.mask&mask == 0 || (static != nil && !static()) {
		return
	}
	if st == nil {
		st = new(unix.Stat_t)
		if unix.Fstat(ev.fd, st) != nil {
			return
		}
	}
	access := event.FileAccess("")
	if mask == unix.FAN_OPEN_EXEC_PERM {
		access = event.FileExec
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || !f.linksAllowed(st, path, access) || f.o.Protected.Protects(fileID{uint64(st.Dev), st.Ino}, path) {
		return
	}
	if f.ignoreMark(inodeKey{dev: uint64(st.Dev), ino: st.Ino}, mask, gen, ev.fd, "", path) && mask == unix.FAN_OPEN_PERM {
		f.aheadOf(path, st, gen)
	}
}

// linksAllowed reports whether a file of st, opened as path, may be
// ignore-marked as far as its links go: one link, or StaticLinked says
// every path to it is as good as path for access.
func (f *Files) linksAllowed(st *unix.Stat_t, path string, access event.FileAccess) bool {
	return st.Nlink == 1 || f.o.StaticLinked != nil && f.o.StaticLinked(path, access)
}

// ignoreMark puts an ignore mark for mask on the inode key, reached as
// fanotify_mark's dirfd and name, unless Forget ran since gen or Close
// began; at most CacheSize inodes are marked, one more removes them all
// first. It reports whether the mark was put.
func (f *Files) ignoreMark(key inodeKey, mask uint64, gen uint64, dirfd int, name, path string) bool {
	f.markMu.Lock()
	defer f.markMu.Unlock()
	if f.gen.Load() != gen || f.groupClosed || f.closing {
		return false
	}
	if _, ok := f.marked[key]; !ok && len(f.marked) >= f.o.CacheSize {
		if err := f.flushStatic(); err != nil {
			f.log.Warn("fileexec: remove ignore marks", "err", err)
			return false
		}
	}
	// Marked again even when remembered: an event for a marked inode means
	// its mark was cleared (the file was modified, or its inode evicted).
	flags := uint(staticMarkFlags)
	if f.noEvictable {
		flags &^= unix.FAN_MARK_EVICTABLE
	}
	err := unix.FanotifyMark(f.fd, flags, mask, dirfd, name)
	if errors.Is(err, unix.EINVAL) && !f.noEvictable {
		f.noEvictable = true // before 5.19
		err = unix.FanotifyMark(f.fd, flags&^unix.FAN_MARK_EVICTABLE, mask, dirfd, name)
	}
	if err != nil {
		f.log.Debug("fileexec: ignore mark", "path", path, "err", err)
		return false
	}
	f.marked[key] = struct{}{}
	f.staticMarks.Add(1)
	return true
}

// flushStatic removes every inode mark of the group — only ignore marks
// are put on inodes, the watched mounts carry mount marks, which
// FAN_MARK_FLUSH without FAN_MARK_MOUNT leaves alone. markMu is held.
func (f *Files) flushStatic() error {
	if f.groupClosed {
		return nil
	}
	if err := unix.FanotifyMark(f.fd, unix.FAN_MARK_FLUSH, 0, unix.AT_FDCWD, ""); err != nil {
		return err
	}
	clear(f.marked)
	clear(f.ahead)
	return nil
}

// Forget removes every ignore mark and drops every cached verdict (the
// policy changed): the next open of each file is decided again. An open
// whose verdict was looked up before Forget is still answered with it, but
// neither caches it nor marks its file.
func (f *Files) Forget() error {
	f.markMu.Lock()
	defer f.markMu.Unlock()
	f.gen.Add(1)
	f.cache.Purge()
	f.notStatic.Purge()
	if f.byInode {
		return nil // no ignore marks; its inode marks are the watch itself
	}
	if err := f.flushStatic(); err != nil {
		return fmt.Errorf("fileexec: forget: remove ignore marks: %w", err)
	}
	return nil
}

// tgidOf returns the thread group (the process) of thread tid, which is
// alive: it waits for its open to be answered. Reading /proc/<tid>/status
// costs more than the rest of an answer, so it is the last resort: a
// leader is recognised by pidfd_open, which takes only leaders, and the
// groups of other threads are remembered and checked with one stat of
// /proc/<tgid>/task/<tid>, which exists exactly while tid is a thread of
// tgid.
func (f *Files) tgidOf(tid int) (int, error) {
	f.tgidMu.Lock()
	g, ok := f.tgids[tid]
	f.tgidMu.Unlock()
	if ok {
		var st unix.Stat_t
		if unix.Stat("/proc/"+strconv.Itoa(g)+"/task/"+strconv.Itoa(tid), &st) == nil {
			return g, nil
		}
	}
	if pfd, err := unix.PidfdOpen(tid, 0); err == nil {
		unix.Close(pfd)
		return tid, nil
	}
	var buf [1024]byte // Tgid is on the fourth line
	status, err := readProc("/proc/"+strconv.Itoa(tid)+"/status", buf[:])
	if err != nil {
		return 0, err
	}
	if g, err = parseTgid(status); err != nil {
		return 0, err
	}
	if g != tid {
		f.tgidMu.Lock()
		if len(f.tgids) >= maxThreadsRemembered {
			clear(f.tgids)
		}
		f.tgids[tid] = g
		f.tgidMu.Unlock()
	}
	return g, nil
}

// access tells how ev's thread opens its file: from its registers in
// /proc/<tid>/syscall, which the thread cannot change while it waits.
//
// The kernel shows them only while the thread sleeps and has not been
// woken since it was looked at; otherwise the line says "running". The
// thread queues its event just before it goes to sleep, and every answer
// to any event of the group wakes every thread waiting for one (they share
// one wait queue), so on a loaded machine, with many opens waiting, the
// registers can stay hidden for many milliseconds. The thread waits for
// this answer anyway: the read is tried again, yielding at first and then
// sleeping longer and longer, for up to accessPatience. An access still not
// seen then (or a line that cannot be read) is unknown, which the policy
// decides as a read and as a write: never a guess.
func (f *Files) access(ev rawEvent) event.FileAccess {
	if ev.mask&unix.FAN_OPEN_EXEC_PERM != 0 {
		return event.FileExec
	}
	var buf [512]byte
	path := "/proc/" + strconv.Itoa(ev.tid) + "/syscall"
	var start time.Time
	pause := 20 * time.Microsecond
	for try := 0; ; try++ {
		b, err := readProc(path, buf[:])
		if err != nil {
			return event.FileUnknown
		}
		if !bytes.HasPrefix(b, []byte("running")) {
			return accessFromSyscall(f.nrs, b)
		}
		switch {
		case try < 10:
			runtime.Gosched()
			continue
		case try == 10:
			start = time.Now()
		case time.Since(start) > accessPatience:
			f.log.Warn("fileexec: the opening thread's registers stayed hidden; the access is unknown", "tid", ev.tid, "tries", try)
			return event.FileUnknown
		}
		time.Sleep(pause)
		pause = min(pause+pause/2, 200*time.Microsecond)
	}
}

// accessPatience bounds how long access waits for a thread's registers.
const accessPatience = 5 * time.Second

// readProc reads the start of a /proc file with one read, without the
// runtime poller's bookkeeping that os.ReadFile pays for on every open.
func readProc(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// readlink reads a symbolic link; a target that fills the buffer may be
// cut short and is an error.
func readlink(path string) (string, error) {
	var buf [unix.PathMax]byte
	n, err := unix.Readlink(path, buf[:])
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", fmt.Errorf("readlink %s: target too long", path)
	}
	return string(buf[:n]), nil
}

// fail publishes e denied for reason and returns false.
func (f *Files) fail(e *event.Event, reason string, err error) bool {
	if err != nil {
		reason += ": " + err.Error()
	}
	e.Verdict = event.Verdict{Action: event.Deny, Reason: reason}
	f.publish(e)
	return false
}

func (f *Files) publish(e *event.Event) {
	if f.o.Publish != nil {
		f.o.Publish(e)
	}
}

// verdict returns the verdict for key: from the cache, from a decision in
// progress for the same key (shared is true for both, and e is not
// published), or from Decide, after which e is published with it. gen is
// the Forget count read before; vgen the one the verdict was made under
// (older than gen for a shared decision that began before a Forget).
func (f *Files) verdict(key cacheKey, e *event.Event, gen uint64) (v event.Verdict, shared bool, vgen uint64) {
	if v, ok := f.cache.Get(key); ok {
		return v, true, gen
	}
	f.flightMu.Lock()
	if v, ok := f.cache.Get(key); ok {
		f.flightMu.Unlock()
		return v, true, gen
	}
	if fl, ok := f.flights[key]; ok {
		f.flightMu.Unlock()
		select {
		case <-fl.done:
			return fl.v, true, fl.gen
		case <-f.ctx.Done():
			e.Verdict = stoppedVerdict()
			f.publish(e)
			return e.Verdict, false, gen
		}
	}
	fl := &flight{done: make(chan struct{}), gen: gen}
	f.flights[key] = fl
	f.flightMu.Unlock()

	v, decided := f.decide(e, true)
	if decided {
		f.markMu.Lock()
		if f.gen.Load() == gen { // not decided under a policy Forget dropped
			f.cache.Add(key, v)
		}
		f.markMu.Unlock()
	}
	fl.v = v
	f.flightMu.Lock()
	delete(f.flights, key)
	f.flightMu.Unlock()
	close(fl.done)
	return v, false, gen
}

// decide calls Decide without waiting past Close, and publishes e with the
// verdict when publish is set. decided is false when Close came first.
func (f *Files) decide(e *event.Event, publish bool) (v event.Verdict, decided bool) {
	pub := func(e *event.Event) {
		if publish {
			f.publish(e)
		}
	}
	select {
	case f.sem <- struct{}{}:
	case <-f.ctx.Done():
		e.Verdict = stoppedVerdict()
		pub(e)
		return e.Verdict, false
	}
	ch := make(chan event.Verdict, 1)
	go func() {
		defer func() { <-f.sem }()
		defer func() {
			if r := recover(); r != nil {
				ch <- event.Verdict{Action: event.Deny, Reason: fmt.Sprintf("deciding failed: %v", r)}
			}
		}()
		ch <- f.o.Decider.Decide(f.ctx, e)
	}()
	select {
	case v = <-ch:
		e.Verdict = v.Enforced()
		pub(e)
		return e.Verdict, true
	case <-f.ctx.Done():
		// Decide may still be reading e: publish a copy.
		c := *e
		c.Verdict = stoppedVerdict()
		pub(&c)
		return c.Verdict, false
	}
}

// Stats returns the counts so far.
func (f *Files) Stats() FileStats {
	return FileStats{
		Mounts:    f.mounts,
		Files:     f.watchedCount(),
		Events:    f.events.Load(),
		Outside:   f.outside.Load(),
		Ignored:   f.ignored.Load(),
		ExecOpens: f.execOpens.Load(),
		CacheHits: f.hits.Load(),
		Denied:    f.denied.Load(),
		Static:    f.staticMarks.Load(),
	}
}

func (f *Files) watchedCount() int {
	f.markMu.Lock()
	defer f.markMu.Unlock()
	return len(f.watched)
}

// Close removes the marks, denies every open of a session process still
// waiting for a decision (their Decide contexts are cancelled), answers
// what is left in the queue, and closes the group. Opens made after Close
// are no longer seen. It is safe to call more than once.
func (f *Files) Close() error {
	f.closeOnce.Do(func() {
		f.cancel()
		f.markMu.Lock() // no mark after the flush below
		f.closing = true
		f.markMu.Unlock()
		var errs []error
		flush := uint(unix.FAN_MARK_FLUSH | unix.FAN_MARK_MOUNT)
		if f.byInode {
			flush = unix.FAN_MARK_FLUSH // its inode marks
		}
		if err := unix.FanotifyMark(f.fd, flush, 0, unix.AT_FDCWD, ""); err != nil {
			errs = append(errs, fmt.Errorf("fileexec: remove marks: %w", err))
		}
		f.stopping.Store(true)
		if err := f.group.SetReadDeadline(time.Now()); err != nil {
			errs = append(errs, fmt.Errorf("fileexec: stop reader: %w", err))
		} else {
			<-f.readerDone
		}
		f.handlers.Wait()
		f.markMu.Lock() // Forget must not reach a closed (reused) fd number
		f.groupClosed = true
		f.markMu.Unlock()
		if err := f.group.Close(); err != nil {
			errs = append(errs, fmt.Errorf("fileexec: close fanotify: %w", err))
		}
		if f.mainRoot >= 0 {
			unix.Close(f.mainRoot)
		}
		unix.Close(f.procFD)
		f.closeErr = errors.Join(errs...)
	})
	return f.closeErr
}
