package secretcorpus

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestGenerateReplays(t *testing.T) {
	o := Options{Seed: 42, Providers: []Provider{Anthropic, OpenAIResponses}, Serializations: []Serialization{Python, GoJSON}}
	a, b := Generate(o), Generate(o)
	if len(a) != 4 || len(a) != len(b) {
		t.Fatalf("%d and %d sessions, want 4", len(a), len(b))
	}
	for i := range a {
		if len(a[i].Requests) != len(b[i].Requests) {
			t.Fatalf("%s: %d and %d requests", a[i].Name, len(a[i].Requests), len(b[i].Requests))
		}
		for j := range a[i].Requests {
			if !bytes.Equal(a[i].Requests[j].Body, b[i].Requests[j].Body) {
				t.Fatalf("%s: the same seed made different bodies", a[i].Requests[j].Name)
			}
		}
	}
	// A subset replays as part of the whole.
	one := Generate(Options{Seed: 42, Providers: []Provider{OpenAIResponses}, Serializations: []Serialization{GoJSON}})
	if !bytes.Equal(one[0].Requests[2].Body, a[3].Requests[2].Body) {
		t.Error("a session generated alone differs from the same session generated with others")
	}
	other := Generate(Options{Seed: 43, Providers: []Provider{Anthropic}, Serializations: []Serialization{Python}})
	if bytes.Equal(other[0].Requests[1].Body, a[0].Requests[1].Body) {
		t.Error("another seed made the same body")
	}
}

// Every body is JSON written the way its client writes it, grows turn by
// turn, and holds every label where the label says.
func TestBodies(t *testing.T) {
	for _, s := range Generate(Options{Seed: 7, Sessions: 2}) {
		t.Run(s.Name, func(t *testing.T) {
			prevLen, shrunk := 0, 0
			for _, r := range s.Requests {
				b := r.Body
				if !json.Valid(b) {
					t.Fatalf("%s: not valid JSON", r.Name)
				}
				var compact, want bytes.Buffer
				if err := json.Compact(&compact, b); err != nil {
					t.Fatal(err)
				}
				switch r.Serialization {
				case Python:
					if i := bytes.IndexFunc(b, func(c rune) bool { return c >= 0x7f }); i >= 0 {
						t.Errorf("%s: a non-ASCII byte at %d in an ensure_ascii body", r.Name, i)
					}
					want.Write(pythonSpacing(compact.Bytes()))
				case GoJSON:
					if i := bytes.IndexAny(b, "<>&"); i >= 0 {
						t.Errorf("%s: a raw %q at %d in a Go body", r.Name, b[i], i)
					}
					want = compact
				case Pretty:
					json.Indent(&want, compact.Bytes(), "", "  ")
				case JS:
					want = compact
				}
				if !bytes.Equal(want.Bytes(), b) {
					t.Errorf("%s: not laid out as a %s client does", r.Name, r.Serialization)
				}
				if len(b) < prevLen {
					shrunk++ // a compacted history
				}
				prevLen = len(b)
				res, err := r.Check(b)
				if err != nil {
					t.Fatal(err)
				}
				for i, leaked := range res.Leaked {
					if !leaked {
						sec := r.Secrets[i]
						t.Errorf("%s: %s in %s (%s) at %s depth %d: not found where its label says", r.Name, sec.Type, sec.Location, sec.Layout, sec.Pointer, sec.Depth)
					}
				}
				for i, damaged := range res.Damaged {
					if damaged {
						n := r.Negatives[i]
						t.Errorf("%s: hard negative %s at %s depth %d: not found where its label says", r.Name, n.Kind, n.Pointer, n.Depth)
					}
				}
			}
			if shrunk > 1 {
				t.Errorf("%d requests shorter than the one before: the history was not resent", shrunk)
			}
		})
	}
}

// A run covers every type, location, layout, depth and kind of hard
// negative.
func TestCoverage(t *testing.T) {
	seen := map[string]map[string]bool{}
	see := func(dim, k string) {
		if seen[dim] == nil {
			seen[dim] = map[string]bool{}
		}
		seen[dim][k] = true
	}
	for _, s := range Generate(Options{Seed: 11, Sessions: 5}) {
		for _, r := range s.Requests {
			for _, sec := range r.Secrets {
				see(ByType, sec.Type)
				see(ByLocation, sec.Location)
				see(ByLayout, sec.Layout)
				see(ByDepth, strconv.Itoa(sec.Depth))
				if len(sec.Probes) == 0 {
					t.Errorf("%s: %s has no probes", r.Name, sec.Type)
				}
				for _, p := range sec.Probes {
					if len(p) < 12 && p != sec.Value {
						t.Errorf("%s: %s has a probe of %d bytes", r.Name, sec.Type, len(p))
					}
				}
			}
			for _, n := range r.Negatives {
				see(ByKind, n.Kind)
			}
		}
	}
	for dim, want := range map[string][]string{
		ByType:     SecretTypes(),
		ByLocation: Locations(),
		ByLayout:   Layouts(),
		ByDepth:    {"0", "1", "2", "3"},
		ByKind:     {"uuid", "git-sha", "sha256", "image", "sri", "signature", "encrypted-reasoning", "placeholder", "example-key", "certificate", "ssh-public-key", "session-id"},
	} {
		for _, k := range want {
			if !seen[dim][k] {
				t.Errorf("no %s %q in the corpus", dim, k)
			}
		}
	}
}

// Check counts a secret of 40 bytes or more as leaked while two thirds of
// it are left, and as redacted once at most a third is; a changed hard negative as damaged;
// and refuses an output that is not JSON.
func TestCheck(t *testing.T) {
	s := Generate(Options{Seed: 3, Providers: []Provider{OpenAIChat}, Serializations: []Serialization{GoJSON}})[0]
	r := s.Requests[len(s.Requests)-1]
	// long values are cut (what keep leaves stays); the others and PEM keys
	// are redacted whole.
	long := func(sec Secret) bool { return len(sec.Value) >= 40 && !strings.Contains(sec.Value, "-----BEGIN") }
	nLong := 0
	for _, sec := range r.Secrets {
		if long(sec) {
			nLong++
		}
	}
	if nLong == 0 || len(r.Negatives) == 0 {
		t.Fatal("the last request holds no long secret or no hard negative: pick another seed")
	}
	// redact replaces in every string what keep leaves of each value
	// (JSON-escaped as deep as it sits) with a placeholder.
	redact := func(keep func(v string) string, negToo bool) []byte {
		var doc any
		if err := json.Unmarshal(r.Body, &doc); err != nil {
			t.Fatal(err)
		}
		var olds, cut []string
		for _, sec := range r.Secrets {
			switch {
			case strings.Contains(sec.Value, "-----BEGIN"):
				olds = append(olds, sec.Probes...)
			case long(sec):
				cut = append(cut, sec.Value)
			default:
				olds = append(olds, sec.Value)
			}
		}
		if negToo {
			olds = append(olds, r.Negatives[0].Value)
		}
		var walk func(v any) any
		walk = func(v any) any {
			switch x := v.(type) {
			case map[string]any:
				for k, e := range x {
					x[k] = walk(e)
				}
			case []any:
				for i, e := range x {
					x[i] = walk(e)
				}
			case string:
				for _, old := range cut {
					for d := range 4 {
						for _, form := range forms(old, d) {
							x = strings.ReplaceAll(x, form, keep(form)+"[REDACTED:x:1]")
						}
					}
				}
				for _, old := range olds {
					for d := range 4 {
						for _, form := range forms(old, d) {
							x = strings.ReplaceAll(x, form, "[REDACTED:x:2]")
						}
					}
				}
				return x
			}
			return v
		}
		out, err := json.Marshal(walk(doc))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	count := func(res Result) (leaked, damaged int) {
		for _, l := range res.Leaked {
			if l {
				leaked++
			}
		}
		for _, d := range res.Damaged {
			if d {
				damaged++
			}
		}
		return leaked, damaged
	}
	tests := []struct {
		name        string
		out         []byte
		wantLeaked  int // -1: all
		wantDamaged int
	}{
		{"unchanged", r.Body, -1, 0},
		{"redacted", redact(func(string) string { return "" }, false), 0, 0},
		{"a third left", redact(func(v string) string { return v[:len(v)/3-1] }, false), 0, 0},
		{"two thirds left", redact(func(v string) string { return v[:2*len(v)/3+1] }, false), nLong, 0},
		{"a negative changed too", redact(func(string) string { return "" }, true), 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.Check(tt.out)
			if err != nil {
				t.Fatal(err)
			}
			leaked, damaged := count(res)
			want := tt.wantLeaked
			if want < 0 {
				want = len(r.Secrets)
			}
			if diff := cmp.Diff([2]int{want, tt.wantDamaged}, [2]int{leaked, damaged}); diff != "" {
				t.Errorf("[leaked damaged] (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := r.Check(r.Body[:len(r.Body)-1]); err == nil {
		t.Error("Check took a body cut short")
	}
	if _, err := r.Check([]byte(`{"model":"x"}`)); err == nil {
		t.Error("Check took a body without the labeled strings")
	}
}

// pythonSpacing is compact JSON with json.dumps' separators, ", " and ": ".
func pythonSpacing(b []byte) []byte {
	var out []byte
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		out = append(out, c)
		switch {
		case in && c == '\\':
			i++
			out = append(out, b[i])
		case c == '"':
			in = !in
		case !in && (c == ',' || c == ':'):
			out = append(out, ' ')
		}
	}
	return out
}

// forms are v JSON-escaped d times by each escaper.
func forms(v string, d int) []string {
	out := []string{v}
	for range d {
		var next []string
		for _, f := range out {
			for _, st := range []style{{}, {html: true}, {ascii: true}} {
				next = append(next, st.escapeJSON(f))
			}
		}
		out = next
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestTally(t *testing.T) {
	r := &Request{Name: "p/s/0/1", Provider: Gemini, Serialization: JS,
		Secrets:   []Secret{{Type: "a", Location: "user", Layout: "env"}, {Type: "b", Location: "user", Layout: "env", Depth: 1}},
		Negatives: []Negative{{Kind: "uuid"}, {Kind: "uuid"}}}
	var tl Tally
	tl.Add(r, Result{Leaked: []bool{true, false}, Damaged: []bool{false, true}})
	if tl.Recall() != 0.5 || tl.Damage() != 0.5 {
		t.Errorf("recall %v damage %v, want 0.5 and 0.5", tl.Recall(), tl.Damage())
	}
	if got := tl.Table(ByType); !strings.Contains(got, "a                                1       1   0.000") {
		t.Errorf("Table(ByType):\n%s", got)
	}
	if got := tl.DamageTable(ByKind); !strings.Contains(got, "uuid                             2       1   0.500") {
		t.Errorf("DamageTable(ByKind):\n%s", got)
	}
	if len(tl.Misses()) != 2 {
		t.Errorf("misses: %q", tl.Misses())
	}
}

func TestSecretKinds(t *testing.T) {
	g := NewSecrets(1)
	for _, kind := range Kinds() {
		s, core := g.Secret(kind)
		if s == "" || !strings.Contains(s, core) || len(core) < 10 {
			t.Errorf("%s: a secret of %d bytes, core of %d", kind, len(s), len(core))
		}
	}
	// Keys are DER of the right structure and size.
	for _, tt := range []struct {
		kind    string
		minSize int
	}{{"pem-rsa", 1100}, {"pem-rsa-4096", 2300}, {"pem-ec", 100}, {"pem-ed25519", 40}} {
		b, _ := pem.Decode([]byte(g.Make(tt.kind)))
		if b == nil || len(b.Bytes) < tt.minSize {
			t.Errorf("%s: not PEM, or too short", tt.kind)
			continue
		}
		var raw asn1.RawValue
		if rest, err := asn1.Unmarshal(b.Bytes, &raw); err != nil || len(rest) != 0 {
			t.Errorf("%s: not one DER value: %v", tt.kind, err)
		}
	}
	b, _ := pem.Decode([]byte(g.Make("pem-ed25519")))
	if _, err := x509.ParsePKCS8PrivateKey(b.Bytes); err != nil {
		t.Errorf("ed25519 key: %v", err)
	}
	if NewSecrets(5).Make("pem-rsa-4096") != NewSecrets(5).Make("pem-rsa-4096") {
		t.Error("keys do not follow from the seed")
	}
}

func TestSeed(t *testing.T) {
	env := map[string]string{SeedEnv: "12345"}
	if s, err := Seed(func(k string) string { return env[k] }); err != nil || s != 12345 {
		t.Errorf("Seed = %d, %v; want 12345", s, err)
	}
	env[SeedEnv] = "x"
	if _, err := Seed(func(k string) string { return env[k] }); err == nil {
		t.Error("a bad seed was taken")
	}
	a, _ := Seed(func(string) string { return "" })
	b, _ := Seed(func(string) string { return "" })
	if a == b {
		t.Error("two random seeds are equal")
	}
}

// Each style writes what encoding/json reads back as the same string.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c", "line\nnext\ttab\x01", "<&>", "café →", "😀", "\u2028", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, st := range []style{styleOf(JS), styleOf(Python), styleOf(GoJSON), styleOf(Pretty)} {
			var b strings.Builder
			st.appendString(&b, s)
			var got string
			if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
				t.Fatalf("%+v: %q does not decode: %v", st, b.String(), err)
			}
			if got != s {
				t.Fatalf("%+v: %q decodes to %q", st, s, got)
			}
			if st.ascii && strings.IndexFunc(b.String(), func(r rune) bool { return r >= 0x7f }) >= 0 {
				t.Fatalf("ascii style wrote non-ASCII: %q", b.String())
			}
			if st.html && strings.ContainsAny(b.String(), "<>&") {
				t.Fatalf("html style wrote an HTML character: %q", b.String())
			}
			if st == styleOf(GoJSON) {
				want, _ := json.Marshal(s)
				if string(want) != b.String() {
					t.Fatalf("Go style wrote %q, encoding/json %q", b.String(), want)
				}
			}
		}
	})
}
