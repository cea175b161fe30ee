//go:build linux

package fileexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// Nested carries a session's file mediation into the mount namespaces its
// processes make (a sandbox of their own, such as bubblewrap): fanotify
// marks are per mount, and a new namespace's copies of the mounts, and the
// mounts made in it, carry none.
//
// The session's seccomp filter hands it unshare and clone asking for a new
// mount namespace, and mount, umount2 (umount) and pivot_root; its
// listener lets no signal cancel a call once received. For unshare and the
// mount calls, Handle freezes the session's cgroup, waits until no other
// thread of the session runs, lets the call go on, and waits until the
// caller is stopped by the freeze on its way back. A fork cannot go on
// with a freeze pending for its caller, so for a clone every filesystem of
// the caller's namespace is marked as a whole first (the child's copies
// are watched from the moment they exist), and the session is frozen once
// the child exists. Then every mount a process of a nested namespace can
// reach is marked (markNested says which, and what is refused), and only
// then is the session thawed: no process runs a single instruction with a
// reachable mount no mark watches. Files opened through those mounts are
// decided by the path they have in the session's own namespace (Files'
// sessionPath). A call that does not finish in time is killed; a
// reachable mount that cannot be marked kills the session.
//
// A uid-0 agent (NestedOptions.NoCgroupNS) is refused new cgroup
// namespaces; a new mount namespace is refused while the caller's working
// or root directory is under a mount that hides it, and, with file
// mediation but no cgroup to freeze, always. Each refusal is published,
// with a reason that says why and what to do instead.
type Nested struct {
	o   NestedOptions
	log *slog.Logger
	mu  sync.Mutex // one call at a time
	// cloned, when set (tests), runs once a clone's child is seen, before
	// the session is frozen: the child runs meanwhile.
	cloned func()
}

// NewNested returns the Nested of a session. InSession is required.
func NewNested(o NestedOptions) (*Nested, error) {
	if o.InSession == nil {
		return nil, errors.New("fileexec: nested: InSession is required")
	}
	if o.Files != nil && o.Files.byInode {
		return nil, errors.New("fileexec: nested: Files watches files (WatchFiles), not a session's mounts")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Patience <= 0 {
		o.Patience = 10 * time.Second
	}
	return &Nested{o: o, log: o.Logger}, nil
}

// Handles reports whether c is a call Handle answers.
func (n *Nested) Handles(c Call) bool {
	k, _ := decodeNS(c)
	return k != nsNone
}

// Handle answers c, a namespace or mount call (Handles), through a,
// always (unless the thread died).
func (n *Nested) Handle(_ context.Context, c Call, a CallAnswer) {
	log := n.log.With("session", n.o.Session, "tid", c.TID)
	answer := func(err error) {
		if err != nil && !errors.Is(err, unix.ENOENT) {
			log.Warn("fileexec: answer a namespace call", "err", err)
		}
	}
	kind, flags := decodeNS(c)
	tgid, err := tgidOfThread(c.TID)
	if !a.Valid() {
		return
	}
	if err != nil {
		log.Warn("fileexec: find the process of a thread", "err", err)
		answer(a.Fail(unix.EPERM))
		return
	}
	if kind == nsNone || !n.o.InSession(tgid) {
		answer(a.Continue())
		return
	}
	newNS := kind != nsMount && flags&cloneNewNS != 0
	if kind != nsMount && flags&cloneNewCgroup != 0 && n.o.NoCgroupNS {
		n.refuse(tgid, kind, RuleCgroupNS, "a new cgroup namespace is refused to an agent running as uid 0: in one it could mount its cgroups afresh, writable, and move processes out of the session; run the agent as an ordinary user (--user), or leave the cgroup namespace shared (bubblewrap: --unshare-user --unshare-ipc --unshare-pid --unshare-uts, without --unshare-all or --unshare-cgroup)")
		answer(a.Fail(unix.EPERM))
		return
	}
	f := n.o.Files
	if f == nil || (kind != nsMount && !newNS) {
		answer(a.Continue())
		return
	}
	if kind == nsMount && n.inMainNS(f, c.TID) {
		// The session's own namespace: the kernel refuses a process
		// without capabilities there, and nothing changes.
		answer(a.Continue())
		return
	}
	if n.o.Cgroup == "" {
		n.refuse(tgid, kind, RuleNestedMounts, "a new mount namespace needs transparent mode under file mediation: the session's cgroup is frozen while its mounts are marked; run in transparent mode, or with --mediate-files=false")
		answer(a.Fail(unix.EPERM))
		return
	}
	if newNS {
		if _, err := mountNSID([]int{c.TID}); err != nil && !errors.Is(err, unix.ESRCH) {
			n.refuse(tgid, kind, RuleNestedMounts, "a new mount namespace cannot be followed on this kernel ("+err.Error()+"); run with --mediate-files=false, or on Linux 6.11 or later")
			answer(a.Fail(unix.EPERM))
			return
		}
		if err := reachable(c.TID); err != nil {
			n.refuse(tgid, kind, RuleNestedMounts, "a new mount namespace is refused while the working or root directory is under a mount that hides it ("+err.Error()+"): its copies of the mounts there could be reached unwatched; change to a directory reachable from / first")
			answer(a.Fail(unix.EPERM))
			return
		}
	}
	if kind == nsClone {
		n.trackClone(log, c.TID, tgid, a)
		return
	}
	n.track(log, c.TID, tgid, kind, a)
}

// superblocks holds filesystem marks, one per superblock, for as long as
// a clone's new namespace has mounts no mount mark watches.
type superblocks struct {
	f   *Files
	fds []int // O_PATH, one on each superblock marked
}

// markSuperblocks marks every filesystem (but pseudo filesystems) mounted
// in thread tid's mount namespace as a whole: an open through any mount
// of one, in any namespace, copies included, raises an event. An error
// means one could not be marked.
func (f *Files) markSuperblocks(tid int) (*superblocks, error) {
	proc := "/proc/" + strconv.Itoa(tid)
	b, err := os.ReadFile(proc + "/mountinfo")
	if err != nil {
		return nil, err
	}
	mounts, err := parseMountinfo(b)
	if err != nil {
		return nil, err
	}
	root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	byID := map[int]mount{}
	for _, m := range mounts {
		byID[m.ID] = m
	}
	sb := &superblocks{f: f}
	done := map[string]bool{}
	var errs []error
	for _, m := range mounts {
		if pseudoFS(m.FSType) || done[m.Dev] {
			continue
		}
		fd, err := openMountCached(root, m, byID)
		if errors.Is(err, errHidden) {
			continue // unreachable, and so are its copies
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Point, err))
			continue
		}
		if err := unix.FanotifyMark(f.fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, markMask, f.procFD, strconv.Itoa(fd)); err != nil {
			unix.Close(fd)
			errs = append(errs, fmt.Errorf("%s: %w", m.Point, err))
			continue
		}
		sb.fds = append(sb.fds, fd)
		done[m.Dev] = true
	}
	// A filesystem is covered when one of its mounts was marked; one
	// whose mounts are all hidden is reached by none.
	if len(errs) > 0 {
		for _, m := range mounts {
			if !pseudoFS(m.FSType) && !done[m.Dev] {
				if _, err := openMountCached(root, m, byID); errors.Is(err, errHidden) {
					continue
				}
				sb.remove()
				return nil, fmt.Errorf("fileexec: mark the filesystem %s (%s): %w", m.Dev, m.FSType, errors.Join(errs...))
			}
		}
	}
	return sb, nil
}

// remove removes the filesystem marks.
func (sb *superblocks) remove() {
	for _, fd := range sb.fds {
		unix.FanotifyMark(sb.f.fd, unix.FAN_MARK_REMOVE|unix.FAN_MARK_FILESYSTEM, markMask, sb.f.procFD, strconv.Itoa(fd))
		unix.Close(fd)
	}
	sb.fds = nil
}

// trackClone lets a clone asking for a new mount namespace go on, and
// marks the mounts of the child's namespace. A fork fails (and is made
// again) while its caller has a freeze pending, so the session cannot be
// frozen first, as for the other calls: every filesystem of the caller's
// namespace is marked as a whole meanwhile, so that the child's copies of
// its mounts are watched from the moment they exist; then the session is
// frozen (a child made from then on is born frozen), the caller stopped
// on its way back, the mounts of every nested namespace marked, the
// session thawed, and the filesystem marks removed. A mount the child
// makes meanwhile waits for this call to be done.
func (n *Nested) trackClone(log *slog.Logger, tid, tgid int, a CallAnswer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, cg := n.o.Files, n.o.Cgroup
	sb, err := f.markSuperblocks(tid)
	if err != nil {
		n.refuse(tgid, nsClone, RuleNestedMounts, "the filesystems of its mount namespace could not be watched while the new namespace's mounts are marked: "+err.Error())
		a.Fail(unix.EPERM)
		return
	}
	defer sb.remove()
	before, err := threads(cg)
	if err != nil || !a.Valid() {
		a.Fail(unix.EPERM)
		return
	}
	if err := a.Continue(); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			log.Warn("fileexec: answer a namespace call", "err", err)
		}
		return
	}
	// Freezing while the fork is under way would make it fail and be made
	// again: wait for the child (a failed clone has none: the wait ends
	// after a while, and a clone the freeze fails is notified again).
	waitChild(cg, tid, before, time.Second)
	if n.cloned != nil {
		n.cloned()
	}
	if err := freeze(cg, true); err != nil {
		// The filesystem marks stay until the child's mounts are marked:
		// kill the session rather than leave them unwatched.
		n.killSession(log, tgid, nsClone, err)
		return
	}
	defer func() {
		if err := freeze(cg, false); err != nil {
			log.Error("fileexec: thaw the session", "err", err)
		}
	}()
	n.settle(log, tid, tgid, nsClone)
}

// inMainNS says whether thread tid is in the session's own mount
// namespace. A thread blocked in a call cannot change its namespace.
func (n *Nested) inMainNS(f *Files, tid int) bool {
	var st unix.Stat_t
	return unix.Stat("/proc/"+strconv.Itoa(tid)+"/ns/mnt", &st) == nil && st.Ino == f.mainNS
}

// track lets the call of thread tid go on with the session frozen around
// it, and marks the mounts of every nested namespace before the session
// runs again.
func (n *Nested) track(log *slog.Logger, tid, tgid int, kind nsCall, a CallAnswer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cg := n.o.Cgroup
	if err := freeze(cg, true); err != nil {
		log.Warn("fileexec: freeze the session", "err", err)
		n.refuse(tgid, kind, RuleNestedMounts, "the session's processes could not be stopped while its mounts are marked: "+err.Error())
		a.Fail(unix.EPERM)
		return
	}
	defer func() {
		if err := freeze(cg, false); err != nil {
			log.Error("fileexec: thaw the session", "err", err)
		}
	}()
	if err := waitStill(cg, tid, n.o.Patience); err != nil {
		n.refuse(tgid, kind, RuleNestedMounts, "the session's processes did not stop while its mounts are marked: "+err.Error())
		a.Fail(unix.EPERM)
		return
	}
	if !a.Valid() {
		return
	}
	if err := a.Continue(); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			log.Warn("fileexec: answer a namespace call", "err", err)
		}
		return
	}
	n.settle(log, tid, tgid, kind)
}

// settle waits, the session frozen, until thread tid is out of the call
// it was let go on with, then marks the mounts of every nested namespace.
func (n *Nested) settle(log *slog.Logger, tid, tgid int, kind nsCall) {
	cg := n.o.Cgroup
	if err := waitParked(cg, tid, n.o.Patience); err != nil {
		// Still in the call (waiting on a FUSE server the freeze stopped,
		// say): a fatal signal ends it, and nothing it did goes
		// unmarked.
		log.Warn("fileexec: a namespace call did not finish; killing its thread", "err", err)
		unix.Tgkill(tgid, tid, unix.SIGKILL)
		n.publishKilled(tgid, kind, "its "+kind.String()+" call did not finish while the session was stopped to mark its mounts (a mount on a FUSE filesystem served from the session, say): killed")
		if err := waitGone(tid, n.o.Patience); err != nil {
			log.Error("fileexec: a killed thread did not exit", "err", err)
		}
	}
	if err := waitStill(cg, tid, n.o.Patience); err != nil {
		n.killSession(log, tgid, kind, err)
		return
	}
	report, err := n.o.Files.markNested(cg)
	if errors.Is(err, errFilesClosed) {
		log.Debug("fileexec: a namespace call after file mediation ended", "call", kind.String())
		return
	}
	if err != nil {
		n.killSession(log, tgid, kind, err)
		return
	}
	log.Debug("fileexec: marked the mounts of nested namespaces", "call", kind.String(), "namespaces", report.namespaces, "mounts", report.marked)
}

// killSession kills every process of the session: a mount of a nested
// namespace could not be watched.
func (n *Nested) killSession(log *slog.Logger, tgid int, kind nsCall, err error) {
	log.Error("fileexec: a mount of a nested namespace could not be watched; killing the session", "err", err)
	n.publishKilled(tgid, kind, "a mount of a nested namespace could not be watched ("+err.Error()+"): the session was killed")
	if err := os.WriteFile(filepath.Join(n.o.Cgroup, "cgroup.kill"), []byte("1"), 0); err != nil {
		log.Error("fileexec: kill the session", "err", err)
	}
}

// refuse publishes the refusal of a call of process tgid.
func (n *Nested) refuse(tgid int, kind nsCall, rule, reason string) {
	n.publish(tgid, kind, event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule, Rule: rule, Reason: reason + " (denied with EPERM)"})
}

// publishKilled publishes a call whose process, or session, was killed.
func (n *Nested) publishKilled(tgid int, kind nsCall, reason string) {
	n.publish(tgid, kind, event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule, Rule: RuleNestedMounts, Reason: reason})
}

func (n *Nested) publish(tgid int, kind nsCall, v event.Verdict) {
	if n.o.Publish == nil {
		return
	}
	e := &event.Event{Time: n.o.Now(), Kind: event.KindFile, Session: n.o.Session,
		File: &event.File{Access: event.FileUnknown, Op: kind.String()}, Verdict: v}
	if n.o.Process != nil {
		if p, err := n.o.Process(tgid); err == nil {
			e.Process = p
		}
	}
	n.o.Publish(e)
}

// freeze freezes (or thaws) the cgroup v2 directory cg.
func freeze(cg string, on bool) error {
	v := []byte("0")
	if on {
		v = []byte("1")
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.freeze"), v, 0); err != nil {
		return fmt.Errorf("fileexec: freeze %s: %w", cg, err)
	}
	return nil
}

// threads lists the threads of cgroup cg.
func threads(cg string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(cg, "cgroup.threads"))
	if err != nil {
		return nil, fmt.Errorf("fileexec: threads of the session: %w", err)
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		if id, err := strconv.Atoi(f); err == nil {
			out = append(out, id)
		}
	}
	return out, nil
}

// poll calls done until it returns true, an error, or patience runs out;
// it yields at first, then sleeps longer and longer, up to 2 ms.
func poll(patience time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(patience)
	pause := 20 * time.Microsecond
	for try := 0; ; try++ {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fileexec: still waiting after %v", patience)
		}
		if try < 10 {
			runtime.Gosched()
			continue
		}
		time.Sleep(pause)
		pause = min(pause*2, 2*time.Millisecond)
	}
}

// waitStill waits until no thread of the frozen cgroup cg but tid runs:
// each is stopped by the freeze, or asleep in the kernel, which it leaves
// only to stop.
func waitStill(cg string, tid int, patience time.Duration) error {
	return poll(patience, func() (bool, error) {
		ts, err := threads(cg)
		if err != nil {
			return false, err
		}
		for _, t := range ts {
			if t != tid && threadState(t) == 'R' {
				return false, nil
			}
		}
		return true, nil
	})
}

// threadState is the state letter of thread tid ('R' running, 'S', 'D',
// ...), or 0 when it is gone.
func threadState(tid int) byte {
	var buf [512]byte
	b, err := readProc("/proc/"+strconv.Itoa(tid)+"/stat", buf[:])
	if err != nil {
		return 0
	}
	// "pid (comm) S ...": comm may hold anything, so from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// waitParked waits until thread tid, whose call was let go on in the
// frozen cgroup cg, is stopped by the freeze on its way back to user space
// (or waits for the vfork child it made, which is born frozen), or is
// gone, or the whole cgroup is frozen.
func waitParked(cg string, tid int, patience time.Duration) error {
	wchan := "/proc/" + strconv.Itoa(tid) + "/wchan"
	events := filepath.Join(cg, "cgroup.events")
	var buf [128]byte
	return poll(patience, func() (bool, error) {
		b, err := readProc(wchan, buf[:])
		if err != nil {
			return true, nil // gone
		}
		// The freeze stops a thread in get_signal (do_freezer_trap).
		if s := string(b); s == "get_signal" || s == "do_freezer_trap" || s == "wait_for_vfork_done" {
			return true, nil
		}
		ev, err := os.ReadFile(events)
		return err == nil && bytes.Contains(ev, []byte("frozen 1")), nil
	})
}

// waitChild waits, up to patience, until a thread that is not in before
// appears in cgroup cg in another mount namespace than thread tid's, or
// tid is gone.
func waitChild(cg string, tid int, before []int, patience time.Duration) {
	var own unix.Stat_t
	if unix.Stat("/proc/"+strconv.Itoa(tid)+"/ns/mnt", &own) != nil {
		return
	}
	had := map[int]bool{}
	for _, t := range before {
		had[t] = true
	}
	_ = poll(patience, func() (bool, error) {
		ts, err := threads(cg)
		if err != nil || threadState(tid) == 0 {
			return true, nil
		}
		for _, t := range ts {
			var st unix.Stat_t
			if !had[t] && unix.Stat("/proc/"+strconv.Itoa(t)+"/ns/mnt", &st) == nil && st.Ino != own.Ino {
				return true, nil
			}
		}
		return false, nil
	})
}

// waitGone waits until thread tid no longer exists.
func waitGone(tid int, patience time.Duration) error {
	return poll(patience, func() (bool, error) {
		return threadState(tid) == 0 || threadState(tid) == 'Z' || threadState(tid) == 'X', nil
	})
}

// nestedReport says what markNested did.
type nestedReport struct {
	namespaces, marked int
}

// nsState is what markNested knows of one nested mount namespace.
type nsState struct {
	mounts map[int]nestedMount // by id
}

// nestedMount is a mount of a nested namespace, and whether it is marked.
type nestedMount struct {
	mount
	marked bool
}

// is says whether a is m: a mount id the kernel hands out again names
// another mount, of another filesystem or directory.
func (a nestedMount) is(m mount) bool { return a.Dev == m.Dev && a.Root == m.Root }

// errFilesClosed: the session's file mediation ended (Close), and with
// it every mark; there is nothing left to carry.
var errFilesClosed = errors.New("fileexec: file mediation is closed")

// errUnwatched is a mount of a nested namespace that a process could
// reach and no mark watches.
var errUnwatched = errors.New("a mount of a nested namespace cannot be watched")

// markNested marks the mounts of every mount namespace a thread of cgroup
// cg is in, but the session's own, that a process there can reach; the
// session must be frozen. What a process reaches is what is reachable
// from the namespace's root, from its working and root directories, and
// from the directories it holds open: the marked mounts of the namespace
// it came from, or of this one. So, in a namespace new since the last
// call (the copy unshare or clone made), the threads' working and root
// directories must be reachable from its root (a copy of a mount hidden
// under another one is then reachable by none), and every mount made
// since, but the copies a recursive bind makes under its own new mount,
// must be reachable from its root when it is made (made through a
// directory held open under a mount that hides it, none could mark it).
// Every mount reachable from the root, but those of pseudo filesystems,
// is marked; marks stay on a mount hidden later. An error wrapping
// errUnwatched says which rule was broken: a reachable mount is unmarked.
// The nested namespaces' mounts are kept for sessionPath.
func (f *Files) markNested(cg string) (nestedReport, error) {
	var rep nestedReport
	f.markMu.Lock() // Close must not close the group under the marks
	defer f.markMu.Unlock()
	if f.groupClosed {
		return rep, errFilesClosed
	}
	ts, err := threads(cg)
	if err != nil {
		return rep, err
	}
	// Grouped by the namespace's inode (unique among live namespaces),
	// known by its id (never used again: an inode number is).
	byNS := map[uint64][]int{}
	for _, t := range ts {
		var st unix.Stat_t
		if unix.Stat("/proc/"+strconv.Itoa(t)+"/ns/mnt", &st) != nil || st.Ino == f.mainNS {
			continue // gone, or in the session's namespace
		}
		byNS[st.Ino] = append(byNS[st.Ino], t)
	}
	if f.nsStates == nil {
		f.nsStates = map[uint64]*nsState{}
	}
	var errs []error
	live := map[uint64]bool{}
	for _, tids := range byNS {
		id, err := mountNSID(tids)
		if errors.Is(err, unix.ESRCH) {
			continue // every thread is gone
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st, marked, err := f.markNamespace(f.nsStates[id], tids)
		if err != nil {
			errs = append(errs, err)
		}
		if st != nil {
			f.nsStates[id] = st
			live[id] = true
			rep.namespaces++
			rep.marked += marked
		}
	}
	table := map[int]mount{}
	for id, st := range f.nsStates {
		if !live[id] {
			delete(f.nsStates, id) // no thread of the session is there now
			continue
		}
		for mid, m := range st.mounts {
			table[mid] = m.mount
		}
	}
	f.nsMu.Lock()
	f.nested = table
	f.nsMu.Unlock()
	if len(byNS) > 0 {
		f.nestedSeen.Store(true)
	}
	return rep, errors.Join(errs...)
}

// nsGetMntNSID is the ioctl NS_GET_MNTNS_ID (Linux 6.11): a mount
// namespace's 64-bit id, which the kernel never hands out again.
const nsGetMntNSID = 0x8008b705

// mountNSID returns the id of the mount namespace threads tids are in
// (ESRCH when every one is gone).
func mountNSID(tids []int) (uint64, error) {
	for _, t := range tids {
		fd, err := unix.Open("/proc/"+strconv.Itoa(t)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var id uint64
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nsGetMntNSID, uintptr(unsafe.Pointer(&id)))
		unix.Close(fd)
		if errno != 0 {
			return 0, fmt.Errorf("fileexec: the id of a mount namespace (NS_GET_MNTNS_ID, Linux 6.11): %w", errno)
		}
		return id, nil
	}
	return 0, unix.ESRCH
}

// nsEnv is a thread inside a mount namespace, for inMountNS's function:
// root is the namespace's root directory, self the thread's /proc entry
// and proc Chaperone's /proc, both opened before it entered.
type nsEnv struct {
	root, self, proc int
}

// inMountNS runs fn on a thread that entered the mount namespace of
// one of threads tids (its root and working directory are then the
// namespace's root, whatever a process there chroot'ed to). The thread is
// never given back: it ends with fn. ok is false when every thread is
// gone.
func inMountNS(tids []int, fn func(nsEnv) error) (ok bool, err error) {
	nsFD := -1
	for _, t := range tids {
		if nsFD, err = unix.Open("/proc/"+strconv.Itoa(t)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			break
		}
	}
	if nsFD < 0 {
		return false, nil
	}
	defer unix.Close(nsFD)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // and never unlocked
		done <- func() error {
			self, err := unix.Open("/proc/thread-self", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(self)
			proc, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(proc)
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return fmt.Errorf("unshare CLONE_FS: %w", err)
			}
			if err := unix.Setns(nsFD, unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("enter the namespace: %w", err)
			}
			root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(root)
			return fn(nsEnv{root: root, self: self, proc: proc})
		}()
	}()
	if err := <-done; err != nil {
		return true, fmt.Errorf("fileexec: the mount namespace of thread %d: %w", tids[0], err)
	}
	return true, nil
}

// markNamespace marks the mounts of the mount namespace threads tids are
// in, as markNested says; old is what the last call found there (nil: the
// namespace is new). It returns the namespace's state and how many mounts
// it marked; the state is nil when every thread is gone.
func (f *Files) markNamespace(old *nsState, tids []int) (*nsState, int, error) {
	st := &nsState{mounts: map[int]nestedMount{}}
	marked := 0
	var broken []error
	ok, err := inMountNS(tids, func(env nsEnv) error {
		mounts, byID, err := envMounts(env)
		if err != nil {
			return err
		}
		for _, m := range mounts {
			nm := nestedMount{mount: m}
			prev, known := nestedMount{}, false
			if old != nil {
				prev, known = old.mounts[m.ID]
				known = known && prev.is(m)
			}
			switch {
			case pseudoFS(m.FSType):
			case known && prev.marked:
				nm.marked = true // marks stay on a mount
			default:
				fd, err := openMountCached(env.root, m, byID)
				if err == nil {
					err = f.markFD(fd)
					unix.Close(fd)
					nm.marked = err == nil
					if nm.marked {
						marked++
					}
				}
				switch {
				case err == nil:
				case isUnreachable(err) && (known || old == nil || isNew(old, byID[m.Parent])):
					// A copy of a mount hidden where the copy was made
					// from (the namespace's, or a recursive bind's,
					// whose new top mount is reachable), or one hidden
					// since it was marked: reached by no one.
				case isUnreachable(err):
					broken = append(broken, fmt.Errorf("%w: %s (%s) was made where no path from the namespace's root leads (through a directory held open under a mount that hides it)", errUnwatched, m.Point, m.FSType))
				default:
					broken = append(broken, fmt.Errorf("%w: %s (%s): %v", errUnwatched, m.Point, m.FSType, err))
				}
			}
			st.mounts[m.ID] = nm
		}
		if old == nil {
			for _, t := range tids {
				if err := reachableDirs(env, t, byID); err != nil {
					broken = append(broken, fmt.Errorf("%w: %w", errUnwatched, err))
				}
			}
		}
		return nil
	})
	if !ok {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return st, marked, errors.Join(broken...)
}

// isNew says whether m is a mount the last call did not find in old.
func isNew(old *nsState, m mount) bool {
	prev, ok := old.mounts[m.ID]
	return m.ID != 0 && (!ok || !prev.is(m))
}

// isUnreachable says whether opening a mount point failed because no path
// from the root leads to that mount: another mount hides it, or one
// hides a directory on the way.
func isUnreachable(err error) bool {
	return errors.Is(err, errHidden) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
}

// reachableDirs checks that thread tid's working and root directories
// are reachable from the root of the namespace env is in, when they are
// in one of its mounts (byID): at the path they have there, the same
// directory, through the same mount.
func reachableDirs(env nsEnv, tid int, byID map[int]mount) error {
	for _, dir := range []string{"cwd", "root"} {
		name := strconv.Itoa(tid) + "/" + dir
		fd, err := unix.Openat(env.proc, name, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone
		}
		var want, got unix.Statx_t
		err = unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID|unix.STATX_INO, &want)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("thread %d's %s: %w", tid, dir, err)
		}
		m, ok := byID[int(want.Mnt_id)]
		if !ok || pseudoFS(m.FSType) {
			continue // a mount of the namespace it came from, or left unmarked anyway
		}
		var buf [unix.PathMax]byte
		n, err := unix.Readlinkat(env.proc, name, buf[:])
		if err != nil {
			return fmt.Errorf("thread %d's %s: %w", tid, dir, err)
		}
		p := string(buf[:n]) // as this thread sees it: from the namespace's root
		fd, err = openPathCached(env.root, p, byID)
		if err == nil {
			err = unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID|unix.STATX_INO, &got)
			unix.Close(fd)
		}
		if err != nil || got.Mnt_id != want.Mnt_id || got.Ino != want.Ino || got.Dev_major != want.Dev_major || got.Dev_minor != want.Dev_minor {
			return fmt.Errorf("thread %d's %s directory %s is under a mount that hides it", tid, dir, p)
		}
	}
	return nil
}

// openPathCached opens (O_PATH) p from root, in the dentry cache only
// when a FUSE filesystem is mounted in the namespace (byID).
func openPathCached(root int, p string, byID map[int]mount) (int, error) {
	how := func(extra uint64) *unix.OpenHow {
		return &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | extra}
	}
	var fd int
	var err error
	for range 3 {
		if fd, err = unix.Openat2(root, p, how(resolveCached)); !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
	for _, m := range byID {
		if userServed(m.FSType) {
			return -1, err
		}
	}
	return unix.Openat2(root, p, how(0))
}

// reachable checks, before a thread's unshare or clone copies its mount
// namespace, that its working and root directories are reachable from
// the namespace's root: otherwise the copy's mounts there, hidden, would
// be reached through them, unmarked.
func reachable(tid int) error {
	_, err := inMountNS([]int{tid}, func(env nsEnv) error {
		_, byID, err := envMounts(env)
		if err != nil {
			return err
		}
		return reachableDirs(env, tid, byID)
	})
	return err
}

// resolveCached is openat2's RESOLVE_CACHED (5.12): the lookup fails with
// EAGAIN instead of doing I/O or waiting on a filesystem.
const resolveCached = 0x20

// openMountCached is openMount, its lookup made in the dentry cache only
// (RESOLVE_CACHED), so that it never waits on a FUSE server (which a
// frozen session cannot answer). Where that fails (kernfs and others
// revalidate every name; a rename elsewhere can fail it too), it is tried
// again as usual when no FUSE filesystem is on the way.
func openMountCached(root int, m mount, byID map[int]mount) (int, error) {
	var fd int
	var err error
	for range 3 {
		if fd, err = openMount(root, m, resolveCached|unix.RESOLVE_NO_SYMLINKS); !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
	for p, seen := byID[m.Parent], 0; seen < len(byID); p, seen = byID[p.Parent], seen+1 {
		if userServed(p.FSType) {
			return -1, err
		}
		if p.Parent == p.ID {
			break
		}
	}
	return openMount(root, m, unix.RESOLVE_NO_SYMLINKS)
}

// readAllAt reads the file name under directory fd.
// envMounts returns the mounts of the namespace env is in, as its
// mountinfo lists them and by id.
func envMounts(env nsEnv) ([]mount, map[int]mount, error) {
	b, err := readAllAt(env.self, "mountinfo")
	if err != nil {
		return nil, nil, err
	}
	mounts, err := parseMountinfo(b)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[int]mount, len(mounts))
	for _, m := range mounts {
		byID[m.ID] = m
	}
	return mounts, byID, nil
}

func readAllAt(dir int, name string) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	file := os.NewFile(uintptr(fd), name)
	defer file.Close()
	return io.ReadAll(file)
}

// sessionPath returns the path the session knows a file by, the file open
// as fd, whose path p readlink gave (a path in the mount namespace it was
// opened in). A file opened through a mount of the session's own namespace
// is p. One opened through a nested namespace's mount is the path the
// same file has in the session's namespace: p, when it leads there to
// that file, else p translated through the two mounts of its filesystem
// (a bind mount elsewhere), checked to lead to that file; a file without
// a name is p. own is true, and the path p, for a file of a filesystem
// mounted afresh in the nested namespace that holds only what the agent
// put there (ownFS: a tmpfs, a FUSE filesystem it serves): nothing of the
// session's is in it. Anything else has no path the policy could be asked
// about: reason says why it is refused.
func (f *Files) sessionPath(fd int, p string) (sp string, own bool, reason string) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID|unix.STATX_INO|unix.STATX_NLINK|unix.STATX_TYPE, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		return "", false, "the mount the file was opened through could not be found"
	}
	f.nsMu.RLock()
	_, main := f.mainMounts[int(stx.Mnt_id)]
	m, nested := f.nested[int(stx.Mnt_id)]
	var same []mount
	if nested {
		same = f.mainByDev[m.Dev]
	}
	f.nsMu.RUnlock()
	if main {
		return p, false, ""
	}
	if nested && len(same) == 0 && ownFS(m.FSType) {
		return p, true, ""
	}
	if stx.Nlink == 0 {
		return p, false, "" // a file without a name (O_TMPFILE, deleted), which no path reaches
	}
	if c, ok := f.pathOf(p, &stx); ok {
		return c, false, ""
	}
	if nested {
		if fsPath, ok := inMount(m, p); ok {
			for _, sm := range same {
				if c, ok := atMount(sm, fsPath); ok {
					if c, ok := f.pathOf(c, &stx); ok {
						return c, false, ""
					}
				}
			}
		}
		if len(same) == 0 {
			return "", false, "opened through a " + m.FSType + " mount made in a nested namespace, whose files are other files that no path of the session names (denied with EPERM)"
		}
	}
	return "", false, "opened through a mount of a nested namespace, at a path that does not lead to it in the session (a bind mount elsewhere, say): denied with EPERM; open it by its path in the session"
}

// pathOf returns the real path, in the session's namespace, that p leads
// to when it leads to the file stx describes.
func (f *Files) pathOf(p string, stx *unix.Statx_t) (string, bool) {
	flags := unix.O_PATH | unix.O_CLOEXEC
	if stx.Mode&unix.S_IFMT == unix.S_IFLNK {
		flags |= unix.O_NOFOLLOW // a link or rename of the symbolic link itself
	}
	fd, err := unix.Openat2(f.mainRoot, p, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	var st unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_INO, &st) != nil ||
		st.Ino != stx.Ino || st.Dev_major != stx.Dev_major || st.Dev_minor != stx.Dev_minor {
		return "", false
	}
	real, err := readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", false
	}
	return real, true
}
