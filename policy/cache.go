package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/chaperone-dev/chaperone/event"
)

// cacheKey identifies the decision-relevant part of an event: what it
// does and which program (by name and lineage, not pid) does it. Times,
// pids and process arguments are left out, so that a judge's decision
// about "curl in bash in claude reaching api.github.com" is reused. The
// key is a SHA-256 so that an agent cannot craft two events that share a
// cached decision, and so that long argv lists stay cheap to keep.
type cacheKey [sha256.Size]byte

func keyOf(rule string, e *event.Event) cacheKey {
	var stack [512]byte
	b := stack[:0]
	add := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	addList := func(l []string) {
		b = binary.AppendUvarint(b, uint64(len(l)))
		for _, s := range l {
			add(s)
		}
	}
	add(rule)
	add(string(e.Kind))
	add(agentOf(e))
	if p := e.Process; p != nil {
		add(p.Exe)
		addList(p.LineageNames)
	} else {
		add("")
		addList(nil)
	}
	add(hostOf(e))
	if c := e.Connect; c != nil {
		add(c.Dst.Addr().Unmap().String())
		b = binary.AppendUvarint(b, uint64(dstPort(e)))
		add(string(c.Transport))
		add(c.Via)
		add(c.Relay)
	} else {
		add("")
		b = binary.AppendUvarint(b, 0)
		add("")
		add("")
		add("")
	}
	if h := e.HTTP; h != nil {
		add(h.Method)
		p, _ := splitURL(h.URL)
		add(p)
		add(h.Upgrade)
	} else {
		add("")
		add("")
		add("")
	}
	if l := e.LLM; l != nil {
		add(l.Provider)
		add(l.Model)
	} else {
		add("")
		add("")
	}
	if t := e.TLS; t != nil {
		// Intercepting a host and passing it through uninspected are
		// different questions.
		b = append(b, boolByte(t.ClientRejectsCA), boolByte(t.ClientRejected))
		add(t.Alert)
	} else {
		b = append(b, 0, 0)
		add("")
	}
	if d := e.DNS; d != nil {
		add(d.Type)
	} else {
		add("")
	}
	if f := e.File; f != nil {
		add(f.Path)
		add(string(f.Access))
		add(f.Op)
		add(f.Target)
	} else {
		add("")
		add("")
		add("")
		add("")
	}
	if x := e.Exec; x != nil {
		add(x.Path)
		addList(x.Argv)
		add(x.Digest) // a verdict on a path must not outlive a change of what is there
		add(x.Program)
		add(x.Interpreter)
	} else {
		add("")
		addList(nil)
		add("")
		add("")
		add("")
	}
	return sha256.Sum256(b)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

type cacheEntry struct {
	v  event.Verdict
	at time.Time
}

// decisionCache remembers the judge's verdicts, bounded in size and age.
// It is safe for concurrent use.
type decisionCache struct {
	lru          *lru.Cache[cacheKey, cacheEntry]
	ttl          time.Duration
	now          func() time.Time
	hits, misses atomic.Uint64
}

func newDecisionCache(size int, ttl time.Duration, now func() time.Time) *decisionCache {
	c, err := lru.New[cacheKey, cacheEntry](size)
	if err != nil {
		// Only a size <= 0 fails, and callers pass a positive one.
		panic("policy: decision cache: " + err.Error())
	}
	return &decisionCache{lru: c, ttl: ttl, now: now}
}

func (c *decisionCache) get(k cacheKey) (event.Verdict, bool) {
	v, ok := c.lookup(k)
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return v, ok
}

// lookup is get without counting.
func (c *decisionCache) lookup(k cacheKey) (event.Verdict, bool) {
	ent, ok := c.lru.Get(k)
	if ok && c.now().Sub(ent.at) < c.ttl {
		return ent.v, true
	}
	if ok {
		c.lru.Remove(k)
	}
	return event.Verdict{}, false
}

func (c *decisionCache) put(k cacheKey, v event.Verdict) {
	c.lru.Add(k, cacheEntry{v: v, at: c.now()})
}

// flight is one judge call in progress; callers asking the same question
// meanwhile wait for it instead of asking again.
type flight struct {
	done chan struct{}
	v    event.Verdict
}

type flights struct {
	mu sync.Mutex
	m  map[cacheKey]*flight
}

// join returns the call in progress for k, or starts one (leader=true).
func (f *flights) join(k cacheKey) (c *flight, leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.m[k]; ok {
		return c, false
	}
	if f.m == nil {
		f.m = map[cacheKey]*flight{}
	}
	c = &flight{done: make(chan struct{})}
	f.m[k] = c
	return c, true
}

// finish publishes the leader's verdict to the waiting callers.
func (f *flights) finish(k cacheKey, c *flight, v event.Verdict) {
	c.v = v
	f.mu.Lock()
	delete(f.m, k)
	f.mu.Unlock()
	close(c.done)
}
