package secrets

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestAllowlistSplit: an allowlist regex split into its alternatives, each
// skipped when the words it needs are missing, excuses exactly what the
// whole regex does.
func TestAllowlistSplit(t *testing.T) {
	cfg, err := loadGitleaks()
	if err != nil {
		t.Fatal(err)
	}
	c := loadCorpus(t, 1)
	var texts []string
	for _, smp := range append(c.pos, c.neg...) {
		texts = append(texts, strings.Split(smp.text, "\n")...)
	}
	// Names the generic rule's allowlist excuses, and near misses.
	texts = append(texts, "accessibility", "ACCESS_ID", "api.version", "author", "keyboard", "Monkey", "monkey", "MONKEY",
		"key_alias=x", "token_url: y", "public-token", "secret_name", "withCredentials", "csrf-token", "A_B=\nC_D=\n",
		"io.jsonwebtoken : jjwt", "key-vault-name", "keystore_path", "turkey", "X-MS-Exchange-Organization-Auth")
	split := 0
	for _, gr := range cfg.GetOrderedRules() {
		for _, a := range gr.Allowlists {
			for _, r := range a.Regexes {
				var al allowlist
				if err := al.add(r.String()); err != nil {
					t.Fatal(err)
				}
				if len(al.res) == 1 {
					continue
				}
				split++
				whole := regexp.MustCompile(r.String())
				for _, x := range texts {
					got := false
					for i, re := range al.res {
						if (al.needs[i] == nil || al.needs[i].contains(x)) && re.MatchString(x) {
							got = true
							break
						}
					}
					if want := whole.MatchString(x); got != want {
						t.Errorf("rule %s: an allowlist regex split says %v where whole it says %v, on a text of %d bytes", gr.RuleID, got, want, len(x))
					}
				}
			}
		}
	}
	if split == 0 {
		t.Fatal("no allowlist regex was split: the test tests nothing")
	}
	t.Logf("%d regexes split, checked on %d texts", split, len(texts))
}

// shapeTexts are texts that gitleaks' anchored allowlist regexes match,
// and near misses.
var shapeTexts = []string{
	"true", "false", "null", "aaaaaaaa", "AAAA", "****", "....", "$1", "${2}", "$HOME", "${api_key}",
	"{{ .Values.token }}", "${{ secrets.API_TOKEN }}", "${{ env.X_Y }}", "%APPDATA%", "%s", "%-d", "{0}", "{}",
	"@TOKEN@", "/Users/bob/src/x.go", "/etc/ssl/private", "/usr/local/bin/x", "s.abcdefghijklmnopqrstuvwx",
	"key_alias", "import { a, b } from 'c'", "--mount=type=secret,id=x", "K\u212Aey", "\u017fecret", "€uro",
}

// TestAllowlistShapes: an allowlist regex is skipped only on texts it
// cannot match (textShape), over every allowlist of the scanner, on the
// corpus's lines and texts made to match the anchored ones.
func TestAllowlistShapes(t *testing.T) {
	s := newTestScanner(t)
	c := loadCorpus(t, 1)
	texts := slices.Clone(shapeTexts)
	for _, smp := range append(c.pos, c.neg...) {
		for _, l := range strings.Split(smp.text, "\n") {
			texts = append(texts, l, strings.TrimSpace(l))
			for _, f := range strings.FieldsFunc(l, func(r rune) bool { return strings.ContainsRune(" =:\"'", r) }) {
				texts = append(texts, f)
			}
		}
	}
	skipped, shaped := 0, 0
	for _, al := range allowlists(s) {
		for i, re := range al.res {
			if i >= len(al.shapes) {
				continue
			}
			sh := al.shapes[i]
			if sh.first != nil || sh.bytes != nil {
				shaped++
			}
			for _, x := range texts {
				fits := sh.fits(x)
				if !fits {
					skipped++
				}
				if !fits && re.MatchString(x) {
					t.Errorf("%s matches a text of %d bytes its shape says it cannot", re, len(x))
				}
			}
		}
	}
	if shaped == 0 || skipped == 0 {
		t.Fatalf("%d regexes have a shape, %d runs skipped: the test tests nothing", shaped, skipped)
	}
	t.Logf("%d regexes have a shape; %d of their runs skipped over %d texts", shaped, skipped, len(texts))
}

// FuzzAllowlistShapes: no text an allowlist regex matches is one its
// shape rules out.
func FuzzAllowlistShapes(f *testing.F) {
	for _, x := range shapeTexts {
		f.Add(x)
	}
	s := newTestScanner(f)
	als := allowlists(s)
	f.Fuzz(func(t *testing.T, x string) {
		for _, al := range als {
			for i, re := range al.res {
				if i < len(al.shapes) && !al.shapes[i].fits(x) && re.MatchString(x) {
					t.Fatalf("%s matches %q, which its shape rules out", re, x)
				}
			}
		}
	})
}

// allowlists returns every allowlist of s: the global ones, then the
// rules'.
func allowlists(s *Scanner) []allowlist {
	als := slices.Clone(s.global)
	for _, r := range s.rules {
		als = append(als, r.allow...)
	}
	return als
}
