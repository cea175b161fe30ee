package secrets

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
)

// PlaceholderPrefix starts every placeholder: [REDACTED:<rule-id>:<hex>].
const PlaceholderPrefix = "[REDACTED:"

// MaxPlaceholderLen bounds a placeholder's length, for stream restorers.
const MaxPlaceholderLen = 64

// minHex is the usual number of hex digits in a placeholder; more are used
// only when two secrets of one session would otherwise share a placeholder.
const minHex = 4

// Redactor replaces the secrets of one session with placeholders and
// remembers them, so that the placeholders can be restored in responses. It
// is safe for concurrent use.
type Redactor struct {
	s   *Scanner
	key []byte

	mu       sync.Mutex
	bySecret map[redactKey]string // (rule, secret) -> placeholder
	secrets  map[string]string    // placeholder -> secret
}

type redactKey struct{ rule, secret string }

// NewRedactor returns a Redactor for one session. key (32 random bytes per
// session) keys the HMAC that names each secret's placeholder: the same
// secret under the same key gets the same placeholder.
func NewRedactor(s *Scanner, key []byte) *Redactor {
	return &Redactor{
		s:        s,
		key:      append([]byte(nil), key...),
		bySecret: map[redactKey]string{},
		secrets:  map[string]string{},
	}
}

// Redact returns v with every secret replaced by its placeholder; ids lists
// the rule id of each replacement, in order (duplicates kept). Once a secret
// is found, its other occurrences in v are replaced too, even where no rule
// would find it. When nothing is found, out is v and ids is nil, and nothing
// is allocated.
func (r *Redactor) Redact(v string) (out string, ids []string) {
	fs := r.s.ScanString(v)
	if len(fs) == 0 {
		return v, nil
	}
	fs = everyOccurrence(v, fs)
	var b strings.Builder
	b.Grow(len(v))
	ids = make([]string, 0, len(fs))
	last := 0
	for _, f := range fs {
		b.WriteString(v[last:f.Start])
		b.WriteString(r.placeholder(f.RuleID, v[f.Start:f.End]))
		ids = append(ids, f.RuleID)
		last = f.End
	}
	b.WriteString(v[last:])
	return b.String(), ids
}

// Lookup returns the secret behind a placeholder this Redactor made.
func (r *Redactor) Lookup(placeholder string) (secret string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	secret, ok = r.secrets[placeholder]
	return secret, ok
}

// placeholder names secret, found by rule id. Placeholders of one session
// never collide: a secret whose short name is taken by another gets a longer
// one, so the first comer keeps its name and the result does not depend on
// anything but the order secrets were first seen in.
func (r *Redactor) placeholder(id, secret string) string {
	k := redactKey{id, secret}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.bySecret[k]; ok {
		return p
	}
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(secret))
	sum := hex.EncodeToString(m.Sum(nil))
	maxHex := min(len(sum), MaxPlaceholderLen-len(PlaceholderPrefix)-len(id)-2)
	var p string
	for n := minHex; ; n++ {
		p = PlaceholderPrefix + id + ":" + sum[:n] + "]"
		if old, taken := r.secrets[p]; !taken || old == secret || n >= maxHex {
			break
		}
	}
	r.bySecret[k] = p
	if _, taken := r.secrets[p]; !taken {
		r.secrets[p] = secret
	}
	return p
}

// everyOccurrence adds to fs (sorted, non-overlapping) the other occurrences
// of the secrets in fs that overlap no finding, and returns them sorted.
func everyOccurrence(v string, fs []Finding) []Finding {
	out := fs
	seen := map[string]bool{}
	for _, f := range fs {
		secret := v[f.Start:f.End]
		if seen[secret] {
			continue
		}
		seen[secret] = true
		for i := 0; ; {
			j := strings.Index(v[i:], secret)
			if j < 0 {
				break
			}
			a, b := i+j, i+j+len(secret)
			if !overlapsAny(out, a, b) {
				out = append(out, Finding{RuleID: f.RuleID, Start: a, End: b})
			}
			i = a + 1
		}
	}
	if len(out) > len(fs) {
		slices.SortFunc(out, func(x, y Finding) int { return x.Start - y.Start })
	}
	return out
}

func overlapsAny(fs []Finding, a, b int) bool {
	for _, f := range fs {
		if f.Start < b && a < f.End {
			return true
		}
	}
	return false
}
