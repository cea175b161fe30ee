package session

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/redirect"
)

// originLookup is one redirect record taken when its connection was
// accepted (a record is read once: the lookup deletes it), and whose it
// is: the lookup's error, or the scope's refusal.
type originLookup struct {
	origin  redirect.Origin
	who     owned
	err     error
	refused error
}

// dnsRecord is a TCP DNS connection's record, kept while it is open.
type dnsRecord struct {
	origin redirect.Origin
	who    owned
}

// splitDNS wraps a transparent listener: connections of no session's are
// relayed untouched; those whose original destination is TCP port 53 go
// to the session's resolver; the rest are accepted for the proxy, their
// records kept for its Origin call.
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
		r := originLookup{}
		r.origin, r.err = l.ts.red.Lookup(client)
		if r.err == nil {
			r.who, r.refused = l.ts.scope.owner(r.origin)
		}
		switch {
		case r.err == nil && r.refused == nil && r.who.relay:
			go relayUntouched(c, r.origin.Dst)
			continue
		case r.err == nil && r.refused == nil && r.origin.Dst.Port() == 53:
			l.ts.tcpDNS.Store(client, dnsRecord{r.origin, r.who})
			if !l.ts.dnsTCP.handOff(&dnsConn{Conn: c, forget: func() { l.ts.tcpDNS.Delete(client) }}) {
				c.Close()
			}
			continue
		}
		l.ts.accepted.Store(client, r)
		return c, nil
	}
}

// relayUntouched passes a connection of no session's on to where it was
// going, as if it had never been redirected: not inspected, not recorded.
func relayUntouched(c net.Conn, dst netip.AddrPort) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", dst.String(), 10*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 1)
	go func() {
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
		done <- struct{}{}
	}()
	io.Copy(c, up)
	c.(*net.TCPConn).CloseWrite()
	<-done
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
