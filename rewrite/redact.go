package rewrite

import (
	"cmp"
	"encoding/json"
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
	// later texts.
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
// second walk, made only when the first found something.
func RedactBody(body []byte, r Redactor) (out []byte, ids []string) {
	if len(body) == 0 {
		return body, nil
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
	b := string(body) // the walk's texts are its substrings
	isJSON := json.Valid(body)
	walk := func() []edit {
		if isJSON {
			return w.values(b)
		}
		return w.text(b, 0, nil, false)
	}
	es := walk()
	if len(w.repeat) > 0 {
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
		es = mergeEdits(es, walk())
	}
	if len(es) == 0 {
		return body, nil
	}
	out = make([]byte, 0, len(body)+len(es)*16)
	ids = make([]string, 0, len(es))
	last := 0
	for _, e := range es {
		if e.start < last {
			continue // cannot be: edits are kept apart at every level
		}
		out = append(out, body[last:e.start]...)
		out = append(out, e.repl...)
		ids = append(ids, e.rule)
		last = e.end
	}
	return append(out, body[last:]...), ids
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
}

// values returns the edits of the JSON text b's string values, in b.
func (w *walker) values(b string) []edit {
	var out []edit
	forStrings(b, func(start, end int, key bool) {
		if key {
			return
		}
		raw := b[start+1 : end-1]
		if strings.IndexByte(raw, '\\') < 0 {
			out = appendUp(out, w.text(raw, 0, nil, false), nil, start+1)
			return
		}
		es := w.text(unescape(raw, nil), 0, nil, false)
		if len(es) > 0 {
			var m escapes // made only when needed: most strings hold no secret
			unescape(raw, &m)
			out = appendUp(out, es, m, start+1)
		}
	})
	return out
}

// text returns the edits of t, a text decoded from a string depth levels
// into the body. fs are its secrets if its parent found them already
// (scanned): a parent that is JSON searches its strings in place.
func (w *walker) text(t string, depth int, fs []edit, scanned bool) []edit {
	if depth < MaxNesting && looksJSON(t) {
		return w.json(t, depth, fs)
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

// json returns the edits of t, a JSON text depth levels into the body,
// whose parent found given in it. It searches t with its escapes resolved
// (keys and values together, decoded), puts each secret found in the
// string that holds it (dropping those that cross a string's bounds), and
// goes on into the strings whose escapes may hide more: those that are
// JSON, or hold escaped quotes.
func (w *walker) json(t string, depth int, given []edit) []edit {
	u, m := t, escapes(nil)
	if strings.IndexByte(t, '\\') >= 0 {
		u = unescape(t, &m)
	}
	fs := w.find(u)
	if len(given) > 0 {
		down := make([]edit, len(given))
		for i, e := range given {
			e.start, e.end = m.toDec(e.start, false), m.toDec(e.end, true)
			down[i] = e
		}
		fs = mergeEdits(fs, down)
	}
	var out []edit // in u
	i := 0
	forStrings(t, func(start, end int, key bool) {
		ds, de := m.toDec(start+1, false), m.toDec(end-1, true) // the string's inside, decoded
		for i < len(fs) && fs[i].start < ds {
			i++ // not inside one string: dropped
		}
		j := i
		for j < len(fs) && fs[j].end <= de {
			j++
		}
		mine := fs[i:j]
		i = j
		s := u[ds:de]
		if !key && !w.again {
			if es := w.edges(s); len(es) > 0 {
				local := make([]edit, len(mine))
				for k, e := range mine {
					e.start, e.end = e.start-ds, e.end-ds
					local[k] = e
				}
				mine = mergeEdits(local, es)
				for k := range mine {
					mine[k].start += ds
					mine[k].end += ds
				}
			}
		}
		if de-ds == end-1-(start+1) || len(mine) == 0 && !couldHide(s) {
			// No escapes, nothing more to see inside; or nothing to see.
			out = append(out, mine...)
			return
		}
		local := make([]edit, len(mine))
		for k, e := range mine {
			e.start, e.end = e.start-ds, e.end-ds
			local[k] = e
		}
		for _, e := range w.text(s, depth+1, local, true) {
			e.start, e.end = e.start+ds, e.end+ds
			out = append(out, e)
		}
	})
	return appendUp(nil, out, m, 0)
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

// looksJSON reports whether s is a JSON object, array or string.
func looksJSON(s string) bool {
	if firstNonSpace(s) < 0 {
		return false
	}
	return json.Valid(unsafe.Slice(unsafe.StringData(s), len(s))) // read only
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
