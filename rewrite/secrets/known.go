package secrets

import (
	"encoding/base64"
	"encoding/hex"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Known-value limits.
const (
	// MinKnownLen is the shortest value a Known set finds encoded:
	// shorter ones' encodings would match too much that is not them.
	MinKnownLen = 12
	// MinPlainLen is the shortest value a Known set takes; one shorter
	// than MinKnownLen (a password) is found as it is only, and only
	// the last maxShort such values are kept.
	MinPlainLen = 8
	maxShort    = 16
	// DefaultKnownValues is how many values NewRedactor's set holds.
	DefaultKnownValues = 1024
	// StreamOverlap is the context a scan of a stream keeps between its
	// windows, so that no secret is cut by a window's end: more than the
	// longest match of any rule (about 1 KiB with its context; a PEM
	// private key, whose body is unbounded, up to this: an RSA key of
	// 16384 bits is 12 KiB) and than any known value's encodings
	// (MaxKnownLen as hex is twice as long).
	StreamOverlap = 64 << 10
	// MaxKnownLen is the longest value a Known set takes.
	MaxKnownLen = 16 << 10
)

// Encodings a known value is recognised under. Where the text had to be
// decoded first, "+url" (percent-encoding) or "+json" (JSON string
// escapes) is added: "base64+url".
const (
	EncPlain     = "plain"
	EncBase64    = "base64"
	EncBase64URL = "base64url"
	EncHex       = "hex"
)

// RuleBrokered is the rule id of a brokered credential's real value,
// found where the agent was only ever given its placeholder.
const RuleBrokered = "brokered-credential"

// KnownMatch is one occurrence of a known value, or of an encoding of it,
// in a text. It never holds the value.
type KnownMatch struct {
	RuleID     string // the rule that first found the value, or RuleBrokered
	Credential string // for a brokered credential, its name
	Encoding   string // EncPlain, EncBase64, …, with "+url" or "+json" when the text was decoded
	Start, End int    // the bytes of the text that hold it (of a base64 form, the groups wholly inside the value)

	value string
}

// Known is the set of secret values one session has shown (found in any of
// its requests) or that Chaperone brokers for it, and finds them in a text
// also when encoded: base64 (standard and URL alphabets, padded or not, at
// each of the three alignments a value can have inside a longer encoded
// text), hex (lower or upper case), and each of these percent-encoded
// (every byte or some) or written with JSON string escapes (\u0041, \/).
// Of a base64 form, what is matched is the run of whole groups inside the
// value: the value less at most two bytes at either end.
//
// It holds at most a limit of values; past it, the oldest learned value
// is forgotten (brokered credentials never are). Values shorter than
// MinPlainLen or longer than MaxKnownLen are not taken; those shorter than
// MinKnownLen (a password) are found only as they are (or percent- or
// JSON-escaped), and only the last maxShort of them are kept. It is safe for
// concurrent use: a search reads an immutable index, which each change
// replaces. It never logs or returns a value.
type Known struct {
	limit int

	mu    sync.Mutex
	vals  []knownValue   // oldest first
	byVal map[string]int // value -> index in vals
	snap  atomic.Pointer[knownIndex]
}

type knownValue struct {
	rule, cred, value string
}

// NewKnown returns an empty set that holds at most limit values.
func NewKnown(limit int) *Known {
	return &Known{limit: max(limit, 1), byVal: map[string]int{}}
}

// Len is how many values the set holds.
func (k *Known) Len() int {
	if s := k.snap.Load(); s != nil {
		return len(s.vals)
	}
	return 0
}

// Add learns value, found by rule ruleID. It reports whether the set
// changed (false for a value it has, or one too short or too long).
func (k *Known) Add(ruleID, value string) bool {
	return k.add(knownValue{rule: ruleID, value: value})
}

// AddCredential learns the real value of the brokered credential name.
func (k *Known) AddCredential(name, value string) bool {
	return k.add(knownValue{rule: RuleBrokered, cred: name, value: value})
}

func (k *Known) add(v knownValue) bool {
	if len(v.value) < MinPlainLen || len(v.value) > MaxKnownLen {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if i, ok := k.byVal[v.value]; ok {
		if v.cred == "" || k.vals[i].cred != "" {
			return false
		}
		k.vals[i] = knownValue{rule: v.rule, cred: v.cred, value: k.vals[i].value} // a brokered credential outranks a finding
	} else {
		v.value = strings.Clone(v.value) // not a window into a request's bytes
		k.vals = append(k.vals, v)
		if len(k.vals) > k.limit {
			k.evict(func(knownValue) bool { return true })
		}
		if len(v.value) < MinKnownLen && k.shorts() > maxShort {
			k.evict(func(kv knownValue) bool { return len(kv.value) < MinKnownLen })
		}
		k.byVal = make(map[string]int, len(k.vals))
		for i, kv := range k.vals {
			k.byVal[kv.value] = i
		}
	}
	k.snap.Store(buildKnownIndex(slices.Clone(k.vals))) // its own: k.vals changes in place
	return true
}

// evict forgets the oldest learned value that which accepts.
func (k *Known) evict(which func(knownValue) bool) {
	for i, v := range k.vals {
		if v.cred == "" && which(v) {
			k.vals = append(k.vals[:i], k.vals[i+1:]...)
			return
		}
	}
}

// shorts is how many values are shorter than MinKnownLen.
func (k *Known) shorts() int {
	n := 0
	for _, v := range k.vals {
		if len(v.value) < MinKnownLen {
			n++
		}
	}
	return n
}

// Find returns the occurrences of known values and their encodings in
// text, sorted by Start, each once (where two overlap, both are kept).
// With an empty set, or a text too short to hold any, it costs nothing.
func (k *Known) Find(text string) []KnownMatch {
	if k == nil {
		return nil
	}
	ix := k.snap.Load()
	if ix == nil || len(text) < min(ix.minLen, ix.shortMin) {
		return nil
	}
	ms := ix.find(text, "", nil, nil)
	if strings.IndexByte(text, '%') >= 0 {
		if d, m, ok := percentDecode(text); ok {
			ms = ix.find(d, "+url", m.orig, ms)
			if strings.IndexByte(d, '\\') >= 0 {
				if d2, m2, ok := jsonDecode(d); ok {
					ms = ix.find(d2, "+url+json", func(p int) int { return m.orig(m2.orig(p)) }, ms)
				}
			}
		}
	}
	if strings.IndexByte(text, '\\') >= 0 {
		if d, m, ok := jsonDecode(text); ok {
			ms = ix.find(d, "+json", m.orig, ms)
		}
	}
	if len(ms) > 1 {
		sort.SliceStable(ms, func(i, j int) bool { return ms[i].Start < ms[j].Start })
		ms = dedupeMatches(ms)
	}
	return ms
}

// FindBytes is Find for a byte slice; it keeps no reference to b.
func (k *Known) FindBytes(b []byte) []KnownMatch {
	if len(b) == 0 {
		return nil
	}
	return k.Find(unsafe.String(&b[0], len(b)))
}

func dedupeMatches(ms []KnownMatch) []KnownMatch {
	out := ms[:1]
	for _, m := range ms[1:] {
		last := out[len(out)-1]
		if m.Start == last.Start && m.End == last.End && m.value == last.value {
			continue
		}
		out = append(out, m)
	}
	return out
}

// knownIndex finds patterns (a value's encodings) in a text by probing it
// every stride bytes with the 8 bytes there: any pattern at least
// stride+7 long covers one probe, at an offset below stride, and the
// index holds each pattern's 8 bytes at each such offset. A bit set of
// their hashes turns most probes away before the map is consulted.
type knownIndex struct {
	vals     []knownValue
	short    []int32 // values shorter than MinKnownLen: found plain, by strings.Index
	pats     []knownPattern
	grams    map[uint64][]gramRef
	filter   []uint64
	shift    uint // 64 - the filter's bits, for the hash
	stride   int
	minLen   int // of pats
	shortMin int // of short
}

type knownPattern struct {
	text string
	val  int32 // index in vals
	enc  string
}

type gramRef struct {
	pat int32
	off int32 // where the probe falls in the pattern
}

const gramLen = 8

func buildKnownIndex(vals []knownValue) *knownIndex {
	ix := &knownIndex{vals: vals, grams: map[uint64][]gramRef{}, minLen: 1 << 30, shortMin: 1 << 30}
	seen := map[string]bool{}
	add := func(text string, val int, enc string) {
		if len(text) < MinKnownLen || seen[text] {
			return
		}
		seen[text] = true
		ix.pats = append(ix.pats, knownPattern{text: text, val: int32(val), enc: enc})
		ix.minLen = min(ix.minLen, len(text))
	}
	for i, v := range vals {
		if len(v.value) < MinKnownLen {
			ix.short = append(ix.short, int32(i))
			ix.shortMin = min(ix.shortMin, len(v.value))
			continue
		}
		b := []byte(v.value)
		add(v.value, i, EncPlain)
		h := hex.EncodeToString(b)
		add(h, i, EncHex)
		add(strings.ToUpper(h), i, EncHex)
		for k := range 3 {
			n := (len(b) - k) / 3 * 3
			if n <= 0 {
				continue
			}
			add(base64.RawStdEncoding.EncodeToString(b[k:k+n]), i, EncBase64)
			add(base64.RawURLEncoding.EncodeToString(b[k:k+n]), i, EncBase64URL)
		}
	}
	ix.stride = max(1, ix.minLen-gramLen+1)
	n := 0
	for pi, p := range ix.pats {
		for off := 0; off < ix.stride && off+gramLen <= len(p.text); off++ {
			g := load64(p.text, off)
			ix.grams[g] = append(ix.grams[g], gramRef{pat: int32(pi), off: int32(off)})
			n++
		}
	}
	// About 32 bits for each gram: a probe that matches none passes the
	// filter about once in 30 times.
	b := max(12, bits.Len(uint(n*32)))
	ix.filter = make([]uint64, 1<<(b-6))
	ix.shift = uint(64 - b)
	for g := range ix.grams {
		h := ix.hash(g)
		ix.filter[h>>6] |= 1 << (h & 63)
	}
	return ix
}

// load64 is the 8 bytes of s at i, little-endian (one load, compiled).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func (ix *knownIndex) hash(g uint64) uint64 { return (g * 0x9E3779B97F4A7C15) >> ix.shift }

// find appends the matches in text to ms; a text decoded from the one
// searched has its positions mapped back by orig (nil: none).
func (ix *knownIndex) find(text, how string, orig func(int) int, ms []KnownMatch) []KnownMatch {
	for _, vi := range ix.short {
		v := &ix.vals[vi]
		for i := 0; ; {
			j := strings.Index(text[i:], v.value)
			if j < 0 {
				break
			}
			km := KnownMatch{RuleID: v.rule, Credential: v.cred, Encoding: EncPlain + how, Start: i + j, End: i + j + len(v.value), value: v.value}
			if orig != nil {
				km.Start, km.End = orig(km.Start), orig(km.End)
			}
			ms = append(ms, km)
			i += j + len(v.value)
		}
	}
	if len(text) < ix.minLen {
		return ms
	}
	for i := 0; i+gramLen <= len(text); i += ix.stride {
		g := load64(text, i)
		h := ix.hash(g)
		if ix.filter[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		for _, ref := range ix.grams[g] {
			p := &ix.pats[ref.pat]
			start := i - int(ref.off)
			if start < 0 || start+len(p.text) > len(text) || text[start:start+len(p.text)] != p.text {
				continue
			}
			v := &ix.vals[p.val]
			km := KnownMatch{RuleID: v.rule, Credential: v.cred, Encoding: p.enc + how, Start: start, End: start + len(p.text), value: v.value}
			if orig != nil {
				km.Start, km.End = orig(km.Start), orig(km.End)
			}
			ms = append(ms, km)
		}
	}
	return ms
}

// posMap maps positions in a decoded text back to the text it was decoded
// from: pairs (decoded, original) at each escape's start and end, in
// order; between them the two advance together.
type posMap []int

func (m posMap) orig(d int) int {
	n := len(m) / 2
	i := sort.Search(n, func(i int) bool { return m[2*i] > d }) - 1
	if i < 0 {
		return d
	}
	return m[2*i+1] + d - m[2*i]
}

// percentDecode decodes every %XX of s (a '+' stays a '+'); ok is false
// when there is none.
func percentDecode(s string) (string, posMap, bool) {
	var b []byte
	var m posMap
	last := 0
	for i := 0; i+2 < len(s); i++ {
		if s[i] != '%' || !isHexDigit(s[i+1]) || !isHexDigit(s[i+2]) {
			continue
		}
		if b == nil {
			b = make([]byte, 0, len(s))
		}
		b = append(b, s[last:i]...)
		m = append(m, len(b), i)
		b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
		i += 2
		last = i + 1
		m = append(m, len(b), last)
	}
	if b == nil {
		return "", nil, false
	}
	b = append(b, s[last:]...)
	return string(b), m, true
}

// jsonDecode resolves the escapes of a JSON string's inside (\uXXXX, a
// surrogate pair as one rune, \/ \" \\ \n …); ok is false when there is
// none. A backslash before anything else is kept.
func jsonDecode(s string) (string, posMap, bool) {
	var b []byte
	var m posMap
	last := 0
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		var out []byte
		n := 2
		switch c := s[i+1]; c {
		case '"', '\\', '/':
			out = []byte{c}
		case 'b':
			out = []byte{'\b'}
		case 'f':
			out = []byte{'\f'}
		case 'n':
			out = []byte{'\n'}
		case 'r':
			out = []byte{'\r'}
		case 't':
			out = []byte{'\t'}
		case 'u':
			r, ok := hexRune(s[i+2:])
			if !ok {
				continue
			}
			n = 6
			if utf16.IsSurrogate(r) {
				if r2, ok := hexRune(s[min(len(s), i+8):]); ok && i+7 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r, n = d, 12
					}
				}
			}
			out = utf8.AppendRune(nil, r)
		default:
			continue
		}
		if b == nil {
			b = make([]byte, 0, len(s))
		}
		b = append(b, s[last:i]...)
		m = append(m, len(b), i)
		b = append(b, out...)
		last = i + n
		m = append(m, len(b), last)
		i = last - 1
	}
	if b == nil {
		return "", nil, false
	}
	b = append(b, s[last:]...)
	return string(b), m, true
}

func hexRune(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for i := range 4 {
		if !isHexDigit(s[i]) {
			return 0, false
		}
		r = r<<4 | rune(unhex(s[i]))
	}
	return r, true
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
