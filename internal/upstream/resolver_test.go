package upstream

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

func TestResolver(t *testing.T) {
	for _, tt := range []struct {
		name    string
		def     string
		queries []struct {
			name  string
			qtype uint16
			net   string
		}
		want  []Query
		codes []int
	}{
		{
			name: "names and a default",
			def:  "127.0.0.9",
			queries: []struct {
				name  string
				qtype uint16
				net   string
			}{{"API.Example.test.", dns.TypeA, "udp"}, {"api.example.test.", dns.TypeAAAA, "udp"}, {"telemetry.example.com.", dns.TypeA, "tcp"}},
			want: []Query{
				{Name: "api.example.test", Type: "A", Answer: "127.0.0.8", Net: "udp"},
				{Name: "api.example.test", Type: "AAAA", Net: "udp"},
				{Name: "telemetry.example.com", Type: "A", Answer: "127.0.0.9", Net: "tcp"},
			},
			codes: []int{dns.RcodeSuccess, dns.RcodeSuccess, dns.RcodeSuccess},
		},
		{
			name: "names only",
			queries: []struct {
				name  string
				qtype uint16
				net   string
			}{{"api.example.test.", dns.TypeA, "udp"}, {"telemetry.example.com.", dns.TypeA, "udp"}},
			want: []Query{
				{Name: "api.example.test", Type: "A", Answer: "127.0.0.8", Net: "udp"},
				{Name: "telemetry.example.com", Type: "A", Net: "udp"},
			},
			codes: []int{dns.RcodeSuccess, dns.RcodeNameError},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := ResolverOptions{Addr: "127.0.0.1:0", Names: map[string]netip.Addr{"api.example.test.": netip.MustParseAddr("127.0.0.8")}}
			if tt.def != "" {
				o.Default = netip.MustParseAddr(tt.def)
			}
			r, err := StartResolver(o)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var codes []int
			for _, q := range tt.queries {
				m := new(dns.Msg)
				m.SetQuestion(q.name, q.qtype)
				c := &dns.Client{Net: q.net}
				in, _, err := c.Exchange(m, r.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, in.Rcode)
				for _, rr := range in.Answer {
					if a, ok := rr.(*dns.A); !ok || q.qtype != dns.TypeA {
						t.Errorf("%s %s: answer %v", q.name, dns.TypeToString[q.qtype], rr)
					} else if a.Hdr.Name != q.name {
						t.Errorf("answer named %q, want %q", a.Hdr.Name, q.name)
					}
				}
			}
			if diff := cmp.Diff(tt.codes, codes); diff != "" {
				t.Errorf("rcodes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, r.Queries()); diff != "" {
				t.Errorf("queries (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := StartResolver(ResolverOptions{Addr: "192.0.2.1:53"}); err == nil {
		t.Error("a resolver started on a non-loopback address")
	}
}
