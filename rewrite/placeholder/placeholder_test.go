package placeholder

import (
	"regexp"
	"strings"
	"testing"
)

func TestGrammar(t *testing.T) {
	long := "[REDACTED:" + strings.Repeat("a", 48) + ":abcd]" // 64 bytes: the longest allowed
	tests := []struct {
		in       string
		complete int  // Len
		partial  bool // IsPartial
	}{
		{"[REDACTED:aws-access-token:7f3a]", 32, false},
		{"[REDACTED:aws-access-token:7f3a] tail", 32, false},
		{"[REDACTED:a:0123456789abcdef]", 29, false},
		{long, 64, false},
		{"[REDACTED:" + strings.Repeat("a", 49) + ":abcd]", 0, false}, // 65 bytes
		{"[REDACTED:a:7f3]", 0, false},                                // fewer than 4 hex digits
		{"[REDACTED:a:7F3A]", 0, false},                               // upper-case hex
		{"[REDACTED:A:7f3a]", 0, false},                               // upper-case rule
		{"[REDACTED::7f3a]", 0, false},
		{"[REDACTED:a:7f3a", 0, true},
		{"[REDACTED:a:", 0, true},
		{"[REDACTED:a", 0, true},
		{"[REDACTED:", 0, true},
		{"[REDA", 0, true},
		{"[", 0, true},
		{"[redacted:", 0, false},
		{"[REDACTED:a:7f3a ", 0, false},
		{"[REDACTED:a-b_c", 0, false},
		{"", 0, false},
		{"x[REDACTED:a:7f3a]", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got, gotB := Len(tt.in), Len([]byte(tt.in)); got != tt.complete || gotB != tt.complete {
				t.Errorf("Len = %d of a string, %d of bytes; want %d", got, gotB, tt.complete)
			}
			if got, gotB := IsPartial(tt.in), IsPartial([]byte(tt.in)); got != tt.partial || gotB != tt.partial {
				t.Errorf("IsPartial = %v of a string, %v of bytes; want %v", got, gotB, tt.partial)
			}
		})
	}
}

// FuzzLen checks Len against a regular expression of the grammar, on
// strings and bytes alike, and that every proper prefix of a placeholder
// IsPartial.
func FuzzLen(f *testing.F) {
	for _, s := range []string{"[REDACTED:github-pat:6bab]", "[REDACTED:a:7f3a", "[REDACTED::7f3a]", "[REDACTED:a:7F3A] x", "[["} {
		f.Add(s)
	}
	re := regexp.MustCompile(`^\[REDACTED:[a-z0-9-]+:[0-9a-f]{4,}\]`)
	f.Fuzz(func(t *testing.T, s string) {
		want := len(re.FindString(s))
		if want > MaxLen {
			want = 0
		}
		if got, gotB := Len(s), Len([]byte(s)); got != want || gotB != want {
			t.Fatalf("Len(%q) = %d, of bytes %d; want %d", s, got, gotB, want)
		}
		for k := 1; k < want; k++ {
			if !IsPartial(s[:k]) || !IsPartial([]byte(s[:k])) {
				t.Fatalf("IsPartial(%q) = false: a prefix of %q", s[:k], s[:want])
			}
		}
	})
}
