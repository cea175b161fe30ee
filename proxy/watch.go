package proxy

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"
	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"github.com/chaperone-dev/chaperone/event"
)

// watchedConn is an HTTP/1 client connection as the proxy's HTTP servers
// see it, in plain text (over TLS for an intercepted tunnel). net/http
// deals with some failures before any handler runs, and says nothing about
// them; the connection notes them so that they become events when it
// closes: a request header that does not arrive within ReadHeaderTimeout,
// and one beyond the server's hard limit (headerHardLimit).
//
// It costs no allocation of its own: the front's connections are part of
// the frontConn, a tunnel's part of the tunnel.
type watchedConn struct {
	net.Conn
	phase atomic.Uint32 // a connPhase
	fault atomic.Uint32 // a netx.Fault, the first seen
}

// connPhase is where a connection is in its current request. Only a
// deadline that expires while a header is pending is a fault: net/http
// also expires reads itself, to stop its background read once a handler is
// done, and closes idle keep-alive connections by a deadline.
type connPhase uint32

const (
	phaseIdle    connPhase = iota // waiting for a request (net/http's StateNew, StateIdle)
	phasePending                  // bytes of a request header arrived
	phaseServing                  // a handler took the request
)

// served marks c's current request as taken by a handler.
func (c *watchedConn) served() {
	if connPhase(c.phase.Load()) != phaseServing {
		c.phase.Store(uint32(phaseServing))
	}
}

// idle marks c as waiting for its next request: net/http's StateIdle.
func (c *watchedConn) idle() { c.phase.Store(uint32(phaseIdle)) }

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && connPhase(c.phase.Load()) == phaseIdle {
		c.phase.CompareAndSwap(uint32(phaseIdle), uint32(phasePending))
	}
	if err != nil && connPhase(c.phase.Load()) == phasePending && netx.IsTimeout(err) {
		c.fault.CompareAndSwap(uint32(netx.FaultNone), uint32(netx.FaultHeaderTimeout))
	}
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	if len(b) == len(h1.TooLargeReply) && string(b) == h1.TooLargeReply {
		c.fault.CompareAndSwap(uint32(netx.FaultNone), uint32(netx.FaultHeaderTooLarge))
	}
	return c.Conn.Write(b)
}

// CloseWrite half-closes the connection, as net/http does after a 431.
func (c *watchedConn) CloseWrite() error { return netx.CloseWrite(c.Conn) }

// frontConnState follows the front's connections: each response makes a
// connection idle, and a connection that closes after a fault gets its
// event.
func (p *Proxy) frontConnState(c net.Conn, s http.ConnState) {
	fc, ok := c.(*frontConn)
	if !ok {
		return
	}
	switch s {
	case http.StateIdle:
		fc.idle()
	case http.StateClosed:
		if f := netx.Fault(fc.fault.Load()); f != netx.FaultNone {
			// The session is known if an earlier request on the
			// connection authenticated.
			p.publishConnFault(f, fc.procSession, fc.proc, "", "HTTP/1.1")
		}
	}
}

// publishConnFault publishes the http event of a connection closed
// before a handler ran: no request was read, so the event has no
// method or URL; host is the tunnel's destination, if any.
func (p *Proxy) publishConnFault(f netx.Fault, session string, proc *event.Process, host, proto string) {
	e := &event.Event{
		Time: p.now(), Kind: event.KindHTTP, Session: session, Process: proc,
		HTTP: &event.HTTP{Host: host, Proto: proto},
	}
	switch f {
	case netx.FaultHeaderTimeout:
		msg := "client sent no complete request header within " + p.readHeaderTimeout.String()
		e.Verdict = proxyVerdict(ruleHeaderTimeout, msg)
		e.HTTP.Error = msg
	case netx.FaultHeaderTooLarge:
		e.Verdict = proxyVerdict(ruleHeaderTooLarge, "request header too large to read, far over MaxHeaderBytes "+strconv.Itoa(p.maxHeaderBytes))
		e.HTTP.Status = http.StatusRequestHeaderFieldsTooLarge
	}
	p.publish(e)
}

// headerHardLimit is the servers' MaxHeaderBytes for a configured limit:
// headers between the two are read and refused by the handler with an
// event that names the request (refuseHeaderTooLarge); net/http refuses
// larger ones itself, and a watchedConn notices.
func headerHardLimit(limit int) int {
	if limit > math.MaxInt/2 {
		return limit
	}
	return 2 * limit
}

// headerSize is the size of r's request line and header as HTTP/1.1 sends
// them: the measure MaxHeaderBytes bounds, for HTTP/2 requests too.
func headerSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2 + 2 // request line, blank line
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vv := range r.Header {
		for _, v := range vv {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// refuseHeaderTooLarge answers 431 to a request whose header is over
// MaxHeaderBytes and publishes e, its http event, refused.
func (p *Proxy) refuseHeaderTooLarge(w http.ResponseWriter, e *event.Event, size int) {
	p.refuse(w, e, http.StatusRequestHeaderFieldsTooLarge, proxyVerdict(ruleHeaderTooLarge,
		"request header of "+strconv.Itoa(size)+" bytes, over MaxHeaderBytes "+strconv.Itoa(p.maxHeaderBytes)))
}
