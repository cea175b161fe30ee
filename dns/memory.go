package dns

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

const (
	// defaultNameCapacity bounds how many addresses a session remembers.
	defaultNameCapacity = 4096
	// minRemember keeps a name at least this long whatever its TTL:
	// programs cache answers past their TTL (and TTL 0 is common), and a
	// connection made from such a cache should still be reported by name.
	minRemember = 10 * time.Minute
	// maxRemember caps a long TTL so memory follows what the session did
	// lately.
	maxRemember = 24 * time.Hour
)

// nameMemory maps addresses to the name they were last looked up as: an
// LRU of bounded size whose entries also expire.
type nameMemory struct {
	mu   sync.Mutex
	cap  int
	ll   *list.List // front is most recent; values are *nameEntry
	byIP map[netip.Addr]*list.Element
}

type nameEntry struct {
	addr    netip.Addr
	name    string
	expires time.Time
}

func newNameMemory(capacity int) *nameMemory {
	return &nameMemory{cap: capacity, ll: list.New(), byIP: map[netip.Addr]*list.Element{}}
}

// put records addr as answered for name at now with ttl seconds.
func (m *nameMemory) put(addr netip.Addr, name string, now time.Time, ttl uint32) {
	keep := min(max(time.Duration(ttl)*time.Second, minRemember), maxRemember)
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byIP[addr]; ok {
		e := el.Value.(*nameEntry)
		e.name, e.expires = name, now.Add(keep)
		m.ll.MoveToFront(el)
		return
	}
	m.byIP[addr] = m.ll.PushFront(&nameEntry{addr: addr, name: name, expires: now.Add(keep)})
	for m.ll.Len() > m.cap {
		old := m.ll.Back()
		m.ll.Remove(old)
		delete(m.byIP, old.Value.(*nameEntry).addr)
	}
}

// get returns addr's name unless it has expired by now.
func (m *nameMemory) get(addr netip.Addr, now time.Time) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byIP[addr]
	if !ok {
		return "", false
	}
	e := el.Value.(*nameEntry)
	if !now.Before(e.expires) {
		m.ll.Remove(el)
		delete(m.byIP, addr)
		return "", false
	}
	return e.name, true
}
