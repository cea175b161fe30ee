package dns

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSystemUpstreams(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		name    string
		in      string
		want    []netip.AddrPort
		wantErr bool
	}{
		{"systemd-resolved stub", "# generated\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n", []netip.AddrPort{ap("127.0.0.53:53")}, false},
		{"several, in order, deduplicated", "nameserver 10.0.0.2\nnameserver ::1\nnameserver 10.0.0.2\n", []netip.AddrPort{ap("10.0.0.2:53"), ap("[::1]:53")}, false},
		{"comments and blanks", "; comment\n\n  nameserver\t192.0.2.1  # trailing\nnameserver 192.0.2.2;x\n", []netip.AddrPort{ap("192.0.2.1:53"), ap("192.0.2.2:53")}, false},
		{"zone kept", "nameserver fe80::1%eth0\n", []netip.AddrPort{ap("[fe80::1%eth0]:53")}, false},
		{"mapped unmapped", "nameserver ::ffff:192.0.2.3\n", []netip.AddrPort{ap("192.0.2.3:53")}, false},
		{"CRLF", "nameserver 192.0.2.4\r\n", []netip.AddrPort{ap("192.0.2.4:53")}, false},
		{"invalid skipped", "nameserver dns.example\nnameserver 192.0.2.5\n", []netip.AddrPort{ap("192.0.2.5:53")}, false},
		{"other directive", "nameservers 192.0.2.6\n", nil, true},
		{"commented out", "#nameserver 192.0.2.7\n", nil, true},
		{"empty", "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SystemUpstreams([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzSystemUpstreams(f *testing.F) {
	f.Add([]byte("nameserver 127.0.0.53\noptions edns0\n"))
	f.Add([]byte("nameserver fe80::1%eth0\nnameserver ::1 # x\n"))
	f.Add([]byte("; only a comment"))
	f.Add([]byte("nameserver \x00\xff\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := SystemUpstreams(b)
		if err == nil && len(got) == 0 {
			t.Fatal("no error and no upstream")
		}
		seen := map[netip.AddrPort]bool{}
		for _, a := range got {
			if !a.IsValid() || a.Port() != 53 || a.Addr().Is4In6() || seen[a] {
				t.Fatalf("bad upstream %v in %v", a, got)
			}
			seen[a] = true
		}
	})
}
