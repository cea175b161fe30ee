package secrets

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"github.com/chaperone-dev/chaperone/rewrite/placeholder"
)

// Redactor replaces the secrets of one session with placeholders and
// remembers them, so that the placeholders can be restored in responses,
// and so that their encodings are found in later texts (Known). It also
// remembers what the rules found in the long texts it searched (scanCache):
// each request of an agent resends the ones before. It is safe for
// concurrent use.
type Redactor struct {
	s     *Scanner
	key   []byte
	known *Known

	mu       sync.Mutex
	bySecret map[redactKey]string // (rule, secret) -> placeholder
	secrets  map[string]string    // placeholder -> secret

	scans scanCache
}

type redactKey struct{ rule, secret string }

// NewRedactor returns a Redactor for one session. key (32 random bytes per
// session) keys the HMAC that names each secret's placeholder: the same
// secret under the same key gets the same placeholder. Its Known set holds
// DefaultKnownValues.
func NewRedactor(s *Scanner, key []byte) *Redactor {
	return &Redactor{
		s:        s,
		key:      append([]byte(nil), key...),
		known:    NewKnown(DefaultKnownValues),
		bySecret: map[redactKey]string{},
		secrets:  map[string]string{},
		scans:    scanCache{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}},
	}
}

// Known is the session's set of known secret values: each secret Redact
// finds joins it, and so may the caller's.
func (r *Redactor) Known() *Known { return r.known }

// Redact returns v with every secret replaced by its placeholder; ids lists
// the rule id of each replacement, in order (duplicates kept). Once a secret
// is found, its other occurrences in v are replaced too, even where no rule
// would find it; so are known values (Known) and their encodings, each by
// the placeholder of the value itself (a brokered credential's is never
// restored). The secrets found join Known. When nothing is found, out is v
// and ids is nil, and nothing is allocated.
func (r *Redactor) Redact(v string) (out string, ids []string) {
	rs := r.replacements(v)
	if len(rs) == 0 {
		return v, nil
	}
	var b strings.Builder
	b.Grow(len(v))
	ids = make([]string, 0, len(rs))
	last := 0
	for _, x := range rs {
		b.WriteString(v[last:x.start])
		b.WriteString(x.ph)
		ids = append(ids, x.id)
		last = x.end
	}
	b.WriteString(v[last:])
	return b.String(), ids
}

// FindSecrets calls found for each replacement Redact would make in v, in
// order: v[start:end] is replaced by placeholder, for rule. It learns what
// Redact learns. It lets a caller that reads v as a view of another text
// (a JSON string's inside, decoded) put the placeholders back where their
// bytes came from.
func (r *Redactor) FindSecrets(v string, found func(start, end int, rule, placeholder string)) {
	for _, x := range r.replacements(v) {
		found(x.start, x.end, x.id, x.ph)
	}
}

type replacement struct {
	start, end int
	id, ph     string
}

// replacements returns what Redact replaces in v, sorted and not
// overlapping; nil, without allocating, when there is nothing.
func (r *Redactor) replacements(v string) []replacement {
	fs := r.scans.scan(r.s, v)
	km := r.known.Find(v)
	if len(fs) == 0 && len(km) == 0 {
		return nil
	}
	if len(fs) > 0 {
		fs = everyOccurrence(v, fs)
	}
	rs := make([]replacement, 0, len(fs)+len(km))
	for _, f := range fs {
		secret := v[f.Start:f.End]
		rs = append(rs, replacement{f.Start, f.End, f.RuleID, r.placeholder(f.RuleID, secret, true)})
		if r.known.Add(f.RuleID, secret) {
			r.learnInner(secret)
		}
	}
	for _, m := range km {
		if overlapsAny(fs, m.Start, m.End) {
			continue
		}
		rs = append(rs, replacement{m.Start, m.End, m.RuleID, r.placeholder(m.RuleID, m.value, m.Credential == "")})
	}
	if len(km) > 0 {
		slices.SortStableFunc(rs, func(x, y replacement) int { return x.start - y.start })
	}
	out := rs[:0]
	last := 0
	for _, x := range rs {
		if x.start < last {
			continue // overlaps one kept already
		}
		out = append(out, x)
		last = x.end
	}
	return out
}

// learnInner learns the secrets that a secret found whole holds: a
// connection string found as a Kubernetes Secret's value holds an Azure
// Storage key, which the session may show again on its own.
func (r *Redactor) learnInner(secret string) {
	for _, g := range r.s.ScanString(secret) {
		if g.End-g.Start < len(secret) {
			r.known.Add(g.RuleID, secret[g.Start:g.End])
		}
	}
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
// anything but the order secrets were first seen in. Lookup restores it
// only if restorable.
func (r *Redactor) placeholder(id, secret string, restorable bool) string {
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
	for n := placeholder.MinHex; ; n++ { // more digits only when two secrets would share a placeholder
		p = PlaceholderPrefix + id + ":" + sum[:n] + "]"
		if old, taken := r.secrets[p]; !taken || old == secret || n >= maxHex {
			break
		}
	}
	secret = strings.Clone(secret) // not a window into a request's bytes
	r.bySecret[redactKey{id, secret}] = p
	if _, taken := r.secrets[p]; !taken && restorable {
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

// Bounds of a Redactor's scanCache.
const (
	// minScanCached is the shortest text whose scan is remembered: a
	// shorter one is scanned again, for about what hashing it costs.
	minScanCached = 32
	// maxScanCached is how many texts' scans a generation of the cache
	// holds; it keeps the last two.
	maxScanCached = 4096
)

// scanCache remembers the findings of the long texts one Redactor has
// scanned, by their length and two 64-bit hashes under seeds of its own
// (chosen at random, so a text cannot be made to collide with another):
// an agent sends its whole history again with each request, and a scan
// depends on the text alone. What is found by the session's known values
// is not remembered: it changes as the session shows new ones. It holds
// no text and no secret, only positions and rule ids.
type scanCache struct {
	seeds    [2]maphash.Seed
	mu       sync.Mutex
	cur, old map[scanKey][]Finding // old: the generation before cur
}

type scanKey struct {
	h0, h1 uint64
	n      int
}

// scan returns s.ScanString(v), remembered. The findings are shared: the
// caller must not change them (they have no room to grow in place).
func (c *scanCache) scan(s *Scanner, v string) []Finding {
	if len(v) < minScanCached {
		return s.ScanString(v)
	}
	k := scanKey{maphash.String(c.seeds[0], v), maphash.String(c.seeds[1], v), len(v)}
	c.mu.Lock()
	fs, ok := c.cur[k]
	if !ok {
		if fs, ok = c.old[k]; ok {
			c.put(k, fs)
		}
	}
	c.mu.Unlock()
	if ok {
		return fs
	}
	fs = slices.Clip(s.ScanString(v))
	c.mu.Lock()
	c.put(k, fs)
	c.mu.Unlock()
	return fs
}

// put remembers fs for k, starting a generation when cur is full.
func (c *scanCache) put(k scanKey, fs []Finding) {
	if len(c.cur) >= maxScanCached || c.cur == nil {
		c.old, c.cur = c.cur, make(map[scanKey][]Finding, 64)
	}
	c.cur[k] = fs
}
