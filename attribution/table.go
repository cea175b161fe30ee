package attribution

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// ErrNotFound is wrapped by the errors returned when a process, a socket or
// a socket's owner does not exist (any more) at lookup time.
var ErrNotFound = errors.New("attribution: not found")

const (
	// userHZ is the unit of the times in /proc/PID/stat (USER_HZ). It is
	// 100 on every Linux ABI Chaperone runs on; sysconf(_SC_CLK_TCK) says
	// the same without cgo.
	userHZ = 100
	// maxLineage bounds a lineage walk: a deeper tree is cut, and a cycle
	// (only possible in a broken or fake tree) ends.
	maxLineage = 64
	// maxCached bounds the process cache; an arbitrary entry is evicted when
	// it is full.
	maxCached = 8192
)

// Table looks processes up in /proc and caches what it read. It is safe for
// concurrent use.
type Table struct {
	fsys   FS
	lookup SocketLookup // asked before /proc/net; nil: /proc/net only
	now    func() time.Time

	mu       sync.Mutex
	btime    int64 // boot time, seconds since the epoch; 0 until read
	cache    map[int]cachedProc
	sessions map[int]*sessionPIDs // by root pid
	// digests holds ExeDigest's answers; digesting the hashes in progress.
	digests   map[exeKey]string
	digesting map[exeKey]*digestCall
	// lastFD is, by pid, the fd at which a socket was last found: where
	// holdsFD looks first, since a process that keeps opening connections
	// gets the next fds up.
	lastFD map[int]int
}

// SocketLookup finds the inode of the TCP socket whose local address is
// local and whose peer is remote. An error wrapping ErrNotFound means it has
// no such socket; SockDiag is the one Chaperone uses.
type SocketLookup func(local, remote netip.AddrPort) (inode uint64, err error)

// TableOption configures a Table.
type TableOption func(*Table)

// WithSocketLookup makes SocketOwner ask lookup for a socket's inode first,
// and read /proc/net/tcp{,6} only when lookup fails or finds nothing (so a
// lookup that is unavailable costs one failed call, never a wrong answer).
// The lookup must see the network namespace of the Table's FS: pair SockDiag
// with OSProc, never with a DirFS tree.
func WithSocketLookup(lookup SocketLookup) TableOption {
	return func(t *Table) { t.lookup = lookup }
}

// WithClock sets the clock that ages the cached session processes of
// SessionSocketOwner; the default is time.Now.
func WithClock(now func() time.Time) TableOption {
	return func(t *Table) { t.now = now }
}

// cachedProc is what does not change while a process runs one program. It is
// valid only for the same start time (pid reuse) and the same comm and exe
// (exec).
type cachedProc struct {
	startTicks uint64
	comm       string
	exe        string
	argv       []string
	uid        int
}

// NewTable returns a Table reading fsys, usually
// NewTable(OSProc(), WithSocketLookup(SockDiag)).
func NewTable(fsys FS, opts ...TableOption) *Table {
	t := &Table{
		fsys: fsys, now: time.Now,
		cache:     make(map[int]cachedProc),
		sessions:  make(map[int]*sessionPIDs),
		digests:   make(map[exeKey]string),
		digesting: make(map[exeKey]*digestCall),
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Process returns what pid is now. Exe and Cwd are empty when they cannot be
// read (another user's process without privileges, a kernel thread); Argv is
// empty for a zombie, a kernel thread, or a process in the midst of an exec.
// Lineage holds the ancestors, parent first, ending with pid 1, with a parent
// that cannot be read, or after 64. StartTime is zero when /proc/stat has no
// boot time. The error wraps ErrNotFound when pid does not exist.
func (t *Table) Process(pid int) (*event.Process, error) {
	return t.ProcessUnder(pid, 0)
}

// ProcessUnder is Process with the lineage ending at root, when root is
// one of pid's ancestors (and nil when pid is root): the ancestors above a
// session's root are not the session's, and not reading them saves a walk
// to pid 1 for every new process. root 0 cuts nothing.
func (t *Table) ProcessUnder(pid, root int) (*event.Process, error) {
	st, err := t.stat(pid)
	if err != nil {
		return nil, err
	}
	dir := strconv.Itoa(pid)
	exe, _ := t.fsys.Readlink(dir + "/exe")
	cwd, _ := t.fsys.Readlink(dir + "/cwd")

	c, ok := t.cached(pid, st, exe)
	if !ok {
		c = cachedProc{startTicks: st.startTicks, comm: st.comm, exe: exe}
		status, err := t.fsys.ReadFile(dir + "/status")
		if err != nil {
			return nil, notFound(fmt.Errorf("attribution: process %d: read status: %w", pid, err))
		}
		uid, ok := parseStatusUID(status)
		if !ok {
			return nil, fmt.Errorf("attribution: process %d: status has no uid", pid)
		}
		c.uid = uid
		if cmdline, err := t.fsys.ReadFile(dir + "/cmdline"); err == nil {
			c.argv = splitCmdline(cmdline)
		}
		// A process caught between its exec's new exe and its new
		// arguments has none yet: read them again next time.
		if len(c.argv) > 0 {
			t.store(pid, c)
		}
	}

	p := &event.Process{
		PID:     pid,
		PPID:    st.ppid,
		Exe:     exe,
		Argv:    slices.Clone(c.argv),
		Cwd:     cwd,
		UID:     c.uid,
		Lineage: t.lineage(st, root),
	}
	if bt, ok := t.bootTime(); ok {
		p.StartTime = time.Unix(bt, 0).Add(time.Duration(st.startTicks) * (time.Second / userHZ)).UTC()
	}
	return p, nil
}

// IsDescendant reports whether pid is root or descends from it now.
func (t *Table) IsDescendant(pid, root int) bool {
	if pid == root {
		return true
	}
	st, err := t.stat(pid)
	if err != nil {
		return false
	}
	found := false
	t.walkAncestors(st, func(p int) bool {
		found = p == root
		return !found
	})
	return found
}

// Descendants returns root followed by every process descending from it, in
// breadth-first order (each generation sorted by pid). It returns nil when
// root does not exist. Threads are not listed: they share their process's
// fds.
func (t *Table) Descendants(root int) []int {
	entries, err := t.fsys.ReadDir(".")
	if err != nil {
		return nil
	}
	children := make(map[int][]int)
	starts := make(map[int]uint64)
	for _, e := range entries {
		pid, ok := parsePID(e.Name())
		if !ok {
			continue
		}
		st, err := t.stat(pid)
		if err != nil {
			continue
		}
		starts[pid] = st.startTicks
		children[st.ppid] = append(children[st.ppid], pid)
	}
	if _, ok := starts[root]; !ok {
		return nil
	}
	out := []int{root}
	seen := map[int]bool{root: true}
	for i := 0; i < len(out); i++ {
		parent := out[i]
		kids := children[parent]
		slices.Sort(kids)
		for _, k := range kids {
			// A child never starts before its parent; if it seems to, the
			// parent's pid was reused between reads.
			if seen[k] || starts[k] < starts[parent] {
				continue
			}
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// lineage returns st's ancestors, parent first.
func (t *Table) lineage(st procStat, root int) []int {
	if root > 0 && st.pid == root {
		return nil
	}
	var out []int
	t.walkAncestors(st, func(p int) bool {
		out = append(out, p)
		return p != root
	})
	return out
}

// walkAncestors calls fn with each ancestor of st, parent first, until fn
// returns false. It stops after pid 1, after a parent that cannot be read
// (that parent is still reported: the child's stat named it), and after
// maxLineage ancestors.
func (t *Table) walkAncestors(st procStat, fn func(pid int) bool) {
	seen := [maxLineage]int{}
	child := st
	for n := 0; n < maxLineage && child.ppid > 0; n++ {
		pp := child.ppid
		if pp == st.pid || slices.Contains(seen[:n], pp) {
			return
		}
		seen[n] = pp
		if pp == 1 {
			fn(pp)
			return
		}
		parent, err := t.stat(pp)
		if err != nil {
			fn(pp)
			return
		}
		if parent.startTicks > child.startTicks {
			// pp was reused after the child's parent exited.
			return
		}
		if !fn(pp) {
			return
		}
		child = parent
	}
}

// SocketOwner returns the pid of a process that holds the TCP socket whose
// local address is local and whose peer is remote, as the owner sees it. In
// explicit-proxy mode the client's socket has local = the client's ephemeral
// address and remote = the proxy's listen address. IPv4 addresses match
// sockets listed either way (a.b.c.d or ::ffff:a.b.c.d).
//
// The socket's inode comes from the Table's SocketLookup when it has one and
// that finds it, else from /proc/net. The pids candidates returns (may be
// nil), usually Descendants of the session's root, are searched first; then
// every process (SessionSocketOwner orders the search for a session). When
// several processes share the socket (after fork), the first found is
// returned. The error wraps ErrNotFound when no socket or no owner matches.
func (t *Table) SocketOwner(local, remote netip.AddrPort, candidates func() []int) (int, error) {
	scan, err := t.newFDScan(local, remote)
	if err != nil {
		return 0, err
	}
	if candidates != nil {
		if pid, ok := scan.search(candidates()); ok {
			return pid, nil
		}
	}
	return scan.searchAll()
}

// fdScan searches processes' fds for one socket, each process at most once.
type fdScan struct {
	t             *Table
	local, remote netip.AddrPort
	inode         uint64
	target        string // the fd link of the socket: socket:[INODE]
	seen          map[int]bool
}

func (t *Table) newFDScan(local, remote netip.AddrPort) (*fdScan, error) {
	inode, err := t.socketInode(local, remote)
	if err != nil {
		return nil, err
	}
	return &fdScan{
		t: t, local: local, remote: remote, inode: inode,
		target: "socket:[" + strconv.FormatUint(inode, 10) + "]",
		seen:   make(map[int]bool),
	}, nil
}

// search returns the first of pids, not searched before, that holds the
// socket.
func (s *fdScan) search(pids []int) (int, bool) {
	for _, pid := range pids {
		if s.seen[pid] {
			continue
		}
		s.seen[pid] = true
		if s.t.holdsFD(pid, s.target) {
			return pid, true
		}
	}
	return 0, false
}

// searchAll searches every process not searched before.
func (s *fdScan) searchAll() (int, error) {
	entries, err := s.t.fsys.ReadDir(".")
	if err != nil {
		return 0, fmt.Errorf("attribution: list processes: %w", err)
	}
	for _, e := range entries {
		pid, ok := parsePID(e.Name())
		if !ok || s.seen[pid] {
			continue
		}
		s.seen[pid] = true
		if s.t.holdsFD(pid, s.target) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("%w: no process holds socket inode %d (%v -> %v)", ErrNotFound, s.inode, s.local, s.remote)
}

// socketInode finds the inode of the socket (local, remote): from the
// Table's SocketLookup when it has one and that finds it, else from
// /proc/net.
func (t *Table) socketInode(local, remote netip.AddrPort) (uint64, error) {
	if t.lookup != nil {
		// Any failure, not found included, leaves the answer to /proc/net,
		// which also lists what the lookup cannot see.
		if ino, err := t.lookup(local, remote); err == nil && ino != 0 {
			return ino, nil
		}
	}
	return t.procNetInode(local, remote)
}

// procNetInode finds the inode of the socket (local, remote) in net/tcp and
// net/tcp6. Sockets without an inode (TIME_WAIT, orphans) are skipped.
func (t *Table) procNetInode(local, remote netip.AddrPort) (uint64, error) {
	local = normalize(local)
	remote = normalize(remote)
	files := []string{"net/tcp", "net/tcp6"}
	if local.Addr().Is6() {
		files = files[1:] // an IPv6 socket is listed only in tcp6
	}
	var inode uint64
	read := 0
	var firstErr error
	for _, name := range files {
		data, err := t.fsys.ReadFile(name)
		if err != nil {
			// tcp6 is missing when the kernel has no IPv6.
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		read++
		parseNetTCP(data, func(l, r netip.AddrPort, ino uint64) bool {
			if ino != 0 && normalize(l) == local && normalize(r) == remote {
				inode = ino
				return false
			}
			return true
		})
		if inode != 0 {
			return inode, nil
		}
	}
	if read == 0 {
		return 0, fmt.Errorf("attribution: read tcp sockets: %w", firstErr)
	}
	return 0, fmt.Errorf("%w: no tcp socket %v -> %v", ErrNotFound, local, remote)
}

// UDPSocketOwner finds the process, among candidates, holding the UDP
// socket whose local address is local: bound to that address, or to the
// wildcard with that port. The error wraps ErrNotFound when no socket or
// no candidate matches.
func (t *Table) UDPSocketOwner(local netip.AddrPort, candidates []int) (int, error) {
	local = normalize(local)
	var inode uint64
	for _, name := range []string{"net/udp", "net/udp6"} {
		data, err := t.fsys.ReadFile(name)
		if err != nil {
			continue // udp6 is missing when the kernel has no IPv6
		}
		parseNetTCP(data, func(l, _ netip.AddrPort, ino uint64) bool {
			l = normalize(l)
			if ino != 0 && l.Port() == local.Port() && (l.Addr() == local.Addr() || l.Addr().IsUnspecified()) {
				inode = ino
				return false
			}
			return true
		})
		if inode != 0 {
			break
		}
	}
	if inode == 0 {
		return 0, fmt.Errorf("%w: no udp socket %v", ErrNotFound, local)
	}
	s := &fdScan{t: t, local: local, inode: inode, target: "socket:[" + strconv.FormatUint(inode, 10) + "]", seen: map[int]bool{}}
	if pid, ok := s.search(candidates); ok {
		return pid, nil
	}
	return 0, fmt.Errorf("%w: none of %d processes holds udp socket %v", ErrNotFound, len(candidates), local)
}

// normalize makes IPv4 and v4-mapped forms, and zoned and unzoned forms,
// compare equal.
func normalize(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

// holdsFD reports whether pid has an open fd whose link is target. Threads
// share the fd table of their process, so pid/fd is the whole of it. The
// fds are tried newest (highest) first: the socket looked up was usually
// just opened, and a process holding thousands of connections would
// otherwise cost a readlink of each for every new one.
func (t *Table) holdsFD(pid int, target string) bool {
	dir := strconv.Itoa(pid) + "/fd/"
	t.mu.Lock()
	last, hinted := t.lastFD[pid]
	t.mu.Unlock()
	if hinted {
		// Listing a directory of thousands of fds costs more than a few
		// links read around the last find.
		for fd := last + fdHintAhead; fd >= max(last-fdHintBehind, 0); fd-- {
			if link, err := t.fsys.Readlink(dir + strconv.Itoa(fd)); err == nil && link == target {
				t.noteFD(pid, fd)
				return true
			}
		}
	}
	fds, err := t.listFDs(pid)
	if err != nil {
		return false // gone, or not ours to read
	}
	for _, fd := range slices.Backward(fds) {
		if hinted && fd >= last-fdHintBehind && fd <= last+fdHintAhead {
			continue // read above
		}
		link, err := t.fsys.Readlink(dir + strconv.Itoa(fd))
		if err == nil && link == target {
			t.noteFD(pid, fd)
			return true
		}
	}
	return false
}

// How far around the last find holdsFD looks first: wide enough for a
// process opening connections from dozens of threads at once, whose
// sockets' fds interleave; a link that is not there costs a failed
// readlink, where a listing of thousands of fds costs milliseconds.
const (
	fdHintAhead  = 64
	fdHintBehind = 64
)

func (t *Table) noteFD(pid, fd int) {
	t.mu.Lock()
	if t.lastFD == nil || len(t.lastFD) > 4096 { // a hint only: start over rather than grow
		t.lastFD = make(map[int]int)
	}
	t.lastFD[pid] = fd
	t.mu.Unlock()
}

// listFDs returns pid's open fds in ascending order.
func (t *Table) listFDs(pid int) ([]int, error) {
	dir := strconv.Itoa(pid) + "/fd"
	if l, ok := t.fsys.(nameLister); ok {
		names, err := l.ReadDirNames(dir)
		if err != nil {
			return nil, err
		}
		fds := make([]int, 0, len(names))
		for _, n := range names {
			if fd, err := strconv.Atoi(n); err == nil {
				fds = append(fds, fd)
			}
		}
		slices.Sort(fds)
		return fds, nil
	}
	entries, err := t.fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fds := make([]int, 0, len(entries))
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	return fds, nil
}

// stat reads and parses pid/stat.
func (t *Table) stat(pid int) (procStat, error) {
	if pid <= 0 {
		return procStat{}, fmt.Errorf("%w: process %d", ErrNotFound, pid)
	}
	data, err := t.fsys.ReadFile(strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, notFound(fmt.Errorf("attribution: process %d: read stat: %w", pid, err))
	}
	st, err := parseStat(data)
	if err != nil {
		return procStat{}, fmt.Errorf("attribution: process %d: %w", pid, err)
	}
	if st.pid != pid {
		return procStat{}, fmt.Errorf("attribution: process %d: stat is for pid %d", pid, st.pid)
	}
	return st, nil
}

// notFound adds ErrNotFound to err when it says the file does not exist
// (ENOENT, or ESRCH from a process that exited while being read).
func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

func (t *Table) cached(pid int, st procStat, exe string) (cachedProc, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.cache[pid]
	if !ok || c.startTicks != st.startTicks || c.comm != st.comm || c.exe != exe {
		return cachedProc{}, false
	}
	return c, true
}

func (t *Table) store(pid int, c cachedProc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.cache[pid]; !ok && len(t.cache) >= maxCached {
		for k := range t.cache {
			delete(t.cache, k)
			break
		}
	}
	t.cache[pid] = c
}

// bootTime reads btime once: the kernel recomputes it on each read and it
// can move by a second, which would make one process's start time move.
func (t *Table) bootTime() (int64, bool) {
	t.mu.Lock()
	bt := t.btime
	t.mu.Unlock()
	if bt != 0 {
		return bt, true
	}
	data, err := t.fsys.ReadFile("stat")
	if err != nil {
		return 0, false
	}
	bt, ok := parseBtime(data)
	if !ok || bt == 0 {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.btime == 0 {
		t.btime = bt
	}
	return t.btime, true
}

// splitCmdline splits /proc/PID/cmdline on NUL. The last argument ends with
// a NUL unless the process rewrote its arguments.
func splitCmdline(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	parts := bytes.Split(b, []byte{0})
	argv := make([]string, len(parts))
	for i, p := range parts {
		argv[i] = string(p)
	}
	return argv
}

// parsePID parses a /proc entry name that is a pid.
func parsePID(name string) (int, bool) {
	if len(name) == 0 || name[0] < '1' || name[0] > '9' {
		return 0, false
	}
	n, ok := parseDec(name)
	if !ok || n > 1<<31-1 {
		return 0, false
	}
	return int(n), true
}
