package secrets

import (
	"testing"

	"github.com/zricethezav/gitleaks/v8/detect"
)

func newTestScanner(t testing.TB) *Scanner {
	t.Helper()
	s, err := NewScanner(Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newGitleaks(t testing.TB) *detect.Detector {
	t.Helper()
	d, err := detect.NewDetectorDefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func gitleaksDetect(d *detect.Detector) func(string) ([]string, []string) {
	return func(text string) (ids, secrets []string) {
		for _, f := range d.DetectString(text) {
			ids = append(ids, f.RuleID)
			secrets = append(secrets, f.Secret)
		}
		return ids, secrets
	}
}

// TestGitleaksRecall measures gitleaks on the same corpus, so that the
// benchmark compares engines of known recall.
func TestGitleaksRecall(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	c := loadCorpus(t, 3)
	d := newGitleaks(t)
	gl := score(c.pos, gitleaksDetect(d))
	our := score(c.pos, ours(newTestScanner(t)))
	fp := 0
	for _, n := range c.neg {
		if len(d.DetectString(n.text)) > 0 {
			fp++
		}
	}
	t.Logf("gitleaks: recall %.3f (%d/%d), false-positive rate %.3f (%d/%d); missed: %v",
		gl.recall(), gl.found, gl.total, float64(fp)/float64(len(c.neg)), fp, len(c.neg), gl.missed)
	t.Logf("ours:     recall %.3f (%d/%d)", our.recall(), our.found, our.total)
	if our.recall() < gl.recall() {
		t.Errorf("our recall %.3f is below gitleaks' %.3f", our.recall(), gl.recall())
	}
}

func benchInputs(b *testing.B) map[string]string {
	c := loadCorpus(b, 1)
	return map[string]string{
		"clean":     c.prompt(1<<20, 0),
		"20secrets": c.prompt(1<<20, 20),
	}
}

func BenchmarkScan(b *testing.B) {
	s := newTestScanner(b)
	in := benchInputs(b)
	for _, name := range []string{"clean", "20secrets"} {
		text := in[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n = len(s.ScanString(text))
			}
			b.ReportMetric(float64(n), "findings")
		})
	}
}

func BenchmarkGitleaks(b *testing.B) {
	d := newGitleaks(b)
	in := benchInputs(b)
	for _, name := range []string{"clean", "20secrets"} {
		text := in[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n = len(d.DetectString(text))
			}
			b.ReportMetric(float64(n), "findings")
		})
	}
}
