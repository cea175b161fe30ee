package secrets

import (
	"sort"
	"strings"

	"github.com/chaperone-dev/chaperone/rewrite/placeholder"
)

// PlaceholderPrefix starts every placeholder (rewrite/placeholder's format).
const PlaceholderPrefix = placeholder.Prefix

// MaxPlaceholderLen bounds a placeholder's length, for stream restorers.
const MaxPlaceholderLen = placeholder.MaxLen

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
		if n := placeholder.Len(text[i:]); n > 0 {
			out = append(out, span{i, i + n})
			i += n
		} else {
			i++
		}
	}
}

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
