package dns

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDig asks the resolver with a real client, dig, over UDP and TCP.
func TestDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig is not installed (Debian package dnsutils)")
	}
	up := startUpstream(t, answering(map[string][]netip.Addr{"forwarded.test": addrs("192.0.2.77")}))
	r := startServer(t, Options{
		Upstreams: []netip.AddrPort{up.addr},
		Static:    map[string][]netip.Addr{"static.test": addrs("10.1.1.1", "fd00::1")},
	})
	host, port, err := net.SplitHostPort(r.udp)
	if err != nil {
		t.Fatal(err)
	}
	_, tcpPort, _ := net.SplitHostPort(r.tcp)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"static A over udp", []string{"-p", port, "static.test", "A"}, "10.1.1.1"},
		{"static AAAA over udp", []string{"-p", port, "static.test", "AAAA"}, "fd00::1"},
		{"forwarded over udp", []string{"-p", port, "forwarded.test", "A"}, "192.0.2.77"},
		{"forwarded over tcp", []string{"-p", tcpPort, "+tcp", "forwarded.test", "A"}, "192.0.2.77"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"@" + host, "+short", "+time=5", "+tries=1"}, tt.args...)
			out, err := exec.Command(dig, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("dig %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if diff := cmp.Diff(tt.want, strings.TrimSpace(string(out))); diff != "" {
				t.Errorf("dig answer (-want +got):\n%s", diff)
			}
		})
	}
	if evs := r.events.all(); len(evs) != 4 {
		t.Errorf("%d events, want 4", len(evs))
	}
	if name, ok := r.srv.NameFor(netip.MustParseAddr("192.0.2.77")); !ok || name != "forwarded.test" {
		t.Errorf("NameFor = %q, %v", name, ok)
	}
}
