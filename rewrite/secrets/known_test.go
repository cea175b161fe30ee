package secrets

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// fakeToken is a GitHub-token-shaped value made for one test.
func fakeToken(seed uint64) string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, 36)
	for i := range b {
		b[i] = alnum[rng.IntN(len(alnum))]
	}
	return "ghp_" + string(b)
}

// percentAll percent-encodes every byte of s.
func percentAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// percentSome percent-encodes every third byte of s.
func percentSome(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if i%3 == 1 {
			fmt.Fprintf(&b, "%%%02x", s[i])
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// jsonU writes s with every rune (step 1) or every other rune (step 2)
// as a \u escape (two, for a rune beyond the BMP).
func jsonU(s string, step int) string {
	var b strings.Builder
	i := 0
	for _, r := range s {
		switch {
		case i%step != 0:
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i++
	}
	return b.String()
}

// The encodings of a known value are found wherever it sits in a longer
// encoded text, under the encoding they are, and nothing is found in texts
// that hold only a near miss.
func TestKnownEncodings(t *testing.T) {
	tok := fakeToken(1)
	k := NewKnown(16)
	if !k.Add("github-pat", tok) {
		t.Fatal("the value was not taken")
	}
	type found struct{ RuleID, Encoding string }
	var cases []struct {
		name, text string
		want       string // the encoding found; "" for none
	}
	add := func(name, text, want string) {
		cases = append(cases, struct{ name, text, want string }{name, text, want})
	}
	add("plain", "x="+tok+"&y=1", EncPlain)
	for pre := range 3 { // each alignment of the value inside the encoded bytes
		for _, enc := range []struct {
			name string
			e    *base64.Encoding
			want string
		}{
			{"std", base64.StdEncoding, EncBase64}, {"std-raw", base64.RawStdEncoding, EncBase64},
			{"url", base64.URLEncoding, EncBase64URL}, {"url-raw", base64.RawURLEncoding, EncBase64URL},
		} {
			for post := range 3 {
				// The value's whole groups may read the same in both
				// alphabets: either name is right then.
				src := strings.Repeat(">", pre) + tok + strings.Repeat("?", post)
				add(fmt.Sprintf("base64-%s-pre%d-post%d", enc.name, pre, post), "data: "+enc.e.EncodeToString([]byte(src))+"\n", enc.want)
			}
		}
	}
	add("basic-auth", "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+tok)), EncBase64)
	add("hex-lower", "h="+hex.EncodeToString([]byte("ab"+tok)), EncHex)
	add("hex-upper", "H="+strings.ToUpper(hex.EncodeToString([]byte(tok+"z"))), EncHex)
	add("percent-all", "q="+percentAll(tok), EncPlain+"+url")
	add("percent-some", "q="+percentSome(tok), EncPlain+"+url")
	add("base64-percent", "sig="+percentAll(base64.StdEncoding.EncodeToString([]byte("\xfb\xff"+tok+"\xfe"))), EncBase64+"+url")
	add("json-u-all", `{"a":"`+jsonU(tok, 1)+`"}`, EncPlain+"+json")
	add("json-u-some", `{"a":"`+jsonU(tok, 2)+`"}`, EncPlain+"+json")
	add("json-u-in-percent", "q="+url.QueryEscape(`{"a":"`+jsonU(tok, 3)+`"}`), EncPlain+"+url+json")
	add("near-miss", "x="+tok[:len(tok)-1]+"!", "")
	add("other-base64", base64.StdEncoding.EncodeToString([]byte(fakeToken(2))), "")
	add("empty", "", "")
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			ms := k.Find(tt.text)
			if tt.want == "" {
				if len(ms) != 0 {
					t.Fatalf("found %+v in a text without the value", ms)
				}
				return
			}
			if len(ms) == 0 {
				t.Fatalf("nothing found in %q", tt.text)
			}
			got := found{ms[0].RuleID, ms[0].Encoding}
			if tt.want == EncBase64URL && got.Encoding == EncBase64 {
				got.Encoding = EncBase64URL
			}
			if d := cmp.Diff(found{"github-pat", tt.want}, got); d != "" {
				t.Errorf("first match (-want +got):\n%s", d)
			}
			for _, m := range ms {
				if m.Start < 0 || m.End > len(tt.text) || m.Start >= m.End {
					t.Fatalf("match [%d,%d) out of the text's %d bytes", m.Start, m.End, len(tt.text))
				}
			}
			// The span covers what holds the value: without it, the value
			// is gone from the text however it is decoded.
			cut := tt.text[:ms[0].Start] + "#" + tt.text[ms[0].End:]
			if again := k.Find(cut); len(again) != 0 {
				t.Errorf("with [%d,%d) cut out, still found %+v", ms[0].Start, ms[0].End, again)
			}
		})
	}
}

// Short values are not taken; a value is taken once; a brokered
// credential outranks a finding of the same value and is never forgotten;
// past its limit the set forgets the oldest finding.
func TestKnownLimits(t *testing.T) {
	k := NewKnown(3)
	if k.Add("env-secret", "short") {
		t.Error("a value shorter than MinKnownLen was taken")
	}
	if k.Add("x", strings.Repeat("a", MaxKnownLen+1)) {
		t.Error("a value longer than MaxKnownLen was taken")
	}
	cred := fakeToken(10)
	if !k.AddCredential("github", cred) || k.Add("github-pat", cred) {
		t.Error("a credential, then the same value found: want taken once")
	}
	vals := []string{fakeToken(11), fakeToken(12), fakeToken(13)}
	for _, v := range vals {
		k.Add("github-pat", v)
	}
	if k.Len() != 3 {
		t.Errorf("Len = %d, want 3", k.Len())
	}
	if ms := k.Find(vals[0]); len(ms) != 0 {
		t.Error("the oldest finding was kept past the limit")
	}
	if ms := k.Find(vals[2]); len(ms) != 1 {
		t.Error("the newest finding was forgotten")
	}
	ms := k.Find("Bearer " + cred)
	if len(ms) != 1 || ms[0].RuleID != RuleBrokered || ms[0].Credential != "github" {
		t.Errorf("credential: %+v, want rule %s of github", ms, RuleBrokered)
	}
	// Found first, brokered later: the credential's name is what counts.
	k2 := NewKnown(4)
	k2.Add("github-pat", cred)
	k2.AddCredential("github", cred)
	if ms := k2.Find(cred); len(ms) != 1 || ms[0].Credential != "github" {
		t.Errorf("credential added after the finding: %+v", ms)
	}
}

// Finds and adds run at once (go test -race).
func TestKnownConcurrent(t *testing.T) {
	k := NewKnown(64)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				v := fakeToken(uint64(1000*g + i))
				k.Add("github-pat", v)
				if ms := k.Find("a " + base64.StdEncoding.EncodeToString([]byte(v))); len(ms) == 0 {
					t.Errorf("value %d of %d not found right after it was added", i, g)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A Redactor learns what it redacts: the same secret encoded in a later
// text gets the value's placeholder, which restores the value; a brokered
// credential's never restores.
func TestRedactKnownEncodings(t *testing.T) {
	s := newTestScanner(t)
	r := NewRedactor(s, testKey)
	tok := fakeToken(20)
	first, ids := r.Redact("my token is " + tok)
	if len(ids) != 1 || strings.Contains(first, tok) {
		t.Fatalf("the plain token was not redacted: %v", ids)
	}
	ph := strings.TrimPrefix(first, "my token is ")
	for _, enc := range []string{
		base64.StdEncoding.EncodeToString([]byte("user:" + tok)),
		hex.EncodeToString([]byte(tok)),
		percentAll(tok),
	} {
		out, ids := r.Redact("here: " + enc + " done")
		if len(ids) != 1 || ids[0] != "github-pat" || !strings.Contains(out, ph) {
			t.Errorf("encoded %.12s…: got %q %v, want the value's placeholder %s", enc, out, ids, ph)
		}
		if v, ok := r.Lookup(ph); !ok || v != tok {
			t.Error("the placeholder does not restore the value")
		}
	}
	cred := fakeToken(21)
	r.Known().AddCredential("github", cred)
	out, ids := r.Redact("x " + base64.StdEncoding.EncodeToString([]byte(cred)))
	if len(ids) != 1 || ids[0] != RuleBrokered || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte(cred))[4:20]) {
		t.Fatalf("brokered credential: %q %v", out, ids)
	}
	p := out[strings.Index(out, PlaceholderPrefix):]
	p = p[:strings.IndexByte(p, ']')+1]
	if _, ok := r.Lookup(p); ok {
		t.Error("a brokered credential's placeholder restores its value")
	}
}

// FuzzKnownFind: a value's encodings are found inside arbitrary text, and
// every match lies within the text.
func FuzzKnownFind(f *testing.F) {
	f.Add("prefix ", fakeToken(1), " suffix", uint8(0))
	f.Add("", "0123456789abcdef", "", uint8(3))
	f.Add("%%\\u", "\\u0041\\u0042%41%42xxxxxx", "\\", uint8(5))
	f.Fuzz(func(t *testing.T, pre, value, post string, how uint8) {
		k := NewKnown(4)
		if !k.Add("r", value) {
			return
		}
		if len(value) < MinKnownLen && how%6 >= 1 && how%6 <= 3 {
			return // a short value is found only as it is, or escaped
		}
		var enc string
		switch how % 6 {
		case 0:
			enc = value
		case 1:
			enc = base64.StdEncoding.EncodeToString([]byte(pre + value + post))
		case 2:
			enc = base64.RawURLEncoding.EncodeToString([]byte(pre + value + post))
		case 3:
			enc = hex.EncodeToString([]byte(pre + value + post))
		case 4:
			enc = percentAll(value)
		case 5:
			if !utf8.ValidString(value) || strings.HasSuffix(pre, "\\") {
				return // \u escapes write runes, not bytes; a backslash before one escapes it
			}
			enc = jsonU(value, 1)
		}
		text := pre + enc + post
		ms := k.Find(text)
		for _, m := range ms {
			if m.Start < 0 || m.End > len(text) || m.Start > m.End {
				t.Fatalf("match [%d,%d) outside the text's %d bytes", m.Start, m.End, len(text))
			}
		}
		if len(ms) == 0 {
			t.Fatalf("encoding %d of the value not found", how%6)
		}
	})
}

// FuzzEscapeDecoders holds the percent and JSON decoders to the standard
// library's where it takes the text.
func FuzzEscapeDecoders(f *testing.F) {
	f.Add(`a%41b%zz%4`)
	f.Add(`\u0041\ud83d\ude00\/\n\x`)
	f.Add(`\ud800 lone`)
	f.Fuzz(func(t *testing.T, s string) {
		if d, m, ok := percentDecode(s); ok {
			if !strings.Contains(s, "+") {
				if want, err := url.PathUnescape(s); err == nil && want != d {
					t.Fatalf("percentDecode(%q) = %q, url.PathUnescape = %q", s, d, want)
				}
			}
			if m.orig(len(d)) != len(s) || m.orig(0) != 0 {
				t.Fatalf("map: end %d -> %d, want %d", len(d), m.orig(len(d)), len(s))
			}
		}
		if d, m, ok := jsonDecode(s); ok {
			var want string
			if utf8.ValidString(s) && json.Unmarshal([]byte(`"`+s+`"`), &want) == nil && want != d {
				t.Fatalf("jsonDecode(%q) = %q, encoding/json = %q", s, d, want)
			}
			if m.orig(len(d)) != len(s) {
				t.Fatalf("map: end %d -> %d, want %d", len(d), m.orig(len(d)), len(s))
			}
		}
	})
}

// BenchmarkKnownFind measures a search of a 1 MiB JSON body and of a
// short header value, with 1 and 500 values known.
func BenchmarkKnownFind(b *testing.B) {
	body := strings.Repeat(`{"role":"user","content":"some words of a prompt, and code: for i := range n { x += i }"},`, 1<<20/80)
	for _, n := range []int{1, 500} {
		k := NewKnown(1000)
		for i := range n {
			k.Add("github-pat", fakeToken(uint64(i)))
		}
		b.Run(fmt.Sprintf("body-1MiB/values-%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if k.Find(body) != nil {
					b.Fatal("found")
				}
			}
		})
		b.Run(fmt.Sprintf("header/values-%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if k.Find("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36") != nil {
					b.Fatal("found")
				}
			}
		})
	}
}

// A value shorter than MinKnownLen (a password) is found as it is, also
// JSON-escaped, never encoded; only the last maxShort such values are kept.
func TestKnownShortValues(t *testing.T) {
	k := NewKnown(100)
	pw := "hunter2!x" // 9 bytes
	if !k.Add("password", pw) {
		t.Fatal("a 9-byte value was not taken")
	}
	for _, tt := range []struct {
		text string
		want int
	}{
		{"the password is " + pw + ", twice: " + pw, 2},
		{`{"a":"\u0068unter2!x"}`, 1},
		{base64.StdEncoding.EncodeToString([]byte(pw)), 0},
		{hex.EncodeToString([]byte(pw)), 0},
		{"hunter2!", 0},
	} {
		if got := k.Find(tt.text); len(got) != tt.want {
			t.Errorf("%q: %d matches, want %d", tt.text, len(got), tt.want)
		}
	}
	for i := range maxShort {
		k.Add("password", fmt.Sprintf("short-%03d", i))
	}
	if len(k.Find(pw)) != 0 || len(k.Find("short-000")) != 1 {
		t.Errorf("past %d short values, the oldest is not the one forgotten", maxShort)
	}
	if k.Len() != maxShort {
		t.Errorf("%d values, want %d", k.Len(), maxShort)
	}
}

// knownValue is the i-th value of TestKnownMany: lengths vary from
// MinKnownLen up, so that the two indexes' strides differ.
func knownValue(i int) string {
	v := fakeToken(uint64(5000 + i))
	return v[:MinKnownLen+i%(len(v)-MinKnownLen+1)]
}

// Values added one after another, past the small index's size and past
// the set's limit, are each found, plain and encoded, at every offset in
// a text, right after being added and at the end; forgotten ones are not.
func TestKnownMany(t *testing.T) {
	const limit, n = 300, 700
	k := NewKnown(limit)
	findAt := func(v string, pad int) (plain, b64 bool) {
		pre := strings.Repeat(" ", pad)
		plain = len(k.Find(pre+v+" x")) == 1
		b64 = len(k.Find(pre+base64.StdEncoding.EncodeToString([]byte("u:"+v)))) > 0
		return plain, b64
	}
	cred := fakeToken(4999)
	k.AddCredential("github", cred)
	for i := range n {
		v := knownValue(i)
		if !k.Add("github-pat", v) {
			t.Fatalf("value %d not taken", i)
		}
		if p, b := findAt(v, i%7); !p || !b {
			t.Fatalf("value %d just added: found plain %v, base64 %v", i, p, b)
		}
		if i == 100 {
			// A finding taken over by a brokered credential.
			k.AddCredential("other", knownValue(90))
			if ms := k.Find(knownValue(90)); len(ms) != 1 || ms[0].Credential != "other" {
				t.Fatalf("value 90 taken over by a credential: %+v", ms)
			}
		}
	}
	if k.Len() != limit {
		t.Errorf("Len = %d, want %d", k.Len(), limit)
	}
	for i := range n {
		v := knownValue(i)
		want := i >= n-(limit-2) || i == 90 // two credentials hold two places, and are kept
		for pad := range 40 {
			if p, b := findAt(v, pad); p != want || b != want {
				t.Fatalf("value %d at offset %d: found plain %v, base64 %v; want %v", i, pad, p, b, want)
			}
		}
	}
	if ms := k.Find(cred); len(ms) != 1 || ms[0].RuleID != RuleBrokered {
		t.Errorf("the credential: %+v", ms)
	}
}

// BenchmarkKnownAdd measures learning n values one after another, each
// found right after (as a session's Redactor does), beside rebuilding the
// whole index for each (what Add did before it kept a small index).
func BenchmarkKnownAdd(b *testing.B) {
	for _, n := range []int{100, 1000} {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = fakeToken(uint64(i))
		}
		b.Run(fmt.Sprintf("values-%d", n), func(b *testing.B) {
			for b.Loop() {
				k := NewKnown(DefaultKnownValues)
				for _, v := range vals {
					k.Add("github-pat", v)
				}
			}
		})
		if n > 100 {
			continue // quadratic: minutes
		}
		b.Run(fmt.Sprintf("values-%d/rebuild-all", n), func(b *testing.B) {
			for b.Loop() {
				for i := range vals {
					es := make([]*knownEntry, 0, i+1)
					for _, v := range vals[:i+1] {
						es = append(es, &knownEntry{rule: "github-pat", value: v, pats: encodings(v)})
					}
					buildKnownIndex(es)
				}
			}
		})
	}
}
