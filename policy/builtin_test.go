package policy

import (
	"context"
	"net/netip"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
)

func TestBuiltin(t *testing.T) {
	b, err := NewBuiltin([]string{"evil.test", "*.paste.test", "10.1.2.3", "[2001:db8::1]", "Upper.Test."})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		e    event.Event
		deny bool
	}{
		{"connect exact", event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: "evil.test", Port: 443}}, true},
		{"connect case and dot", event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: "EVIL.test.", Port: 443}}, true},
		{"configured upper case", event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: "upper.test"}}, true},
		{"subdomain wildcard", event.Event{Kind: event.KindTLS, TLS: &event.TLS{ServerName: "a.b.paste.test"}}, true},
		{"wildcard excludes apex", event.Event{Kind: event.KindTLS, TLS: &event.TLS{ServerName: "paste.test"}}, false},
		{"suffix is not a subdomain", event.Event{Kind: event.KindTLS, TLS: &event.TLS{ServerName: "notpaste.test"}}, false},
		{"http host with port", event.Event{Kind: event.KindHTTP, HTTP: &event.HTTP{Host: "evil.test:8443"}}, true},
		{"http ipv6 host", event.Event{Kind: event.KindHTTP, HTTP: &event.HTTP{Host: "[2001:db8::1]:443"}}, true},
		{"dst address", event.Event{Kind: event.KindConnect, Connect: &event.Connect{Dst: netip.MustParseAddrPort("10.1.2.3:22")}}, true},
		{"mapped dst address", event.Event{Kind: event.KindConnect, Connect: &event.Connect{Dst: netip.MustParseAddrPort("[::ffff:10.1.2.3]:22")}}, true},
		{"allowed host", event.Event{Kind: event.KindConnect, Connect: &event.Connect{Host: "api.test", Port: 443}}, false},
		{"session event", event.Event{Kind: event.KindSessionStart, SessionInfo: &event.Session{ID: "x"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := b.Decide(context.Background(), &tt.e)
			if got := !v.Allowed(); got != tt.deny {
				t.Fatalf("denied = %v, want %v (verdict %v)", got, tt.deny, v)
			}
			if tt.deny && (v.Rule != RuleDenyHosts || v.DecidedBy != event.DecidedByRule || v.Reason == "") {
				t.Errorf("deny verdict %+v does not name the rule and reason", v)
			}
			if !tt.deny && v.DecidedBy != event.DecidedByDefault {
				t.Errorf("allow verdict decided by %v, want default", v.DecidedBy)
			}
		})
	}
}

func TestBuiltinRejectsBadHosts(t *testing.T) {
	for _, h := range []string{"", "  ", "a b", "http://x", "x/y", "*"} {
		if _, err := NewBuiltin([]string{h}); err == nil {
			t.Errorf("NewBuiltin(%q) succeeded", h)
		}
	}
}

// TestHostOnly: the port goes, the brackets of an IPv6 literal too, and
// the common forms allocate nothing (hostOnly runs for every request).
func TestHostOnly(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"example.com", "example.com"},
		{"example.com:443", "example.com"},
		{"127.0.0.1", "127.0.0.1"},
		{"127.0.0.1:8080", "127.0.0.1"},
		{"[::1]:443", "::1"},
		{"[::1]", "::1"},
		{"::1", "::1"},
		{"[::ffff:1.2.3.4]:80", "::ffff:1.2.3.4"},
		{"[2001:db8:0::1]:80", "2001:db8::1"},
	} {
		if got := hostOnly(tc.in); got != tc.want {
			t.Errorf("hostOnly(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{"example.com", "example.com:443", "127.0.0.1", "127.0.0.1:8080"} {
		if n := testing.AllocsPerRun(100, func() { hostOnly(in) }); n != 0 {
			t.Errorf("hostOnly(%q) allocates %v times, want 0", in, n)
		}
	}
}
