package secrets

import (
	"encoding/base64"
	"strings"
)

// A Kubernetes Secret holds nothing but secrets: every value of its data
// (base64) and stringData maps is one, whatever its key's name
// (DATABASE_URL, GITHUB_PAT, tls.crt alike), as kubectl get secret -o yaml
// or -o json shows them, also escaped inside a JSON string or
// line-numbered. A value that is base64 of a secret's text is found also
// alone (a JSON string of its own): see decodedSecret.

// matchSecretData matches the next value of a Secret's data or stringData
// map at or after from, for the map's keyword hit [start, end) ("data:",
// `data":`, stringData's too). The map is a Secret's only if kind Secret
// is near it, which the first call checks.
func matchSecretData(s string, start, end, from int, loc *[4]int) bool {
	if start > 0 && isNameByte(s[start-1]) && !(start >= 6 && strings.EqualFold(s[start-6:start], "string")) &&
		!(start > 1 && s[start-2] == '\\') {
		return false // metadata:, not an escape's letter (\ndata:)
	}
	i := skipBlanks(s, end, len(s))
	json := i < len(s) && s[i] == '{'
	pair := func(at int) (vs, ve, next int, ok bool) {
		if json {
			return nextJSONPair(s, max(i+1, at))
		}
		return nextYAMLPair(s, start, max(i, at))
	}
	// The next value that is not a placeholder ([REDACTED:…] when a
	// redacted text is searched again, a chart's {{ … }}).
	vs, ve, next, ok := pair(from)
	for n := 0; ok && n < 256 && isPlaceholder(s[vs:ve]); n++ {
		vs, ve, next, ok = pair(next)
	}
	if !ok {
		return false
	}
	if from == end {
		mapEnd := next
		for n := 0; n < 256; n++ {
			_, _, e, ok := pair(mapEnd)
			if !ok {
				break
			}
			mapEnd = e
		}
		if !kindSecret(s, start, mapEnd) {
			return false
		}
	}
	*loc = [4]int{vs, next, vs, ve}
	return true
}

// nextJSONPair returns the next "key": "value" pair of a JSON object at or
// after i (quotes escaped or not), and where the one after it may start.
func nextJSONPair(s string, i int) (vs, ve, next int, ok bool) {
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == ',' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
		if i+1 < len(s) && s[i] == '\\' && (s[i+1] == 'n' || s[i+1] == 'r' || s[i+1] == 't') {
			i += 2 // an escaped line break of pretty-printed JSON in a string
			continue
		}
		break
	}
	q := quoteAt(s, i)
	if q == "" {
		return 0, 0, 0, false // the object's end, or not a map of strings
	}
	ks := i + len(q)
	ke, ok := valueUntil(s, ks, q)
	if !ok {
		return 0, 0, 0, false
	}
	i = skipBlanks(s, ke+len(q), len(s))
	if i >= len(s) || s[i] != ':' {
		return 0, 0, 0, false
	}
	i = skipBlanks(s, i+1, len(s))
	vq := quoteAt(s, i)
	if vq == "" {
		return 0, 0, 0, false
	}
	vs = i + len(vq)
	if ve, ok = valueUntil(s, vs, vq); !ok || ve == vs {
		return 0, 0, 0, false
	}
	return vs, ve, ve + len(vq), true
}

// nextYAMLPair returns the next "key: value" line at or after i of the
// YAML map whose key ("data:") starts at start: a line indented deeper
// than that key's, after a line number if the view has them.
func nextYAMLPair(s string, start, i int) (vs, ve, next int, ok bool) {
	indent := lineIndent(s, start)
	for n := 0; n < 64; n++ {
		// To the next line's start (raw or escaped line end).
		for i < len(s) && s[i] != '\n' && !(s[i] == '\\' && i+1 < len(s) && s[i+1] == 'n') {
			i++
		}
		if i >= len(s) {
			return 0, 0, 0, false
		}
		if s[i] == '\\' {
			i++
		}
		i++
		b := lineBody(s, i)
		ks := skipBlanks(s, b, len(s))
		if ks-b <= indent {
			return 0, 0, 0, false // the map ended
		}
		ke := ks
		for ke < len(s) && (isNameByte(s[ke]) || s[ke] == '/') {
			ke++
		}
		if ke == ks || ke+1 >= len(s) || s[ke] != ':' || s[ke+1] != ' ' {
			return 0, 0, 0, false
		}
		vs = skipBlanks(s, ke+1, len(s))
		if q := quoteAt(s, vs); q != "" {
			e, ok := valueUntil(s, vs+len(q), q)
			if !ok {
				return 0, 0, 0, false
			}
			vs, ve, next = vs+len(q), e, e+len(q)
		} else {
			ve = vs
			for ve < len(s) && s[ve] != '\n' && s[ve] != '\r' && s[ve] != ' ' && s[ve] != '\\' {
				ve++
			}
			next = ve
		}
		if ve > vs && s[vs] != '|' && s[vs] != '>' {
			return vs, ve, next, true
		}
		i = next // a block scalar's lines are deeper still: skipped as pairs that fail
	}
	return 0, 0, 0, false
}

// lineIndent is the indentation of the line holding i, after its number
// if it has one.
func lineIndent(s string, i int) int {
	ls := i
	for ls > 0 && s[ls-1] != '\n' && !(s[ls-1] == 'n' && ls > 1 && s[ls-2] == '\\') {
		ls--
	}
	b := lineBody(s, ls)
	return skipBlanks(s, b, i) - b
}

// lineBody returns where a line starting at ls begins after its number
// ("     3→", "     3\t") or its mark in a patch ("+", "-"), or ls.
func lineBody(s string, ls int) int {
	if ls < len(s) && (s[ls] == '+' || s[ls] == '-') {
		return ls + 1
	}
	j := skipBlanks(s, ls, len(s))
	k := j
	for k < len(s) && k-j < 8 && '0' <= s[k] && s[k] <= '9' {
		k++
	}
	if k == j {
		return ls
	}
	if e := lineNumberEnd(s, k, len(s)); e > 0 {
		return e
	}
	return ls
}

// kindSecret reports whether the object around a data map [start, end)
// is a Kubernetes Secret: kind Secret within 512 bytes before it or 256
// after it.
func kindSecret(s string, start, end int) bool {
	lo, hi := max(0, start-512), min(len(s), end+256)
	w := s[lo:hi]
	for {
		k := strings.Index(w, "kind")
		if k < 0 {
			return false
		}
		rest := w[k+4:]
		j := 0
		for j < len(rest) && j < 8 && (rest[j] == '"' || rest[j] == '\\' || rest[j] == ':' || rest[j] == ' ') {
			j++
		}
		if strings.HasPrefix(rest[j:], "Secret") && (len(rest) == j+6 || !isAlnum(rest[j+6])) {
			return true
		}
		w = rest
	}
}

// decodedSecret reports the secret a whole text that is base64 holds: a
// value of a Kubernetes Secret, alone in a JSON string, is the base64 of a
// token, a URL with a password, a connection string. The decoded text must
// be printable and hold a finding of the other rules.
func (s *Scanner) decodedSecret(text string) (Finding, bool) {
	if len(text) < 16 || len(text) > 64<<10 {
		return Finding{}, false
	}
	for i := 0; i < len(text); i++ {
		if c := text[i]; !isAlnum(c) && c != '+' && c != '/' && c != '=' && c != '-' && c != '_' {
			return Finding{}, false
		}
	}
	// Its first 48 bytes first, without allocating: most base64 in a
	// prompt is binary (an image, a hash, a signature).
	url := strings.ContainsAny(text, "-_")
	enc, raw := base64.StdEncoding, base64.RawStdEncoding
	if url {
		enc, raw = base64.URLEncoding, base64.RawURLEncoding
	}
	if text[len(text)-1] != '=' {
		enc = raw
	}
	var src [64]byte
	var head [48]byte
	k := copy(src[:], text[:min(len(text), 64)&^3])
	headEnc := raw // a prefix has no padding
	if k == len(text) {
		headEnc = enc
	}
	n, err := headEnc.Decode(head[:], src[:k])
	if err != nil || !printable(head[:n]) {
		return Finding{}, false
	}
	dec, err := enc.DecodeString(text)
	if err != nil || len(dec) < 8 || !printable(dec) {
		return Finding{}, false
	}
	fs := s.scanText(string(dec), nil)
	if len(fs) == 0 {
		return Finding{}, false
	}
	return Finding{RuleID: fs[0].RuleID, Start: 0, End: len(text)}, true
}

// printable reports whether b is text: printable ASCII, blanks and line
// ends.
func printable(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\n' && c != '\r' && c != '\t' || c >= 0x7f {
			return false
		}
	}
	return true
}
