package secrets

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// Finding is one secret found in a scanned text.
type Finding struct {
	RuleID     string // e.g. "aws-access-token", "github-pat", "private-key", "database-url", "env-secret"
	Start, End int    // byte offsets of the secret itself (the capture group, not the surrounding match)
}

// Options adjusts a Scanner.
type Options struct {
	AllowRules    []string // rule ids never reported
	AllowLiterals []string // exact secret values never reported (e.g. documented example keys)
}

// Scanner finds secrets in text. It is built once and safe for concurrent use.
type Scanner struct {
	rules    []*rule
	ids      []string // sorted, unique
	ac       *automaton
	kwRules  [][]int32 // keyword index -> rules
	always   []int32   // rules without keywords
	global   []allowlist
	literals map[string]struct{}
	states   sync.Pool // *scanState
}

// NewScanner loads gitleaks' default rules and ours.
func NewScanner(o Options) (*Scanner, error) {
	own, err := ownRules()
	if err != nil {
		return nil, fmt.Errorf("secrets: own rules: %w", err)
	}
	replaced := map[string]bool{}
	for _, r := range own {
		replaced[r.id] = true
	}
	// basic-auth finds curl's -u password alone; gitleaks' curl-auth-user
	// takes "user:password" whole, and the password, quoted bare later,
	// would not be known.
	replaced["curl-auth-user"] = true
	cfg, err := loadGitleaks()
	if err != nil {
		return nil, err
	}
	rules, global, err := fromGitleaks(cfg, replaced)
	if err != nil {
		return nil, err
	}
	return newScanner(o, append(rules, own...), global)
}

func newScanner(o Options, rules []*rule, global []allowlist) (*Scanner, error) {
	known := map[string]bool{}
	for _, r := range rules {
		known[r.id] = true
	}
	drop := map[string]bool{}
	for _, id := range o.AllowRules {
		if !known[id] {
			return nil, fmt.Errorf("secrets: allow unknown rule %q", id)
		}
		drop[id] = true
	}
	s := &Scanner{global: global, literals: map[string]struct{}{}}
	for _, l := range append(publicValues(), o.AllowLiterals...) {
		s.literals[l] = struct{}{}
	}
	kwIndex := map[string]int{}
	var kws []string
	for _, r := range rules {
		if drop[r.id] {
			continue
		}
		if err := r.plan(); err != nil {
			return nil, err
		}
		ri := int32(len(s.rules))
		s.rules = append(s.rules, r)
		if len(r.keywords) == 0 {
			s.always = append(s.always, ri)
			continue
		}
		for _, k := range r.keywords {
			k = strings.ToLower(k)
			i, ok := kwIndex[k]
			if !ok {
				i = len(kws)
				kwIndex[k] = i
				kws = append(kws, k)
				s.kwRules = append(s.kwRules, nil)
			}
			if !slices.Contains(s.kwRules[i], ri) {
				s.kwRules[i] = append(s.kwRules[i], ri)
			}
		}
	}
	s.ac = newAutomaton(kws)
	for _, r := range s.rules {
		s.ids = append(s.ids, r.id)
	}
	slices.Sort(s.ids)
	s.ids = slices.Compact(s.ids)
	n := len(s.rules)
	s.states.New = func() any {
		return &scanState{open: make([]span, n), next: make([]int, n), tried: make([]int, n), epoch: make([]uint32, n)}
	}
	return s, nil
}

// Rules returns the id of every rule the scanner reports, sorted.
func (s *Scanner) Rules() []string { return slices.Clone(s.ids) }

// Scan returns the secrets in b, sorted by Start and non-overlapping: of two
// overlapping candidates the longer one wins, then the more specific rule.
func (s *Scanner) Scan(b []byte) []Finding {
	if len(b) == 0 {
		return nil
	}
	// The scan only reads b and keeps no reference to it.
	return s.scan(unsafe.String(&b[0], len(b)))
}

// ScanString is Scan for a string.
func (s *Scanner) ScanString(v string) []Finding { return s.scan(v) }

type span struct{ start, end int }

type candidate struct {
	rule       int32
	start, end int
	match      int // length of the whole regex match: a tighter one is more specific
}

// scanState is the per-scan scratch space, pooled so that a scan that finds
// nothing allocates nothing. A rule's entries are valid only when its epoch
// is the scan's: a scan sets up only the rules its text wakes, so its cost
// does not grow with the number of rules.
type scanState struct {
	open    []span // per rule: the window waiting to be searched; end < 0 = none
	next    []int  // per rule: where its next match may start (matches do not overlap)
	tried   []int  // per rule: where its anchored regex was last tried
	epoch   []uint32
	gen     uint32
	touched []int32 // the rules set up in this scan
	cands   []candidate
	loc     [4]int // a matcher's result
}

// begin starts a scan.
func (st *scanState) begin() {
	st.gen++
	if st.gen == 0 { // wrapped: no stale epoch may pass for the new one
		clear(st.epoch)
		st.gen = 1
	}
	st.touched = st.touched[:0]
	st.cands = st.cands[:0]
}

// use sets up rule ri's entries the first time a scan needs them.
func (st *scanState) use(ri int32) {
	if st.epoch[ri] == st.gen {
		return
	}
	st.epoch[ri] = st.gen
	st.open[ri] = span{-1, -1}
	st.next[ri] = 0
	st.tried[ri] = -1
	st.touched = append(st.touched, ri)
}

func (s *Scanner) scan(text string) []Finding {
	var ps []span
	if strings.Contains(text, PlaceholderPrefix) {
		if ps = placeholders(text); ps != nil {
			text = masked(text, ps)
		}
	}
	fs := s.scanText(text, ps)
	if fs == nil {
		if f, ok := s.decodedSecret(text); ok {
			return []Finding{f}
		}
	}
	return fs
}

// scanText runs the rules on text; a candidate that overlaps one of
// skip (sorted) is no secret.
func (s *Scanner) scanText(text string, skip []span) []Finding {
	if text == "" {
		return nil
	}
	// One pass of the keyword automaton drives every rule that has
	// keywords. Most texts (a header's value, a clean prompt) have none:
	// they cost that pass and nothing else.
	pos, q, ok := s.ac.find(text, 0, 0)
	if !ok && len(s.always) == 0 {
		return nil
	}
	st := s.states.Get().(*scanState)
	defer s.states.Put(st)
	st.begin()
	for ok {
		for _, k := range s.ac.outputs(q) {
			start := pos - s.ac.lens[k]
			for _, ri := range s.kwRules[k] {
				s.hit(st, text, ri, start, pos)
			}
		}
		pos, q, ok = s.ac.find(text, pos, q)
	}
	for _, ri := range st.touched {
		if w := st.open[ri]; w.end >= 0 {
			s.search(st, text, ri, w.start, w.end)
		}
	}
	for _, ri := range s.always {
		st.use(ri)
		s.search(st, text, ri, 0, len(text))
	}
	if skip != nil {
		st.cands = slices.DeleteFunc(st.cands, func(c candidate) bool { return overlaps(skip, c.start, c.end) })
	}
	if len(st.cands) == 0 {
		return nil
	}
	return resolve(s.rules, st.cands)
}

// hit handles one occurrence [start, end) of one of rule ri's keywords.
func (s *Scanner) hit(st *scanState, text string, ri int32, start, end int) {
	st.use(ri)
	r := s.rules[ri]
	if r.match != nil {
		if start < st.next[ri] {
			return // inside this rule's last match
		}
		if r.match(text, start, end, &st.loc) {
			st.next[ri] = st.loc[1]
			s.candidate(st, text, ri, st.loc[:])
		}
		return
	}
	if r.matchNext != nil {
		if start < st.next[ri] {
			return
		}
		for from, n := end, 0; n < 1024 && r.matchNext(text, start, end, from, &st.loc); n++ {
			st.next[ri] = st.loc[1]
			from = st.loc[1]
			s.candidate(st, text, ri, st.loc[:])
		}
		return
	}
	if r.opWithin > 0 && (!hasOperator(text[end:min(len(text), end+r.opWithin)]) || r.secretSet != nil && !r.secretAfter(text, end)) {
		return
	}
	if r.anchor != nil {
		var ok bool
		if start, ok = r.anchor(text, start, end); !ok {
			return
		}
	}
	if r.anchored != nil {
		for lo := max(0, start-r.backscan); start > lo && isWordByte(text[start-1]); {
			start--
		}
		if start == st.tried[ri] {
			return
		}
		st.tried[ri] = start
		s.anchoredAt(st, text, ri, start)
		return
	}
	ws, we := start-r.pre, end+r.post
	if r.window != nil {
		var ok bool
		if ws, we, ok = r.window(text, start, end); !ok {
			return
		}
	}
	ws, we = max(ws, 0), min(we, len(text))
	o := &st.open[ri]
	if o.end >= 0 && ws <= o.end {
		o.start, o.end = min(o.start, ws), max(o.end, we)
		return
	}
	if o.end >= 0 {
		s.search(st, text, ri, o.start, o.end)
	}
	*o = span{ws, we}
}

func hasOperator(s string) bool {
	for i := 0; i < len(s); i++ {
		if isOperator(s[i]) {
			return true
		}
	}
	return false
}

func isWordByte(c byte) bool { return isAlnum(c) || c == '_' || c == '.' || c == '-' }

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// anchoredAt tries rule ri's anchored regex at a keyword starting at start.
func (s *Scanner) anchoredAt(st *scanState, text string, ri int32, start int) {
	if start < st.next[ri] {
		return
	}
	r := s.rules[ri]
	re, base := r.anchored, start-1
	if start == 0 {
		re, base = r.anchored0, 0
	}
	limit := min(len(text), start+r.maxLen+fwdContext)
	loc := re.FindStringSubmatchIndex(text[base:limit])
	if loc != nil && base+loc[1] == limit && limit < len(text) {
		// The match may go on past the limit: look again without one.
		loc = re.FindStringSubmatchIndex(text[base:])
	}
	if loc == nil {
		return
	}
	for i := range loc {
		if loc[i] >= 0 {
			loc[i] += base
		}
	}
	loc[0] = start
	st.next[ri] = loc[1]
	s.candidate(st, text, ri, loc)
}

// search runs rule ri's regex on the window [ws, we), widened to separators
// so that \b, ^ and $ see what they would in the whole text.
func (s *Scanner) search(st *scanState, text string, ri int32, ws, we int) {
	r := s.rules[ri]
	for i := 0; !r.exact && ws > 0 && ws < len(text) && i < backContext && !isSpace(text[ws]); i++ {
		ws--
	}
	for i := 0; !r.exact && we > 0 && we < len(text) && i < fwdContext && !isSpace(text[we-1]); i++ {
		we++
	}
	ms := r.re.FindAllStringSubmatchIndex(text[ws:we], -1)
	if n := len(ms); n > 0 && ws+ms[n-1][1] == we && we < len(text) && !r.exact {
		// The last match touches the window's end: it may go on.
		nl := strings.IndexByte(text[we:min(len(text), we+65536)], '\n')
		if nl < 0 {
			we = min(len(text), we+65536)
		} else {
			we += nl + 1
		}
		ms = r.re.FindAllStringSubmatchIndex(text[ws:we], -1)
	}
	for _, loc := range ms {
		for i := range loc {
			if loc[i] >= 0 {
				loc[i] += ws
			}
		}
		if loc[0] < st.next[ri] {
			continue
		}
		st.next[ri] = loc[1]
		s.candidate(st, text, ri, loc)
	}
}

// candidate applies a rule's checks to one regex match and records it.
func (s *Scanner) candidate(st *scanState, text string, ri int32, loc []int) {
	r := s.rules[ri]
	ss, se := -1, -1
	switch {
	case r.group > 0:
		if 2*r.group+1 < len(loc) {
			ss, se = loc[2*r.group], loc[2*r.group+1]
		}
	default:
		for g := 1; 2*g+1 < len(loc); g++ {
			if loc[2*g] >= 0 && loc[2*g+1] > loc[2*g] {
				ss, se = loc[2*g], loc[2*g+1]
				break
			}
		}
		if ss < 0 {
			ss, se = loc[0], loc[1]
			for ss < se && text[ss] == '\n' {
				ss++
			}
			for se > ss && text[se-1] == '\n' {
				se--
			}
		}
	}
	if ss < 0 || ss >= se {
		return
	}
	if ss > 0 && se < len(text) && (isAlnum(text[ss-1]) || text[ss-1] == '-' || text[ss-1] == '_' || text[ss-1] == '+') && isAlnum(text[se]) {
		// Inside a longer run of base64: a piece of a blob (a model's
		// encrypted reasoning, a signature), not a token, which never
		// comes glued to such text on both sides.
		return
	}
	secret := text[ss:se]
	if r.entropy > 0 && entropy(secret) <= r.entropy {
		return
	}
	if r.valid != nil && !r.valid(text, loc, ss, se) {
		return
	}
	if _, ok := s.literals[secret]; ok {
		return
	}
	match := strings.Trim(text[loc[0]:loc[1]], "\n")
	line := func() string { return lineOf(text, loc[0], loc[1]) }
	for i := range s.global {
		if s.global[i].allowed(secret, match, line) {
			return
		}
	}
	for i := range r.allow {
		if r.allow[i].allowed(secret, match, line) {
			return
		}
	}
	st.cands = append(st.cands, candidate{ri, ss, se, loc[1] - loc[0]})
}

// lineOf returns the lines holding [a, b), at most 4 KiB either side.
func lineOf(text string, a, b int) string {
	ls := strings.LastIndexByte(text[max(0, a-4096):a], '\n')
	if ls < 0 {
		ls = max(0, a-4096)
	} else {
		ls += max(0, a-4096) + 1
	}
	le := strings.IndexByte(text[b:min(len(text), b+4096)], '\n')
	if le < 0 {
		le = min(len(text), b+4096)
	} else {
		le += b
	}
	return text[ls:le]
}

// resolve keeps non-overlapping candidates, longest first, then the most
// specific (by rank, then by the tighter regex match), then the leftmost, and
// returns them sorted by start.
func resolve(rules []*rule, cands []candidate) []Finding {
	slices.SortFunc(cands, func(x, y candidate) int {
		if d := (y.end - y.start) - (x.end - x.start); d != 0 {
			return d
		}
		if d := rules[y.rule].rank - rules[x.rule].rank; d != 0 {
			return d
		}
		if d := x.match - y.match; d != 0 {
			return d
		}
		if d := x.start - y.start; d != 0 {
			return d
		}
		return int(x.rule - y.rule)
	})
	var out []Finding
	for _, c := range cands {
		i := sort.Search(len(out), func(i int) bool { return out[i].Start >= c.start })
		if i > 0 && out[i-1].End > c.start || i < len(out) && out[i].Start < c.end {
			continue
		}
		out = slices.Insert(out, i, Finding{RuleID: rules[c.rule].id, Start: c.start, End: c.end})
	}
	return out
}
