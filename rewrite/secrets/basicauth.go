package secrets

import "strings"

// A password given with its user: curl's -u user:password (--user), and
// the userinfo of a URL (https://user:password@host), whatever the scheme
// (database URLs have a rule of their own, which wins). The secret is the
// password.

// matchCurlUser matches curl's -u or --user option at a keyword hit.
func matchCurlUser(s string, start, end int, loc *[4]int) bool {
	if start > 0 && s[start-1] != ' ' && s[start-1] != '\t' && s[start-1] != '\n' {
		return false
	}
	i := end
	switch {
	case i < len(s) && s[i] == '=':
		i++
	case i < len(s) && (s[i] == ' ' || s[i] == '\t'):
		i = skipBlanks(s, i, min(len(s), i+5))
	case quoteAt(s, i) == "":
		return false // -uadmin:…, -use, --username
	}
	q := quoteAt(s, i)
	vs := i + len(q)
	ve := vs
	if q != "" {
		v, ok := valueUntil(s, vs, q)
		if !ok {
			return false
		}
		ve = v
	} else {
		for ve < len(s) && ve-vs < maxValue && s[ve] != ' ' && s[ve] != '\t' && s[ve] != '\n' && s[ve] != '\r' && s[ve] != '\\' {
			ve++
		}
	}
	colon := strings.IndexByte(s[vs:ve], ':')
	if colon < 0 {
		return false
	}
	ps := vs + colon + 1
	if ps >= ve || !plausibleValue(s[ps:ve], false) {
		return false
	}
	*loc = [4]int{start, ve, ps, ve}
	return true
}

// matchURLPassword matches the password of a URL's userinfo at a "://"
// keyword hit.
func matchURLPassword(s string, start, end int, loc *[4]int) bool {
	ss := start
	for ss > 0 && start-ss < 16 && (isAlnum(s[ss-1]) || s[ss-1] == '+' || s[ss-1] == '-' || s[ss-1] == '.') {
		ss--
	}
	if ss == start {
		return false // no scheme
	}
	// The userinfo ends at the last '@' before the path: a password may
	// hold an '@' that should have been escaped.
	colon, at := -1, -1
	lim := min(len(s), end+maxValue)
scan:
	for j := end; j < lim; j++ {
		switch c := s[j]; c {
		case ' ', '\t', '\n', '\r', '/', '"', '\'', '`', '\\':
			break scan
		case ':':
			if colon < 0 {
				colon = j
			}
		case '@':
			at = j
		}
	}
	if at < colon {
		return false
	}
	if colon < 0 || at < 0 || at+1 >= len(s) || !(isAlnum(s[at+1]) || s[at+1] == '[') {
		return false
	}
	if !plausibleValue(s[colon+1:at], false) {
		return false
	}
	*loc = [4]int{ss, at, colon + 1, at}
	return true
}
