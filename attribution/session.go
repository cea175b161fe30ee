package attribution

import (
	"net/netip"
	"slices"
	"time"
)

const (
	// descendantsTTL is how long SessionSocketOwner searches a session's
	// Descendants as read before (reading them costs a stat of every
	// process). A stale list costs a fresh read on a miss, never a wrong
	// answer: every candidate's fds are read at lookup time.
	descendantsTTL = time.Second
	// maxRecentOwners is how many of a session's last socket owners are
	// searched first.
	maxRecentOwners = 8
	// maxSessions bounds the sessions remembered; an arbitrary one is
	// forgotten when it is full.
	maxSessions = 256
)

// sessionPIDs is what SessionSocketOwner remembers of one session.
type sessionPIDs struct {
	recent      []int // owners of the session's last sockets, most recent first
	descendants []int
	read        time.Time // when descendants was read; zero: never
}

// SessionSocketOwner is SocketOwner for a session whose processes descend
// from root, with the search ordered for an agent that opens many
// connections from a few processes:
//
//  1. the processes that owned the session's last sockets (up to 8);
//  2. the session's processes as Descendants listed them, if less than a
//     second ago;
//  3. the session's processes now (Descendants again);
//  4. every process.
//
// Each process is searched once. An owner found in steps 1 to 3 is
// remembered for the next lookup; one outside the session is not. The error
// wraps ErrNotFound as SocketOwner's does.
func (t *Table) SessionSocketOwner(local, remote netip.AddrPort, root int) (int, error) {
	scan, err := t.newFDScan(local, remote)
	if err != nil {
		return 0, err
	}
	if pid, ok := scan.search(t.recentOwners(root)); ok {
		t.rememberOwner(root, pid)
		return pid, nil
	}
	if pids, ok := t.cachedDescendants(root); ok {
		if pid, ok := scan.search(pids); ok {
			t.rememberOwner(root, pid)
			return pid, nil
		}
	}
	read := t.now()
	pids := t.Descendants(root)
	t.storeDescendants(root, pids, read)
	if pid, ok := scan.search(pids); ok {
		t.rememberOwner(root, pid)
		return pid, nil
	}
	// An owner found only here is outside the session (or was born since
	// the line above): not one to search first next time.
	return scan.searchAll()
}

func (t *Table) recentOwners(root int) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.sessions[root]; s != nil {
		return slices.Clone(s.recent)
	}
	return nil
}

func (t *Table) cachedDescendants(root int) ([]int, bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[root]
	if s == nil || s.read.IsZero() {
		return nil, false
	}
	if age := now.Sub(s.read); age < 0 || age >= descendantsTTL {
		return nil, false
	}
	// Never written in place, so no copy is needed.
	return s.descendants, true
}

func (t *Table) storeDescendants(root int, pids []int, read time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessionLocked(root)
	if read.Before(s.read) {
		return // a concurrent lookup stored a newer list
	}
	s.descendants, s.read = pids, read
}

// rememberOwner moves pid to the front of root's recent owners.
func (t *Table) rememberOwner(root, pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessionLocked(root)
	if i := slices.Index(s.recent, pid); i >= 0 {
		s.recent = slices.Delete(s.recent, i, i+1)
	} else if len(s.recent) >= maxRecentOwners {
		s.recent = s.recent[:maxRecentOwners-1]
	}
	s.recent = slices.Insert(s.recent, 0, pid)
}

func (t *Table) sessionLocked(root int) *sessionPIDs {
	s := t.sessions[root]
	if s != nil {
		return s
	}
	if len(t.sessions) >= maxSessions {
		for k := range t.sessions {
			delete(t.sessions, k)
			break
		}
	}
	s = &sessionPIDs{}
	t.sessions[root] = s
	return s
}
