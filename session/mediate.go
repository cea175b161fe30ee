package session

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/fileexec"
	"github.com/chaperone-dev/chaperone/internal/privdrop"
)

// mediationOptions is what file and exec mediation need from the session.
type mediationOptions struct {
	session   string
	info      *event.Session
	inSession func(pid int) bool
	// static says whether every open of path is allowed whatever the
	// process, an open for access having just been given v: then the
	// kernel stops asking about the file. forget is given the function
	// that undoes that (a new policy).
	static func(path string, access event.FileAccess, v event.Verdict) bool
	// staticLinked: a file with several links that static holds for may
	// be marked all the same (fileexec.FileOptions.StaticLinked).
	staticLinked func(path string, access event.FileAccess) bool
	forget       func(func())
	// noAhead: each file's first open is decided and recorded, none
	// marked ahead with its directory (audit.file_reads: all).
	noAhead bool
	// protect lists the files the agent may not change (or open), whatever
	// the policy.
	protect []fileexec.Protect
	// fileInSession, when set, is inSession for file opens and execs.
	fileInSession func(pid int) bool
	process       func(pid int) (*event.Process, error)
	decider       event.Decider
	publish       func(*event.Event)
	log           *slog.Logger
	stderr        io.Writer
	// cgroup is the session's cgroup directory (transparent mode), which
	// is frozen while the mounts of a namespace the agent makes for
	// itself are marked; "" without one.
	cgroup string
	// agentRoot: the agent runs as uid 0, and is refused cgroup
	// namespaces.
	agentRoot bool
}

// decide is the decider as file and exec events see it: every event
// carries the session (its working tree, home and state directory, for
// the policy), and what is left of an ask is a deny.
func (o mediationOptions) decide(ctx context.Context, e *event.Event) event.Verdict {
	if e.SessionInfo == nil {
		e.SessionInfo = o.info
	}
	return o.decider.Decide(ctx, e).Enforced()
}

// CanMediateFiles says whether this process can mediate files and execs,
// and why not.
func CanMediateFiles() (bool, string) {
	switch {
	case runtime.GOOS != "linux":
		return false, "file and exec mediation is built for Linux only"
	case os.Geteuid() != 0:
		return false, "file and exec mediation needs root (fanotify and a mount namespace)"
	}
	return true, ""
}

// ignoredPath says which opens are not decided: the kernel's pseudo
// files, which programs open by the hundred and which hold nothing of the
// user's.
func ignoredPath(path string) bool {
	for _, p := range []string{"/proc/", "/sys/", "/dev/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// openGate sets up mediation around the shim (pid) waiting at gate, then
// lets it exec the agent. A mediation that cannot start is reported and
// left off (the network is still mediated), except exec mediation once
// its filter is in place: unserved, every exec would fail, so then the
// session does not start.
func openGate(ctx context.Context, gate *privdrop.Gate, pid int, o mediationOptions) (stop func(), err error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	listener, err := gate.Ready(rctx)
	if err != nil {
		gate.Close()
		return func() {}, fmt.Errorf("session: start the agent: %w", err)
	}
	// Only the session's processes live in its mount namespace (entering
	// it takes root): a file open through its mounts is the session's
	// when the opener is in it, which one readlink tells. An opener in
	// another namespace (one a session process made for itself, or
	// Chaperone's reaching in through /proc) is asked about.
	if ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt"); err == nil {
		member := o.inSession
		o.fileInSession = func(pid int) bool {
			if got, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt"); err == nil && got == ns {
				return true
			}
			return member(pid)
		}
	}
	stops, err := startMediation(pid, listener, o)
	if err != nil {
		gate.Close()
		for _, s := range stops {
			s()
		}
		return func() {}, err
	}
	if err := gate.Open(); err != nil {
		for _, s := range stops {
			s()
		}
		return func() {}, fmt.Errorf("session: start the agent: %w", err)
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, nil
}

// processCache remembers what attribution said of a pid for a moment: a
// build opens thousands of files from one process, and reading its /proc
// entries and its ancestors' for each open would cost more than the
// decision. An entry holds while the pid runs the same executable (one
// readlink) and for at most ttl.
type processCache struct {
	mu       sync.Mutex
	ttl      time.Duration
	now      func() time.Time
	exeOf    func(pid int) (string, error)
	describe func(pid int) (*event.Process, error)
	m        map[int]cachedProcess
}

type cachedProcess struct {
	p   *event.Process
	exe string
	at  time.Time
}

func newProcessCache(describe func(int) (*event.Process, error), ttl time.Duration) *processCache {
	return &processCache{ttl: ttl, now: time.Now, describe: describe, m: map[int]cachedProcess{},
		exeOf: func(pid int) (string, error) { return os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe") }}
}

// process returns the description of pid, from the cache when it holds.
func (c *processCache) process(pid int) (*event.Process, error) {
	exe, err := c.exeOf(pid)
	if err != nil {
		return c.describe(pid)
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.m[pid]
	c.mu.Unlock()
	if ok && e.exe == exe && now.Sub(e.at) < c.ttl {
		return e.p, nil
	}
	p, err := c.describe(pid)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= 4096 {
		clear(c.m)
	}
	c.m[pid] = cachedProcess{p: p, exe: exe, at: now}
	c.mu.Unlock()
	return p, nil
}

// ids is who the agent runs as, for permission checks.
type ids struct {
	uid  int
	gids []int // primary first
}

// agentIdentity is the uid and groups the agent runs with: who's, or
// Chaperone's own where who keeps them.
func agentIdentity(who privdrop.Options) ids {
	id := ids{uid: who.UID}
	if id.uid < 0 {
		id.uid = os.Geteuid()
	}
	gid := who.GID
	if gid < 0 {
		gid = os.Getegid()
	}
	id.gids = append(id.gids, gid)
	groups := who.Groups
	if groups == nil && who.UID < 0 {
		groups, _ = os.Getgroups()
	}
	return ids{uid: id.uid, gids: append(id.gids, groups...)}
}

// modeDeniesWrite reports whether a file of this owner, group and mode
// refuses id a write by its permission bits (as for a process without
// capabilities, which the agent is).
func modeDeniesWrite(uid, gid int, mode uint32, id ids) bool {
	switch {
	case uid == id.uid:
		return mode&0o200 == 0
	case slices.Contains(id.gids, gid):
		return mode&0o020 == 0
	}
	return mode&0o002 == 0
}
