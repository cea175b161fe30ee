package rewrite

import (
	"testing"
)

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
