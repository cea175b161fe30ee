package h3

import (
	"sync"
	"time"
)

// maxAltEntries bounds an AltCache: beyond it, expired entries are
// dropped, then any.
const maxAltEntries = 4096

// BrokenFor is how long an origin that could not be reached over QUIC is
// sent its requests over TCP only.
const BrokenFor = 5 * time.Minute

// AltCache remembers which origins (host:port) offer HTTP/3, and on
// which UDP port: learned from their Alt-Svc header, or from a request
// that went over HTTP/3, until the advertisement's max-age; and which
// could not be reached over QUIC lately (Broken). Safe for concurrent
// use.
type AltCache struct {
	Now func() time.Time // nil: time.Now

	mu sync.Mutex
	m  map[string]altEntry
}

type altEntry struct {
	port    uint16    // 0: no HTTP/3 known, only broken
	expires time.Time // of port
	broken  time.Time // QUIC failed: TCP only until then
}

func (c *AltCache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Lookup returns the UDP port on which origin offers HTTP/3, if an
// unexpired advertisement or success says so and QUIC did not fail
// lately.
func (c *AltCache) Lookup(origin string) (uint16, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[origin]
	now := c.now()
	if !ok || now.Before(e.broken) || e.port == 0 || !now.Before(e.expires) {
		return 0, false
	}
	return e.port, true
}

// Broken reports whether QUIC to origin failed lately.
func (c *AltCache) Broken(origin string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[origin]
	return ok && c.now().Before(e.broken)
}

// Learn reads the Alt-Svc field value an origin sent: "clear" forgets its
// alternatives, and its first HTTP/3 alternative on its own host (an
// empty alt-authority host) is remembered until its max-age. Alternatives
// on other hosts are not followed: the proxy dials only where the client
// was going. A value that cannot be read changes nothing.
func (c *AltCache) Learn(origin, altSvc string) {
	alts, clear, err := ParseAltSvc(altSvc)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[origin]
	if clear {
		e.port, e.expires = 0, time.Time{}
		c.set(origin, e)
		return
	}
	for _, a := range alts {
		if a.Proto == "h3" && a.Host == "" { // drafts (h3-29) are not spoken upstream
			e.port, e.expires = a.Port, c.now().Add(a.MaxAge)
			c.set(origin, e)
			return
		}
	}
}

// Succeeded records a request that went to origin over HTTP/3 on port: it
// offers HTTP/3 there for at least DefaultMaxAge, unless it advertised a
// later expiry for that port.
func (c *AltCache) Succeeded(origin string, port uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[origin]
	exp := c.now().Add(DefaultMaxAge)
	if e.port != port || e.expires.Before(exp) {
		e.port, e.expires = port, exp
	}
	e.broken = time.Time{}
	c.set(origin, e)
}

// Failed records that origin could not be reached over QUIC: its
// requests go over TCP for BrokenFor.
func (c *AltCache) Failed(origin string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[origin]
	e.broken = c.now().Add(BrokenFor)
	c.set(origin, e)
}

// set stores e, making room first if the cache is full. Under mu.
func (c *AltCache) set(origin string, e altEntry) {
	if c.m == nil {
		c.m = make(map[string]altEntry)
	}
	if _, ok := c.m[origin]; !ok && len(c.m) >= maxAltEntries {
		now := c.now()
		for k, v := range c.m {
			if !now.Before(v.expires) && !now.Before(v.broken) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < maxAltEntries {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[origin] = e
}
