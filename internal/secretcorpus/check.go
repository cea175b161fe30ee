package secretcorpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Result is what a redacted body left of its request's labels.
type Result struct {
	Leaked  []bool // by index of Request.Secrets: still recoverable
	Damaged []bool // by index of Request.Negatives: changed
}

// Check scores out, the request's body after redaction. It fails when out
// is not one valid JSON value or lacks a string its labels point at (a
// redactor changes string values only).
//
// An occurrence of a secret is leaked when any of its Probes is found in
// the string its Pointer names, as it was planted or JSON-escaped once per
// level of its Depth (plain, with Go's HTML escapes, or with Python's
// ASCII escapes, at each level). With pieces of q bytes, any run of 2q-1
// bytes of the value left in place holds a piece, so it is a miss (two
// thirds of a value of 36 bytes or more), and a run shorter than q never
// is; a PEM key is leaked when any of its base64 lines is left whole. A hard
// negative is damaged when its Value is not found there in any of those
// forms. Occurrences of one value in one string are counted together: k
// of them, m found, is min(k, m) leaked (or k-m damaged).
func (r *Request) Check(out []byte) (Result, error) {
	res := Result{Leaked: make([]bool, len(r.Secrets)), Damaged: make([]bool, len(r.Negatives))}
	if !json.Valid(out) {
		return res, fmt.Errorf("secretcorpus: %s: the output is not valid JSON", r.Name)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return res, fmt.Errorf("secretcorpus: %s: decode the output: %w", r.Name, err)
	}
	strs := map[string]string{}
	lookup := func(ptr string) (string, error) {
		if s, ok := strs[ptr]; ok {
			return s, nil
		}
		s, err := resolve(doc, ptr)
		if err != nil {
			return "", fmt.Errorf("secretcorpus: %s: %w", r.Name, err)
		}
		strs[ptr] = s
		return s, nil
	}

	type key struct{ ptr, value string }
	secGroups := map[key][]int{}
	for i, s := range r.Secrets {
		k := key{s.Pointer, s.Value}
		secGroups[k] = append(secGroups[k], i)
	}
	for k, idx := range secGroups {
		s, err := lookup(k.ptr)
		if err != nil {
			return res, err
		}
		sec := r.Secrets[idx[0]]
		depth := 0
		for _, i := range idx {
			depth = max(depth, r.Secrets[i].Depth)
		}
		found := 0
		for _, p := range sec.Probes {
			found = max(found, countForms(s, p, depth))
		}
		for _, i := range idx[:min(found, len(idx))] {
			res.Leaked[i] = true
		}
	}

	negGroups := map[key][]int{}
	for i, n := range r.Negatives {
		k := key{n.Pointer, n.Value}
		negGroups[k] = append(negGroups[k], i)
	}
	for k, idx := range negGroups {
		s, err := lookup(k.ptr)
		if err != nil {
			return res, err
		}
		depth := 0
		for _, i := range idx {
			depth = max(depth, r.Negatives[i].Depth)
		}
		kept := countForms(s, k.value, depth)
		for _, i := range idx[min(kept, len(idx)):] {
			res.Damaged[i] = true
		}
	}
	return res, nil
}

// countForms counts the occurrences of v in s as it is and JSON-escaped
// once per level, up to depth levels, by any of the escapers.
func countForms(s, v string, depth int) int {
	forms := []string{v}
	cur := []string{v}
	escapers := []style{{}, {html: true}, {ascii: true}}
	for range depth {
		var next []string
		for _, f := range cur {
			for _, st := range escapers {
				if e := st.escapeJSON(f); !slices.Contains(forms, e) {
					forms = append(forms, e)
					next = append(next, e)
				}
			}
		}
		if len(next) == 0 {
			break
		}
		cur = next
	}
	n := 0
	for _, f := range forms {
		n += strings.Count(s, f)
	}
	return n
}

// resolve returns the string at a JSON pointer.
func resolve(doc any, ptr string) (string, error) {
	cur := doc
	for _, tok := range strings.Split(ptr, "/")[1:] {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return "", fmt.Errorf("no %s in the output", ptr)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return "", fmt.Errorf("no %s in the output", ptr)
			}
			cur = x[i]
		default:
			return "", fmt.Errorf("no %s in the output", ptr)
		}
	}
	s, ok := cur.(string)
	if !ok {
		return "", fmt.Errorf("%s is not a string in the output", ptr)
	}
	return s, nil
}

// Tally adds up results by type, location, layout, provider,
// serialization and depth. Its zero value is ready to use.
type Tally struct {
	secrets, negatives map[string]map[string]*count
	misses             []string
}

type count struct{ total, bad int }

// Dimensions of a Tally's tables.
const (
	ByType          = "type"
	ByLocation      = "location"
	ByLayout        = "layout"
	ByProvider      = "provider"
	BySerialization = "serialization"
	ByDepth         = "depth"
	ByKind          = "kind" // of hard negative
)

func bump(m map[string]map[string]*count, dim, k string, bad bool) {
	if m[dim] == nil {
		m[dim] = map[string]*count{}
	}
	c := m[dim][k]
	if c == nil {
		c = &count{}
		m[dim][k] = c
	}
	c.total++
	if bad {
		c.bad++
	}
}

// Add counts one request's result.
func (t *Tally) Add(r *Request, res Result) {
	if t.secrets == nil {
		t.secrets, t.negatives = map[string]map[string]*count{}, map[string]map[string]*count{}
	}
	for i, s := range r.Secrets {
		bad := res.Leaked[i]
		for dim, k := range map[string]string{
			"": "all", ByType: s.Type, ByLocation: s.Location, ByLayout: s.Layout,
			ByProvider: string(r.Provider), BySerialization: string(r.Serialization), ByDepth: strconv.Itoa(s.Depth),
		} {
			bump(t.secrets, dim, k, bad)
		}
		if bad {
			t.misses = append(t.misses, fmt.Sprintf("%s: %s in %s (%s, depth %d, %s)", r.Name, s.Type, s.Location, s.Layout, s.Depth, s.Pointer))
		}
	}
	for i, n := range r.Negatives {
		bad := res.Damaged[i]
		bump(t.negatives, "", "all", bad)
		bump(t.negatives, ByKind, n.Kind, bad)
		bump(t.negatives, ByProvider, string(r.Provider), bad)
		bump(t.negatives, BySerialization, string(r.Serialization), bad)
		if bad {
			t.misses = append(t.misses, fmt.Sprintf("%s: hard negative %s changed (depth %d, %s)", r.Name, n.Kind, n.Depth, n.Pointer))
		}
	}
}

// Recall is the share of secret occurrences no longer recoverable.
func (t *Tally) Recall() float64 {
	c := t.secrets[""]["all"]
	if c == nil || c.total == 0 {
		return 1
	}
	return 1 - float64(c.bad)/float64(c.total)
}

// Damage is the share of hard negatives changed.
func (t *Tally) Damage() float64 {
	c := t.negatives[""]["all"]
	if c == nil || c.total == 0 {
		return 0
	}
	return float64(c.bad) / float64(c.total)
}

// Secrets are the secret occurrences counted, and how many leaked.
func (t *Tally) Secrets() (total, leaked int) {
	if c := t.secrets[""]["all"]; c != nil {
		return c.total, c.bad
	}
	return 0, 0
}

// Negatives are the hard negatives counted, and how many were changed.
func (t *Tally) Negatives() (total, damaged int) {
	if c := t.negatives[""]["all"]; c != nil {
		return c.total, c.bad
	}
	return 0, 0
}

// Misses describes each leaked secret and damaged negative: request,
// type or kind, location, layout, depth and pointer; never a value.
func (t *Tally) Misses() []string { return t.misses }

// Table is the recall by one dimension (ByType, ByLocation, ByLayout,
// ByProvider, BySerialization, ByDepth), as aligned text, worst first.
func (t *Tally) Table(dim string) string {
	return table(t.secrets[dim], dim, "leaked", "recall", func(c *count) float64 { return 1 - float64(c.bad)/float64(c.total) })
}

// DamageTable is the damage by ByKind, ByProvider or BySerialization.
func (t *Tally) DamageTable(dim string) string {
	return table(t.negatives[dim], dim, "changed", "damage", func(c *count) float64 { return float64(c.bad) / float64(c.total) })
}

func table(m map[string]*count, dim, what, title string, rate func(*count) float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := m[keys[i]], m[keys[j]]
		if a.bad*b.total != b.bad*a.total {
			return a.bad*b.total > b.bad*a.total
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-26s %7s %7s %7s\n", dim, "total", what, title)
	for _, k := range keys {
		c := m[k]
		fmt.Fprintf(&b, "%-26s %7d %7d %7.3f\n", k, c.total, c.bad, rate(c))
	}
	return b.String()
}
