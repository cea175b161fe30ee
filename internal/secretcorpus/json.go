package secretcorpus

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A generated body is a tree of JSON values: obj (keys in the order a
// client writes them), arr, string, *text (a string that holds planted
// values), nested (a string that holds JSON), int, float64, bool, nil.
type (
	obj   []field
	field struct {
		k string
		v any
	}
	arr []any
	// nested is a string value whose content is the JSON of v, as the
	// client that wrote it serializes (compact, its own escaping).
	nested struct{ v any }
)

// text is a string with the secrets and hard negatives planted in it.
type text struct {
	s     string
	marks []mark
}

// mark is one secret or hard negative planted in a text; depth counts the
// JSON strings between the text and the value (a secret in a JSON file
// shown as text is at depth 1).
type mark struct {
	sec   *plant
	neg   *negPlant
	depth int
}

// plant is a secret planted once; every body that carries it (a session
// resends its history) reports it again.
type plant struct {
	typ, location, layout string
	value                 string
	probes                []string
}

type negPlant struct{ kind, value string }

func (t *text) add(s string) *text {
	t.s += s
	return t
}

// with appends o's text and takes its marks.
func (t *text) with(o *text) *text {
	t.s += o.s
	t.marks = append(t.marks, o.marks...)
	return t
}

func (t *text) secret(p *plant) *text {
	t.marks = append(t.marks, mark{sec: p})
	return t
}

func (t *text) negative(kind, value string) *text {
	t.marks = append(t.marks, mark{neg: &negPlant{kind: kind, value: value}})
	return t
}

// mapLines applies fn to each line of t (the marks stay: what they point
// at must survive fn).
func (t *text) mapLines(fn func(i int, line string) string) *text {
	lines := strings.Split(t.s, "\n")
	for i, l := range lines {
		lines[i] = fn(i, l)
	}
	return &text{s: strings.Join(lines, "\n"), marks: t.marks}
}

// negText is a string value that is itself a hard negative.
func negText(kind, value string) *text {
	return (&text{s: value}).negative(kind, value)
}

// style is how a client writes JSON.
type style struct {
	itemSep, keySep string
	indent          string // "" for one line
	html            bool   // <, >, &, U+2028 and U+2029 as \u escapes (Go's encoding/json)
	ascii           bool   // everything outside printable ASCII as \u escapes (Python's ensure_ascii)
}

func styleOf(s Serialization) style {
	switch s {
	case Python:
		return style{itemSep: ", ", keySep: ": ", ascii: true}
	case GoJSON:
		return style{itemSep: ",", keySep: ":", html: true}
	case Pretty:
		return style{itemSep: ",", keySep: ": ", indent: "  "}
	}
	return style{itemSep: ",", keySep: ":"} // JS
}

// inner is the style of the JSON a client writes inside a string (tool
// arguments, a wrapped tool output): its own escaping, on one line.
func (st style) inner() style {
	if st.indent != "" {
		return style{itemSep: ",", keySep: ":"}
	}
	return st
}

// indented is the style of a program that prints indented JSON: the AWS
// and Azure CLIs (Python), kubectl (Go).
func indented(indent string, html, ascii bool) style {
	return style{itemSep: ",", keySep: ": ", indent: indent, html: html, ascii: ascii}
}

// encoder writes a tree; onText sees every *text and nested value with
// the JSON pointer of the string it is.
type encoder struct {
	b      strings.Builder
	st     style
	onText func(ptr string, t *text)
}

// jsonText serializes v as st writes it; the result carries the marks of
// every text in v, one level deeper.
func jsonText(v any, st style) *text {
	t := &text{}
	e := encoder{st: st, onText: func(_ string, x *text) {
		for _, m := range x.marks {
			m.depth++
			t.marks = append(t.marks, m)
		}
	}}
	e.value(v, "", 0)
	t.s = e.b.String()
	return t
}

func (e *encoder) newline(level int) {
	if e.st.indent == "" {
		return
	}
	e.b.WriteByte('\n')
	for range level {
		e.b.WriteString(e.st.indent)
	}
}

func (e *encoder) value(v any, ptr string, level int) {
	switch x := v.(type) {
	case nil:
		e.b.WriteString("null")
	case bool:
		e.b.WriteString(strconv.FormatBool(x))
	case int:
		e.b.WriteString(strconv.Itoa(x))
	case float64:
		e.b.WriteString(strconv.FormatFloat(x, 'f', -1, 64))
	case string:
		e.st.appendString(&e.b, x)
	case *text:
		e.st.appendString(&e.b, x.s)
		if e.onText != nil {
			e.onText(ptr, x)
		}
	case nested:
		t := jsonText(x.v, e.st.inner())
		e.value(t, ptr, level)
	case obj:
		if len(x) == 0 {
			e.b.WriteString("{}")
			return
		}
		e.b.WriteByte('{')
		for i, f := range x {
			if i > 0 {
				e.b.WriteString(e.st.itemSep)
			}
			e.newline(level + 1)
			e.st.appendString(&e.b, f.k)
			e.b.WriteString(e.st.keySep)
			e.value(f.v, ptr+"/"+pointerToken(f.k), level+1)
		}
		e.newline(level)
		e.b.WriteByte('}')
	case arr:
		if len(x) == 0 {
			e.b.WriteString("[]")
			return
		}
		e.b.WriteByte('[')
		for i, item := range x {
			if i > 0 {
				e.b.WriteString(e.st.itemSep)
			}
			e.newline(level + 1)
			e.value(item, ptr+"/"+strconv.Itoa(i), level+1)
		}
		e.newline(level)
		e.b.WriteByte(']')
	default:
		panic(fmt.Sprintf("secretcorpus: cannot encode %T", v))
	}
}

// pointerToken escapes a key for a JSON pointer (RFC 6901).
func pointerToken(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// appendString writes s as a JSON string the way st's client does.
func (st style) appendString(b *strings.Builder, s string) {
	const hexDigits = "0123456789abcdef"
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hexDigits[r>>12&0xf])
		b.WriteByte(hexDigits[r>>8&0xf])
		b.WriteByte(hexDigits[r>>4&0xf])
		b.WriteByte(hexDigits[r&0xf])
	}
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			u4(r)
		case st.html && (r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029'):
			u4(r)
		case st.ascii && r > 0x7e:
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				u4(r1)
				u4(r2)
			} else {
				u4(r)
			}
		case r == utf8.RuneError:
			u4(r) // only valid UTF-8 is generated; keep the output valid regardless
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// escapeJSON is s as st writes it inside a JSON string (without quotes).
func (st style) escapeJSON(s string) string {
	var b strings.Builder
	st.appendString(&b, s)
	return b.String()[1 : b.Len()-1]
}
