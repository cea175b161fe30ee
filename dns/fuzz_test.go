package dns

import (
	"context"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/chaperone-dev/chaperone/event"
)

// FuzzHandle feeds arbitrary bytes through the path a UDP packet takes
// (unpack, decide, answer, truncate, pack). Without upstreams nothing
// leaves the process. Any reply must parse and carry the query's ID.
func FuzzHandle(f *testing.F) {
	seed := func(m *mdns.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"static.test.", mdns.TypeA}, {"static.test.", mdns.TypeAAAA}, {"denied.test.", mdns.TypeA}, {"other.test.", mdns.TypeTXT}, {".", mdns.TypeNS}, {"static.test.", mdns.TypeAXFR}} {
		m := new(mdns.Msg)
		m.SetQuestion(q.name, q.qtype)
		seed(m)
		m.SetEdns0(1232, true)
		seed(m)
	}
	two := new(mdns.Msg)
	two.SetQuestion("a.test.", mdns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	seed(two)
	f.Add([]byte{})
	f.Add([]byte{0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'x'})
	f.Add([]byte{0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0})

	s, err := New(Options{
		Decider: event.DeciderFunc(func(_ context.Context, e *event.Event) event.Verdict {
			if e.DNS.Name == "denied.test" {
				return event.Verdict{Action: event.Deny}
			}
			return event.Verdict{Action: event.Allow}
		}),
		Static: map[string][]netip.Addr{"static.test": addrs("10.0.0.1", "fd00::1")},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	f.Fuzz(func(t *testing.T, pkt []byte) {
		for _, udp := range []bool{true, false} {
			out := s.handlePacket(context.Background(), pkt, udp, netip.AddrPort{})
			if out == nil {
				continue
			}
			if udp && len(out) > mdns.MaxMsgSize {
				t.Fatalf("udp reply of %d bytes", len(out))
			}
			m := new(mdns.Msg)
			if err := m.Unpack(out); err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}
			if !m.Response || len(pkt) < 2 || m.Id != uint16(pkt[0])<<8|uint16(pkt[1]) {
				t.Fatalf("reply id %#x response %v for query %x", m.Id, m.Response, pkt)
			}
		}
	})
}
