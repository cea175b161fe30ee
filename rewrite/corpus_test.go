package rewrite_test

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/zricethezav/gitleaks/v8/detect"

	"github.com/chaperone-dev/chaperone/internal/secretcorpus"
	"github.com/chaperone-dev/chaperone/rewrite"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// Thresholds of the corpus test (issue 26).
const (
	minRecall = 0.99
	maxDamage = 0.002
)

// TestRedactCorpus measures the proxy's redaction (RedactBody, with one
// Redactor per session as the proxy has) on generated agent traffic it has
// never seen: a seed chosen now, printed, replayed with
// CHAPERONE_CORPUS_SEED=<seed>. Recall is the share of planted secret
// occurrences no longer recoverable from the redacted bodies
// (secretcorpus.Request.Check says how a partial cut counts), damage the
// share of hard negatives changed; every redacted body must be JSON. The
// tables (run with -v) give both by type, location, layout, provider,
// serialization and JSON nesting depth, and list each miss by place,
// never by value.
func TestRedactCorpus(t *testing.T) {
	seed, err := secretcorpus.Seed(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d (replay: %s=%d go test -run TestRedactCorpus -v ./rewrite)", seed, secretcorpus.SeedEnv, seed)
	n := 3
	if testing.Short() {
		n = 1
	}
	sc, err := secrets.NewScanner(secrets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var tally secretcorpus.Tally
	requests, size := 0, 0
	for _, s := range secretcorpus.Generate(secretcorpus.Options{Seed: seed, Sessions: n}) {
		key := sha256.Sum256([]byte(s.Name))
		red := secrets.NewRedactor(sc, key[:])
		for _, r := range s.Requests {
			out, _ := rewrite.RedactBody(r.Body, red)
			res, err := r.Check(out)
			if err != nil {
				t.Error(err) // names the request and the place, never a value
				continue
			}
			tally.Add(&r, res)
			requests++
			size += len(r.Body)
		}
	}
	for _, dim := range []string{secretcorpus.ByType, secretcorpus.ByLocation, secretcorpus.ByLayout, secretcorpus.ByProvider, secretcorpus.BySerialization, secretcorpus.ByDepth} {
		t.Logf("recall by %s:\n%s", dim, tally.Table(dim))
	}
	for _, dim := range []string{secretcorpus.ByKind, secretcorpus.ByProvider, secretcorpus.BySerialization} {
		t.Logf("damage by %s:\n%s", dim, tally.DamageTable(dim))
	}
	if m := tally.Misses(); len(m) > 0 {
		const most = 300
		t.Logf("%d misses (the first %d):\n%s", len(m), min(most, len(m)), strings.Join(m[:min(most, len(m))], "\n"))
	}
	secs, leaked := tally.Secrets()
	negs, damaged := tally.Negatives()
	t.Logf("seed %d: %d requests, %d bytes; recall %.4f (%d of %d secret occurrences leaked), damage %.4f (%d of %d hard negatives changed)",
		seed, requests, size, tally.Recall(), leaked, secs, tally.Damage(), damaged, negs)
	if tally.Recall() < minRecall {
		t.Errorf("recall %.4f < %.2f (seed %d)", tally.Recall(), minRecall, seed)
	}
	if tally.Damage() > maxDamage {
		t.Errorf("damage %.4f > %.3f (seed %d)", tally.Damage(), maxDamage, seed)
	}
}

// oracle redacts exactly the planted secrets: every probe of every label
// of a session's requests, in every form a JSON string level gives it. It
// is a rewrite.Redactor both as a text redactor (Redact) and as a finder
// of spans (FindSecrets).
type oracle struct{ probes []string }

func (o oracle) Redact(s string) (string, []string) {
	var b strings.Builder
	var ids []string
	last := 0
	o.FindSecrets(s, func(start, end int, rule, ph string) {
		b.WriteString(s[last:start])
		b.WriteString(ph)
		ids = append(ids, rule)
		last = end
	})
	if ids == nil {
		return s, nil
	}
	b.WriteString(s[last:])
	return b.String(), ids
}

// FindSecrets calls found for each run of overlapping or adjacent probe
// occurrences, in order.
func (o oracle) FindSecrets(s string, found func(start, end int, rule, placeholder string)) {
	type span struct{ start, end int }
	var spans []span
	for _, p := range o.probes {
		for i := 0; ; {
			j := strings.Index(s[i:], p)
			if j < 0 {
				break
			}
			spans = append(spans, span{i + j, i + j + len(p)})
			i += j + 1
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	for i := 0; i < len(spans); {
		run := spans[i]
		for i++; i < len(spans) && spans[i].start <= run.end; i++ {
			run.end = max(run.end, spans[i].end)
		}
		found(run.start, run.end, "oracle", "[REDACTED:oracle:0]")
	}
}

// TestRedactCorpusOracle checks the measuring stick: RedactBody with a
// redactor that knows every planted secret reaches recall 1 and damage 0,
// so what TestRedactCorpus misses, the detectors missed.
func TestRedactCorpusOracle(t *testing.T) {
	var tally secretcorpus.Tally
	for _, s := range secretcorpus.Generate(secretcorpus.Options{Seed: 5}) {
		var o oracle
		for _, r := range s.Requests {
			for _, sec := range r.Secrets {
				for _, p := range sec.Probes {
					o.probes = append(o.probes, p, jsonEscaped(p), jsonEscaped(jsonEscaped(p)), jsonEscaped(jsonEscaped(jsonEscaped(p))))
				}
			}
		}
		for _, r := range s.Requests {
			out, _ := rewrite.RedactBody(r.Body, o)
			res, err := r.Check(out)
			if err != nil {
				t.Fatal(err)
			}
			tally.Add(&r, res)
		}
	}
	if tally.Recall() != 1 || tally.Damage() != 0 {
		t.Errorf("recall %.4f, damage %.4f; want 1 and 0:\n%s", tally.Recall(), tally.Damage(), strings.Join(tally.Misses(), "\n"))
	}
}

// jsonEscaped is s as Go writes it inside a JSON string.
func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// BenchmarkRedactCorpus measures the whole path the proxy runs on an LLM
// request body (decode the JSON, walk its strings, detect, replace) on the
// corpus, beside gitleaks' DetectString on the same bodies, so that the
// ratio of their MB/s, and of their CPU time (cpu-ns/op, steadier on a
// busy machine), reads off one run:
//
//	go test -run '^$' -bench RedactCorpus ./rewrite
func BenchmarkRedactCorpus(b *testing.B) {
	sessions := secretcorpus.Generate(secretcorpus.Options{Seed: 1})
	var size int64
	for _, s := range sessions {
		for _, r := range s.Requests {
			size += int64(len(r.Body))
		}
	}
	b.Run("chaperone", func(b *testing.B) {
		sc, err := secrets.NewScanner(secrets.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		b.ReportAllocs()
		cpu0 := rewrite.ProcessCPU()
		for b.Loop() {
			for _, s := range sessions {
				key := sha256.Sum256([]byte(s.Name))
				red := secrets.NewRedactor(sc, key[:])
				for _, r := range s.Requests {
					rewrite.RedactBody(r.Body, red)
				}
			}
		}
		rewrite.ReportCPU(b, cpu0)
	})
	b.Run("gitleaks", func(b *testing.B) {
		d, err := detect.NewDetectorDefaultConfig()
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		b.ReportAllocs()
		cpu0 := rewrite.ProcessCPU()
		for b.Loop() {
			for _, s := range sessions {
				for _, r := range s.Requests {
					d.DetectString(string(r.Body))
				}
			}
		}
		rewrite.ReportCPU(b, cpu0)
	})
}
