package secrets

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/internal/secretcorpus"
)

// A sample of the labeled corpus. For a positive, core is the part of the
// generated secret a finding must contain (the whole secret, except for a
// service-account key whose JSON string ends in an escaped newline).
type sample struct {
	name   string // record name and instance, safe to print
	ruleID string // expected rule; "" for negatives
	text   string
	core   string
}

// secretGen makes fake secrets in the shapes of real ones, from a seed:
// secretcorpus.Secrets, which the corpus of whole request bodies
// (rewrite/corpus_test.go) shares.
type secretGen struct{ *secretcorpus.Secrets }

func newSecretGen(_ testing.TB, seed uint64) *secretGen {
	return &secretGen{secretcorpus.NewSecrets(seed)}
}

func (g *secretGen) make(kind string) string { return g.Make(kind) }

// secret returns a fake secret of the named kind, and the core a finding
// must contain. A kind may name layouts after it, applied in order
// ("pem-rsa|lineno|escaped": see layOut).
func (g *secretGen) secret(kind string) (string, string) { return g.Secret(kind) }

func (g *secretGen) pemRSA(pkcs8 bool) string { return g.PEMRSA(pkcs8) }

func (g *secretGen) fillNegative(body string) string { return g.FillNegative(body) }

func (g *secretGen) str(n int, chars string) string { return g.Str(n, chars) }

func (g *secretGen) uuid() string { return g.UUID() }

// layOut lays a PEM key (or any multi-line secret) out as an agent's tools
// show it (secretcorpus.LayOut).
func layOut(s, how string) string { return secretcorpus.LayOut(s, how) }

// Alphabets of the fake secrets.
const (
	alnum  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	lower  = "abcdefghijklmnopqrstuvwxyz"
	digits = "0123456789"
	hexd   = "0123456789abcdef"
	b64c   = alnum + "+/"
	b64u   = alnum + "_-"
)

type record struct{ header, body string }

func readRecords(t testing.TB, path string) []record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []record
	for _, part := range strings.Split("\n"+string(data), "\n=== ")[1:] {
		header, body, _ := strings.Cut(part, "\n")
		recs = append(recs, record{header: header, body: strings.TrimRight(body, "\n")})
	}
	return recs
}

// corpus is the labeled corpus: instances of every record of
// testdata/positives.txt and testdata/negatives.txt.
type corpus struct {
	pos, neg []sample
	gen      *secretGen
	negRecs  []record
	posRecs  []record
}

func loadCorpus(t testing.TB, instances int) *corpus {
	t.Helper()
	c := &corpus{
		gen:     newSecretGen(t, 1),
		posRecs: readRecords(t, "testdata/positives.txt"),
		negRecs: readRecords(t, "testdata/negatives.txt"),
	}
	for i := range instances {
		for _, r := range c.posRecs {
			c.pos = append(c.pos, c.positive(r, i))
		}
		for _, r := range c.negRecs {
			c.neg = append(c.neg, sample{name: fmt.Sprintf("%s#%d", r.header, i), text: c.gen.fillNegative(r.body)})
		}
	}
	return c
}

func (c *corpus) positive(r record, i int) sample {
	id, kind, _ := strings.Cut(r.header, " ")
	s, core := c.gen.secret(kind)
	return sample{
		name:   fmt.Sprintf("%s/%s#%d", id, kind, i),
		ruleID: id,
		text:   strings.Replace(r.body, "{{S}}", s, 1),
		core:   core,
	}
}

// prompt builds a realistic text of at least size bytes from the negative
// records, with n positives spread through it.
func (c *corpus) prompt(size, n int) string {
	r := rand.New(rand.NewPCG(7, 11))
	var parts []string
	total := 0
	for total < size {
		rec := c.negRecs[r.IntN(len(c.negRecs))]
		p := c.gen.fillNegative(rec.body)
		parts = append(parts, p)
		total += len(p) + 2
	}
	for i := range n {
		rec := c.posRecs[(i*7)%len(c.posRecs)]
		at := (i*len(parts))/n + 1
		parts[at-1] = parts[at-1] + "\n\n" + c.positive(rec, 100+i).text
	}
	return strings.Join(parts, "\n\n")
}

type scoreCard struct {
	found, sameID, total int
	missed, relabeled    []string
}

func (sc scoreCard) recall() float64 { return float64(sc.found) / float64(sc.total) }

// score counts positives whose core lies inside one finding; detect returns
// each finding's rule id and secret.
func score(pos []sample, detect func(text string) (ids, secrets []string)) scoreCard {
	var sc scoreCard
	for _, p := range pos {
		sc.total++
		ids, secs := detect(p.text)
		hit := false
		for i, s := range secs {
			if strings.Contains(s, p.core) {
				hit = true
				if ids[i] == p.ruleID {
					sc.sameID++
				} else {
					sc.relabeled = append(sc.relabeled, p.name+" as "+ids[i])
				}
				break
			}
		}
		if hit {
			sc.found++
		} else {
			sc.missed = append(sc.missed, p.name)
		}
	}
	return sc
}

func ours(s *Scanner) func(string) ([]string, []string) {
	return func(text string) (ids, secrets []string) {
		for _, f := range s.ScanString(text) {
			ids = append(ids, f.RuleID)
			secrets = append(secrets, text[f.Start:f.End])
		}
		return ids, secrets
	}
}

func TestCorpus(t *testing.T) {
	s := newTestScanner(t)
	c := loadCorpus(t, 3)
	kinds := map[string]bool{}
	for _, p := range c.pos {
		kinds[p.ruleID] = true
	}
	if len(kinds) < 20 {
		t.Fatalf("corpus has %d secret types, want at least 20", len(kinds))
	}

	sc := score(c.pos, ours(s))
	t.Logf("ours: recall %.3f (%d/%d over %d types); rule id as labeled for %d, other ids: %v; missed: %v",
		sc.recall(), sc.found, sc.total, len(kinds), sc.sameID, sc.relabeled, sc.missed)
	if sc.recall() < 0.95 {
		t.Errorf("recall %.3f < 0.95", sc.recall())
	}

	fp := 0
	for _, n := range c.neg {
		if fs := s.ScanString(n.text); len(fs) > 0 {
			fp++
			var ids []string
			for _, f := range fs {
				ids = append(ids, f.RuleID)
			}
			t.Logf("false positive in %s: %v", n.name, ids)
		}
	}
	rate := float64(fp) / float64(len(c.neg))
	t.Logf("ours: false-positive rate %.3f (%d/%d negative samples)", rate, fp, len(c.neg))
	if rate > 0.02 {
		t.Errorf("false-positive rate %.3f > 0.02", rate)
	}
}
