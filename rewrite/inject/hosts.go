package inject

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
)

// hostPattern is one parsed entry of Credential.Hosts.
type hostPattern struct {
	// host is the exact host (lowercase name, or an IP in netip's canonical
	// form), or for a wildcard the suffix including its leading dot
	// (".example.com").
	host     string
	wildcard bool
	port     string // "" matches any port
}

// parseHostPattern reads "api.github.com", "*.example.com", "10.0.0.1",
// "[::1]", each optionally followed by ":port".
func parseHostPattern(s string) (hostPattern, error) {
	host, port, ok := splitHostPort(strings.ToLower(s))
	if !ok {
		return hostPattern{}, errors.New("malformed host or port")
	}
	if rest, isWild := strings.CutPrefix(host, "*."); isWild {
		if !validHostname(rest) {
			return hostPattern{}, errors.New("wildcard must be followed by a host name")
		}
		// "*.com" would hand the credential to a whole top-level domain.
		if !strings.Contains(rest, ".") {
			return hostPattern{}, errors.New("wildcard needs at least two labels after it")
		}
		return hostPattern{host: "." + rest, wildcard: true, port: port}, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return hostPattern{}, errors.New("zoned address")
		}
		return hostPattern{host: a.String(), port: port}, nil
	}
	if !validHostname(host) {
		return hostPattern{}, errors.New("invalid host name")
	}
	return hostPattern{host: host, port: port}, nil
}

func (p hostPattern) match(host, port string) bool {
	if p.port != "" && p.port != port {
		return false
	}
	if p.wildcard {
		return len(host) > len(p.host) && strings.HasSuffix(host, p.host)
	}
	return host == p.host
}

func (p hostPattern) String() string {
	h := p.host
	if p.wildcard {
		h = "*" + h
	} else if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if p.port != "" {
		h += ":" + p.port
	}
	return h
}

// normalizeHost turns a request's host ("API.GitHub.com:443", "[::1]:8443",
// "example.com.") into a lowercase host and port for matching. ok is false
// for anything that is not a plain host name or IP literal, so that nothing
// odd can satisfy a wildcard.
func normalizeHost(s string) (host, port string, ok bool) {
	host, port, ok = splitHostPort(strings.ToLower(s))
	if !ok {
		return "", "", false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.String(), port, true
	}
	host = strings.TrimSuffix(host, ".")
	if !validHostname(host) {
		return "", "", false
	}
	return host, port, true
}

// splitHostPort splits "host", "host:port", "[v6]", "[v6]:port" and a bare
// IPv6 literal. The port, when present, is returned in canonical decimal.
func splitHostPort(s string) (host, port string, ok bool) {
	if s == "" {
		return "", "", false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false
		}
		host, rest := s[1:end], s[end+1:]
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return "", "", false
		}
		if rest == "" {
			return host, "", true
		}
		p, ok := cutPort(rest)
		return host, p, ok
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", true
	case 1:
		i := strings.IndexByte(s, ':')
		p, ok := cutPort(s[i:])
		if !ok || i == 0 {
			return "", "", false
		}
		return s[:i], p, true
	default: // bare IPv6 literal, which cannot carry a port
		if _, err := netip.ParseAddr(s); err != nil {
			return "", "", false
		}
		return s, "", true
	}
}

// cutPort reads ":port" into canonical decimal form.
func cutPort(s string) (string, bool) {
	digits, ok := strings.CutPrefix(s, ":")
	if !ok || digits == "" || len(digits) > 5 {
		return "", false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", false
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 || n > 65535 {
		return "", false
	}
	return strconv.Itoa(n), true
}

// validHostname accepts dot-separated non-empty labels of [a-z0-9_-], at most
// 63 bytes each and 253 in all (lowercase input).
func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
		label++
		if label > 63 {
			return false
		}
	}
	return label > 0
}

// HostMatcher matches request hosts against patterns written as in
// Credential.Hosts: "api.github.com", "*.example.com", an IP, each
// optionally with ":port".
type HostMatcher struct{ pats []hostPattern }

// NewHostMatcher parses patterns; the error names the first bad one.
func NewHostMatcher(patterns []string) (*HostMatcher, error) {
	m := &HostMatcher{}
	for _, s := range patterns {
		p, err := parseHostPattern(s)
		if err != nil {
			return nil, errors.New("inject: host " + strconv.Quote(s) + ": " + err.Error())
		}
		m.pats = append(m.pats, p)
	}
	return m, nil
}

// Match reports whether host (a Host header: name or IP, maybe with a
// port) matches one of the patterns.
func (m *HostMatcher) Match(host string) bool {
	if m == nil {
		return false
	}
	h, port, ok := normalizeHost(host)
	if !ok {
		return false
	}
	for _, p := range m.pats {
		if p.match(h, port) {
			return true
		}
	}
	return false
}
