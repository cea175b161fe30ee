package rewrite

import (
	"strings"
	"testing"
)

func TestPlaceholderGrammar(t *testing.T) {
	long := "[REDACTED:" + strings.Repeat("a", 48) + ":abcd]" // 64 bytes: the longest allowed
	tests := []struct {
		in       string
		complete int  // placeholderLen
		partial  bool // isPartialPlaceholder
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
			if got := placeholderLen([]byte(tt.in)); got != tt.complete {
				t.Errorf("placeholderLen = %d, want %d", got, tt.complete)
			}
			if got := isPartialPlaceholder([]byte(tt.in)); got != tt.partial {
				t.Errorf("isPartialPlaceholder = %v, want %v", got, tt.partial)
			}
		})
	}
}

func TestHoldFrom(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"abc", 3},
		{"abc [REDA", 4},
		{"abc [REDACTED:x:1", 4},
		{"[REDACTED:x:1234] done", 22},
		{"a [REDA[RED", 7},
		{"a [REDACTED:x:1234]", 19},
		{"a [", 2},
		{"a [b", 4},
	}
	for _, tt := range tests {
		if got := holdFrom([]byte(tt.in)); got != tt.want {
			t.Errorf("holdFrom(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
