package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/chaperone-dev/chaperone/event"
)

// Options configures a Server.
type Options struct {
	// Session is the id put on every event.
	Session string
	// Decider decides every query, before anything is answered or
	// forwarded. Required.
	Decider event.Decider
	// Publish receives every event; it is called on the query's path and
	// must not block for long. Nil discards.
	Publish func(*event.Event)
	// Static maps a host name (case and a trailing dot do not matter) to
	// its addresses: IPv4 ones answer A queries, IPv6 ones AAAA queries.
	Static map[string][]netip.Addr
	// Upstreams are the resolvers asked, in order, for names that are not
	// static. Empty: only static names are answered; others get SERVFAIL.
	Upstreams []netip.AddrPort
	// DenyRcode answers a denied query: mdns.RcodeNameError (NXDOMAIN, the
	// default when zero) or mdns.RcodeRefused.
	DenyRcode int
	// Timeout bounds one exchange with one upstream; 2s when zero.
	Timeout time.Duration
	// Logger; discards when nil.
	Logger *slog.Logger
	// Now is the clock for events and name memory; time.Now when nil.
	Now func() time.Time
	// Process finds the process that sent a query from client (the UDP
	// packet's source, the TCP connection's remote address; an IPv4
	// address is never in its v4-mapped form). Its result becomes the
	// event's Process before the Decider sees the event. It is called once
	// per query that produces an event, concurrently, on the query's path.
	// Nil, or a nil result, leaves Process nil.
	Process func(client netip.AddrPort) *event.Process
	// Attribute, when set, is asked instead of Process and Session: the
	// session and process behind a query from client, or mediated false
	// for a query that is no session's (a machine-wide resolver's
	// non-agent client), which is forwarded as it is, with no event and
	// no decision.
	Attribute func(client netip.AddrPort) (session string, p *event.Process, mediated bool)
}

const (
	defaultTimeout = 2 * time.Second
	// maxInflightUDP bounds the UDP queries handled at once per socket;
	// beyond it the socket is read no faster than queries finish.
	maxInflightUDP = 256
	// tcpIdle closes a TCP client that sends nothing for this long.
	tcpIdle = 10 * time.Second
	// staticTTL is the TTL of static answers: short, so a changed
	// configuration is seen soon.
	staticTTL = 60
)

// Server is one session's resolver. Its methods are safe for concurrent use.
type Server struct {
	session   string
	decider   event.Decider
	publish   func(*event.Event)
	static    map[string][]netip.Addr
	upstreams []netip.AddrPort
	denyRcode int
	timeout   time.Duration
	log       *slog.Logger
	now       func() time.Time
	process   func(netip.AddrPort) *event.Process
	attribute func(netip.AddrPort) (string, *event.Process, bool)
	names     *nameMemory

	ctx    context.Context // cancelled by Close: stops in-flight exchanges
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	packets map[net.PacketConn]struct{}
	lists   map[net.Listener]struct{}
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup // every goroutine the Server started
}

// New validates o and returns a Server that serves nothing until ServeUDP
// or ServeTCP is called.
func New(o Options) (*Server, error) {
	if o.Decider == nil {
		return nil, errors.New("dns: options: Decider is required")
	}
	switch o.DenyRcode {
	case 0:
		o.DenyRcode = mdns.RcodeNameError
	case mdns.RcodeNameError, mdns.RcodeRefused:
	default:
		return nil, fmt.Errorf("dns: options: DenyRcode %d is neither NXDOMAIN (%d) nor REFUSED (%d)",
			o.DenyRcode, mdns.RcodeNameError, mdns.RcodeRefused)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("dns: options: negative Timeout %v", o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = defaultTimeout
	}
	if o.Publish == nil {
		o.Publish = func(*event.Event) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	static := make(map[string][]netip.Addr, len(o.Static))
	for name, addrs := range o.Static {
		n := canonical(name)
		if n == "" || n == "." {
			return nil, fmt.Errorf("dns: options: static: empty host name")
		}
		if _, ok := mdns.IsDomainName(n); !ok {
			return nil, fmt.Errorf("dns: options: static: %q is not a host name", name)
		}
		for _, a := range addrs {
			if !a.IsValid() {
				return nil, fmt.Errorf("dns: options: static: %s: invalid address", n)
			}
			static[n] = append(static[n], a.Unmap().WithZone(""))
		}
		if _, ok := static[n]; !ok {
			static[n] = nil // a name without addresses exists and answers empty
		}
	}
	ups := make([]netip.AddrPort, 0, len(o.Upstreams))
	for _, u := range o.Upstreams {
		if !u.IsValid() || u.Port() == 0 {
			return nil, fmt.Errorf("dns: options: upstream %q is not an address with a port", u)
		}
		ups = append(ups, u)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		session:   o.Session,
		decider:   o.Decider,
		publish:   o.Publish,
		static:    static,
		upstreams: ups,
		denyRcode: o.DenyRcode,
		timeout:   o.Timeout,
		log:       o.Logger,
		now:       o.Now,
		process:   o.Process,
		attribute: o.Attribute,
		names:     newNameMemory(defaultNameCapacity),
		ctx:       ctx,
		cancel:    cancel,
		packets:   map[net.PacketConn]struct{}{},
		lists:     map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
	}, nil
}

// canonical lowercases a name and drops its trailing dot.
func canonical(name string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
}

// NameFor returns the name this session most recently resolved to addr,
// while that memory lasts (at least the answer's TTL, see nameMemory). It
// is a hint: an address answers for many names (a CDN's does), and the
// last lookup of it may have been another process's, for another name.
func (s *Server) NameFor(addr netip.Addr) (string, bool) {
	return s.names.get(addr.Unmap().WithZone(""), 0, s.now())
}

// NameForProcess returns the name process pid itself most recently
// resolved to addr, while that memory lasts.
func (s *Server) NameForProcess(addr netip.Addr, pid int) (string, bool) {
	return s.names.get(addr.Unmap().WithZone(""), pid, s.now())
}

// Resolved reports whether this session's resolver answered name (lower
// case, no trailing dot) with addr, while that memory lasts: any of the
// names an address was looked up as, not only the last.
func (s *Server) Resolved(name string, addr netip.Addr) bool {
	return s.names.has(addr.Unmap().WithZone(""), name, s.now())
}

// ServeUDP answers queries arriving on pc until Close, then returns nil; it
// returns the read error if pc fails first. pc is closed when ServeUDP
// returns.
func (s *Server) ServeUDP(pc net.PacketConn) error {
	if !s.track(func() { s.packets[pc] = struct{}{} }) {
		pc.Close()
		return nil
	}
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.packets, pc)
		s.mu.Unlock()
		pc.Close()
	}()
	sem := make(chan struct{}, maxInflightUDP)
	buf := make([]byte, mdns.MaxMsgSize)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if s.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("dns: read udp: %w", err)
		}
		select {
		case sem <- struct{}{}:
		case <-s.ctx.Done():
			return nil
		}
		pkt := append([]byte(nil), buf[:n]...)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-sem }()
			if reply := s.handlePacket(s.ctx, pkt, true, clientAddr(from)); reply != nil {
				if _, err := pc.WriteTo(reply, from); err != nil && !s.isClosed() {
					s.log.Debug("dns: write udp reply", "session", s.session, "err", err)
				}
			}
		}()
	}
}

// ServeTCP answers queries on connections accepted from l until Close, then
// returns nil; it returns the accept error if l fails first. l is closed
// when ServeTCP returns.
func (s *Server) ServeTCP(l net.Listener) error {
	if !s.track(func() { s.lists[l] = struct{}{} }) {
		l.Close()
		return nil
	}
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.lists, l)
		s.mu.Unlock()
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("dns: accept tcp: %w", err)
		}
		if !s.track(func() { s.conns[c] = struct{}{} }) {
			c.Close()
			return nil
		}
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.serveConn(c)
		}()
	}
}

// serveConn answers length-prefixed queries on one TCP connection in turn.
func (s *Server) serveConn(c net.Conn) {
	client := clientAddr(c.RemoteAddr())
	var lenBuf [2]byte
	for {
		c.SetReadDeadline(time.Now().Add(tcpIdle))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		pkt := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(c, pkt); err != nil {
			return
		}
		reply := s.handlePacket(s.ctx, pkt, false, client)
		if reply == nil {
			continue
		}
		out := make([]byte, 2+len(reply))
		binary.BigEndian.PutUint16(out, uint16(len(reply)))
		copy(out[2:], reply)
		c.SetWriteDeadline(time.Now().Add(tcpIdle))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// clientAddr is a client's address as given to Options.Process, unmapped;
// the zero AddrPort when a says nothing usable.
func clientAddr(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	case nil:
		return netip.AddrPort{}
	default:
		ap, _ = netip.ParseAddrPort(a.String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// track registers a resource and one goroutine under the lock, unless the
// Server is closed.
func (s *Server) track(add func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	add()
	s.wg.Add(1)
	return true
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops serving: it closes the sockets given to ServeUDP and
// ServeTCP and every TCP connection, cancels upstream exchanges, and
// returns once every goroutine of the Server has ended. It is idempotent
// and works whether or not anything was served.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	s.cancel()
	var errs []error
	for pc := range s.packets {
		if err := pc.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for l := range s.lists {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for c := range s.conns {
		c.Close() // a client's connection failing to close is not the Server's error
	}
	s.mu.Unlock()
	s.wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dns: close: %w", err)
	}
	return nil
}
