package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/attribution"
	"github.com/chaperone-dev/chaperone/dns"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy"
	"github.com/chaperone-dev/chaperone/redirect"
)

// CgroupParent is the cgroup under the v2 root that holds every
// transparent session's leaf.
const CgroupParent = "chaperone"

// transparentOptions is what a transparent session needs beyond its id.
type transparentOptions struct {
	// machine, when set, captures the machine's marked processes instead
	// of a cgroup's: the daemon (machine.go).
	machine   *machineScope
	procs     *attribution.Table
	decider   event.Decider
	publish   func(*event.Event)
	static    map[string][]netip.Addr // --resolve names, answered by the session's resolver
	upstreams []netip.AddrPort        // where its resolver forwards the rest
	allowQUIC bool                    // let UDP to port 443 through, unmediated
	allowUDP  bool                    // let UDP to other ports than 53 and 443 through, unmediated
	log       *slog.Logger
	now       func() time.Time // the refusal events' clock; nil means time.Now
	// interceptQUIC sends UDP to port 443 to the proxy's QUIC listeners
	// (run sessions only: the machine's hooks publish no UDP records).
	interceptQUIC bool
}

// scope is which processes a transparent session captures, and whose
// session each is: a cgroup's (run), or the machine's marked processes
// (the daemon: machine.go).
type scope interface {
	// owner tells whose a redirect record is; an error refuses its
	// connection.
	owner(o redirect.Origin) (owned, error)
	// ownerOf tells whose process pid is: for a client that reached the
	// proxy's address without the hooks redirecting it.
	ownerOf(pid int) (owned, bool)
}

// owned is whose a redirected connection or query is.
type owned struct {
	session string
	root    int  // the session's first process: lineages are named from it
	relay   bool // no session's: passed on untouched, never recorded
}

// transparentSession is the kernel side of a transparent session: its
// cgroup (or the machine's marked processes), the eBPF hooks, and the
// proxy's listeners that the hooks send connections to.
type transparentSession struct {
	id    string
	scope scope
	cg    *redirect.SessionCgroup // nil for the machine
	red   *redirect.Redirector
	hooks interface{ Close() error }
	ln4   net.Listener
	ln6   net.Listener // nil when the machine has no IPv6 loopback
	dns   *dns.Server  // the session's resolver, where the hooks send port 53
	udp   []net.PacketConn
	quic  []net.PacketConn // the proxy's QUIC listeners, where the hooks send UDP to port 443
	// dnsTCP feeds the resolver the TCP connections to port 53; tcpDNS
	// holds their records (client address → dnsRecord) while open.
	dnsTCP *connQueue
	tcpDNS sync.Map
	// accepted holds the records of connections accepted for the proxy
	// (client address → originLookup) until Origin takes them.
	accepted sync.Map
	procs    *attribution.Table
	// rootPID is the session's first process, once started: lineages are
	// named from it.
	rootPID atomic.Int64
	// What the hooks refused is published as denied connect events until
	// stopRefusals; refusalsDone is closed once the last one is.
	publish      func(*event.Event)
	now          func() time.Time
	log          *slog.Logger
	stopRefusals context.CancelFunc
	refusalsDone chan struct{}
}

// startTransparent creates the session's cgroup, listens for redirected
// connections and attaches the hooks. Close undoes whatever it did, also
// after a failure half way.
func startTransparent(id string, o transparentOptions) (_ *transparentSession, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("transparent mode needs root: attaching eBPF programs to a cgroup takes CAP_BPF and CAP_SYS_ADMIN (use sudo, or --mode proxy)")
	}
	ts := &transparentSession{id: id, procs: o.procs, publish: o.publish, now: o.now, log: o.log}
	if ts.now == nil {
		ts.now = time.Now
	}
	defer func() {
		if err != nil {
			ts.Close()
		}
	}()
	// Where run sessions' cgroups are: a run session's is made there; the
	// machine's hooks leave those alone.
	root, err := redirect.CgroupRoot()
	if err != nil {
		return nil, fmt.Errorf("transparent mode: %w", err)
	}
	parent, err := redirect.OpenParent(root, CgroupParent)
	if err != nil {
		return nil, fmt.Errorf("transparent mode: %w", err)
	}
	if o.machine != nil {
		ts.scope = o.machine
	} else {
		if ts.cg, err = parent.NewSession(id); err != nil {
			return nil, fmt.Errorf("transparent mode: %w", err)
		}
		ts.scope = cgroupScope{ts}
	}
	if ts.ln4, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("transparent mode: listen: %w", err)
	}
	cfg := redirect.Config{ProxyV4: ts.ln4.Addr().(*net.TCPAddr).AddrPort()}
	if ts.ln6, err = net.Listen("tcp6", "[::1]:0"); err == nil {
		cfg.ProxyV6 = ts.ln6.Addr().(*net.TCPAddr).AddrPort()
	} else {
		ts.ln6 = nil // IPv6 connects then fail, and clients fall back to IPv4
	}
	if ts.dns, err = dns.New(dns.Options{
		Session: id, Decider: o.decider, Publish: o.publish,
		Static: o.static, Upstreams: o.upstreams, Logger: o.log,
		Attribute: ts.queryProcess,
	}); err != nil {
		return nil, fmt.Errorf("transparent mode: %w", err)
	}
	udp4, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("transparent mode: resolver: %w", err)
	}
	ts.udp = append(ts.udp, udp4)
	cfg.DNSV4 = udp4.LocalAddr().(*net.UDPAddr).AddrPort()
	if ts.ln6 != nil {
		if udp6, err := net.ListenPacket("udp6", "[::1]:0"); err == nil {
			ts.udp = append(ts.udp, udp6)
			cfg.DNSV6 = udp6.LocalAddr().(*net.UDPAddr).AddrPort()
		}
	}
	cfg.AllowQUIC = o.allowQUIC
	if o.interceptQUIC && !o.allowQUIC && o.machine == nil {
		if cfg.QUICV4, cfg.QUICV6, err = ts.listenQUIC(); err != nil {
			return nil, err
		}
	}
	cfg.AllowUDP = o.allowUDP
	if o.machine != nil {
		cfg.MarkedOnly, cfg.Candidates, cfg.PinDir = true, o.machine.candidates, o.machine.pinDir
		// run sessions' processes are theirs, even when marked.
		cfg.SkipCgroup = parent.Path
		o.machine.runParent = parent.Path
	}
	if ts.red, err = redirect.Load(cfg); err != nil {
		return nil, fmt.Errorf("transparent mode: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	refusals, err := ts.red.Refusals(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("transparent mode: %w", err)
	}
	ts.stopRefusals, ts.refusalsDone = cancel, make(chan struct{})
	go func() {
		defer close(ts.refusalsDone)
		for rf := range refusals {
			ts.publishRefusal(rf)
		}
	}()
	if o.machine != nil {
		if err := o.machine.start(ts); err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		if ts.hooks, err = ts.red.AttachMachine(o.machine.pinDir); err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		return ts, nil
	}
	if ts.hooks, err = ts.red.Attach(ts.cg.Path); err != nil {
		return nil, fmt.Errorf("transparent mode: %w", err)
	}
	return ts, nil
}

// cgroupScope is a run session's: the processes of its cgroup.
type cgroupScope struct{ ts *transparentSession }

func (c cgroupScope) owner(o redirect.Origin) (owned, error) {
	if o.CgroupID != c.ts.cg.ID {
		return owned{}, fmt.Errorf("connection from cgroup %d, not the session's", o.CgroupID)
	}
	return owned{session: c.ts.id, root: int(c.ts.rootPID.Load())}, nil
}

func (c cgroupScope) ownerOf(pid int) (owned, bool) {
	if in, err := redirect.Contains(c.ts.cg.Path, pid); err != nil || !in {
		return owned{}, false
	}
	return owned{session: c.ts.id, root: int(c.ts.rootPID.Load())}, true
}

// queryProcess is the session and process behind a DNS query from
// client, as the hooks recorded it; a query of no session's (the machine's
// non-agents) is not mediated.
func (ts *transparentSession) queryProcess(client netip.AddrPort) (string, *event.Process, bool) {
	var who owned
	o, err := ts.red.LookupUDP(client)
	if m, ok := ts.scope.(*machineScope); ok && err != nil {
		// The machine's hooks publish no record of a query's socket (that
		// program would run for every packet of the machine): its owner
		// is found among the marked processes.
		o, err = m.udpOrigin(client)
	}
	if err == nil {
		who, err = ts.scope.owner(o)
	}
	if v, ok := ts.tcpDNS.Load(client); ok {
		o, who, err = v.(dnsRecord).origin, v.(dnsRecord).who, nil
	}
	switch {
	case err != nil && ts.cg != nil:
		return ts.id, nil, true // recorded as the session's, its process unknown
	case err != nil || who.relay:
		return "", nil, false
	}
	return who.session, ts.process(o, who), true
}

// process describes the process of a redirect record; one gone already
// is what the kernel saw.
func (ts *transparentSession) process(o redirect.Origin, who owned) *event.Process {
	proc, err := describeProcess(ts.procs, int(o.PID), who.root)
	if err != nil {
		return &event.Process{PID: int(o.PID), UID: int(o.UID), Argv: []string{o.Comm}}
	}
	return proc
}

// listenQUIC opens the proxy's QUIC listeners: IPv4, and IPv6 when the
// machine has an IPv6 loopback (without it, IPv6 QUIC fails with EPERM
// and clients fall back to IPv4 or TCP).
func (ts *transparentSession) listenQUIC() (v4, v6 netip.AddrPort, err error) {
	pc4, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return v4, v6, fmt.Errorf("transparent mode: QUIC listener: %w", err)
	}
	ts.quic = append(ts.quic, pc4)
	v4 = pc4.LocalAddr().(*net.UDPAddr).AddrPort()
	if ts.ln6 != nil {
		if pc6, err := net.ListenPacket("udp6", "[::1]:0"); err == nil {
			ts.quic = append(ts.quic, pc6)
			v6 = pc6.LocalAddr().(*net.UDPAddr).AddrPort()
		}
	}
	return v4, v6, nil
}

// serve starts the session's resolver and hands the redirected
// connections to p.
func (ts *transparentSession) serve(p *proxy.Proxy) {
	for _, pc := range ts.udp {
		go ts.dns.ServeUDP(pc)
	}
	ts.dnsTCP = newConnQueue(ts.ln4.Addr())
	go ts.dns.ServeTCP(ts.dnsTCP)
	for _, ln := range []net.Listener{ts.ln4, ts.ln6} {
		if ln != nil {
			go p.ServeTransparent(splitDNS{Listener: ln, ts: ts}, ts)
		}
	}
	for _, pc := range ts.quic {
		go p.ServeQUIC(pc, quicOrigins{ts})
	}
}

// Origin implements proxy.OriginFinder: the hooks' record of where the
// client was going, and whose session it is.
func (ts *transparentSession) Origin(client netip.AddrPort) (proxy.Tunnel, error) {
	v, ok := ts.accepted.LoadAndDelete(client)
	if !ok {
		return ts.unredirected(client), fmt.Errorf("no record for %s", client)
	}
	r := v.(originLookup)
	switch {
	case r.err != nil:
		return ts.unredirected(client), r.err
	case r.refused != nil:
		return proxy.Tunnel{}, r.refused
	}
	return ts.tunnel(r.origin, r.who), nil
}

// tunnel is what the proxy needs of a redirected connection's record.
func (ts *transparentSession) tunnel(o redirect.Origin, who owned) proxy.Tunnel {
	// The name the process itself looked this address up as, if it did:
	// a hint, for a connection that does not name its host (no SNI, no
	// HTTP); another process's lookup is not this connection's name.
	host, _ := ts.dns.NameForProcess(o.Dst.Addr().Unmap(), int(o.PID))
	return proxy.Tunnel{Session: who.session, Host: host, Dst: o.Dst, Process: ts.process(o, who), Via: "transparent"}
}

// quicOrigins is the OriginFinder of the proxy's QUIC listeners: the
// record the hooks published under the client's UDP address, which
// describes the socket's latest datagram to port 443, so it is looked up
// as the connection's first packet arrives.
type quicOrigins struct{ ts *transparentSession }

func (q quicOrigins) Origin(client netip.AddrPort) (proxy.Tunnel, error) {
	return q.OriginQUIC(client, nil)
}

// OriginQUIC is the record the hooks published for the connection's first
// Initial, by the client's address and the Initial's destination
// connection ID, so that handshakes started at once from one socket to
// different servers each get their own; without one, Origin's.
func (q quicOrigins) OriginQUIC(client netip.AddrPort, dcid []byte) (proxy.Tunnel, error) {
	client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
	o, err := q.ts.red.LookupQUIC(client, dcid)
	if err != nil {
		return proxy.Tunnel{}, err
	}
	who, err := q.ts.scope.owner(o)
	switch {
	case err != nil:
		return proxy.Tunnel{}, err
	case who.relay:
		return proxy.Tunnel{}, fmt.Errorf("quic from %s: no session's", client)
	}
	return q.ts.tunnel(o, who), nil
}

// Resolved implements proxy.ResolverMemory for the session: its resolver
// answered host with addr (for any process of the session, whatever it
// answered with the address since).
func (ts *transparentSession) Resolved(session, host string, addr netip.Addr) bool {
	return session == ts.id && ts.dns.Resolved(host, addr)
}

// unredirected names the session and process of a client that reached a
// listener without passing the hooks: a session process that connected
// to the proxy's address itself (the hooks leave that alone). The
// client's socket is found like explicit mode finds it; anyone else gets
// an empty Tunnel.
func (ts *transparentSession) unredirected(client netip.AddrPort) proxy.Tunnel {
	ln := ts.ln4
	if a := client.Addr(); a.Is6() && !a.Is4In6() {
		ln = ts.ln6
	}
	if ln == nil {
		return proxy.Tunnel{}
	}
	pid, err := ts.procs.SessionSocketOwner(client, ln.Addr().(*net.TCPAddr).AddrPort(), int(ts.rootPID.Load()))
	if err != nil {
		return proxy.Tunnel{}
	}
	who, ok := ts.scope.ownerOf(pid)
	if !ok || who.relay {
		return proxy.Tunnel{}
	}
	proc, err := describeProcess(ts.procs, pid, who.root)
	if err != nil {
		proc = &event.Process{PID: pid}
	}
	return proxy.Tunnel{Session: who.session, Process: proc, Via: "transparent"}
}

// publishRefusal publishes what the hooks refused as a denied connect
// event of the process that tried.
func (ts *transparentSession) publishRefusal(rf redirect.Refusal) {
	if ts.publish == nil {
		return
	}
	who, ok := ts.scope.ownerOf(int(rf.PID))
	if ts.cg != nil {
		who, ok = owned{session: ts.id, root: int(ts.rootPID.Load())}, true
	}
	if !ok || who.relay {
		return // a machine's process that is no session's, gone or unmarked since
	}
	proc, err := describeProcess(ts.procs, int(rf.PID), who.root)
	if err != nil {
		// Gone already: keep what the kernel saw.
		proc = &event.Process{PID: int(rf.PID), UID: int(rf.UID), Argv: []string{rf.Comm}}
	}
	v := event.Verdict{Action: event.Deny, DecidedBy: event.DecidedByRule}
	switch rf.Kind {
	case redirect.RefusalQUIC:
		v.Rule, v.Reason = "quic_refused", "UDP to port 443 (QUIC) is refused (--quic refuse, the machine-wide daemon, or no QUIC listener for its address family), so clients fall back to TCP through the proxy"
	case redirect.RefusalUDP:
		v.Rule, v.Reason = "udp_refused", "UDP other than DNS is refused in transparent mode: the proxy cannot see it (--udp allow lets it through, unmediated)"
	case redirect.RefusalSocket:
		v.Rule, v.Reason = "socket_refused", fmt.Sprintf("a %s cannot be mediated: refused at %s()", rf.SocketName(), rf.Call)
	default:
		v.Rule, v.Reason = "fail_closed", "cannot be redirected: no proxy or resolver for its address family"
	}
	c := &event.Connect{Transport: event.Transport(rf.ProtocolName()), Via: "transparent"}
	if rf.Dst.IsValid() {
		c.Dst, c.Port = rf.Dst, rf.Dst.Port()
		c.Host, _ = ts.dns.NameForProcess(rf.Dst.Addr().Unmap(), int(rf.PID))
	}
	ts.publish(&event.Event{
		Time: ts.now(), Kind: event.KindConnect, Session: who.session, Process: proc,
		Verdict: v, Connect: c,
	})
}

// flushRefusals publishes the refusals still pending and stops: the
// session's processes are gone.
func (ts *transparentSession) flushRefusals() {
	if ts.stopRefusals == nil {
		return
	}
	ts.stopRefusals()
	<-ts.refusalsDone
	if n, err := ts.red.RefusalsDropped(); err == nil && n > 0 && ts.log != nil {
		ts.log.Warn("refusals not recorded: the reader fell behind (the calls were refused all the same)", "dropped", n)
	}
}

// quicRefused is how many QUIC datagrams the session was refused (its
// clients fall back to TCP, which the proxy sees).
func (ts *transparentSession) quicRefused() uint64 {
	n, _ := ts.red.QUICRefused()
	return n
}

// end kills what is left of the session (killOnExit) or waits for it to
// exit by itself.
func (ts *transparentSession) end(ctx context.Context, killOnExit bool) error {
	defer ts.flushRefusals()
	if ts.cg == nil {
		return nil
	}
	if killOnExit {
		return ts.cg.Kill()
	}
	return ts.cg.WaitEmpty(ctx)
}

// Close detaches the hooks and removes the cgroup. The proxy closes the
// listeners it serves; Close closes them too for a session that never
// served.
func (ts *transparentSession) Close() error {
	var errs []error
	if ts.hooks != nil {
		errs = append(errs, ts.hooks.Close())
	}
	if ts.red != nil {
		errs = append(errs, ts.red.Close())
	}
	if ts.refusalsDone != nil {
		<-ts.refusalsDone // the reader stops at Close
	}
	if m, ok := ts.scope.(*machineScope); ok {
		m.stop()
	}
	if ts.dnsTCP != nil {
		ts.dnsTCP.Close()
	}
	if ts.dns != nil {
		errs = append(errs, ts.dns.Close())
	}
	for _, pc := range ts.udp {
		pc.Close() // already closed when the resolver served it
	}
	for _, pc := range ts.quic {
		pc.Close() // already closed when the proxy served it
	}
	for _, ln := range []net.Listener{ts.ln4, ts.ln6} {
		if ln != nil {
			ln.Close()
		}
	}
	if ts.cg != nil {
		if err := ts.cg.Kill(); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		errs = append(errs, ts.cg.Remove())
	}
	return errors.Join(errs...)
}

// sessionCgroup is the directory of ts's cgroup, or "" without one.
func sessionCgroup(ts *transparentSession) string {
	if ts == nil || ts.cg == nil {
		return ""
	}
	return ts.cg.Path
}
