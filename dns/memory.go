package dns

import (
	"container/list"
	"net/netip"
	"slices"
	"sync"
	"time"
)

const (
	// defaultNameCapacity bounds how many addresses a session remembers.
	defaultNameCapacity = 4096
	// maxNamesPerAddr bounds the names remembered for one address (a CDN's
	// address answers for many): the least recently looked up goes first.
	maxNamesPerAddr = 16
	// maxPIDsPerName bounds the processes remembered for one name of an
	// address: the most recent ones.
	maxPIDsPerName = 8
	// minRemember keeps a name at least this long whatever its TTL:
	// programs cache answers past their TTL (and TTL 0 is common), and a
	// connection made from such a cache should still be reported by name.
	minRemember = 10 * time.Minute
	// maxRemember caps a long TTL so memory follows what the session did
	// lately.
	maxRemember = 24 * time.Hour
)

// nameMemory maps addresses to the names they were looked up as, and by
// which processes: an LRU of addresses of bounded size, each holding its
// most recently looked up names (at most maxNamesPerAddr), whose entries
// also expire.
type nameMemory struct {
	mu   sync.Mutex
	cap  int
	ll   *list.List // front is most recent; values are *nameEntry
	byIP map[netip.Addr]*list.Element
}

type nameEntry struct {
	addr  netip.Addr
	names []addrName // most recently looked up first
}

// addrName is one name an address was answered for.
type addrName struct {
	name    string
	pids    []int // the processes that looked it up, most recent first; 0 is unknown
	expires time.Time
}

func newNameMemory(capacity int) *nameMemory {
	return &nameMemory{cap: capacity, ll: list.New(), byIP: map[netip.Addr]*list.Element{}}
}

// put records addr as answered for name, asked by process pid (0 when
// unknown), at now with ttl seconds.
func (m *nameMemory) put(addr netip.Addr, name string, pid int, now time.Time, ttl uint32) {
	keep := min(max(time.Duration(ttl)*time.Second, minRemember), maxRemember)
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byIP[addr]
	if !ok {
		el = m.ll.PushFront(&nameEntry{addr: addr})
		m.byIP[addr] = el
		for m.ll.Len() > m.cap {
			old := m.ll.Back()
			m.ll.Remove(old)
			delete(m.byIP, old.Value.(*nameEntry).addr)
		}
	} else {
		m.ll.MoveToFront(el)
	}
	e := el.Value.(*nameEntry)
	n := addrName{name: name}
	if i := slices.IndexFunc(e.names, func(n addrName) bool { return n.name == name }); i >= 0 {
		n = e.names[i]
		e.names = slices.Delete(e.names, i, i+1)
	}
	n.expires = now.Add(keep)
	if i := slices.Index(n.pids, pid); i >= 0 {
		n.pids = slices.Delete(n.pids, i, i+1)
	}
	n.pids = slices.Insert(n.pids, 0, pid)
	if len(n.pids) > maxPIDsPerName {
		n.pids = n.pids[:maxPIDsPerName]
	}
	e.names = slices.Insert(e.names, 0, n)
	if len(e.names) > maxNamesPerAddr {
		e.names = e.names[:maxNamesPerAddr]
	}
}

// live returns addr's entry with the names expired by now dropped, or
// nil; the caller holds mu.
func (m *nameMemory) live(addr netip.Addr, now time.Time) *nameEntry {
	el, ok := m.byIP[addr]
	if !ok {
		return nil
	}
	e := el.Value.(*nameEntry)
	e.names = slices.DeleteFunc(e.names, func(n addrName) bool { return !now.Before(n.expires) })
	if len(e.names) == 0 {
		m.ll.Remove(el)
		delete(m.byIP, addr)
		return nil
	}
	return e
}

// get returns the name addr was most recently looked up as by process pid
// (pid 0: by anyone), unless expired by now.
func (m *nameMemory) get(addr netip.Addr, pid int, now time.Time) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live(addr, now)
	if e == nil {
		return "", false
	}
	if pid == 0 {
		return e.names[0].name, true
	}
	for _, n := range e.names {
		if slices.Contains(n.pids, pid) {
			return n.name, true
		}
	}
	return "", false
}

// has reports whether addr was answered for name, unless expired by now.
func (m *nameMemory) has(addr netip.Addr, name string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live(addr, now)
	return e != nil && slices.ContainsFunc(e.names, func(n addrName) bool { return n.name == name })
}
