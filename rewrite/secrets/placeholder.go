package secrets

import (
	"sort"
	"strings"
)

// PlaceholderPrefix starts every placeholder: [REDACTED:<rule-id>:<hex>],
// rule-id in [a-z0-9-]+, at least 4 lowercase hex digits.
const PlaceholderPrefix = "[REDACTED:"

// MaxPlaceholderLen bounds a placeholder's length, for stream restorers.
const MaxPlaceholderLen = 64

// A placeholder is never a secret, nor part of one: a text that holds one
// (an answer's placeholder that went unrestored, a brokered credential's,
// a text redacted once already) is scanned with each placeholder's inside
// masked, and a finding that overlaps one is dropped. Redacting is then
// idempotent: "https://[REDACTED:github-pat:6bab]@github.com" is not taken
// for a user "[REDACTED" with the password "github-pat:6bab]".

// placeholders returns the spans of the complete placeholders in text, in
// order; nil when there are none.
func placeholders(text string) []span {
	var out []span
	for i := 0; ; {
		j := strings.Index(text[i:], PlaceholderPrefix)
		if j < 0 {
			return out
		}
		i += j
		if n := placeholderLen(text[i:]); n > 0 {
			out = append(out, span{i, i + n})
			i += n
		} else {
			i++
		}
	}
}

// placeholderLen returns the length of the placeholder s starts with, or 0.
func placeholderLen(s string) int {
	i := len(PlaceholderPrefix)
	for i < len(s) && i < MaxPlaceholderLen && (isLowerAlnum(s[i]) || s[i] == '-') {
		i++
	}
	if i == len(PlaceholderPrefix) || i >= len(s) || s[i] != ':' {
		return 0
	}
	i++
	h := i
	for i < len(s) && i < MaxPlaceholderLen && ('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
		i++
	}
	if i-h < minHex || i >= len(s) || s[i] != ']' || i+1 > MaxPlaceholderLen {
		return 0
	}
	return i + 1
}

func isLowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// masked returns text with the inside of each placeholder in ps turned to
// 'x': the brackets stay, so what is next to a placeholder is scanned as it
// stands (a word boundary stays one, a URL's user is still a user).
func masked(text string, ps []span) string {
	b := []byte(text)
	for _, p := range ps {
		for k := p.start + 1; k < p.end-1; k++ {
			b[k] = 'x'
		}
	}
	return string(b)
}

// overlaps reports whether [start, end) overlaps one of ps (sorted, not
// overlapping).
func overlaps(ps []span, start, end int) bool {
	i := sort.Search(len(ps), func(i int) bool { return ps[i].end > start })
	return i < len(ps) && ps[i].start < end
}
