package secrets

import (
	"regexp"
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
