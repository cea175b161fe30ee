package proxy

import (
	"maps"
	"net/url"
	"strings"
)

// Redacted replaces credential values in events.
const Redacted = "[REDACTED]"

// RedactURL prints u for an event: scheme, host, path and query, without
// userinfo or fragment, and with the values of query parameters that carry
// credentials (sig, signature, token, key, access_token, X-Amz-Signature,
// anything named like a token, secret, password or API key) replaced by
// Redacted. Both '&' and ';' separate parameters, since some servers split
// on either. The rest of the query is kept byte for byte.
func RedactURL(u *url.URL) string { return redactURL(u, nil) }

// Flags of a query parameter in which a secret was found.
const (
	queryName  uint8 = 1 << iota // in its name: the whole parameter is Redacted
	queryValue                   // in its value: the value is Redacted
)

// redactURL is RedactURL, with also the parameters flagged (by position,
// as writeRedactedQuery splits the query; flags may be short) redacted.
func redactURL(u *url.URL, flags []uint8) string {
	var b strings.Builder
	path := u.EscapedPath()
	b.Grow(len(u.Scheme) + 3 + len(u.Host) + len(path) + 1 + len(u.RawQuery) + len(Redacted))
	if u.Scheme != "" {
		b.WriteString(u.Scheme)
		b.WriteByte(':')
	}
	if u.Opaque != "" {
		// An opaque URL may carry userinfo ("//user:pw@host/..."); drop it.
		o := u.Opaque
		if strings.HasPrefix(o, "//") {
			if at := strings.IndexByte(o, '@'); at >= 0 {
				if slash := strings.IndexByte(o[2:], '/'); slash < 0 || at < slash+2 {
					o = "//" + o[at+1:]
				}
			}
		}
		b.WriteString(o)
	} else {
		if u.Scheme != "" || u.Host != "" {
			b.WriteString("//")
		}
		b.WriteString(u.Host)
		if path != "" && path[0] != '/' && u.Host != "" {
			b.WriteByte('/')
		}
		b.WriteString(path)
	}
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteByte('?')
		writeRedactedQuery(&b, u.RawQuery, flags)
	}
	return b.String()
}

func writeRedactedQuery(b *strings.Builder, q string, flags []uint8) {
	for i := 0; q != ""; i++ {
		seg := q
		sep := strings.IndexAny(q, "&;")
		if sep >= 0 {
			seg, q = q[:sep], q[sep:]
		} else {
			q = ""
		}
		var f uint8
		if i < len(flags) {
			f = flags[i]
		}
		key, _, hasValue := strings.Cut(seg, "=")
		if f&queryName != 0 {
			b.WriteString(Redacted)
		} else if hasValue && (f&queryValue != 0 || isSecretParam(key)) {
			b.WriteString(key)
			b.WriteByte('=')
			b.WriteString(Redacted)
		} else {
			b.WriteString(seg)
		}
		if q != "" { // the separator
			b.WriteByte(q[0])
			q = q[1:]
		}
	}
}

// isSecretParam reports whether a query parameter's name marks a
// credential.
func isSecretParam(key string) bool {
	if strings.ContainsAny(key, "%+") {
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
	}
	switch strings.ToLower(key) {
	case "sig", "key", "code", "auth", "pwd", "pass", "session", "sessionid", "jwt", "bearer":
		return true
	}
	return containsFold(key, "token") || containsFold(key, "secret") || containsFold(key, "signature") ||
		containsFold(key, "passw") || containsFold(key, "credential") || containsFold(key, "apikey") ||
		containsFold(key, "api_key") || containsFold(key, "api-key") || containsFold(key, "authorization") ||
		hasSuffixFold(key, "_key") || hasSuffixFold(key, "-key") || hasSuffixFold(key, "_sig")
}

// policyHeader returns request headers for an event, with the values of
// credential headers replaced by Redacted and empty fields left out. When
// there is nothing to replace or leave out it is h itself (shared says
// so), else a new map; the value slices are the request's, except the
// redacted ones. Neither side modifies what they share: a request's header
// is changed only after it is given one of its own (exchange.ownHeader).
func policyHeader(h map[string][]string) (out map[string][]string, shared bool) {
	clean := true
	for k, vs := range h {
		if len(vs) == 0 || isCredentialHeader(k) {
			clean = false
			break
		}
	}
	if clean {
		return h, true
	}
	out = maps.Clone(h) // cheaper than building a map key by key
	var redacted []string
	for k, vs := range out {
		switch {
		case len(vs) == 0:
			delete(out, k)
		case isCredentialHeader(k):
			if redacted == nil {
				redacted = []string{Redacted}
			}
			out[k] = redacted[:1:1]
		}
	}
	return out, false
}

// isCredentialHeader reports whether a header's values are credentials:
// Authorization, Proxy-Authorization, Cookie, X-Api-Key and anything named
// like an auth, token, secret, key, password, signature or session header.
// It runs on every header of every request, so it looks for the words'
// first letters before comparing.
func isCredentialHeader(name string) bool {
	for i := 0; i < len(name); i++ {
		s := name[i:]
		switch name[i] | 0x20 { // ASCII lowercase; no other byte becomes a letter
		case 'a':
			if hasPrefixFold(s, "auth") {
				return true
			}
		case 'c':
			if hasPrefixFold(s, "cookie") || hasPrefixFold(s, "credential") {
				return true
			}
		case 'k':
			if hasPrefixFold(s, "key") {
				return true
			}
		case 'p':
			if hasPrefixFold(s, "passw") {
				return true
			}
		case 's':
			if hasPrefixFold(s, "secret") || hasPrefixFold(s, "signature") || hasPrefixFold(s, "session") {
				return true
			}
		case 't':
			if hasPrefixFold(s, "token") {
				return true
			}
		}
	}
	return false
}

// containsFold reports whether s contains the lowercase ASCII substr,
// ignoring ASCII case, without allocating.
func containsFold(s, substr string) bool {
	for i := 0; i+len(substr) <= len(s); i++ {
		if hasPrefixFold(s[i:], substr) {
			return true
		}
	}
	return false
}

func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for j := 0; j < len(prefix); j++ {
		c := s[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[j] {
			return false
		}
	}
	return true
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && hasPrefixFold(s[len(s)-len(suffix):], suffix)
}
