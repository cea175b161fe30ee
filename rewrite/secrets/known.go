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
// concurrent use: a search reads an immutable snapshot, which each change
// replaces. It never logs or returns a value.
//
// Adding a value costs little however many the set holds: the values'
// encodings are indexed in two parts, a large one and a small one of the
// values learned since the large one was built, searched together in one
// pass; a new value rebuilds the small one only, which is merged into the
// large one when it grows past a sixteenth of it (or minSmall values).
type Known struct {
	limit int

	mu    sync.Mutex
	vals  []*knownEntry          // oldest first
	byVal map[string]*knownEntry // value -> its entry in vals
	big   []*knownEntry          // the long values bigIx indexes (some may be gone since)
	small []*knownEntry          // the long values learned since, which the snapshot's small index holds
	gone  int                    // entries of big gone since it was built
	bigIx *knownIndex
	snap  atomic.Pointer[knownSnap]
}

// knownEntry is one value of a Known set. Only gone changes once the entry
// is made: set when the value is forgotten (or taken over by a brokered
// credential's entry), after which an index that still holds it skips it.
type knownEntry struct {
	rule, cred, value string
	pats              []knownPattern // its encodings, for a value at least MinKnownLen long
	gone              atomic.Bool
}

// knownSnap is what a search reads: immutable, but for its entries' gone.
type knownSnap struct {
	n          int           // values in the set
	short      []*knownEntry // values shorter than MinKnownLen: found plain, by strings.Index
	shortMin   int           // of short
	big, small *knownIndex   // nil: none
	minLen     int           // the shortest pattern of big and small
	stride     int           // the smaller of their strides: a probe of both
}

// minSmall is the size the small index may reach whatever the large one's.
const minSmall = 4

// NewKnown returns an empty set that holds at most limit values.
func NewKnown(limit int) *Known {
	return &Known{limit: max(limit, 1), byVal: map[string]*knownEntry{}}
}

// Len is how many values the set holds.
func (k *Known) Len() int {
	if s := k.snap.Load(); s != nil {
		return s.n
	}
	return 0
}

// Add learns value, found by rule ruleID. It reports whether the set
// changed (false for a value it has, or one too short or too long).
func (k *Known) Add(ruleID, value string) bool {
	return k.add(&knownEntry{rule: ruleID, value: value})
}

// AddCredential learns the real value of the brokered credential name.
func (k *Known) AddCredential(name, value string) bool {
	return k.add(&knownEntry{rule: RuleBrokered, cred: name, value: value})
}

func (k *Known) add(v *knownEntry) bool {
	if len(v.value) < MinPlainLen || len(v.value) > MaxKnownLen {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*knownEntry // entries no longer in the set
	if e, ok := k.byVal[v.value]; ok {
		if v.cred == "" || e.cred != "" {
			return false
		}
		// A brokered credential outranks a finding: its entry takes the
		// finding's place, and age.
		v.value = e.value
		k.vals[slices.Index(k.vals, e)] = v
		k.byVal[v.value] = v
		out = append(out, e)
	} else {
		v.value = strings.Clone(v.value) // not a window into a request's bytes
		k.vals = append(k.vals, v)
		k.byVal[v.value] = v
	}
	if len(v.value) >= MinKnownLen {
		v.pats = encodings(v.value)
		k.small = append(k.small, v)
	}
	if len(out) == 0 {
		if len(k.vals) > k.limit {
			out = k.evict(out, func(*knownEntry) bool { return true })
		}
		if len(v.value) < MinKnownLen && k.shorts() > maxShort {
			out = k.evict(out, func(e *knownEntry) bool { return len(e.value) < MinKnownLen })
		}
	}
	for _, e := range out {
		if i := slices.Index(k.small, e); i >= 0 {
			k.small = slices.Delete(k.small, i, i+1)
		} else if len(e.value) >= MinKnownLen {
			k.gone++
		}
	}
	if len(k.small) > max(minSmall, len(k.big)/16) || k.gone > len(k.big)/4 {
		k.big = k.big[:0:0]
		for _, e := range k.vals {
			if len(e.value) >= MinKnownLen {
				k.big = append(k.big, e)
			}
		}
		k.small, k.gone = nil, 0
		k.bigIx = buildKnownIndex(k.big)
	}
	s := &knownSnap{n: len(k.vals), shortMin: 1 << 30, big: k.bigIx, small: buildKnownIndex(k.small)}
	for _, e := range k.vals {
		if len(e.value) < MinKnownLen {
			s.short = append(s.short, e)
			s.shortMin = min(s.shortMin, len(e.value))
		}
	}
	if s.big == nil {
		s.big, s.small = s.small, nil
	}
	s.minLen, s.stride = 1<<30, 1
	if s.big != nil {
		s.minLen, s.stride = s.big.minLen, s.big.stride
	}
	if s.small != nil {
		s.minLen, s.stride = min(s.minLen, s.small.minLen), min(s.stride, s.small.stride)
	}
	k.snap.Store(s)
	for _, e := range out {
		e.gone.Store(true) // after the store: a value taken over is never missing
	}
	return true
}

// evict appends to out the oldest learned value that which accepts, and
// forgets it.
func (k *Known) evict(out []*knownEntry, which func(*knownEntry) bool) []*knownEntry {
	for i, e := range k.vals {
		if e.cred == "" && which(e) {
			k.vals = slices.Delete(k.vals, i, i+1)
			delete(k.byVal, e.value)
			return append(out, e)
		}
	}
	return out
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
	sn := k.snap.Load()
	if sn == nil || len(text) < min(sn.minLen, sn.shortMin) {
		return nil
	}
	ms := sn.find(text, "", nil, nil)
	if strings.IndexByte(text, '%') >= 0 {
		if d, m, ok := percentDecode(text); ok {
			ms = sn.find(d, "+url", m.orig, ms)
			if strings.IndexByte(d, '\\') >= 0 {
				if d2, m2, ok := jsonDecode(d); ok {
					ms = sn.find(d2, "+url+json", func(p int) int { return m.orig(m2.orig(p)) }, ms)
				}
			}
		}
	}
	if strings.IndexByte(text, '\\') >= 0 {
		if d, m, ok := jsonDecode(text); ok {
			ms = sn.find(d, "+json", m.orig, ms)
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
	vals   []*knownEntry
	pats   []knownPattern
	keys   []uint64 // grams, open-addressed by tableSlot
	heads  []int32  // by slot: 1 + the index of the gram's first ref; 0: an empty slot
	tshift uint     // 64 - the table's bits
	refs   []gramRef
	filter []uint64
	shift  uint // 64 - the filter's bits, for the hash
	stride int
	minLen int // of pats
}

type knownPattern struct {
	text string
	val  int32 // index in vals
	enc  string
}

type gramRef struct {
	pat  int32
	off  int32 // where the probe falls in the pattern
	next int32 // the gram's next ref; -1: none
}

const gramLen = 8

// encodings returns the texts a value of at least MinKnownLen bytes is
// found as, each once, with their encodings: made once for each value,
// and indexed at each rebuild.
func encodings(v string) []knownPattern {
	var out []knownPattern
	add := func(text, enc string) {
		if len(text) < MinKnownLen {
			return
		}
		for _, p := range out {
			if p.text == text {
				return
			}
		}
		out = append(out, knownPattern{text: text, enc: enc})
	}
	b := []byte(v)
	add(v, EncPlain)
	h := hex.EncodeToString(b)
	add(h, EncHex)
	add(strings.ToUpper(h), EncHex)
	for k := range 3 {
		n := (len(b) - k) / 3 * 3
		if n <= 0 {
			continue
		}
		add(base64.RawStdEncoding.EncodeToString(b[k:k+n]), EncBase64)
		add(base64.RawURLEncoding.EncodeToString(b[k:k+n]), EncBase64URL)
	}
	return out
}

// buildKnownIndex indexes the encodings of vals, values at least
// MinKnownLen long; nil when there are none.
func buildKnownIndex(vals []*knownEntry) *knownIndex {
	if len(vals) == 0 {
		return nil
	}
	ix := &knownIndex{vals: slices.Clone(vals), minLen: 1 << 30}
	seen := make(map[string]bool, 9*len(vals))
	for i, v := range ix.vals {
		for _, p := range v.pats {
			if seen[p.text] {
				continue // another value's encoding: the first keeps it
			}
			seen[p.text] = true
			ix.pats = append(ix.pats, knownPattern{text: p.text, val: int32(i), enc: p.enc})
			ix.minLen = min(ix.minLen, len(p.text))
		}
	}
	ix.stride = max(1, ix.minLen-gramLen+1)
	n := 0
	for _, p := range ix.pats {
		n += min(ix.stride, len(p.text)-gramLen+1)
	}
	// About 32 bits for each gram: a probe that matches none passes the
	// filter about once in 30 times.
	b := max(12, bits.Len(uint(n*32)))
	ix.filter = make([]uint64, 1<<(b-6))
	ix.shift = uint(64 - b)
	tb := max(4, bits.Len(uint(2*n))) // at most half full
	ix.keys, ix.heads, ix.tshift = make([]uint64, 1<<tb), make([]int32, 1<<tb), uint(64-tb)
	ix.refs = make([]gramRef, 0, n)
	// Backwards, each put first: a gram's refs go in the patterns' order.
	for pi := len(ix.pats) - 1; pi >= 0; pi-- {
		p := ix.pats[pi]
		for off := min(ix.stride, len(p.text)-gramLen+1) - 1; off >= 0; off-- {
			g := load64(p.text, off)
			i := ix.slot(g)
			if ix.heads[i] == 0 {
				ix.keys[i] = g
				h := ix.hash(g)
				ix.filter[h>>6] |= 1 << (h & 63)
			}
			ix.refs = append(ix.refs, gramRef{pat: int32(pi), off: int32(off), next: ix.heads[i] - 1})
			ix.heads[i] = int32(len(ix.refs))
		}
	}
	return ix
}

// slot is where gram g is in the table, or the empty slot where it would
// go.
func (ix *knownIndex) slot(g uint64) uint64 {
	mask := uint64(len(ix.keys) - 1)
	for i := (g * 0xD6E8FEB86659FD93) >> ix.tshift; ; i = (i + 1) & mask {
		if ix.heads[i] == 0 || ix.keys[i] == g {
			return i
		}
	}
}

// load64 is the 8 bytes of s at i, little-endian (one load, compiled).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func (ix *knownIndex) hash(g uint64) uint64 { return (g * hashMul) >> ix.shift }

// hashMul is the filter's multiplicative hash.
const hashMul = 0x9E3779B97F4A7C15

// find appends the matches in text to ms; a text decoded from the one
// searched has its positions mapped back by orig (nil: none).
func (s *knownSnap) find(text, how string, orig func(int) int, ms []KnownMatch) []KnownMatch {
	for _, v := range s.short {
		for i := 0; ; {
			j := strings.Index(text[i:], v.value)
			if j < 0 {
				break
			}
			if !v.gone.Load() {
				ms = append(ms, v.match(EncPlain+how, i+j, i+j+len(v.value), orig))
			}
			i += j + len(v.value)
		}
	}
	if len(text) < s.minLen {
		return ms
	}
	// One pass probes both indexes, every stride bytes: each holds its
	// patterns' grams at every offset below its own stride, at least s's.
	a, b, stride := s.big, s.small, s.stride
	fa, sa := a.filter, a.shift
	if b == nil {
		for i := 0; i+gramLen <= len(text); i += stride {
			g := load64(text, i)
			if h := (g * hashMul) >> sa; fa[h>>6]&(1<<(h&63)) != 0 {
				ms = a.match(text, i, g, stride, how, orig, ms)
			}
		}
		return ms
	}
	fb, sb := b.filter, b.shift
	for i := 0; i+gramLen <= len(text); i += stride {
		g := load64(text, i)
		if h := (g * hashMul) >> sa; fa[h>>6]&(1<<(h&63)) != 0 {
			ms = a.match(text, i, g, stride, how, orig, ms)
		}
		if h := (g * hashMul) >> sb; fb[h>>6]&(1<<(h&63)) != 0 {
			ms = b.match(text, i, g, stride, how, orig, ms)
		}
	}
	return ms
}

// match appends the patterns that the probe g at text[i:] is a gram of,
// at an offset below stride (at another, another probe finds them).
func (ix *knownIndex) match(text string, i int, g uint64, stride int, how string, orig func(int) int, ms []KnownMatch) []KnownMatch {
	for j := ix.heads[ix.slot(g)] - 1; j >= 0; j = ix.refs[j].next {
		ref := &ix.refs[j]
		if int(ref.off) >= stride {
			continue
		}
		p := &ix.pats[ref.pat]
		start := i - int(ref.off)
		if start < 0 || start+len(p.text) > len(text) || text[start:start+len(p.text)] != p.text {
			continue
		}
		if v := ix.vals[p.val]; !v.gone.Load() {
			ms = append(ms, v.match(p.enc+how, start, start+len(p.text), orig))
		}
	}
	return ms
}

// match is a KnownMatch of e at [start, end) of a text, mapped back by
// orig (nil: none).
func (e *knownEntry) match(enc string, start, end int, orig func(int) int) KnownMatch {
	if orig != nil {
		start, end = orig(start), orig(end)
	}
	return KnownMatch{RuleID: e.rule, Credential: e.cred, Encoding: enc, Start: start, End: end, value: e.value}
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
