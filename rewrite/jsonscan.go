package rewrite

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
)

// maxJSONDepth is the deepest nesting parseJSON accepts: encoding/json's.
const maxJSONDepth = 10000

// parseJSON reports whether t is valid JSON, as json.Valid does (invalid
// UTF-8 inside strings is accepted, as there), several times faster; when
// it is, it appends to spans the inside of each of its strings, object
// keys included, in order (their d0 and d1 left as r0 and r1).
func parseJSON(t string, spans strSpans) (strSpans, bool) {
	return scanJSON(t, spans, nil)
}

// span is t[start:end] of some text.
type span struct{ start, end int }

// scanJSON is parseJSON that also appends to *objs, when objs is not nil,
// each object that is the value of a key toolKey names, or array under
// "json" (Bedrock's toolResult json is any JSON value), and is inside no
// other such value: from its { or [ to past its } or ].
func scanJSON(t string, spans strSpans, objs *[]span) (strSpans, bool) {
	var stack []byte // the open containers: '{' or '['
	obj := -1        // the depth of the stack at which the tool object being read opened
	objStart := 0
	i := skipSpace(t, 0)
	for {
		// A value starts at i.
		if i >= len(t) {
			return spans, false
		}
		switch c := t[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxJSONDepth {
				return spans, false
			}
			close := byte('}')
			if c == '[' {
				close = ']'
			}
			if objs != nil && obj < 0 && len(stack) > 0 && stack[len(stack)-1] == '{' {
				if k := t[spans[len(spans)-1].r0:spans[len(spans)-1].r1]; c == '{' && toolKey(k) || k == "json" {
					obj, objStart = len(stack), i
				}
			}
			i = skipSpace(t, i+1)
			if i < len(t) && t[i] == close {
				i++
				if obj == len(stack) {
					obj = -1 // empty: nothing to read in it
				}
				break // empty: a whole value
			}
			stack = append(stack, c)
			if c == '{' {
				var ok bool
				if i, spans, ok = parseKey(t, i, spans); !ok {
					return spans, false
				}
			}
			continue // its first value
		case c == '"':
			end, ok := stringEndValid(t, i)
			if !ok {
				return spans, false
			}
			spans = append(spans, strSpan{r0: i + 1, r1: end - 1, d0: i + 1, d1: end - 1})
			i = end
		case c == '-' || '0' <= c && c <= '9':
			var ok bool
			if i, ok = numberEnd(t, i); !ok {
				return spans, false
			}
		default:
			n := literal(t[i:])
			if n == 0 {
				return spans, false
			}
			i += n
		}
		// After a value: close what ends here, then a comma or the end.
		for {
			i = skipSpace(t, i)
			if len(stack) == 0 {
				return spans, i == len(t)
			}
			if i >= len(t) {
				return spans, false
			}
			top := stack[len(stack)-1]
			switch c := t[i]; {
			case c == ',':
				i = skipSpace(t, i+1)
				if top == '{' {
					var ok bool
					if i, spans, ok = parseKey(t, i, spans); !ok {
						return spans, false
					}
				}
			case c == '}' && top == '{', c == ']' && top == '[':
				stack = stack[:len(stack)-1]
				i++
				if obj == len(stack) {
					*objs = append(*objs, span{objStart, i})
					obj = -1
				}
				continue
			default:
				return spans, false
			}
			break
		}
	}
}

// toolKey reports whether an object under this key holds a tool's input
// or output as JSON, data rather than an API's fields: Anthropic's and
// Bedrock's tool_use and toolUse input, Gemini's functionCall args and
// functionResponse response, Bedrock's toolResult json.
func toolKey(k string) bool {
	switch k {
	case "input", "args", "response", "json":
		return true
	}
	return false
}

// parseKey reads an object's key and its colon at i, and returns where
// its value starts.
func parseKey(t string, i int, spans strSpans) (int, strSpans, bool) {
	if i >= len(t) || t[i] != '"' {
		return i, spans, false
	}
	end, ok := stringEndValid(t, i)
	if !ok {
		return i, spans, false
	}
	spans = append(spans, strSpan{r0: i + 1, r1: end - 1, d0: i + 1, d1: end - 1, key: true})
	i = skipSpace(t, end)
	if i >= len(t) || t[i] != ':' {
		return i, spans, false
	}
	return skipSpace(t, i+1), spans, true
}

func skipSpace(t string, i int) int {
	for i < len(t) && isSpace(t[i]) {
		i++
	}
	return i
}

// stringEndValid returns the index just past the end of the JSON string
// that opens at t[i], if it is a valid one.
func stringEndValid(t string, i int) (int, bool) {
	for j := i + 1; j < len(t); {
		switch c := t[j]; {
		case c == '"':
			return j + 1, true
		case c == '\\':
			if j+1 >= len(t) {
				return 0, false
			}
			switch t[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if _, ok := hex4(t[min(j+2, len(t)):]); !ok {
					return 0, false
				}
				j += 6
			default:
				return 0, false
			}
		case c < 0x20:
			return 0, false
		default:
			j++
		}
	}
	return 0, false
}

// numberEnd returns the index just past the JSON number at t[i], if it is
// a valid one: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(t string, i int) (int, bool) {
	if t[i] == '-' {
		i++
	}
	switch {
	case i < len(t) && t[i] == '0':
		i++
	case i < len(t) && '1' <= t[i] && t[i] <= '9':
		i = digitsEnd(t, i)
	default:
		return i, false
	}
	if i < len(t) && t[i] == '.' {
		j := digitsEnd(t, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		i++
		if i < len(t) && (t[i] == '+' || t[i] == '-') {
			i++
		}
		j := digitsEnd(t, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func digitsEnd(t string, i int) int {
	for i < len(t) && '0' <= t[i] && t[i] <= '9' {
		i++
	}
	return i
}

// literal returns the length of the true, false or null that starts t, or
// 0.
func literal(t string) int {
	for _, l := range [...]string{"true", "false", "null"} {
		if len(t) >= len(l) && t[:len(l)] == l {
			return len(l)
		}
	}
	return 0
}

// pointedString is one string of a JSON body: body[start:end], quotes
// included, and its JSON pointer.
type pointedString struct {
	start, end int
	pointer    string
}

// stringPointers returns the strings of a JSON body, in order, each with
// its JSON pointer (RFC 6901; a key has its member's, its own name written
// *); nil for a body that is not JSON. Keys inside a tool's data (toolKey)
// are written * too: they may be anything, a secret included; so is a key
// that is not a plain name (up to 24 letters, '_' and '-'). It is
// encoding/json's reading (Decoder.Token), made only to say where
// something is.
func stringPointers(body []byte) []pointedString {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	type level struct {
		array bool
		data  bool // inside a tool's data
		index int
		key   string
		inKey bool // an object's next string is a key
	}
	var path []level
	pointer := func(hideLast bool) string {
		var b strings.Builder
		for i, l := range path {
			b.WriteByte('/')
			switch {
			case l.array:
				b.WriteString(strconv.Itoa(l.index))
			case !l.data && plainKey(l.key) && !(hideLast && i == len(path)-1):
				b.WriteString(l.key)
			default:
				b.WriteByte('*')
			}
		}
		return b.String()
	}
	// A value ends: the next one of its array has the next index, the next
	// string of its object is a key.
	ended := func() {
		if n := len(path); n > 0 {
			if path[n-1].array {
				path[n-1].index++
			} else {
				path[n-1].inKey = true
			}
		}
	}
	// data says whether a container opening here is a tool's data: an
	// object under a toolKey (as scanJSON's), or inside one.
	data := func(object bool) bool {
		n := len(path)
		return n > 0 && (path[n-1].data || object && !path[n-1].array && toolKey(path[n-1].key))
	}
	var out []pointedString
	for {
		start := d.InputOffset()
		tok, err := d.Token()
		if err != nil {
			if err == io.EOF {
				return out
			}
			return nil
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				path = append(path, level{inKey: true, data: data(true)})
			case '[':
				path = append(path, level{array: true, data: data(false)})
			default:
				path = path[:len(path)-1]
				ended()
			}
		case string:
			end := int(d.InputOffset())
			// The token began after any separator and space before it.
			at := int(start) + bytes.IndexByte(body[start:end], '"')
			if n := len(path); n > 0 && !path[n-1].array && path[n-1].inKey {
				path[n-1].key, path[n-1].inKey = t, false
				out = append(out, pointedString{at, end, pointer(true)})
				continue
			}
			out = append(out, pointedString{at, end, pointer(false)})
			ended()
		default:
			ended()
		}
	}
}

// plainKey reports whether an object's key is a plain name: up to 24
// letters, '_' and '-'.
func plainKey(k string) bool {
	if k == "" || len(k) > 24 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
