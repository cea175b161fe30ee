package secrets

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// placeholderRE matches what a Redactor writes.
func placeholderRE() *regexp.Regexp {
	return regexp.MustCompile(`\[REDACTED:[a-z0-9-]+:[0-9a-f]{4,}\]`)
}

// restore replaces the placeholders r made with their secrets.
func restore(r *Redactor, s string) string {
	return placeholderRE().ReplaceAllStringFunc(s, func(p string) string {
		if v, ok := r.Lookup(p); ok {
			return v
		}
		return p
	})
}

func TestRedact(t *testing.T) {
	s := newTestScanner(t)
	g := newSecretGen(t, 9)
	ghp, pass := g.make("ghp"), g.make("dbpass")
	tests := []struct {
		name    string
		text    string
		wantIDs []string
	}{
		{"clean", "nothing to see here: the key is under the mat", nil},
		{"one", "token " + ghp + " end", []string{"github-pat"}},
		{"repeated", ghp + " and again " + ghp, []string{"github-pat", "github-pat"}},
		{"two kinds", "postgres://u:" + pass + "@h/db\nGH=" + ghp, []string{"database-url", "github-pat"}},
		{"every occurrence", "postgres://u:" + pass + "@h/db\nthe password was " + pass + ".", []string{"database-url", "database-url"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRedactor(s, testKey)
			out, ids := r.Redact(tt.text)
			if diff := cmp.Diff(tt.wantIDs, ids); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
			if tt.wantIDs == nil && out != tt.text {
				t.Error("clean text changed")
			}
			for _, secret := range []string{ghp, pass} {
				if strings.Contains(tt.text, secret) && strings.Contains(out, secret) {
					t.Error("a secret survived redaction")
				}
			}
			if got := restore(r, out); got != tt.text {
				t.Error("restoring the placeholders does not give back the text")
			}
			for _, p := range placeholderRE().FindAllString(out, -1) {
				if len(p) > MaxPlaceholderLen {
					t.Errorf("placeholder of %d bytes > MaxPlaceholderLen", len(p))
				}
			}
		})
	}
}

// TestRedactIdempotent redacts texts that hold placeholders already: a
// placeholder is never taken for a secret or a part of one, and what is
// next to one is still found.
func TestRedactIdempotent(t *testing.T) {
	s := newTestScanner(t)
	g := newSecretGen(t, 9)
	ghp, pass := g.make("ghp"), g.make("dbpass")
	tests := []struct {
		name    string
		text    string
		wantOut string // the text with each "{}" the placeholder of the secret after it, in wantIDs
		wantIDs []string
	}{
		{"a URL's user", "git push https://[REDACTED:github-pat:6bab]@github.com/acme/api.git", "", nil},
		{"curl's user", "curl -u [REDACTED:stripe-access-token:2b2e]: -d amount=2000", "", nil},
		{"curl's password", "curl -u admin:[REDACTED:basic-auth:6bab] https://x", "", nil},
		{"a password after a placeholder user", "https://[REDACTED:github-pat:6bab]:" + pass + "@github.com/acme", "https://[REDACTED:github-pat:6bab]:{}@github.com/acme", []string{"basic-auth"}},
		{"a token right after a placeholder", "token: [REDACTED:github-pat:6bab]" + ghp, "token: [REDACTED:github-pat:6bab]{}", []string{"github-pat"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRedactor(s, testKey)
			out, ids := r.Redact(tt.text)
			if diff := cmp.Diff(tt.wantIDs, ids); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
			want := tt.text
			if tt.wantOut != "" {
				want = strings.Replace(tt.wantOut, "{}", placeholderRE().FindAllString(out, -1)[1], 1)
			}
			if out != want {
				t.Errorf("Redact = %q, want %q", out, want)
			}
		})
	}
	t.Run("the corpus, twice", func(t *testing.T) {
		c := loadCorpus(t, 3)
		r := NewRedactor(s, testKey)
		for _, x := range append(c.pos, c.neg...) {
			once, _ := r.Redact(x.text)
			if twice, ids := r.Redact(once); twice != once {
				t.Errorf("%s: redacting again replaced %v", x.name, ids)
			}
		}
	})
}

func TestRedactStable(t *testing.T) {
	s := newTestScanner(t)
	ghp := newSecretGen(t, 3).make("ghp")
	a, b, other := NewRedactor(s, testKey), NewRedactor(s, testKey), NewRedactor(s, []byte("another key, another session...."))
	pa, _ := a.Redact(ghp)
	pa2, _ := a.Redact("x " + ghp)
	pb, _ := b.Redact(ghp)
	po, _ := other.Redact(ghp)
	if pa != pb || "x "+pa != pa2 {
		t.Error("same secret and key give different placeholders")
	}
	if pa == po {
		t.Error("different keys give the same placeholder")
	}
	if !strings.HasPrefix(pa, PlaceholderPrefix+"github-pat:") || len(pa) != len(PlaceholderPrefix+"github-pat:")+4+1 {
		t.Errorf("placeholder %q is not [REDACTED:github-pat:<4 hex>]", pa)
	}
	if _, ok := other.Lookup(pa); ok {
		t.Error("Lookup restored another session's placeholder")
	}
	if _, ok := a.Lookup("[REDACTED:github-pat:0000]"); ok {
		t.Error("Lookup restored a placeholder it never made")
	}
}

// TestPlaceholderCollisions makes enough secrets that 4 hex digits collide
// and checks that every secret still gets its own placeholder, the same one
// in every session that saw the secrets in the same order.
func TestPlaceholderCollisions(t *testing.T) {
	s := newTestScanner(t)
	a, b := NewRedactor(s, testKey), NewRedactor(s, testKey)
	seen := map[string]string{}
	long := 0
	for i := range 3000 {
		secret := fmt.Sprintf("secret-%d", i)
		p := a.placeholder("env-secret", secret, true)
		if q := b.placeholder("env-secret", secret, true); q != p {
			t.Fatalf("secret %d: sessions disagree on its placeholder", i)
		}
		if old, dup := seen[p]; dup && old != secret {
			t.Fatalf("secret %d shares a placeholder", i)
		}
		seen[p] = secret
		if got, ok := a.Lookup(p); !ok || got != secret {
			t.Fatalf("secret %d: Lookup does not restore it", i)
		}
		if len(p) > len("[REDACTED:env-secret:0000]") {
			long++
		}
	}
	if long == 0 {
		t.Error("no collision among 3000 secrets: the test does not test")
	}
	t.Logf("%d of 3000 placeholders needed more than 4 hex digits", long)
}

func TestRedactConcurrent(t *testing.T) {
	s := newTestScanner(t)
	g := newSecretGen(t, 4)
	var texts []string
	for i := range 8 {
		// Half long enough to be remembered (scanCache).
		texts = append(texts, strings.Repeat("padding ", 40*(i%2))+"GH="+g.make("ghp")+"\nDB=postgres://u:"+g.make("dbpass")+"@h/db")
	}
	r := NewRedactor(s, testKey)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 50 {
				text := texts[(i+j)%len(texts)]
				out, _ := r.Redact(text)
				if restore(r, out) != text {
					t.Error("round trip failed under concurrency")
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestRedactCleanAllocs(t *testing.T) {
	s := newTestScanner(t)
	r := NewRedactor(s, testKey)
	text := strings.Repeat("The API key is read from the environment; the token expires after an hour. ", 50)
	if out, ids := r.Redact(text); out != text || ids != nil {
		t.Fatal("clean text was redacted")
	}
	if len(s.ScanString(text)) != 0 || !s.ac.contains(text) {
		t.Fatal("the text must be clean yet hold keywords, for the test to test")
	}
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	if n := testing.AllocsPerRun(100, func() { r.Redact(text) }); n != 0 {
		t.Errorf("Redact of a clean text allocates %v times", n)
	}
}

func BenchmarkRedact(b *testing.B) {
	s := newTestScanner(b)
	r := NewRedactor(s, testKey)
	clean := strings.Repeat("The API key is read from the environment; the token expires after an hour. ", 50)
	g := newSecretGen(b, 8)
	dirty := clean + "\nexport GITHUB_TOKEN=" + g.make("ghp") + "\n"
	for _, bc := range []struct{ name, text string }{{"clean", clean}, {"1secret", dirty}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.text)))
			b.ReportAllocs()
			for b.Loop() {
				r.Redact(bc.text)
			}
		})
	}
}

// A secret found inside a longer one (an AWS secret key in a credentials
// value found whole) is known too: a later text that shows it on its own,
// where no rule would find it, has it replaced.
func TestRedactLearnsInnerSecrets(t *testing.T) {
	s := newTestScanner(t)
	g := newSecretGen(t, 26)
	aws := g.str(20, b64c) + "/" + g.str(19, b64c)
	r := NewRedactor(s, testKey)
	first := `AWS_CREDENTIALS="aws_secret_access_key=` + aws + ` region=eu-west-1"`
	out, ids := r.Redact(first)
	if len(ids) != 1 || strings.Contains(out, aws) {
		t.Fatalf("the credentials were not redacted whole: %v", ids)
	}
	if len(s.ScanString("is "+aws+" still good?")) != 0 {
		t.Fatal("a rule finds the key on its own: the test does not test")
	}
	if out, ids := r.Redact("is " + aws + " still good?"); len(ids) != 1 || strings.Contains(out, aws) {
		t.Errorf("the key inside was not learned (%v)", ids)
	}
}

// A Redactor remembers the rules' findings in long texts (scanCache): the
// same text again is redacted the same, and another text, even of the
// same length with the secret elsewhere, is searched anew; every result
// is what a Redactor that never saw the texts gives.
func TestRedactRemembersScans(t *testing.T) {
	s := newTestScanner(t)
	g := newSecretGen(t, 9)
	tok := g.make("ghp")
	prose := strings.Repeat("clean words of a prompt. ", 20)
	line := "export GITHUB_TOKEN=" + tok + "\n"
	texts := []string{
		prose + line,
		prose + line, // again: remembered
		line + prose, // the same length, the secret elsewhere
		"x" + prose + line,
		prose + "export GITHUB_TOKEN=" + g.make("ghp") + "\n", // the same length, another secret
		prose + prose,
	}
	if len(texts[0]) < minScanCached {
		t.Fatalf("the texts (%d bytes) are too short to be remembered", len(texts[0]))
	}
	r := NewRedactor(s, testKey)
	for i, x := range texts {
		got, gotIDs := r.Redact(x)
		want, wantIDs := NewRedactor(s, testKey).Redact(x)
		if got != want || !slices.Equal(gotIDs, wantIDs) {
			t.Errorf("text %d: redacted as %d bytes (%v), want %d bytes (%v)", i, len(got), gotIDs, len(want), wantIDs)
		}
		if strings.Contains(got, tok) {
			t.Errorf("text %d: the secret was left", i)
		}
	}
}
