package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/chaperone-dev/chaperone/event"
)

// testNow is the fixed clock of servers under test.
var testNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func allowAll() event.Decider {
	return event.DeciderFunc(func(context.Context, *event.Event) event.Verdict {
		return event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault}
	})
}

// recorder collects published events.
type recorder struct {
	mu     sync.Mutex
	events []*event.Event
}

func (r *recorder) publish(e *event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []*event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*event.Event(nil), r.events...)
}

// fakeUpstream is a resolver the test starts on 127.0.0.5, on the same port
// for UDP and TCP, answering with handler and counting what it receives.
type fakeUpstream struct {
	addr    netip.AddrPort
	udpSeen atomic.Int64
	tcpSeen atomic.Int64
}

func (u *fakeUpstream) seen() int64 { return u.udpSeen.Load() + u.tcpSeen.Load() }

func startUpstream(t testing.TB, handler func(w mdns.ResponseWriter, r *mdns.Msg, tcp bool)) *fakeUpstream {
	t.Helper()
	var pc net.PacketConn
	var l net.Listener
	for range 20 { // the TCP port matching a free UDP port may be taken
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.5:0")
		if err != nil {
			t.Fatalf("listen udp: %v", err)
		}
		l, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no port free for both udp and tcp on 127.0.0.5")
	}
	u := &fakeUpstream{addr: pc.LocalAddr().(*net.UDPAddr).AddrPort()}
	h := mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		_, tcp := w.RemoteAddr().(*net.TCPAddr)
		if tcp {
			u.tcpSeen.Add(1)
		} else {
			u.udpSeen.Add(1)
		}
		handler(w, r, tcp)
	})
	for _, srv := range []*mdns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			srv.Shutdown()
			<-done
		})
	}
	return u
}

// answering is an upstream handler that answers A and AAAA queries from
// table with TTL 300 and NXDOMAIN for names it lacks.
func answering(table map[string][]netip.Addr) func(w mdns.ResponseWriter, r *mdns.Msg, tcp bool) {
	return func(w mdns.ResponseWriter, r *mdns.Msg, _ bool) {
		m := new(mdns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		addrs, ok := table[canonical(q.Name)]
		if !ok {
			m.Rcode = mdns.RcodeNameError
		}
		for _, a := range addrs {
			hdr := mdns.RR_Header{Name: q.Name, Class: mdns.ClassINET, Ttl: 300}
			switch {
			case q.Qtype == mdns.TypeA && a.Is4():
				hdr.Rrtype = mdns.TypeA
				m.Answer = append(m.Answer, &mdns.A{Hdr: hdr, A: a.AsSlice()})
			case q.Qtype == mdns.TypeAAAA && a.Is6():
				hdr.Rrtype = mdns.TypeAAAA
				m.Answer = append(m.Answer, &mdns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
		if q.Qtype == mdns.TypeTXT && ok {
			m.Answer = append(m.Answer, &mdns.TXT{
				Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeTXT, Class: mdns.ClassINET, Ttl: 300},
				Txt: []string{"hello"},
			})
		}
		w.WriteMsg(m)
	}
}

// running is a Server under test with its UDP and TCP addresses.
type running struct {
	srv      *Server
	udp, tcp string
	events   *recorder
	serveErr chan error
}

// startServer starts a Server on 127.0.0.1 for UDP and TCP; cleanup closes
// it and checks that both Serve calls returned nil.
func startServer(t testing.TB, o Options) *running {
	t.Helper()
	rec := &recorder{}
	if o.Publish == nil {
		o.Publish = rec.publish
	}
	if o.Decider == nil {
		o.Decider = allowAll()
	}
	if o.Now == nil {
		o.Now = func() time.Time { return testNow }
	}
	if o.Session == "" {
		o.Session = "s1"
	}
	srv, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatalf("listen tcp: %v", err)
	}
	r := &running{srv: srv, udp: pc.LocalAddr().String(), tcp: l.Addr().String(), events: rec, serveErr: make(chan error, 2)}
	go func() { r.serveErr <- srv.ServeUDP(pc) }()
	go func() { r.serveErr <- srv.ServeTCP(l) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for range 2 {
			if err := <-r.serveErr; err != nil {
				t.Errorf("Serve returned %v after Close, want nil", err)
			}
		}
	})
	return r
}

// query asks the server one question over network ("udp" or "tcp").
func (r *running) query(t *testing.T, network, name string, qtype uint16) *mdns.Msg {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(mdns.Fqdn(name), qtype)
	return r.exchange(t, network, m)
}

func (r *running) exchange(t *testing.T, network string, m *mdns.Msg) *mdns.Msg {
	t.Helper()
	resp, err := r.tryExchange(network, m)
	if err != nil {
		t.Fatalf("exchange over %s: %v", network, err)
	}
	return resp
}

func (r *running) tryExchange(network string, m *mdns.Msg) (*mdns.Msg, error) {
	addr := r.udp
	if network == "tcp" {
		addr = r.tcp
	}
	c := &mdns.Client{Net: network, Timeout: 10 * time.Second}
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		return nil, err
	}
	if resp.Id != m.Id {
		return nil, errors.New("reply has another id")
	}
	return resp, nil
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
