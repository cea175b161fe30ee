package secrets

import (
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
)

// Bounds of the regions a regex runs on.
const (
	// unboundedLen stands for an unbounded repetition when sizing a region: a
	// match that reaches the end of its region is looked for again in a
	// larger one, so this only needs to cover common lengths.
	unboundedLen = 256
	backContext  = 64  // how far a window start may move back to reach a separator
	fwdContext   = 256 // how far a window end may move forward to reach a separator
)

// rank orders rules by specificity, for overlapping findings of equal length.
const (
	rankGeneric  = iota // gitleaks' generic-api-key
	rankEnv             // our .env heuristic
	rankSpecific        // every rule for one kind of credential
)

// rule is one detector, compiled for the scanner's keyword-window engine.
type rule struct {
	id       string
	re       *regexp.Regexp
	group    int     // capture group of the secret; 0: the first non-empty group, else the match
	entropy  float64 // the secret's Shannon entropy must exceed it (0: unchecked)
	keywords []string
	rank     int

	// Anchored rules: every match starts at a keyword. anchored is re as
	// ^(?s:.)(?:re), run from one byte before the keyword so that \b sees
	// its real left neighbour; anchored0 is ^(?:re) for a keyword at 0.
	anchored, anchored0 *regexp.Regexp
	maxLen              int // upper bound of a match's length (unbounded parts count unboundedLen)

	// secretSet and minSecret describe the secret of a keyword-assignment
	// rule: a hit is worth a regex run only if a long enough run of these
	// bytes, ended by a terminator, starts soon after it.
	secretSet *[256]bool
	minSecret int
	maxSecret int

	// backscan > 0: the anchored regex starts up to backscan word bytes
	// ([\w.-]) before the hit.
	backscan int

	// Windowed rules: the regex runs on [hit-pre, hitEnd+post].
	pre, post int
	// opWithin > 0 marks gitleaks' "keyword ... = value" rules: an
	// assignment operator must follow the keyword within opWithin bytes.
	opWithin int

	// Hooks of our own detectors.
	match func(s string, start, end int, loc *[4]int) bool // a matcher run at each hit instead of a regex: loc is the match and the secret
	// matchNext is a matcher of several secrets per hit: called again
	// from the end of the last match until it finds no more.
	matchNext func(s string, start, end, from int, loc *[4]int) bool
	window    func(s string, start, end int) (int, int, bool)        // the region to search for a hit; false drops the hit
	exact     bool                                                   // the window's edges are separators: search it as it is
	anchor    func(s string, start, end int) (int, bool)             // where to run the anchored regex for a hit; false drops it
	valid     func(s string, match []int, secStart, secEnd int) bool // final say on a candidate

	allow []allowlist
}

type allowTarget int

const (
	targetSecret allowTarget = iota
	targetMatch
	targetLine
)

type allowlist struct {
	target allowTarget
	and    bool             // both re and stop must hold
	res    []*regexp.Regexp // kept apart, not joined: each keeps its literal-prefix fast path
	needs  []*automaton     // by regex: one of these words is in every match of it (nil: unknown)
	shapes []textShape      // by regex: what a text it matches looks like
	stop   *automaton       // case-insensitive stopwords, searched in the secret
}

// allowed reports whether the allowlist excuses the candidate; line is
// called only when the list looks at the line.
func (a *allowlist) allowed(secret, match string, line func() string) bool {
	stopOK := a.stop != nil && a.stop.contains(secret)
	if !a.and && stopOK {
		return true
	}
	if a.and && a.stop != nil && !stopOK {
		return false
	}
	if a.res == nil {
		return a.and && stopOK
	}
	t := secret
	switch a.target {
	case targetMatch:
		t = match
	case targetLine:
		t = line()
	}
	for i, re := range a.res {
		if i < len(a.shapes) && !a.shapes[i].fits(t) {
			continue
		}
		if i < len(a.needs) && a.needs[i] != nil && !a.needs[i].contains(t) {
			continue // none of the words every match holds: no match
		}
		if re.MatchString(t) {
			return true
		}
	}
	return false
}

// add adds the regex src to the list. A long alternation (gitleaks'
// generic-api-key excuses dozens of names in one regex) becomes one regex
// per alternative, each run only when the words it needs are there: one
// small regex is fast, and most never run.
func (a *allowlist) add(src string) error {
	tree, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return fmt.Errorf("secrets: allowlist regex: %w", err)
	}
	parts := []*syntax.Regexp{tree}
	if tree.Op == syntax.OpAlternate && len(tree.Sub) > 4 {
		parts = tree.Sub
	}
	for _, p := range parts {
		ps := src
		if len(parts) > 1 {
			ps = p.String()
		}
		re, err := regexp.Compile(ps)
		if err != nil {
			return fmt.Errorf("secrets: allowlist regex: %w", err)
		}
		var need *automaton
		if ws := neededWords(p.Simplify()); ws != nil {
			need = newAutomaton(ws)
		}
		a.res = append(a.res, re)
		a.needs = append(a.needs, need)
		a.shapes = append(a.shapes, shapeOf(p))
	}
	return nil
}

// textShape is what a regex says of the texts it matches, cheaper to
// check than running it: most of gitleaks' allowlist regexes are anchored
// (^\$\{…}$, ^/(?:bin|etc|…)/…), and most candidates start with a byte
// they cannot start with, or hold one they cannot hold.
type textShape struct {
	first *[256]bool // the bytes a matched text can start with (nil: any)
	bytes *[256]bool // the bytes a matched text can hold (nil: any)
}

// fits reports whether re may match t; false only when it cannot.
func (sh textShape) fits(t string) bool {
	if sh.first != nil && (t == "" || !sh.first[t[0]]) {
		return false
	}
	if sh.bytes != nil {
		for i := 0; i < len(t); i++ {
			if !sh.bytes[t[i]] {
				return false
			}
		}
	}
	return true
}

// shapeOf returns re's shape: its first bytes if every match starts at
// the text's start, and its bytes if every match is the whole text.
func shapeOf(re *syntax.Regexp) textShape {
	var sh textShape
	re = re.Simplify()
	if body, ok := anchoredStart(re); ok {
		var set [256]bool
		if firstBytes(body, &set) {
			sh.first = &set
		}
	}
	if anchoredBoth(re) {
		var set [256]bool
		if allBytes(re, &set) {
			sh.bytes = &set
		}
	}
	return sh
}

// anchoredStart returns what follows ^ when re is ^ followed by it
// (a capture of that, or an alternation of such: then re itself).
func anchoredStart(re *syntax.Regexp) (*syntax.Regexp, bool) {
	switch re.Op {
	case syntax.OpCapture:
		return anchoredStart(re.Sub[0])
	case syntax.OpConcat:
		if len(re.Sub) >= 2 && re.Sub[0].Op == syntax.OpBeginText {
			return &syntax.Regexp{Op: syntax.OpConcat, Sub: re.Sub[1:], Flags: re.Flags}, true
		}
	case syntax.OpAlternate:
		alt := &syntax.Regexp{Op: syntax.OpAlternate, Flags: re.Flags}
		for _, sub := range re.Sub {
			b, ok := anchoredStart(sub)
			if !ok {
				return nil, false
			}
			alt.Sub = append(alt.Sub, b)
		}
		return alt, true
	}
	return nil, false
}

// anchoredBoth reports whether every match of re is the whole text: ^…$.
func anchoredBoth(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpCapture:
		return anchoredBoth(re.Sub[0])
	case syntax.OpConcat:
		return len(re.Sub) >= 2 && re.Sub[0].Op == syntax.OpBeginText && re.Sub[len(re.Sub)-1].Op == syntax.OpEndText
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if !anchoredBoth(sub) {
				return false
			}
		}
		return true
	}
	return false
}

// addRunes adds to set the bytes that a rune of [lo, hi] may start with,
// or hold: all of 0x80-0xff for any rune beyond ASCII.
func addRunes(set *[256]bool, lo, hi rune) {
	for c := lo; c <= min(hi, utf8.RuneSelf-1); c++ {
		set[c] = true
	}
	if hi >= utf8.RuneSelf {
		for c := 0x80; c <= 0xff; c++ {
			set[c] = true
		}
	}
}

// literalRunes adds the bytes of a literal's rune r to set: under (?i) an
// ASCII letter's other case, and the bytes of any rune beyond ASCII (K
// folds to the Kelvin sign).
func literalRunes(set *[256]bool, r rune, fold bool) {
	addRunes(set, r, r)
	if fold && ('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
		addRunes(set, r^0x20, r^0x20)
		addRunes(set, utf8.RuneSelf, utf8.RuneSelf)
	}
}

// firstBytes adds to set every byte a match of re can start with; false
// when it cannot tell (re may match empty text, or any byte).
func firstBytes(re *syntax.Regexp, set *[256]bool) bool {
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return false
		}
		literalRunes(set, re.Rune[0], re.Flags&syntax.FoldCase != 0)
		return true
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			addRunes(set, re.Rune[i], re.Rune[i+1])
		}
		return true
	case syntax.OpCapture, syntax.OpPlus:
		return firstBytes(re.Sub[0], set)
	case syntax.OpRepeat:
		return re.Min >= 1 && firstBytes(re.Sub[0], set)
	case syntax.OpConcat:
		return len(re.Sub) > 0 && firstBytes(re.Sub[0], set)
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if !firstBytes(sub, set) {
				return false
			}
		}
		return true
	}
	return false
}

// allBytes adds to set every byte a match of re can hold; false when it
// cannot tell (re matches any byte).
func allBytes(re *syntax.Regexp, set *[256]bool) bool {
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			literalRunes(set, r, re.Flags&syntax.FoldCase != 0)
		}
		return true
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			addRunes(set, re.Rune[i], re.Rune[i+1])
		}
		return true
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return false
	case syntax.OpEmptyMatch, syntax.OpBeginText, syntax.OpEndText, syntax.OpBeginLine, syntax.OpEndLine,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	}
	for _, sub := range re.Sub {
		if !allBytes(sub, set) {
			return false
		}
	}
	return len(re.Sub) > 0
}

// neededWords returns words (lowercase) one of which every match of re
// holds, nil when it cannot tell or a word would be shorter than 2 bytes:
// a pass of their automaton is cheaper than running the regex, most of
// whose candidates do not match.
func neededWords(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) < 2 {
			return nil
		}
		for _, c := range re.Rune {
			if c >= utf8.RuneSelf {
				return nil // the automaton folds ASCII only
			}
		}
		return []string{strings.ToLower(string(re.Rune))}
	case syntax.OpCapture, syntax.OpPlus:
		return neededWords(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min < 1 {
			return nil
		}
		return neededWords(re.Sub[0])
	case syntax.OpConcat:
		// Any part's words will do: the longest shortest word is the
		// cheapest to be wrong about.
		var best []string
		bestLen := 0
		for _, sub := range re.Sub {
			ws := neededWords(sub)
			if ws == nil {
				continue
			}
			short := len(ws[0])
			for _, w := range ws {
				short = min(short, len(w))
			}
			if short > bestLen {
				best, bestLen = ws, short
			}
		}
		return best
	case syntax.OpAlternate:
		var all []string
		for _, sub := range re.Sub {
			ws := neededWords(sub)
			if ws == nil {
				return nil
			}
			all = append(all, ws...)
		}
		return all
	}
	return nil
}

// portAndPath is a URL's port and path after "host:", which the generic
// rule would otherwise take for an API key's value.
var portAndPath = regexp.MustCompile(`^[0-9]{1,5}(/|$)`)

// loadGitleaks parses gitleaks' default configuration. A private viper
// instance keeps the parse off viper's package-level state.
func loadGitleaks() (config.Config, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(config.DefaultConfig)); err != nil {
		return config.Config{}, fmt.Errorf("secrets: read gitleaks config: %w", err)
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return config.Config{}, fmt.Errorf("secrets: decode gitleaks config: %w", err)
	}
	cfg, err := vc.Translate()
	if err != nil {
		return config.Config{}, fmt.Errorf("secrets: translate gitleaks config: %w", err)
	}
	return cfg, nil
}

// convertAllowlists keeps the parts of gitleaks allowlists that apply to
// text without a path or commit. An AND list that needs a path or commit can
// never hold here and is dropped.
func convertAllowlists(in []*config.Allowlist) ([]allowlist, error) {
	var out []allowlist
	for _, a := range in {
		if a == nil {
			continue
		}
		and := a.MatchCondition == config.AllowlistMatchAnd
		if and && (len(a.Paths) > 0 || len(a.Commits) > 0) {
			continue
		}
		if len(a.Regexes) == 0 && len(a.StopWords) == 0 {
			continue
		}
		al := allowlist{and: and}
		switch a.RegexTarget {
		case "match":
			al.target = targetMatch
		case "line":
			al.target = targetLine
		}
		for _, r := range a.Regexes {
			if err := al.add(r.String()); err != nil {
				return nil, err
			}
		}
		if len(a.StopWords) > 0 {
			al.stop = newAutomaton(a.StopWords)
		}
		out = append(out, al)
	}
	return out, nil
}

// fromGitleaks converts gitleaks' rules, skipping path-only rules and those
// replaced by ours (same id).
func fromGitleaks(cfg config.Config, replaced map[string]bool) ([]*rule, []allowlist, error) {
	global, err := convertAllowlists(cfg.Allowlists)
	if err != nil {
		return nil, nil, err
	}
	var rules []*rule
	for _, gr := range cfg.GetOrderedRules() {
		// Path-only rules need a file name, and so do rules scoped to paths:
		// gitleaks never applies those to a bare string either.
		if gr.Regex == nil || gr.Path != nil || gr.SkipReport || replaced[gr.RuleID] {
			continue
		}
		// The stdlib build of gitleaks uses Go's regexp: recompile to own the value.
		src := gr.Regex.String()
		if strings.HasSuffix(src, valueEnd) {
			src = widenValueEnd(src, gr.SecretGroup)
		}
		re, err := regexp.Compile(src)
		if err != nil {
			return nil, nil, fmt.Errorf("secrets: rule %s: %w", gr.RuleID, err)
		}
		al, err := convertAllowlists(gr.Allowlists)
		if err != nil {
			return nil, nil, fmt.Errorf("secrets: rule %s: %w", gr.RuleID, err)
		}
		anchorAllowlist(gr.RuleID, al)
		r := &rule{
			id:       gr.RuleID,
			re:       re,
			group:    gr.SecretGroup,
			entropy:  gr.Entropy,
			keywords: gr.Keywords,
			rank:     rankSpecific,
			allow:    al,
		}
		if strings.Contains(r.id, "generic") {
			r.rank = rankGeneric
			// "api.example.com:8443/v1/x" is a URL, not an assignment: its
			// port and path are not a key.
			r.allow = append(r.allow, allowlist{target: targetSecret, res: []*regexp.Regexp{portAndPath}})
			// A secret-named key's placeholder value is no secret, nor is
			// the value of a key whose name says it is none (nextPageToken).
			r.valid = func(s string, m []int, a, b int) bool {
				k := keyBefore(s, m[0], a)
				return !isPlaceholder(s[a:b]) && !notSecretName(k) && !notSecretWord(k)
			}
		}
		rules = append(rules, r)
	}
	return rules, global, nil
}

// keyBefore returns the last name ([\w.-]+) in s[from:to]: the key of an
// assignment whose value starts at to.
func keyBefore(s string, from, to int) string {
	e := to
	for e > from && !isNameByte(s[e-1]) {
		e--
	}
	b := e
	for b > from && isNameByte(s[b-1]) {
		b--
	}
	return s[b:e]
}

// anchoredAllows are gitleaks allowlist regexes that must hold of a
// whole secret, not of a part of it: vault-service-token's excuses a
// legacy token of letters only (s.…), but unanchored it also excuses the
// hvs. tokens whose first 24 characters after "hvs." are letters (one in
// 140).
func anchoredAllows() map[string]string {
	return map[string]string{"vault-service-token": `s\.[A-Za-z]{24}`}
}

// anchorAllowlist anchors the regexes of rule id's allowlists that
// anchoredAllows names.
func anchorAllowlist(id string, al []allowlist) {
	src, ok := anchoredAllows()[id]
	if !ok {
		return
	}
	for i := range al {
		for j, re := range al[i].res {
			if re.String() == src && al[i].target == targetSecret {
				al[i].res[j] = regexp.MustCompile(`^(?:` + src + `)$`)
			}
		}
	}
}

// plan decides how the engine runs r: anchored at keywords, in windows around
// them, or (no keywords) over the whole input.
func (r *rule) plan() error {
	if r.match != nil || r.matchNext != nil {
		if len(r.keywords) == 0 {
			return fmt.Errorf("secrets: rule %s: a matcher needs keywords", r.id)
		}
		return nil
	}
	tree, err := syntax.Parse(r.re.String(), syntax.Perl)
	if err != nil {
		return fmt.Errorf("secrets: rule %s: %w", r.id, err)
	}
	r.maxLen = maxLen(tree)
	if len(r.keywords) == 0 || r.window != nil {
		return nil
	}
	if r.anchor != nil {
		return r.compileAnchored()
	}
	src := r.re.String()
	if words, backscan := assignmentTemplate(src); words != nil {
		// Every match holds one of the words, followed by an assignment
		// operator within 24 bytes: the words become the keywords, a hit
		// without an operator after it is dropped at once, and the regex
		// runs anchored at the start of the word run holding the hit.
		r.keywords = words
		r.opWithin = 20 + 3 + 1
		r.backscan = backscan
		r.secretShape(src, tree)
		return r.compileAnchored()
	}
	if anchoredAtKeyword(tree, r.keywords) {
		return r.compileAnchored()
	}
	r.pre, r.post = r.maxLen, r.maxLen
	return nil
}

func (r *rule) compileAnchored() error {
	var err error
	src := r.re.String()
	if r.anchored, err = regexp.Compile(`^(?s:.)(?:` + src + `)`); err != nil {
		return fmt.Errorf("secrets: rule %s: %w", r.id, err)
	}
	if r.anchored0, err = regexp.Compile(`^(?:` + src + `)`); err != nil {
		return fmt.Errorf("secrets: rule %s: %w", r.id, err)
	}
	return nil
}

// maxLen bounds the length in bytes of what re matches.
func maxLen(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			n += utf8.RuneLen(r)
		}
		return n
	case syntax.OpCharClass:
		if len(re.Rune) > 0 && re.Rune[len(re.Rune)-1] < utf8.RuneSelf {
			return 1
		}
		return utf8.UTFMax
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return utf8.UTFMax
	case syntax.OpCapture:
		return maxLen(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		return unboundedLen
	case syntax.OpQuest:
		return maxLen(re.Sub[0])
	case syntax.OpRepeat:
		if re.Max < 0 {
			return unboundedLen
		}
		return min(unboundedLen, re.Max*maxLen(re.Sub[0]))
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n += maxLen(s)
		}
		return min(n, 4*unboundedLen)
	case syntax.OpAlternate:
		n := 0
		for _, s := range re.Sub {
			n = max(n, maxLen(s))
		}
		return n
	default: // empty-width assertions, empty match
		return 0
	}
}

const maxPrefixes = 256

// prefixes returns lowercased strings one of which starts every match of re
// (after zero-width assertions), and whether they are whole matches of re.
// ok is false when no useful prefix is known.
func prefixes(re *syntax.Regexp) (set []string, complete, ok bool) {
	switch re.Op {
	case syntax.OpLiteral:
		return []string{strings.ToLower(string(re.Rune))}, true, true
	case syntax.OpCharClass:
		var out []string
		seen := map[string]bool{}
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i+1]-re.Rune[i] > 8 {
				return nil, false, false
			}
			for c := re.Rune[i]; c <= re.Rune[i+1]; c++ {
				s := strings.ToLower(string(c))
				if !seen[s] {
					seen[s] = true
					out = append(out, s)
				}
			}
		}
		if len(out) == 0 || len(out) > 8 {
			return nil, false, false
		}
		return out, true, true
	case syntax.OpCapture:
		return prefixes(re.Sub[0])
	case syntax.OpQuest:
		set, complete, ok := prefixes(re.Sub[0])
		return append(set, ""), complete, ok
	case syntax.OpRepeat, syntax.OpPlus:
		if re.Op == syntax.OpRepeat && re.Min == 0 && re.Max == 1 {
			set, complete, ok := prefixes(re.Sub[0])
			return append(set, ""), complete, ok
		}
		if re.Op == syntax.OpRepeat && re.Min < 1 {
			return nil, false, false
		}
		set, complete, ok := prefixes(re.Sub[0])
		if re.Op == syntax.OpRepeat && re.Min == 1 && re.Max == 1 {
			return set, complete, ok
		}
		return set, false, ok
	case syntax.OpAlternate:
		complete = true
		for _, s := range re.Sub {
			ss, c, ok := prefixes(s)
			if !ok {
				return nil, false, false
			}
			set = append(set, ss...)
			complete = complete && c
		}
		return set, complete, len(set) <= maxPrefixes
	case syntax.OpConcat:
		set = []string{""}
		for _, s := range re.Sub {
			switch s.Op {
			case syntax.OpWordBoundary, syntax.OpBeginText, syntax.OpBeginLine, syntax.OpEmptyMatch:
				continue
			}
			ss, c, ok := prefixes(s)
			if !ok || len(set)*len(ss) > maxPrefixes {
				return set, false, set[0] != "" || len(set) > 1
			}
			next := make([]string, 0, len(set)*len(ss))
			for _, a := range set {
				for _, b := range ss {
					next = append(next, a+b)
				}
			}
			set = next
			if !c {
				return set, false, true
			}
		}
		return set, true, true
	}
	return nil, false, false
}

// anchoredAtKeyword reports whether every match of re begins with one of the
// (lowercase) keywords, so that a keyword hit marks where a match may start.
func anchoredAtKeyword(re *syntax.Regexp, keywords []string) bool {
	set, _, ok := prefixes(re)
	if !ok || len(set) == 0 {
		return false
	}
	for _, p := range set {
		found := false
		for _, k := range keywords {
			if strings.HasPrefix(p, k) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// The tail shared by gitleaks' "<keyword> <assignment> <value>" rules.
const assignMarker = `(?:[ \t\w.-]{0,20})[\s'"]{0,3}`

// assignmentTemplate recognises gitleaks' "<keyword> <assignment> <value>"
// rules and returns the words of their keyword group, lowercased, and how
// many word bytes ([\w.-]) may precede the word in a match. words is nil when
// the rule is not of that shape or the group is not a small finite set.
func assignmentTemplate(src string) (words []string, backscan int) {
	m := strings.Index(src, assignMarker)
	if m <= 0 || src[m-1] != ')' {
		return nil, 0
	}
	rest := strings.TrimPrefix(src[m+len(assignMarker):], ")")
	if !strings.HasPrefix(rest, `(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)`) {
		return nil, 0
	}
	// The keyword group is the balanced group closing at m-1.
	depth, open := 0, -1
	for i := m - 1; i >= 0 && open < 0; i-- {
		if i > 0 && src[i-1] == '\\' {
			continue
		}
		switch src[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				open = i
			}
		}
	}
	if open < 0 {
		return nil, 0
	}
	tree, err := syntax.Parse(src[open:m], syntax.Perl|syntax.FoldCase)
	if err != nil {
		return nil, 0
	}
	words, complete, ok := prefixes(tree)
	if !ok || !complete || slices.Contains(words, "") {
		return nil, 0
	}
	slices.Sort(words)
	return slices.Compact(words), 50 * strings.Count(src[:open], `[\w.-]{0,50}?`)
}

// The end of a value in gitleaks' rules: a quote, a blank, ';' or an
// escaped line end.
const valueEnd = `(?:[\x60'"\s;]|\\[nr]|$)`

// assignEnd replaces valueEnd in keyword-assignment rules: a value also
// ends at any backslash (an escaped quote: \"), ',', '&' (a query), ')',
// ']', '}', '<', '>' and '|'.
const assignEnd = `(?:[\x60'"\s;,&)\]}<>|\\]|$)`

// widenValueEnd rewrites the valueEnd at the end of a gitleaks rule's
// regex src: in a keyword-assignment rule to assignEnd; in a rule for a
// token of known shape (prefix-anchored), any byte outside the token's
// alphabet ends it too ("-u sk_live_…:", "&key=AIza…&", "…\"").
func widenValueEnd(src string, group int) string {
	head := strings.TrimSuffix(src, valueEnd)
	if words, _ := assignmentTemplate(src); words != nil {
		return head + assignEnd
	}
	tree, err := syntax.Parse(head, syntax.Perl)
	if err != nil {
		return src
	}
	var capNode *syntax.Regexp
	var walk func(*syntax.Regexp)
	walk = func(n *syntax.Regexp) {
		if n.Op == syntax.OpCapture && n.Cap == max(group, 1) {
			capNode = n
		}
		for _, s := range n.Sub {
			walk(s)
		}
	}
	walk(tree)
	var set [256]bool
	if capNode == nil || !lastBytes(capNode, &set) {
		return head + assignEnd
	}
	var b strings.Builder
	b.WriteString(`(?:[^`)
	for c := 0; c < utf8.RuneSelf; c++ {
		if set[c] {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	// Prose: a token at a sentence's end ("…my key is SG.… .").
	b.WriteString(`]|[\x60'"\s;]|\\[nr]|[.,:;!?)\]}](?:\s|$)|$)`)
	return head + b.String()
}

// lastBytes adds to set every byte that may end a match of re: what could
// extend a token is what could have been its last byte. false if that is
// not a set of ASCII bytes.
func lastBytes(re *syntax.Regexp, set *[256]bool) bool {
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return true
		}
		return byteSet(&syntax.Regexp{Op: syntax.OpLiteral, Rune: re.Rune[len(re.Rune)-1:], Flags: re.Flags}, set)
	case syntax.OpConcat:
		// The last part, and the ones before it as far as the parts after
		// them may be empty.
		for i := len(re.Sub) - 1; i >= 0; i-- {
			if !lastBytes(re.Sub[i], set) {
				return false
			}
			if minLen(re.Sub[i]) > 0 {
				return true
			}
		}
		return true
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		return lastBytes(re.Sub[0], set)
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if !lastBytes(s, set) {
				return false
			}
		}
		return true
	}
	return byteSet(re, set)
}

// secretShape fills secretSet, minSecret and maxSecret when the secret group
// is made of ASCII bytes none of which can end a value, and the regex ends
// with valueEnd right after it: then a secret is a maximal run of those bytes
// followed by a terminator (or the end of the text).
func (r *rule) secretShape(src string, tree *syntax.Regexp) {
	if !strings.HasSuffix(src, ")"+assignEnd) {
		return
	}
	g := max(r.group, 1)
	var capNode *syntax.Regexp
	var walk func(*syntax.Regexp)
	walk = func(n *syntax.Regexp) {
		if n.Op == syntax.OpCapture && n.Cap == g {
			capNode = n
		}
		for _, s := range n.Sub {
			walk(s)
		}
	}
	walk(tree)
	if capNode == nil || tree.MaxCap() != countCaps(capNode)+g-1 {
		return // other groups after the secret could hold the first non-empty one
	}
	var set [256]bool
	if !byteSet(capNode, &set) {
		return
	}
	for i := 0; i < 256; i++ {
		if set[i] && isTerminator(byte(i)) {
			return
		}
	}
	r.secretSet, r.minSecret, r.maxSecret = &set, minLen(capNode), maxLen(capNode)
}

func countCaps(n *syntax.Regexp) int {
	c := 0
	if n.Op == syntax.OpCapture {
		c++
	}
	for _, s := range n.Sub {
		c += countCaps(s)
	}
	return c
}

// byteSet adds to set every byte re may match; false if that is not a set
// of ASCII bytes.
func byteSet(re *syntax.Regexp, set *[256]bool) bool {
	switch re.Op {
	case syntax.OpLiteral:
		for _, c := range re.Rune {
			if c >= utf8.RuneSelf {
				return false
			}
			set[c] = true
			if re.Flags&syntax.FoldCase != 0 {
				set[lowerASCII(byte(c))] = true
				set[upperASCII(byte(c))] = true
			}
		}
		return true
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i+1] >= utf8.RuneSelf {
				if re.Rune[i] >= utf8.RuneSelf && re.Flags&syntax.FoldCase != 0 {
					continue // fold partners of ASCII letters, such as the Kelvin sign
				}
				return false
			}
			for c := re.Rune[i]; c <= re.Rune[i+1]; c++ {
				set[c] = true
			}
		}
		return true
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return false
	}
	for _, s := range re.Sub {
		if !byteSet(s, set) {
			return false
		}
	}
	return true
}

// minLen bounds from below the length in bytes of what re matches.
func minLen(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(string(re.Rune))
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1
	case syntax.OpCapture:
		return minLen(re.Sub[0])
	case syntax.OpPlus:
		return minLen(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min * minLen(re.Sub[0])
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n += minLen(s)
		}
		return n
	case syntax.OpAlternate:
		n := -1
		for _, s := range re.Sub {
			if m := minLen(s); n < 0 || m < n {
				n = m
			}
		}
		return max(n, 0)
	}
	return 0
}

func upperASCII(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// isTerminator reports whether c can follow a value in assignEnd.
func isTerminator(c byte) bool {
	switch c {
	case '`', '\'', '"', ' ', '\t', '\n', '\v', '\f', '\r', ';', '\\', ',', '&', ')', ']', '}', '<', '>', '|':
		return true
	}
	return false
}

// secretAfter reports whether a keyword ending at end can begin the
// template's assignment: up to 20 name bytes or blanks, up to 3 quotes or
// blanks, an operator, up to 5 quotes, blanks or '=', then a run of secret
// bytes at least minSecret long, ended by a terminator (or too long to
// judge here). It never rejects what the regex would match.
func (r *rule) secretAfter(text string, end int) bool {
	i, lim := end, min(len(text), end+20)
	for i < lim && (isWordByte(text[i]) || text[i] == ' ' || text[i] == '\t') {
		i++
	}
	for k := 0; k < 3 && i < len(text) && (isSpace(text[i]) || text[i] == '\f' || text[i] == '\'' || text[i] == '"'); k++ {
		i++
	}
	var ends [2]int
	ops := ends[:0]
	at := func(j int, w string) bool { return strings.HasPrefix(text[min(j, len(text)):], w) }
	switch {
	case at(i, "=>"):
		ops = append(ops, i+1, i+2)
	case at(i, "="), at(i, ">"), at(i, ","):
		ops = append(ops, i+1)
	case at(i, ":::="):
		ops = append(ops, i+4)
	case at(i, "::="):
		ops = append(ops, i+3)
	case at(i, ":="):
		ops = append(ops, i+1, i+2)
	case at(i, ":"):
		ops = append(ops, i+1)
	case at(i, "||"), at(i, "?="):
		ops = append(ops, i+2)
	}
	for _, o := range ops {
		for k := 0; k <= 5 && o+k <= len(text); k++ {
			if r.secretRun(text, o+k) {
				return true
			}
			if o+k == len(text) {
				break
			}
			if c := text[o+k]; c != '`' && c != '\'' && c != '"' && c != '=' && !isSpace(c) && c != '\f' {
				break
			}
		}
	}
	return false
}

// secretRun reports whether a run of secret bytes at least minSecret long
// starts at i, ended by a terminator or the text's end, or too long to
// judge here.
func (r *rule) secretRun(text string, i int) bool {
	j, cap := i, i+r.maxSecret+1
	for j < len(text) && j < cap && r.secretSet[text[j]] {
		j++
	}
	if j == cap {
		return true // longer than a secret: let the regex decide
	}
	return j-i >= r.minSecret && (j == len(text) || isTerminator(text[j]))
}

// isOperator reports whether c can begin the template's assignment operator.
func isOperator(c byte) bool {
	switch c {
	case '=', '>', ':', '|', '?', ',':
		return true
	}
	return false
}

// entropy is the Shannon entropy of s in bits per byte.
func entropy(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	inv := 1 / float64(len(s))
	e := 0.0
	for _, c := range counts {
		if c > 0 {
			f := float64(c) * inv
			e -= f * math.Log2(f)
		}
	}
	return e
}
