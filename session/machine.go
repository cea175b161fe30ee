package session

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	osuser "os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/fileexec"
	"github.com/chaperone-dev/chaperone/proxy"
	"github.com/chaperone-dev/chaperone/redirect"
)

// ModeDaemon is the mode of the sessions of agents a daemon found: the
// machine's marked processes, captured without a cgroup of their own.
const ModeDaemon = "daemon"

// Machine makes a session the machine's daemon: instead of running one
// agent in a cgroup of its own, it captures every process the kernel marks
// as a possible agent when it execs, makes each agent and its descendants
// a session of their own (one id, start and end, identity and trace each),
// and passes everything else on untouched.
type Machine struct {
	// Candidates are the command names (comm, at most 15 bytes) whose exec
	// marks a process for classification, besides any process exec'd with
	// CHAPERONE_AGENT in its environment.
	Candidates []string
	// PinDir is where the kernel hooks are pinned (on bpffs), so that they
	// outlive the daemon: its marked processes' connections then fail
	// rather than go out unmediated.
	PinDir string
	// Classify tells whether a marked process is an agent, and its name.
	// A process that is not is unmarked; what it connected meanwhile is
	// relayed untouched.
	Classify func(pid int) (agent string, ok bool)
}

// machineScope is a daemon's scope: the machine's marked processes, each
// agent's a session of its own.
type machineScope struct {
	s          *Session
	candidates []string
	pinDir     string
	runParent  string // the cgroup of run sessions' cgroups: not the daemon's
	classify   func(pid int) (string, bool)
	ts         *transparentSession

	// settling serializes classifications: a process and its children are
	// classified once, parents first.
	settling sync.Mutex

	mu     sync.Mutex
	next   uint32 // the next session's mark
	bySlot map[uint32]*agentSession
	byID   map[string]*agentSession

	stopEvents context.CancelFunc
	eventsDone chan struct{}
	// files guards the protected files themselves (by inode) from the
	// agents: nil when fanotify is not available.
	files *fileexec.Files
}

// agentSession is one agent a daemon found, and its session.
type agentSession struct {
	slot uint32
	info event.Session
	rw   *proxy.Rewrites
}

func newMachineScope(s *Session, m *Machine) *machineScope {
	return &machineScope{
		s: s, candidates: m.Candidates, pinDir: m.PinDir, classify: m.Classify,
		next: redirect.MarkPending + 1, bySlot: map[uint32]*agentSession{}, byID: map[string]*agentSession{},
	}
}

// start picks up the marked processes a previous daemon left as sessions
// again, and follows the kernel's reports of marked execs and exits.
func (m *machineScope) start(ts *transparentSession) error {
	m.ts = ts
	// A daemon started by a marked process would be marked too: its own
	// connections would come back to it.
	if err := ts.red.Unmark(uint32(os.Getpid())); err != nil {
		return err
	}
	marks, err := ts.red.Marks()
	if err != nil {
		return err
	}
	m.survivors(marks)
	ctx, cancel := context.WithCancel(context.Background())
	events, err := ts.red.MarkEvents(ctx)
	if err != nil {
		cancel()
		return err
	}
	m.stopEvents, m.eventsDone = cancel, make(chan struct{})
	go func() {
		defer close(m.eventsDone)
		for ev := range events {
			m.handle(ev)
		}
	}()
	// Pending marks made while no daemon ran.
	for pid, mark := range marks {
		if mark == redirect.MarkPending {
			m.settle(int(pid))
		}
	}
	m.guardFiles()
	return nil
}

// guardFiles puts permission marks on the files the agents may not open
// whatever they run: the credential files of the machine's users and
// Chaperone's own state and configuration. Opens of other files, and of
// these by other processes, are not the agents' and are not decided.
func (m *machineScope) guardFiles() {
	paths := fileexec.CredentialFiles(fileexec.Homes())
	for _, p := range []string{m.s.cfg.StateDir, m.s.configFile, m.s.cfg.Policy} {
		if p != "" {
			paths = append(paths, p)
		}
	}
	f, err := fileexec.WatchFiles(paths, fileexec.FileOptions{
		InSession: func(pid int) bool { _, ok := m.ownerOf(pid); return ok },
		Process: func(pid int) (*event.Process, error) {
			who, _ := m.ownerOf(pid)
			return describeProcess(m.s.procs, pid, who.root)
		},
		Decider: event.DeciderFunc(m.decideFile),
		Publish: m.s.bus.Publish,
		Logger:  m.s.log,
		Ignore:  ignoredPath,
	})
	if err != nil {
		fmt.Fprintf(m.s.stderr, "chaperone: the agents' opens of credential files are not decided: %v\n", err)
		return
	}
	m.files = f
}

// decideFile decides an agent's open of a guarded file in the agent's
// session; what is left of an ask is a deny.
func (m *machineScope) decideFile(ctx context.Context, e *event.Event) event.Verdict {
	if e.Process == nil {
		return event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByDefault, Reason: "the process that opened the file is unknown"}
	}
	who, ok := m.ownerOf(e.Process.PID)
	if !ok {
		return event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault, Reason: "not an agent's process"}
	}
	e.Session = who.session
	m.mu.Lock()
	if a := m.byID[who.session]; a != nil {
		info := a.info
		e.SessionInfo = &info
	}
	m.mu.Unlock()
	return m.s.chain.Decide(ctx, e).Enforced()
}

// stop stops following the kernel's reports.
func (m *machineScope) stop() {
	if m.files != nil {
		m.files.Close()
	}
	if m.stopEvents != nil {
		m.stopEvents()
		<-m.eventsDone
	}
}

// survivors makes sessions again of the processes a previous daemon
// marked: per mark, its processes that still run (the map also holds
// threads' ids), the one whose parent is not among them its root.
func (m *machineScope) survivors(marks map[uint32]uint32) {
	procs := map[uint32][]int{}
	for pid, mark := range marks {
		if mark > redirect.MarkPending && alive(int(pid)) && isProcess(int(pid)) {
			procs[mark] = append(procs[mark], int(pid))
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for mark, pids := range procs {
		slices.Sort(pids)
		root := pids[0]
		for _, pid := range pids {
			if p, err := m.s.procs.Process(pid); err == nil && !slices.Contains(pids, p.PPID) {
				root = pid
				break
			}
		}
		name := m.agentName(root)
		if m.next <= mark {
			m.next = mark + 1
		}
		m.addLocked(root, name, mark, "found again after the daemon restarted")
	}
}

// agentName names the agent a process runs, from its command line.
func (m *machineScope) agentName(pid int) string {
	if p, err := m.s.procs.Process(pid); err == nil && len(p.Argv) > 0 {
		return AgentName(p.Argv)
	}
	return "agent"
}

// isProcess tells a process (a thread group's leader) from a thread.
func isProcess(pid int) bool {
	// /proc lists processes only, but a thread's id is found there too:
	// its status names another thread group.
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			return strings.TrimSpace(v) == strconv.Itoa(pid)
		}
	}
	return false
}

func (m *machineScope) handle(ev redirect.MarkEvent) {
	switch {
	case ev.Kind == redirect.MarkExec && ev.Mark == redirect.MarkPending:
		// A process forked before its agent was classified inherited
		// pending: once it is found in the agent's session, its exec is
		// decided like the session's others. An agent's own first exec
		// is what made it one.
		if a := m.agent(m.settle(int(ev.PID))); a != nil && a.info.RootPID != int(ev.PID) {
			go m.decideExec(a, ev)
		}
	case ev.Kind == redirect.MarkExec:
		if a := m.agent(ev.Mark); a != nil {
			go m.decideExec(a, ev) // an ask may wait for a person
		}
	case ev.Kind == redirect.MarkExit:
		m.exited(ev.Mark)
	}
}

// owner implements scope: a marked process's session, once it is
// classified (now, if it was not yet); a process that is no agent's is
// relayed.
func (m *machineScope) owner(o redirect.Origin) (owned, error) {
	mark := o.Mark
	if mark == redirect.MarkPending {
		mark = m.settle(int(o.PID))
	}
	return m.ownedBy(mark), nil
}

func (m *machineScope) ownerOf(pid int) (owned, bool) {
	mark, err := m.markOf(pid)
	if err != nil || mark == 0 {
		return owned{}, false
	}
	if mark == redirect.MarkPending {
		mark = m.settle(pid)
	}
	who := m.ownedBy(mark)
	return who, !who.relay
}

func (m *machineScope) ownedBy(mark uint32) owned {
	a := m.agent(mark)
	if a == nil {
		return owned{relay: true}
	}
	return owned{session: a.info.ID, root: a.info.RootPID}
}

func (m *machineScope) agent(mark uint32) *agentSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bySlot[mark]
}

// markOf is pid's mark, 0 when it has none.
func (m *machineScope) markOf(pid int) (uint32, error) {
	return m.ts.red.MarkOf(uint32(pid))
}

// settle classifies a process marked pending, and returns its mark: a
// descendant of an agent's process joins its session; an agent the
// classifier recognises starts one; anything else is unmarked (0).
func (m *machineScope) settle(pid int) uint32 {
	m.settling.Lock()
	defer m.settling.Unlock()
	mark, err := m.markOf(pid)
	if err != nil || mark != redirect.MarkPending {
		return mark // settled meanwhile, or gone
	}
	if m.inRunSession(pid) {
		if err := m.ts.red.Unmark(uint32(pid)); err != nil {
			m.s.log.Warn("daemon: unmark", "pid", pid, "err", err)
		}
		return 0
	}
	// A child forked before its parent was classified inherited pending:
	// it is in its ancestor's session, if that is one.
	for p, depth := pid, 0; p > 1 && depth < 64; depth++ {
		proc, err := m.s.procs.Process(p)
		if err != nil || proc.PPID <= 1 {
			break
		}
		pp := proc.PPID
		if am, err := m.markOf(pp); err == nil && am > redirect.MarkPending && m.agent(am) != nil {
			if err := m.ts.red.Mark(uint32(pid), am); err != nil {
				m.s.log.Warn("daemon: mark", "pid", pid, "err", err)
			}
			return am
		}
		p = pp
	}
	name, ok := m.classify(pid)
	if !ok {
		if err := m.ts.red.Unmark(uint32(pid)); err != nil {
			m.s.log.Warn("daemon: unmark", "pid", pid, "err", err)
		}
		return 0
	}
	a := m.add(pid, name, "found at its exec")
	if err := m.ts.red.Mark(uint32(pid), a.slot); err != nil {
		m.s.log.Warn("daemon: mark", "pid", pid, "err", err)
	}
	return a.slot
}

// inRunSession tells whether a process is in a `chaperone run` session's
// cgroup: that session's, not the daemon's.
func (m *machineScope) inRunSession(pid int) bool {
	if m.runParent == "" {
		return false
	}
	root, err := redirect.CgroupRoot()
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(root, m.runParent)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return strings.HasPrefix(p, "/"+rel+"/")
		}
	}
	return false
}

// udpOrigin finds the marked process whose UDP socket sent a query from
// client, and its mark.
func (m *machineScope) udpOrigin(client netip.AddrPort) (redirect.Origin, error) {
	marks, err := m.ts.red.Marks()
	if err != nil {
		return redirect.Origin{}, err
	}
	pids := make([]int, 0, len(marks))
	for pid := range marks {
		pids = append(pids, int(pid))
	}
	pid, err := m.s.procs.UDPSocketOwner(client, pids)
	if err != nil {
		return redirect.Origin{}, err
	}
	mark, err := m.markOf(pid)
	if err != nil || mark == 0 {
		return redirect.Origin{}, fmt.Errorf("process %d is not marked", pid)
	}
	o := redirect.Origin{PID: uint32(pid), Mark: mark}
	if p, err := m.s.procs.Process(pid); err == nil {
		o.UID = uint32(p.UID)
		if len(p.Argv) > 0 {
			o.Comm = filepath.Base(p.Argv[0])
		}
	}
	return o, nil
}

// setCandidates replaces the command names the kernel marks at exec.
func (m *machineScope) setCandidates(names []string) error { return m.ts.red.SetCandidates(names) }

// add starts the session of an agent whose first process is pid.
func (m *machineScope) add(pid int, name, how string) *agentSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	slot := m.next
	m.next++
	return m.addLocked(pid, name, slot, how)
}

func (m *machineScope) addLocked(pid int, name string, slot uint32, how string) *agentSession {
	id := newID(6)
	info := event.Session{ID: id, Agent: name, RootPID: pid, Mode: ModeDaemon, Started: time.Now(), StateDir: m.s.cfg.StateDir}
	found := false
	if p, err := m.s.procs.Process(pid); err == nil {
		info.Command, info.Workdir = p.Argv, p.Cwd
		info.UID, info.ParentPID = p.UID, p.PPID
		found = true
	}
	info.TTY = terminalOf(pid)
	if c, ok, err := m.s.procs.ProcessContainer(pid); err == nil && ok {
		info.ContainerID, info.ContainerRuntime, info.PodUID = c.ID, c.Runtime, c.PodUID
	}
	user := strconv.Itoa(info.UID)
	if u, err := osuser.LookupId(user); err == nil {
		user = u.Username
		if found {
			info.Home = u.HomeDir // the agent's user's: its caches' reads are routine
		}
	}
	a := &agentSession{slot: slot, info: info, rw: m.s.agentRewrites(id, name, user)}
	m.bySlot[slot], m.byID[id] = a, a
	// The proxy serves known sessions only; the token is for its explicit
	// side, which the daemon's agents do not use.
	m.s.proxy.AddSession(id, newID(24))
	m.s.log.Info("daemon: agent session", "session", id, "agent", name, "pid", pid, "how", how)
	publishSession(m.s.bus, event.KindSessionStart, info, m.s.log)
	return a
}

// rewrites is a session's rewrites, nil for no session of the machine's.
func (m *machineScope) rewrites(id string) *proxy.Rewrites {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.byID[id]; a != nil {
		return a.rw
	}
	return nil
}

// decideExec decides an exec the kernel reported in an agent's session.
// The program already runs: the daemon cannot refuse an exec as run
// mode's filter does, so a denied one is killed as soon as it is decided
// (through a pidfd taken first, so that no other process can be hit).
func (m *machineScope) decideExec(a *agentSession, ev redirect.MarkEvent) {
	kill, release, holdErr := holdProcess(int(ev.PID))
	defer release()
	proc, err := describeProcess(m.s.procs, int(ev.PID), a.info.RootPID)
	if err != nil {
		proc = &event.Process{PID: int(ev.PID), UID: int(ev.UID), Argv: []string{ev.Comm}}
	}
	info := a.info
	e := &event.Event{
		Time: time.Now(), Kind: event.KindExec, Session: a.info.ID, SessionInfo: &info, Process: proc,
		Exec: &event.Exec{Path: proc.Exe, Argv: proc.Argv, Cwd: proc.Cwd, Program: proc.Exe},
	}
	v := m.s.chain.Decide(context.Background(), e).Enforced()
	if !v.Allowed() {
		if holdErr != nil {
			v.Reason += " (the program had exited, or could not be killed: " + holdErr.Error() + ")"
		} else if err := kill(); err != nil {
			v.Reason += " (it could not be killed: " + err.Error() + ")"
		} else {
			v.Reason += " (the daemon saw the exec after it happened: the program was killed)"
		}
	}
	e.Verdict = v
	m.s.bus.Publish(e)
}

// exited ends a session once none of its processes is left.
func (m *machineScope) exited(mark uint32) {
	a := m.agent(mark)
	if a == nil {
		return
	}
	marks, err := m.ts.red.Marks()
	if err != nil {
		return
	}
	for pid, mk := range marks {
		if mk == mark && alive(int(pid)) {
			return
		}
	}
	m.end(a)
}

// end records an agent session's end.
func (m *machineScope) end(a *agentSession) {
	m.mu.Lock()
	if m.bySlot[a.slot] != a {
		m.mu.Unlock()
		return
	}
	delete(m.bySlot, a.slot)
	delete(m.byID, a.info.ID)
	m.mu.Unlock()
	m.s.proxy.RemoveSession(a.info.ID)
	info := a.info
	info.Duration = time.Since(info.Started)
	publishSession(m.s.bus, event.KindSessionEnd, info, m.s.log)
}

// sessions lists the live agent sessions, oldest first.
func (m *machineScope) sessions() []event.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]event.Session, 0, len(m.bySlot))
	for _, a := range m.bySlot {
		out = append(out, a.info)
	}
	slices.SortFunc(out, func(a, b event.Session) int { return a.Started.Compare(b.Started) })
	return out
}

// adopt makes a running process and its descendants an agent's session.
func (m *machineScope) adopt(pid int, name string) (event.Session, error) {
	if !alive(pid) {
		return event.Session{}, fmt.Errorf("no process %d", pid)
	}
	m.settling.Lock()
	defer m.settling.Unlock()
	if mark, err := m.markOf(pid); err == nil && mark > redirect.MarkPending {
		if a := m.agent(mark); a != nil {
			return a.info, fmt.Errorf("process %d is already in session %s", pid, a.info.ID)
		}
	}
	if name == "" {
		name = m.agentName(pid)
	}
	a := m.add(pid, name, "adopted")
	var errs []error
	for _, p := range m.s.procs.Descendants(pid) {
		if err := m.ts.red.Mark(uint32(p), a.slot); err != nil {
			errs = append(errs, err)
		}
	}
	return a.info, errors.Join(errs...)
}

// terminalOf names a process's controlling terminal, "" for none.
func terminalOf(pid int) string {
	for _, fd := range []string{"0", "1", "2"} {
		t, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd))
		if err == nil && (strings.HasPrefix(t, "/dev/pts/") || strings.HasPrefix(t, "/dev/tty")) {
			return t
		}
	}
	return ""
}

// alive tells whether a process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
