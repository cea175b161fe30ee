package secrets

import "strings"

// A PEM private key as agents' tools show it: raw, with CRLF line ends,
// "\n"-escaped once or more (a JSON string, or one inside another), indented
// (a YAML block such as Kubernetes' "tls.key: |"), line-numbered (Claude
// Code's Read tool: "     2→MIIE…", cat -n: "     2\tMIIE…"), as the lines
// of a diff ("+MIIE…"), quoted line by line in code, or flattened to one line
// with blanks. The key is matched by hand, not by a regex: it has no length
// bound, and a regex's window would cut it.

// maxPrivateKey bounds a key's text (a 16384-bit RSA key is about 13 KiB,
// line-numbered and escaped about 17 KiB): below StreamOverlap, so that a
// stream window always holds a whole key.
const maxPrivateKey = 48 << 10

// Private-key body checks: a key with its END line needs minKeyChars
// base64 bytes in lines of at least minKeyLine (".." or "MIIE..." in docs is
// no key); one cut before its END line needs minCutChars.
const (
	minKeyLine  = 16
	minKeyChars = 40
	minCutChars = 32
)

// matchPrivateKey matches a private key whose BEGIN line starts at start:
// the whole block to the END line, or, when no END line follows, to the end
// of its last base64 line. The secret is the whole match.
func matchPrivateKey(s string, start, _ int, loc *[4]int) bool {
	p, ok := pemMarker(s, start, "-----BEGIN")
	if !ok {
		return false
	}
	limit := min(len(s), start+maxPrivateKey)
	cutEnd, cutChars, frozen := -1, 0, false
	lastCut, lastChars, undo := 0, 0, false // the cut before the last run
	keyChars, runs, headers := 0, 0, 0
	for p < limit {
		g, nl := pemGap(s, p, limit)
		if strings.HasPrefix(s[g:], "-----END") {
			e, ok := pemMarker(s, g, "-----END")
			if !ok || keyChars < minKeyChars {
				break
			}
			*loc = [4]int{start, e, start, e}
			return true
		}
		if g == p && runs+headers > 0 {
			// A line goes on with something that is not base64: its run
			// was no key's ("MIIE…" in docs).
			if undo {
				cutEnd, cutChars = lastCut, lastChars
			}
			break
		}
		if runs == 0 && headers < 4 {
			if h := pemHeader(s, g, limit); h > g {
				headers++
				p = h
				continue
			}
		}
		if nl > 1 && runs > 0 {
			frozen = true // a blank line ends a key without END
		}
		r := pemRun(s, g, limit)
		if r == g {
			break
		}
		n := r - g
		runs++
		if n >= minKeyLine {
			keyChars += n
		}
		undo = false
		// A quote ends the text the key is in as the text's end does: a
		// string of JSON, read with the rest of its document.
		closed := r < len(s) && s[r] == '"'
		if !frozen {
			switch {
			case n >= minKeyLine || r == len(s) || closed || s[r-1] == '=':
				lastCut, lastChars, undo = cutEnd, cutChars, true
				cutEnd, cutChars = r, cutChars+n
			default:
				frozen = true
			}
		}
		if closed {
			break
		}
		p = r
	}
	if cutChars < minCutChars {
		return false
	}
	*loc = [4]int{start, cutEnd, start, cutEnd}
	return true
}

// pemMarker matches a BEGIN or END line at i ("-----BEGIN RSA PRIVATE
// KEY-----") and returns its end.
func pemMarker(s string, i int, word string) (int, bool) {
	if !strings.HasPrefix(s[i:], word) {
		return 0, false
	}
	i += len(word)
	j := i
	for j < len(s) && j-i < 120 && (s[j] == ' ' || s[j] == '_' || 'A' <= s[j] && s[j] <= 'Z' || '0' <= s[j] && s[j] <= '9' || s[j] == '-') {
		if strings.HasPrefix(s[j:], "-----") {
			label := s[i:j]
			if strings.HasSuffix(label, "PRIVATE KEY") || strings.HasSuffix(label, "PRIVATE KEY BLOCK") {
				return j + 5, true
			}
			return 0, false
		}
		j++
	}
	return 0, false
}

// pemGap skips what separates two base64 lines of a key: line breaks, raw
// or escaped ("\n", "\\n", "\r\n"), blanks, quotes, commas, and at a line's
// start its number ("2→", "2\t", "2:", "2|"), a diff or quote mark ("+",
// "-", ">", "#", "*", "|"). It returns the gap's end and how many line ends
// it holds (raw and escaped ones counted apart, the larger count: a Go
// string's "…\n" + at a line's end is one).
func pemGap(s string, i, limit int) (int, int) {
	raw, esc := 0, 0
	lineStart := false
	for i < limit {
		c := s[i]
		switch {
		case c == '\n':
			raw++
			lineStart = true
			i++
		case c == '\r' || c == ' ' || c == '\t' || c == '"' || c == '\'' || c == ',':
			i++
		case c == '\\':
			j := i
			for j < limit && s[j] == '\\' {
				j++
			}
			if j >= limit {
				return i, max(raw, esc)
			}
			switch s[j] {
			case 'n':
				esc++
				lineStart = true
			case 'r', 't', '"', '\'':
			case 'u':
				if !strings.HasPrefix(s[j:], "u2192") {
					return i, max(raw, esc)
				}
				j += 4
			default:
				return i, max(raw, esc) // "\/" starts a base64 run
			}
			i = j + 1
		case c == '-' && strings.HasPrefix(s[i:], "-----"):
			if lineStart && strings.HasPrefix(s[i+1:], "-----END") {
				i++ // a diff's removed END line
				continue
			}
			return i, max(raw, esc)
		case lineStart && (c == '+' || c == '-' || c == '>' || c == '#' || c == '*' || c == '|'):
			i++
		case lineStart && '0' <= c && c <= '9':
			j := i
			for j < limit && j-i < 8 && '0' <= s[j] && s[j] <= '9' {
				j++
			}
			for j < limit && s[j] == ' ' {
				j++
			}
			e := lineNumberEnd(s, j, limit)
			if e < 0 {
				return i, max(raw, esc)
			}
			i = e
		case c == '+' && i+1 < limit && (s[i+1] == ' ' || s[i+1] == '\n' || s[i+1] == '\t'):
			i++ // a string concatenation: "…\n" +
		default:
			return i, max(raw, esc)
		}
	}
	return i, max(raw, esc)
}

// lineNumberEnd returns the end of a line number's end mark at i: "→" (raw
// or \u2192), a tab (raw or escaped), ':' or '|'; -1 if there is none.
func lineNumberEnd(s string, i, limit int) int {
	if i >= limit {
		return -1
	}
	switch s[i] {
	case '\t', ':', '|':
		return i + 1
	case '\\':
		j := i
		for j < limit && s[j] == '\\' {
			j++
		}
		switch {
		case j < limit && s[j] == 't':
			return j + 1
		case strings.HasPrefix(s[j:limit], "u2192"):
			return j + 5
		}
		return -1
	}
	if strings.HasPrefix(s[i:limit], "→") {
		return i + len("→")
	}
	return -1
}

// pemRun returns the end of the base64 run at i ("\/" counts as "/").
func pemRun(s string, i, limit int) int {
	for i < limit {
		c := s[i]
		switch {
		case isAlnum(c) || c == '+' || c == '/' || c == '=':
			i++
		case c == '\\':
			j := i
			for j < limit && s[j] == '\\' {
				j++
			}
			if j >= limit || s[j] != '/' {
				return i
			}
			i = j + 1
		default:
			return i
		}
	}
	return i
}

// pemHeader returns the end of a header line at i ("Proc-Type: 4,ENCRYPTED",
// "DEK-Info: …", an armored key's "Version: …"), or i if there is none.
func pemHeader(s string, i, limit int) int {
	j := i
	for j < limit && j-i < 32 && (isAlnum(s[j]) || s[j] == '-') {
		j++
	}
	if j == i || j+1 >= limit || s[j] != ':' || s[j+1] != ' ' {
		return i
	}
	for j < limit && j-i < 256 && s[j] != '\n' && s[j] != '\r' {
		if s[j] == '\\' {
			k := j
			for k < limit && s[k] == '\\' {
				k++
			}
			if k < limit && (s[k] == 'n' || s[k] == 'r') {
				return j
			}
			j = k
			continue
		}
		j++
	}
	return j
}
