package dns

import (
	"net/netip"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// BenchmarkQuery compares, in one run, asking the fake upstream directly
// with asking it through the resolver, and a static answer.
func BenchmarkQuery(b *testing.B) {
	up := startUpstream(b, answering(map[string][]netip.Addr{"fwd.test": addrs("192.0.2.1")}))
	r := startServer(b, Options{
		Upstreams: []netip.AddrPort{up.addr},
		Static:    map[string][]netip.Addr{"static.test": addrs("10.0.0.1")},
	})
	for _, bb := range []struct {
		name, addr, qname string
	}{
		{"direct-upstream", up.addr.String(), "fwd.test."},
		{"via-resolver", r.udp, "fwd.test."},
		{"static", r.udp, "static.test."},
	} {
		b.Run(bb.name, func(b *testing.B) {
			c := &mdns.Client{Net: "udp", Timeout: 5 * time.Second}
			m := new(mdns.Msg)
			m.SetQuestion(bb.qname, mdns.TypeA)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := c.Exchange(m, bb.addr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
