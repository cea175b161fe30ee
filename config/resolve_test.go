package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseResolve(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		in   string
		want Resolve
	}{
		{"api.example.com:127.0.0.2", Resolve{Host: "api.example.com", Addr: a("127.0.0.2")}},
		{"api.example.com:443:127.0.0.2", Resolve{Host: "api.example.com", Port: 443, Addr: a("127.0.0.2")}},
		{"h:[::1]", Resolve{Host: "h", Addr: a("::1")}},
		{"h:443:::1", Resolve{Host: "h", Port: 443, Addr: a("::1")}},
		{"h:443:[::1]", Resolve{Host: "h", Port: 443, Addr: a("::1")}},
		{"h:::1", Resolve{Host: "h", Addr: a("::1")}},
		{"h:443::1", Resolve{Host: "h", Addr: a("443::1")}}, // ":1" is no address, so all of it is one
		{"API.Example.COM.:8443:10.1.2.3", Resolve{Host: "api.example.com", Port: 8443, Addr: a("10.1.2.3")}},
		{"h:[::ffff:127.0.0.1]", Resolve{Host: "h", Addr: a("127.0.0.1")}},
		{"h:65535:127.0.0.1", Resolve{Host: "h", Port: 65535, Addr: a("127.0.0.1")}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseResolve(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
				t.Errorf("ParseResolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseResolveErrors(t *testing.T) {
	for _, in := range []string{
		"", "host", ":127.0.0.1", "h:", "h:not-an-ip", "h:443:", "h:0:127.0.0.1", "h:70000:127.0.0.1",
		"h:[127.0.0.1]", "h:[::1", "h:fe80::1%eth0", "a b:127.0.0.1", "*.h:127.0.0.1", "h:443:127.0.0.1:5",
	} {
		t.Run(in, func(t *testing.T) {
			_, err := ParseResolve(in)
			if err == nil {
				t.Fatal("ParseResolve succeeded, want an error")
			}
			if q := `"` + in + `"`; !strings.Contains(err.Error(), q) {
				t.Errorf("error %q does not quote the input %s", err, q)
			}
		})
	}
}

func TestResolves(t *testing.T) {
	c := Config{Resolve: []string{"a:127.0.0.1", "b:443:[::1]"}}
	got, err := c.Resolves()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a:127.0.0.1", "b:443:[::1]"}
	var strs []string
	for _, r := range got {
		strs = append(strs, r.String())
	}
	if diff := cmp.Diff(want, strs); diff != "" {
		t.Errorf("Resolves (-want +got):\n%s", diff)
	}
	c.Resolve = append(c.Resolve, "bad")
	if _, err := c.Resolves(); err == nil || !strings.Contains(err.Error(), "resolve[2]") {
		t.Errorf("Resolves with a bad entry: error %v, want one naming resolve[2]", err)
	}
}

func FuzzParseResolve(f *testing.F) {
	for _, s := range []string{
		"api.example.com:127.0.0.2", "api.example.com:443:127.0.0.2", "h:[::1]", "h:443:::1",
		"h:443:[::1]", "h:443::1", "h:[::ffff:1.2.3.4]", "h:fe80::1%eth0", "h:0:1.2.3.4", ":", "h:[",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseResolve(s)
		if err != nil {
			return
		}
		again, err := ParseResolve(r.String())
		if err != nil {
			t.Fatalf("ParseResolve(%q) = %v, but its String %q does not parse: %v", s, r, r.String(), err)
		}
		if again != r {
			t.Fatalf("round trip of %q: %v then %v", s, r, again)
		}
	})
}
