package rewrite

import (
	"cmp"
	"maps"
	"slices"
	"sort"
	"strings"
	"unsafe"
)

// Redactor finds the secrets of a text and names the placeholders that
// replace them; *secrets.Redactor is one.
type Redactor interface {
	// FindSecrets calls found for each secret of s, in order and not
	// overlapping: s[start:end] is to be replaced by placeholder, and rule
	// found it. A Redactor may remember what it finds, to find it again in
	// later texts: a copy, since s may be a window into a request body,
	// valid only during the call.
	FindSecrets(s string, found func(start, end int, rule, placeholder string))
}

// RedactorFunc adapts a function to Redactor.
type RedactorFunc func(s string, found func(start, end int, rule, placeholder string))

// FindSecrets calls f.
func (f RedactorFunc) FindSecrets(s string, found func(start, end int, rule, placeholder string)) {
	f(s, found)
}

// Limits of the walk.
const (
	// MaxNesting is how many levels deep RedactBody looks into strings:
	// JSON inside a JSON string, and escaped text inside a text.
	MaxNesting = 8
	// MinRepeatLen is the shortest secret that RedactBody replaces
	// wherever else it occurs in the body, found or not there.
	MinRepeatLen = 8

	// The lines of a JSON string searched alone (edges).
	minLine = 8
	maxLine = 4 << 10
)

// RedactBody replaces the secrets of a request body by placeholders and
// returns the rule id of each replacement (duplicates kept); when nothing
// is replaced, out is body itself and ids is nil.
//
// Of a JSON body it searches every string value (never an object key),
// decoded, and within each, nesting up to MaxNesting levels deep:
//   - a string that is itself JSON (its first non-space byte is {, [ or ",
//     and it is valid): the whole of it, with its escapes resolved (so
//     that a key and its value are seen together, decoded), the first and
//     last line of each of its string values alone (so that they start
//     and end a line, as a NAME=value rule needs), and in turn each of its
//     strings that is JSON or holds escaped quotes;
//   - a text that holds escaped quotes (\", JSON or shell quoting in
//     prose): also with its escapes resolved.
//
// A secret found in a decoded view is replaced in the bytes it was
// decoded from, the placeholder escaped as each level needs, so that the
// body stays valid JSON and every string that is JSON stays valid JSON; a
// finding that would cross a JSON string's bounds is dropped. Only the
// secrets' bytes change: every other byte stays as it was. A body that is
// not JSON is searched as one text, the same way.
//
// Every secret of at least MinRepeatLen bytes found anywhere in the body
// is then replaced everywhere in it, by the same placeholder, in strings
// searched before it was found too, and where no rule would find it: a
// second walk, made only when the first found something. So is every
// secret found inside one of them, searched alone (the password of a
// database URL that a Secret's DATABASE_URL holds whole).
func RedactBody(body []byte, r Redactor) (out []byte, ids []string) {
	es := bodyEdits(body, r)
	if len(es) == 0 {
		return body, nil
	}
	out = make([]byte, 0, len(body)+len(es)*16)
	ids = make([]string, 0, len(es))
	last := 0
	for _, e := range es {
		out = append(out, body[last:e.start]...)
		out = append(out, e.repl...)
		ids = append(ids, e.rule)
		last = e.end
	}
	return append(out, body[last:]...), ids
}

// A BodySecret is a secret RedactBody would replace: the rule that found
// it, and the JSON pointer (RFC 6901) of the body's string that holds it,
// at whatever depth inside that string it is ("" for a body that is not
// JSON).
type BodySecret struct {
	RuleID  string
	Pointer string
}

// FindBodySecrets returns the secrets RedactBody would replace in body, in
// order, to say where they are without changing it.
func FindBodySecrets(body []byte, r Redactor) []BodySecret {
	es := bodyEdits(body, r)
	if len(es) == 0 {
		return nil
	}
	ptrs := stringPointers(body)
	out := make([]BodySecret, 0, len(es))
	for _, e := range es {
		p := ""
		if i := sort.Search(len(ptrs), func(i int) bool { return ptrs[i].end > e.start }); i < len(ptrs) && ptrs[i].start <= e.start {
			p = ptrs[i].pointer
		}
		out = append(out, BodySecret{e.rule, p})
	}
	return out
}

// bodyEdits returns RedactBody's replacements in body, sorted and apart.
func bodyEdits(body []byte, r Redactor) []edit {
	if len(body) == 0 {
		return nil
	}
	w := &walker{repeat: map[string]edit{}}
	var got []edit
	collect := func(start, end int, rule, ph string) {
		got = append(got, edit{start: start, end: end, rule: rule, repl: ph})
	}
	w.find = func(s string) []edit {
		got = nil
		r.FindSecrets(s, collect)
		for _, e := range got {
			if v := s[e.start:e.end]; len(v) >= MinRepeatLen {
				if _, ok := w.repeat[v]; !ok {
					w.repeat[v] = e
				}
			}
		}
		return got
	}
	// The walk's texts are windows into body, or decoded copies; none
	// outlives the call (a Redactor keeps copies).
	b := unsafe.String(&body[0], len(body))
	var objs []span
	strs, isJSON := scanJSON(b, nil, &objs)
	walk := func() []edit {
		if isJSON {
			return w.values(b, strs, objs)
		}
		return w.text(b, 0, nil, false)
	}
	es := walk()
	if len(w.repeat) > 0 {
		// A secret found inside one found whole (a database URL's
		// password, the value of a Secret's DATABASE_URL) is replaced
		// alone too, wherever it is.
		for _, v := range slices.Collect(maps.Keys(w.repeat)) {
			r.FindSecrets(v, func(start, end int, rule, ph string) {
				if inner := v[start:end]; len(inner) < len(v) && len(inner) >= MinRepeatLen {
					if _, ok := w.repeat[inner]; !ok {
						w.repeat[inner] = edit{start: start, end: end, rule: rule, repl: ph}
					}
				}
			})
		}
		vals := make([]repeated, 0, len(w.repeat))
		for v, e := range w.repeat {
			vals = append(vals, repeated{v, e.rule, e.repl})
		}
		// Longest first: of two values, one inside the other, the longer
		// is replaced. Then by value, for a result that does not depend
		// on the map's order.
		slices.SortFunc(vals, func(x, y repeated) int {
			if d := cmp.Compare(len(y.value), len(x.value)); d != 0 {
				return d
			}
			return strings.Compare(x.value, y.value)
		})
		w.find = func(s string) []edit { return findValues(s, vals) }
		w.again = true
		w.vals = vals
		for _, v := range vals {
			if !verbatim(v.value) {
				w.vals = nil // may be escaped some other way: look everywhere
				break
			}
		}
		es = mergeEdits(es, walk())
	}
	// Apart at every level, and so in the body; this only makes sure.
	kept := es[:0]
	last := 0
	for _, e := range es {
		if e.start >= last {
			kept = append(kept, e)
			last = e.end
		}
	}
	return kept
}

// edit replaces text[start:end] of some text by repl, for rule.
type edit struct {
	start, end int
	rule, repl string
}

// repeated is a secret found in a body, replaced wherever it occurs.
type repeated struct{ value, rule, repl string }

// walker finds the edits of a body: find gives those of one text, in
// order and not overlapping.
type walker struct {
	find   func(s string) []edit
	repeat map[string]edit // secrets found, by value: the first edit of each
	again  bool            // the second walk, for the values found in the first
	vals   []repeated      // the second walk's values, if each is verbatim
}

// verbatim reports whether JSON encoders write s as it is, at any depth
// of nesting: printable ASCII but for what one or another escapes (",
// \, /, <, >, &).
func verbatim(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '/', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// skip reports whether the second walk may pass over a string of the
// body, raw as sent: it holds none of the values, which, verbatim, would
// show in it wherever they are inside it.
func (w *walker) skip(raw string) bool {
	if !w.again || w.vals == nil {
		return false
	}
	for _, v := range w.vals {
		if strings.Contains(raw, v.value) {
			return false
		}
	}
	return true
}

// values returns the edits of the string values of b, a JSON text whose
// strings are strs: each on its own, but those of objs, objects that hold
// a tool's input or output, which are read as JSON inside a string is
// (keys and values together): they are the same data OpenAI's APIs carry
// in strings.
func (w *walker) values(b string, strs strSpans, objs []span) []edit {
	var out []edit
	for k := 0; k < len(strs); k++ {
		st := strs[k]
		if len(objs) > 0 && objs[0].start < st.r0 {
			o := objs[0]
			objs = objs[1:]
			n := k
			for n < len(strs) && strs[n].r1 < o.end {
				n++
			}
			inside := make(strSpans, n-k)
			for i, x := range strs[k:n] {
				inside[i] = strSpan{x.r0 - o.start, x.r1 - o.start, x.r0 - o.start, x.r1 - o.start, x.key}
			}
			if t := b[o.start:o.end]; !w.skip(t) {
				for _, e := range w.json(t, inside, 0, nil) {
					e.start, e.end = e.start+o.start, e.end+o.start
					out = append(out, e)
				}
			}
			k = n - 1
			continue
		}
		raw := b[st.r0:st.r1]
		if st.key || w.skip(raw) {
			continue
		}
		if strings.IndexByte(raw, '\\') < 0 {
			out = appendUp(out, w.text(raw, 0, nil, false), nil, st.r0)
			continue
		}
		es := w.text(unescape(raw, nil), 0, nil, false)
		if len(es) > 0 {
			var m escapes // made only when needed: most strings hold no secret
			unescape(raw, &m)
			out = appendUp(out, es, m, st.r0)
		}
	}
	return out
}

// text returns the edits of t, a text decoded from a string depth levels
// into the body. fs are its secrets if its parent found them already
// (scanned): a parent that is JSON searches its strings in place.
func (w *walker) text(t string, depth int, fs []edit, scanned bool) []edit {
	if depth < MaxNesting && firstNonSpace(t) >= 0 {
		if strs, ok := parseJSON(t, nil); ok {
			return w.json(t, strs, depth, fs)
		}
	}
	if !scanned {
		fs = w.find(t)
	}
	if depth < MaxNesting && strings.Contains(t, `\"`) {
		if sub := w.text(unescape(t, nil), depth+1, nil, false); len(sub) > 0 {
			var m escapes
			unescape(t, &m)
			fs = mergeEdits(appendUp(nil, sub, m, 0), fs)
		}
	}
	return fs
}

// json returns the edits of t, a JSON text depth levels into the body
// whose strings are strs, and whose parent found given in it. It searches t with its escapes resolved
// (keys and values together, decoded), puts each secret found in the
// string that holds it (dropping those that cross a string's bounds), and
// goes on into the strings whose escapes may hide more: those that are
// JSON, or hold escaped quotes.
func (w *walker) json(t string, strs strSpans, depth int, given []edit) []edit {
	u := jsonView(t, strs)
	fs := w.find(u)
	if len(given) > 0 {
		fs = mergeEdits(fs, strs.down(t, given))
	}
	var out []edit // in t
	i := 0
	for k := range strs {
		st := &strs[k]
		for i < len(fs) && fs[i].start < st.d0 {
			i++ // not inside one string: dropped
		}
		j := i
		for j < len(fs) && fs[j].end <= st.d1 {
			j++
		}
		s := u[st.d0:st.d1]
		local := make([]edit, 0, j-i)
		for _, e := range fs[i:j] {
			e.start, e.end = e.start-st.d0, e.end-st.d0
			local = append(local, e)
		}
		i = j
		if !st.key && !w.again {
			if es := w.edges(s); len(es) > 0 {
				local = mergeEdits(local, es)
			}
		}
		if st.escaped() && (len(local) > 0 || couldHide(s)) {
			local = w.text(s, depth+1, local, true)
		}
		if len(local) > 0 {
			var m escapes
			if st.escaped() {
				unescape(t[st.r0:st.r1], &m)
			}
			out = appendUp(out, local, m, st.r0)
		}
	}
	return out
}

// strSpan is one string of a JSON text: its inside is t[r0:r1] in the
// text, u[d0:d1] in its view (jsonView).
type strSpan struct {
	r0, r1, d0, d1 int
	key            bool
}

func (s *strSpan) escaped() bool { return s.r1-s.r0 != s.d1-s.d0 } // an escape always shortens

type strSpans []strSpan

// jsonView returns the valid JSON text t, whose strings are strs, with
// the insides of its strings decoded, and sets where each is in it.
func jsonView(t string, strs strSpans) string {
	if strings.IndexByte(t, '\\') < 0 {
		return t
	}
	b := make([]byte, 0, len(t))
	last := 0
	for k := range strs {
		st := &strs[k]
		b = append(b, t[last:st.r0]...)
		st.d0 = len(b)
		b = appendUnescaped(b, t[st.r0:st.r1], nil)
		st.d1 = len(b)
		last = st.r1
	}
	b = append(b, t[last:]...)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// down moves edits of the text t (of which strs are the strings) to its
// view; those not inside one string are dropped.
func (strs strSpans) down(t string, es []edit) []edit {
	var out []edit
	for _, e := range es {
		k := sort.Search(len(strs), func(k int) bool { return strs[k].r1 >= e.end }) // the first that ends after e
		if k == len(strs) || e.start < strs[k].r0 {
			continue
		}
		st := strs[k]
		var m escapes
		if st.escaped() {
			unescape(t[st.r0:st.r1], &m)
		}
		e.start, e.end = st.d0+m.toDec(e.start-st.r0, false), st.d0+m.toDec(e.end-st.r0, true)
		out = append(out, e)
	}
	return out
}

// edges returns the edits of the first and the last line of a string of
// JSON, each searched alone: in the whole, searched at once, a string's
// first line does not start a line, nor its last end one, and rules that
// read whole lines (NAME=value) would miss them. A string that is JSON
// has its own lines searched when it is walked.
func (w *walker) edges(s string) []edit {
	if firstNonSpace(s) >= 0 {
		return nil
	}
	first := s
	nl := strings.IndexByte(s, '\n')
	if nl >= 0 {
		first = s[:nl]
	}
	var es []edit
	if assignment(first) {
		es = w.find(first)
	}
	if nl < 0 {
		return es
	}
	at := strings.LastIndexByte(s, '\n') + 1
	if last := s[at:]; assignment(last) {
		for _, e := range w.find(last) {
			e.start, e.end = e.start+at, e.end+at
			es = append(es, e)
		}
	}
	return es
}

// assignment reports whether a line may assign a value (NAME=value,
// key: value) and is worth a search of its own.
func assignment(line string) bool {
	return len(line) >= minLine && len(line) <= maxLine && strings.ContainsAny(line, "=:")
}

// couldHide reports whether a decoded string may hold more than a search
// of it as it is finds: JSON, or escaped quotes.
func couldHide(s string) bool {
	return firstNonSpace(s) >= 0 || strings.Contains(s, `\"`)
}

// firstNonSpace returns the index of s's first non-space byte if it may
// open a JSON object, array or string, else -1.
func firstNonSpace(s string) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case '{', '[', '"':
			return i
		}
		return -1
	}
	return -1
}

// appendUp appends to dst the edits es of a decoded text, moved to the
// escaped text it was decoded from (m its escapes; nil when it had none),
// which starts at off in its own text: their bounds widened to whole
// escape sequences, their replacements escaped.
func appendUp(dst, es []edit, m escapes, off int) []edit {
	for _, e := range es {
		e.start, e.end = m.toRaw(e.start, false)+off, m.toRaw(e.end, true)+off
		if n := len(dst); n > 0 && e.start < dst[n-1].end {
			continue // widened into the one before (bounds inside one escaped rune)
		}
		e.repl = escapeString(e.repl)
		dst = append(dst, e)
	}
	return dst
}

// escapeString is s escaped for the inside of a JSON string; s itself when
// it needs no escape (a placeholder never does).
func escapeString(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return string(appendEscaped(make([]byte, 0, len(s)+8), s))
		}
	}
	return s
}

// mergeEdits returns the edits of a and b that do not overlap, sorted: of
// two that overlap, the longer is kept, then a's.
func mergeEdits(a, b []edit) []edit {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	type cand struct {
		edit
		fromA bool
	}
	cs := make([]cand, 0, len(a)+len(b))
	for _, e := range a {
		cs = append(cs, cand{e, true})
	}
	for _, e := range b {
		cs = append(cs, cand{e, false})
	}
	slices.SortStableFunc(cs, func(x, y cand) int {
		if d := (y.end - y.start) - (x.end - x.start); d != 0 {
			return d
		}
		if x.fromA != y.fromA {
			if x.fromA {
				return -1
			}
			return 1
		}
		return x.start - y.start
	})
	out := make([]edit, 0, len(cs))
	for _, c := range cs {
		i := sort.Search(len(out), func(i int) bool { return out[i].start >= c.start })
		if i > 0 && out[i-1].end > c.start || i < len(out) && out[i].start < c.end {
			continue
		}
		out = slices.Insert(out, i, c.edit)
	}
	return out
}

// findValues returns the occurrences in s of the values of vals (longest
// first), each replaced as the first one found was, not overlapping.
func findValues(s string, vals []repeated) []edit {
	var out []edit
	for _, v := range vals {
		if len(v.value) > len(s) {
			continue
		}
		for i := 0; ; {
			j := strings.Index(s[i:], v.value)
			if j < 0 {
				break
			}
			a, b := i+j, i+j+len(v.value)
			k := sort.Search(len(out), func(k int) bool { return out[k].start >= a })
			if !(k > 0 && out[k-1].end > a || k < len(out) && out[k].start < b) {
				out = slices.Insert(out, k, edit{start: a, end: b, rule: v.rule, repl: v.repl})
			}
			i = b
		}
	}
	return out
}
