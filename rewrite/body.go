package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxTaskBytes bounds Request.Task.
const MaxTaskBytes = 4 << 10

// Request is what Inspect learns from an LLM request body.
type Request struct {
	API    API
	Model  string
	Stream bool
	Task   string // the text of the last user message, at most MaxTaskBytes, cut at a rune boundary
	// Prompt is that text whole: for the log, through LogPrompt.
	Prompt string
}

// Inspect reads an LLM request body: the model (from the body, or from path
// for Gemini, Vertex and Bedrock, which name it there), whether the response
// will stream, and the agent's current task, the text of the most recent
// user message that has text (tool results are not the task). It returns an
// error only for a body that is not JSON; fields of unexpected shapes are
// left empty.
func Inspect(api API, path string, body []byte) (Request, error) {
	req := Request{API: api}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		if !json.Valid(body) {
			return req, errors.New("rewrite: inspect: body is not JSON")
		}
		return req, nil // JSON, but not an object
	}
	req.Model = jsonString(top["model"])
	if req.Model == "" {
		req.Model = pathModel(path)
	}
	req.Stream = bytes.Equal(bytes.TrimSpace(top["stream"]), []byte("true")) || pathStreams(path)
	switch api.Op {
	case OpResponses:
		if s := jsonString(top["input"]); s != "" {
			req.Task = s
		} else {
			req.Task = lastUserText(top["input"], "role", "content")
		}
	case OpGenerateContent, OpStreamGenerateContent:
		req.Task = lastUserText(top["contents"], "role", "parts")
	default: // messages, chat.completions, converse, invoke
		req.Task = lastUserText(top["messages"], "role", "content")
		if req.Task == "" {
			for _, k := range []string{"prompt", "inputText"} { // Bedrock invoke of non-chat models
				if s := jsonString(top[k]); s != "" {
					req.Task = s
					break
				}
			}
		}
	}
	req.Prompt, req.Task = req.Task, clip(req.Task, MaxTaskBytes)
	return req, nil
}

// LogPrompt returns text as an llm event may say it: every secret r finds
// replaced by its placeholder, at most max bytes, cut at a rune boundary
// and never inside a placeholder (cut says it was cut). Without a
// redactor it returns nothing: a prompt is never logged with what may be
// a secret. The whole text is searched, so that no secret is cut in two
// where a search would miss it.
func LogPrompt(text string, r Redactor, max int) (out string, cut bool) {
	if text == "" || r == nil || max <= 0 {
		return "", false
	}
	var b strings.Builder
	last := 0 // text[last:] is not in b yet
	full := false
	put := func(s string) {
		if full {
			return
		}
		if room := max - b.Len(); len(s) > room {
			b.WriteString(clip(s, room))
			full = true
			return
		}
		b.WriteString(s)
	}
	r.FindSecrets(text, func(start, end int, _, placeholder string) {
		if full || start < last || end > len(text) {
			return
		}
		put(text[last:start])
		if !full && b.Len()+len(placeholder) > max {
			full = true // a placeholder is whole or not at all
		}
		put(placeholder)
		last = end
	})
	put(text[last:])
	return b.String(), full
}

func jsonString(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// lastUserText returns the text of the last item of the array list whose role
// is user (or, for Gemini, absent) and that has text. content is a string or
// an array of blocks; blocks of type "text" or "input_text", or without a type
// (Gemini parts, Bedrock content), give their "text", joined by newlines.
func lastUserText(list json.RawMessage, roleKey, contentKey string) string {
	var items []map[string]json.RawMessage
	if json.Unmarshal(list, &items) != nil {
		return ""
	}
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		role, hasRole := it[roleKey]
		if hasRole && jsonString(role) != "user" {
			continue
		}
		if !hasRole && contentKey != "parts" {
			continue
		}
		if t := blocksText(it[contentKey]); t != "" {
			return t
		}
	}
	return ""
}

func blocksText(content json.RawMessage) string {
	if s := jsonString(content); s != "" {
		return s
	}
	var blocks []struct {
		Type *string `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(content, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks {
		if b.Text == nil || *b.Text == "" {
			continue
		}
		if b.Type != nil && *b.Type != "text" && *b.Type != "input_text" {
			continue
		}
		parts = append(parts, *b.Text)
	}
	return strings.Join(parts, "\n")
}

// clip cuts s to at most n bytes at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// RewriteStrings calls fn on every JSON string value of body (never object
// keys) and splices in those fn changes, re-encoded; every other byte stays as
// it was, so the output is valid JSON when body was. When fn changes nothing,
// out is body itself (not a copy) and changed is false. fn sees each value
// decoded (escapes resolved; an unpaired surrogate escape becomes U+FFFD) and
// may return (s, true) with s unchanged: that counts as no change. Replacements
// are written with the escapes JSON needs ("\"", "\\", control characters) and
// nothing else; HTML characters are not escaped.
func RewriteStrings(body []byte, fn func(s string) (string, bool)) (out []byte, changed bool, err error) {
	if !json.Valid(body) {
		return nil, false, errors.New("rewrite: rewrite strings: body is not valid JSON")
	}
	if len(body) == 0 {
		return body, false, nil
	}
	b := unsafe.String(&body[0], len(body)) // read only; fn gets copies
	last := 0                               // body[last:] has not been copied to out yet
	forStrings(b, func(start, end int, key bool) {
		if key {
			return
		}
		raw := b[start+1 : end-1]
		var s string
		if strings.IndexByte(raw, '\\') >= 0 {
			s = unescape(raw, nil)
		} else {
			s = strings.Clone(raw)
		}
		ns, ok := fn(s)
		if !ok || ns == s {
			return
		}
		if out == nil {
			out = make([]byte, 0, len(body)+len(body)/16+len(ns))
		}
		out = append(out, body[last:start]...)
		out = append(out, '"')
		out = appendEscaped(out, ns)
		out = append(out, '"')
		last = end
	})
	if out == nil {
		return body, false, nil
	}
	return append(out, body[last:]...), true, nil
}

// forStrings calls fn on each string of b, a valid JSON text, in order,
// object keys included (key says which): b[start] is its opening quote and
// b[end-1] its closing one.
func forStrings(b string, fn func(start, end int, key bool)) {
	for i := 0; ; {
		j := strings.IndexByte(b[i:], '"')
		if j < 0 {
			return
		}
		start := i + j
		end := stringEnd(b, start)
		i = end
		k := end
		for k < len(b) && isSpace(b[k]) {
			k++
		}
		fn(start, end, k < len(b) && b[k] == ':')
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// stringEnd returns the index just past the closing quote of the JSON string
// that opens at b[start]; b is valid JSON.
func stringEnd(b string, start int) int {
	i := start + 1
	for {
		j := strings.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		n := 0
		for p := q - 1; p > start && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// escape is one escape sequence of an escaped text: raw[r0:r1] decodes to
// dec[d0:d1].
type escape struct{ r0, r1, d0, d1 int }

// escapes maps positions between an escaped text and its decoding: its
// escape sequences in order; between them the two advance together.
type escapes []escape

// toRaw returns the position in the escaped text of position d of the
// decoding. A position inside the bytes an escape decodes to goes to the
// escape's start, or with ceil to its end.
func (m escapes) toRaw(d int, ceil bool) int {
	i := sort.Search(len(m), func(i int) bool { return m[i].d0 > d }) - 1
	if i < 0 {
		return d
	}
	switch e := m[i]; {
	case d >= e.d1:
		return e.r1 + d - e.d1
	case d == e.d0 || !ceil:
		return e.r0
	default:
		return e.r1
	}
}

// toDec returns the position in the decoding of position r of the escaped
// text; one inside an escape sequence goes to the start of what it decodes
// to, or with ceil to its end.
func (m escapes) toDec(r int, ceil bool) int {
	i := sort.Search(len(m), func(i int) bool { return m[i].r0 > r }) - 1
	if i < 0 {
		return r
	}
	switch e := m[i]; {
	case r >= e.r1:
		return e.d1 + r - e.r1
	case r == e.r0 || !ceil:
		return e.d0
	default:
		return e.d1
	}
}

// unescape resolves the JSON escapes of raw (\" \\ \/ \b \f \n \r \t
// \uXXXX, a surrogate pair as one rune, an unpaired surrogate as U+FFFD) and
// keeps every other byte, invalid UTF-8 and a backslash before anything else
// included: of a valid JSON string's inside it is the value. With m, it
// appends each escape resolved to *m.
func unescape(raw string, m *escapes) string {
	b := appendUnescaped(make([]byte, 0, len(raw)), raw, m)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is not used again
}

// appendUnescaped appends unescape(raw) to b; the escapes it appends to m
// (if not nil) count from where it began to append.
func appendUnescaped(b []byte, raw string, m *escapes) []byte {
	base := len(b)
	for i := 0; i < len(raw); {
		j := strings.IndexByte(raw[i:], '\\')
		if j < 0 || i+j+1 >= len(raw) {
			b = append(b, raw[i:]...)
			break
		}
		b = append(b, raw[i:i+j]...)
		r0, d0 := i+j, len(b)
		i += j + 2
		switch raw[i-1] {
		case '"', '\\', '/':
			b = append(b, raw[i-1])
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := hex4(raw[i:])
			if !ok {
				b = append(b, raw[i-2:i]...)
				continue
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					r2, ok = hex4(raw[i+2:])
				}
				if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
		default: // not an escape: kept
			b = append(b, raw[i-2:i]...)
			continue
		}
		if m != nil {
			*m = append(*m, escape{r0, i, d0 - base, len(b) - base})
		}
	}
	return b
}

func hex4(b string) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendEscaped appends s escaped for the inside of a JSON string: '"', '\\'
// and control characters; nothing else (no HTML escaping, invalid UTF-8 kept).
func appendEscaped(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	return append(dst, s[start:]...)
}

// errorf builds this package's errors.
func errorf(format string, args ...any) error {
	return fmt.Errorf("rewrite: "+format, args...)
}
