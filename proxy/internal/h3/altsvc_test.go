package h3

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseAltSvc(t *testing.T) {
	day := DefaultMaxAge
	tests := []struct {
		in      string
		want    []Alternative
		clear   bool
		wantErr bool
	}{
		{in: `h3=":443"`, want: []Alternative{{Proto: "h3", Port: 443, MaxAge: day}}},
		{in: `h3=":8443"; ma=3600, h2="alt.example:443"; persist=1`, want: []Alternative{
			{Proto: "h3", Port: 8443, MaxAge: time.Hour},
			{Proto: "h2", Host: "alt.example", Port: 443, MaxAge: day, Persist: true},
		}},
		{in: `h3-29=":443";ma=60,h3=":443"`, want: []Alternative{
			{Proto: "h3-29", Port: 443, MaxAge: time.Minute}, {Proto: "h3", Port: 443, MaxAge: day},
		}},
		{in: `w%3Dx%3Ay=":443"`, want: []Alternative{{Proto: "w=x:y", Port: 443, MaxAge: day}}},
		{in: `h3="[::1]:443"; ma="10"`, want: []Alternative{{Proto: "h3", Host: "[::1]", Port: 443, MaxAge: 10 * time.Second}}},
		{in: ` clear `, clear: true},
		{in: ``, wantErr: true},
		{in: `h3=:443`, wantErr: true},
		{in: `h3=":0"`, wantErr: true},
		{in: `h3=":99999"`, wantErr: true},
		{in: `h3="a:b:443"`, wantErr: true},
		{in: `h3=":443"; ma=soon`, wantErr: true},
		{in: `h3=":443",`, wantErr: true},
		{in: `h3=":443" h2=":443"`, wantErr: true},
		{in: `h3=":443`, wantErr: true},
		{in: `h%zz=":443"`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, clear, err := ParseAltSvc(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "h3: alt-svc: ") {
				t.Errorf("error %q lacks its prefix", err)
			}
			if clear != tt.clear {
				t.Errorf("clear = %v, want %v", clear, tt.clear)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestStripH3(t *testing.T) {
	tests := []struct {
		in   string
		want string
		keep bool
	}{
		{`h3=":443"; ma=86400`, "", false},
		{`h3=":443", h3-29=":443", h2="alt.example:443"; ma=60`, `h2="alt.example:443"; ma=60`, true},
		{`clear`, "clear", true},
		{`garbage "`, "", false},
	}
	for _, tt := range tests {
		got, keep := StripH3(tt.in)
		if got != tt.want || keep != tt.keep {
			t.Errorf("StripH3(%q) = %q, %v; want %q, %v", tt.in, got, keep, tt.want, tt.keep)
		}
	}
}

func TestAltCache(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	c := &AltCache{Now: func() time.Time { return now }}
	const o = "api.example:443"
	if _, ok := c.Lookup(o); ok {
		t.Fatal("empty cache knows an alternative")
	}
	c.Learn(o, `h2="other.example:443", h3="other.example:443", h3=":8443"; ma=60`)
	if p, ok := c.Lookup(o); !ok || p != 8443 {
		t.Fatalf("Lookup = %d %v, want 8443 (the own-host h3 alternative)", p, ok)
	}
	now = now.Add(61 * time.Second)
	if _, ok := c.Lookup(o); ok {
		t.Error("alternative used after its max-age")
	}
	c.Succeeded(o, 443)
	if p, ok := c.Lookup(o); !ok || p != 443 {
		t.Errorf("after a success: %d %v", p, ok)
	}
	c.Failed(o)
	if _, ok := c.Lookup(o); ok || !c.Broken(o) {
		t.Error("a failed origin is still offered HTTP/3")
	}
	now = now.Add(BrokenFor)
	if c.Broken(o) {
		t.Error("still broken after BrokenFor")
	}
	c.Learn(o, "clear")
	if _, ok := c.Lookup(o); ok {
		t.Error("clear did not forget the alternative")
	}
	for i := range maxAltEntries + 10 {
		c.Learn(strings.Repeat("x", i%7)+string(rune('a'+i%26))+":"+string(rune(i)), `h3=":443"`)
	}
	if n := len(c.m); n > maxAltEntries {
		t.Errorf("cache holds %d entries, bound %d", n, maxAltEntries)
	}
}

// FuzzParseAltSvc: no input panics, an accepted value names valid ports,
// and what FormatAlternative writes of it reads back the same.
func FuzzParseAltSvc(f *testing.F) {
	for _, s := range []string{`h3=":443"; ma=86400`, `clear`, `h3-29=":443", h2="a.b:1"; persist=1`, `w%3D=":1"`, `h3="[::1]:443"; ma="5"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		alts, clear, err := ParseAltSvc(s)
		if err != nil || clear {
			return
		}
		for _, a := range alts {
			if a.Port == 0 || a.MaxAge < 0 {
				t.Fatalf("%q: alternative %+v", s, a)
			}
			again, _, err := ParseAltSvc(FormatAlternative(a))
			if err != nil || len(again) != 1 || again[0] != a {
				t.Fatalf("%q: %+v formats as %q, which reads back as %+v, %v", s, a, FormatAlternative(a), again, err)
			}
		}
		StripH3(s)
	})
}
