package dns

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	mdns "github.com/miekg/dns"

	"github.com/chaperone-dev/chaperone/event"
)

// processRecorder is an Options.Process that returns a fixed process and
// records the client addresses it was asked about.
type processRecorder struct {
	proc *event.Process

	mu      sync.Mutex
	clients []netip.AddrPort
}

func (p *processRecorder) lookup(client netip.AddrPort) *event.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clients = append(p.clients, client)
	return p.proc
}

func (p *processRecorder) seen() []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]netip.AddrPort(nil), p.clients...)
}

// exchangeFrom sends m over network from a socket bound to 127.0.0.7 and
// returns the reply and that socket's address.
func (r *running) exchangeFrom(t *testing.T, network string, m *mdns.Msg) (*mdns.Msg, netip.AddrPort) {
	t.Helper()
	addr, local := r.udp, net.Addr(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 7)})
	if network == "tcp" {
		addr, local = r.tcp, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 7)}
	}
	d := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	nc, err := d.Dial(network, addr)
	if err != nil {
		t.Fatalf("dial %s from 127.0.0.7: %v", network, err)
	}
	defer nc.Close()
	from, err := netip.ParseAddrPort(nc.LocalAddr().String())
	if err != nil {
		t.Fatalf("client address: %v", err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &mdns.Client{Net: network, Timeout: 10 * time.Second}
	resp, _, err := c.ExchangeWithConn(m, &mdns.Conn{Conn: nc})
	if err != nil {
		t.Fatalf("exchange over %s: %v", network, err)
	}
	return resp, from
}

func TestProcess(t *testing.T) {
	agent := &event.Process{PID: 4242, PPID: 1, Exe: "/usr/bin/curl", Argv: []string{"curl", "a.test"}, UID: 1000}
	static := map[string][]netip.Addr{"a.test": addrs("10.0.0.1")}
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			procs := &processRecorder{proc: agent}
			var decided []*event.Process // what the Decider saw, in order
			var mu sync.Mutex
			r := startServer(t, Options{
				Static:  static,
				Process: procs.lookup,
				Decider: event.DeciderFunc(func(_ context.Context, e *event.Event) event.Verdict {
					mu.Lock()
					defer mu.Unlock()
					decided = append(decided, e.Process)
					return allowed
				}),
			})

			// A query with two questions produces no event, so no lookup.
			bad := new(mdns.Msg)
			bad.SetQuestion("a.test.", mdns.TypeA)
			bad.Question = append(bad.Question, mdns.Question{Name: "b.test.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET})
			if resp, _ := r.exchangeFrom(t, network, bad); resp.Rcode != mdns.RcodeFormatError {
				t.Fatalf("two questions: rcode %s, want FORMERR", rcodeString(resp.Rcode))
			}

			q := new(mdns.Msg)
			q.SetQuestion("a.test.", mdns.TypeA)
			resp, from := r.exchangeFrom(t, network, q)
			if resp.Rcode != mdns.RcodeSuccess {
				t.Fatalf("rcode %s, want NOERROR", rcodeString(resp.Rcode))
			}
			if from.Addr() != netip.MustParseAddr("127.0.0.7") {
				t.Fatalf("client socket is %s, want 127.0.0.7", from)
			}

			if diff := cmp.Diff([]netip.AddrPort{from}, procs.seen(), cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Errorf("Process called with (-want +got):\n%s", diff)
			}
			want := dnsEvent("a.test", "A", "NOERROR", allowed, addrs("10.0.0.1")...)
			want.Process = agent
			if diff := cmp.Diff([]*event.Event{want}, r.events.all(), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if evs := r.events.all(); len(evs) == 1 && evs[0].Process != agent {
				t.Errorf("event Process is %p, want the pointer Process returned (%p)", evs[0].Process, agent)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(decided) != 1 || decided[0] != agent {
				t.Errorf("Decider saw processes %v, want [%p]", decided, agent)
			}
		})
	}
}

func TestProcessNil(t *testing.T) {
	tests := []struct {
		name    string
		process func(netip.AddrPort) *event.Process
	}{
		{"no func", nil},
		{"func finds nothing", func(netip.AddrPort) *event.Process { return nil }},
		{"func panics", func(netip.AddrPort) *event.Process { panic("lookup failed") }},
	}
	for _, tt := range tests {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				r := startServer(t, Options{
					Static:  map[string][]netip.Addr{"a.test": addrs("10.0.0.1")},
					Process: tt.process,
				})
				q := new(mdns.Msg)
				q.SetQuestion("a.test.", mdns.TypeA)
				if resp, _ := r.exchangeFrom(t, network, q); resp.Rcode != mdns.RcodeSuccess {
					t.Fatalf("rcode %s, want NOERROR", rcodeString(resp.Rcode))
				}
				want := []*event.Event{dnsEvent("a.test", "A", "NOERROR", allowed, addrs("10.0.0.1")...)}
				if diff := cmp.Diff(want, r.events.all(), cmpAddrs, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestClientAddr(t *testing.T) {
	tests := []struct {
		name string
		addr net.Addr
		want netip.AddrPort
	}{
		{"udp v4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7).To4(), Port: 53}, netip.MustParseAddrPort("127.0.0.7:53")},
		{"udp v4 in 16 bytes", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7), Port: 53}, netip.MustParseAddrPort("127.0.0.7:53")},
		{"tcp v4-mapped", &net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.7"), Port: 9}, netip.MustParseAddrPort("127.0.0.7:9")},
		{"tcp v6", &net.TCPAddr{IP: net.IPv6loopback, Port: 9}, netip.MustParseAddrPort("[::1]:9")},
		{"other kind", &net.IPAddr{IP: net.IPv4(127, 0, 0, 7)}, netip.AddrPort{}},
		{"nil", nil, netip.AddrPort{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clientAddr(tt.addr); got != tt.want {
				t.Errorf("clientAddr(%v) = %s, want %s", tt.addr, got, tt.want)
			}
		})
	}
}
