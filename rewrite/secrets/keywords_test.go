package secrets

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type occurrence struct{ pattern, end int }

func naiveFind(patterns []string, text string) []occurrence {
	lt := strings.ToLower(text)
	var out []occurrence
	for end := 1; end <= len(text); end++ {
		for i, p := range patterns {
			if p != "" && end >= len(p) && lt[end-len(p):end] == strings.ToLower(p) {
				out = append(out, occurrence{i, end})
			}
		}
	}
	return out
}

func automatonFind(a *automaton, text string) []occurrence {
	var out []occurrence
	pos, q := 0, int32(0)
	for {
		var ok bool
		if pos, q, ok = a.find(text, pos, q); !ok {
			return out
		}
		outs := a.outputs(q)
		var here []occurrence
		for _, k := range outs {
			here = append(here, occurrence{int(k), pos})
		}
		out = append(out, here...)
	}
}

func TestAutomaton(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		text     string
	}{
		{"none", []string{"abc"}, "xyz"},
		{"overlapping", []string{"he", "she", "his", "hers"}, "ushers and HIS hers"},
		{"suffixes", []string{"a", "aa", "aaa"}, "aaaa"},
		{"case folding", []string{"AKIA", "ghp_"}, "akia AKIA Ghp_ x"},
		{"empty pattern ignored", []string{"", "x"}, "xx"},
		{"at the ends", []string{"ab", "yz"}, "abcxyz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := naiveFind(tt.patterns, tt.text)
			got := automatonFind(newAutomaton(tt.patterns), tt.text)
			sortOcc(want)
			sortOcc(got)
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(occurrence{})); diff != "" {
				t.Errorf("occurrences (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAutomatonRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abAB_-."
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	for i := range 200 {
		var patterns []string
		for range 1 + r.IntN(10) {
			patterns = append(patterns, word(1+r.IntN(4)))
		}
		text := word(r.IntN(60))
		want, got := naiveFind(patterns, text), automatonFind(newAutomaton(patterns), text)
		sortOcc(want)
		sortOcc(got)
		if !slices.Equal(want, got) {
			t.Fatalf("case %d: automaton and naive search disagree", i)
		}
	}
}

func sortOcc(o []occurrence) {
	slices.SortFunc(o, func(a, b occurrence) int {
		if a.end != b.end {
			return a.end - b.end
		}
		return a.pattern - b.pattern
	})
}

func BenchmarkAutomaton(b *testing.B) {
	s := newTestScanner(b)
	text := loadCorpus(b, 1).prompt(1<<20, 0)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		pos, q := 0, int32(0)
		for {
			var ok bool
			if pos, q, ok = s.ac.find(text, pos, q); !ok {
				break
			}
		}
	}
}
