package session

import (
	"net"
	"net/netip"
	"sync"

	"github.com/chaperone-dev/chaperone/redirect"
)

// originLookup is one redirect record taken when its connection was
// accepted (a record is read once: the lookup deletes it).
type originLookup struct {
	origin redirect.Origin
	err    error
}

// splitDNS wraps a transparent listener: connections whose original
// destination is TCP port 53 go to the session's resolver; the rest are
// accepted for the proxy, their records kept for its Origin call.
type splitDNS struct {
	net.Listener
	ts *transparentSession
}

func (l splitDNS) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		client := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		o, err := l.ts.red.Lookup(client)
		if err == nil && o.Dst.Port() == 53 && o.CgroupID == l.ts.cg.ID {
			l.ts.tcpDNS.Store(client, o)
			if !l.ts.dnsTCP.handOff(&dnsConn{Conn: c, forget: func() { l.ts.tcpDNS.Delete(client) }}) {
				c.Close()
			}
			continue
		}
		l.ts.accepted.Store(client, originLookup{o, err})
		return c, nil
	}
}

// dnsConn forgets its record when the resolver is done with it.
type dnsConn struct {
	net.Conn
	once   sync.Once
	forget func()
}

func (c *dnsConn) Close() error {
	c.once.Do(c.forget)
	return c.Conn.Close()
}

// connQueue is a net.Listener fed by handOff: the resolver's TCP side.
type connQueue struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{conns: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

func (q *connQueue) handOff(c net.Conn) bool {
	select {
	case q.conns <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }
