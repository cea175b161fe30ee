package h3

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Alternative is one alt-value of an Alt-Svc header (RFC 7838 section 3).
type Alternative struct {
	Proto string // the ALPN protocol ID, percent-decoded ("h3")
	Host  string // empty: the origin's own host
	Port  uint16
	// MaxAge is how long the alternative may be used (ma); 24 hours when
	// the header does not say.
	MaxAge  time.Duration
	Persist bool
}

// DefaultMaxAge is an alternative's freshness when its ma is absent.
const DefaultMaxAge = 24 * time.Hour

// maxAltValues bounds the alternatives read from one header.
const maxAltValues = 64

// ParseAltSvc reads an Alt-Svc field value: "clear" (clear true: forget the
// origin's alternatives), or a comma-separated list of
// protocol-id="[host]:port" with parameters. An alt-value that cannot be
// read makes the whole value an error: an origin that garbles it is not
// taken at its word.
func ParseAltSvc(v string) (alts []Alternative, clear bool, err error) {
	s := strings.TrimSpace(v)
	if s == "clear" {
		return nil, true, nil
	}
	if s == "" {
		return nil, false, errors.New("h3: alt-svc: empty")
	}
	for s != "" {
		if len(alts) == maxAltValues {
			return nil, false, fmt.Errorf("h3: alt-svc: more than %d alternatives", maxAltValues)
		}
		var a Alternative
		a, s, err = parseAltValue(s)
		if err != nil {
			return nil, false, err
		}
		alts = append(alts, a)
		s = trimOWS(s)
		if s == "" {
			break
		}
		if s[0] != ',' {
			return nil, false, fmt.Errorf("h3: alt-svc: %q after an alternative", clip(s))
		}
		s = trimOWS(s[1:])
		if s == "" {
			return nil, false, errors.New("h3: alt-svc: trailing comma")
		}
	}
	return alts, false, nil
}

// parseAltValue reads protocol-id "=" alt-authority *( OWS ";" OWS parameter ).
func parseAltValue(s string) (Alternative, string, error) {
	a := Alternative{MaxAge: DefaultMaxAge}
	tok, rest := token(s)
	if tok == "" || !strings.HasPrefix(rest, "=") {
		return a, "", fmt.Errorf("h3: alt-svc: no protocol-id=authority at %q", clip(s))
	}
	proto, err := pctDecode(tok)
	if err != nil {
		return a, "", err
	}
	a.Proto = proto
	auth, rest, err := quoted(rest[1:])
	if err != nil {
		return a, "", err
	}
	if a.Host, a.Port, err = splitAuthority(auth); err != nil {
		return a, "", err
	}
	for {
		r := trimOWS(rest)
		if !strings.HasPrefix(r, ";") {
			return a, rest, nil
		}
		r = trimOWS(r[1:])
		name, r := token(r)
		if name == "" || !strings.HasPrefix(r, "=") {
			return a, "", fmt.Errorf("h3: alt-svc: bad parameter at %q", clip(r))
		}
		var val string
		if strings.HasPrefix(r[1:], `"`) {
			val, rest, err = quoted(r[1:])
			if err != nil {
				return a, "", err
			}
		} else {
			val, rest = token(r[1:])
			if val == "" {
				return a, "", fmt.Errorf("h3: alt-svc: parameter %s without a value", name)
			}
		}
		switch strings.ToLower(name) {
		case "ma":
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return a, "", fmt.Errorf("h3: alt-svc: ma %q is not a number of seconds", clip(val))
			}
			if n > uint64(1<<63-1)/uint64(time.Second) {
				n = uint64(1<<63-1) / uint64(time.Second)
			}
			a.MaxAge = time.Duration(n) * time.Second
		case "persist":
			a.Persist = val == "1"
		}
	}
}

// splitAuthority splits alt-authority = [ uri-host ] ":" port.
func splitAuthority(s string) (string, uint16, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("h3: alt-svc: authority %q has no port", clip(s))
	}
	host, port := s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") || len(host) < 3 {
			return "", 0, fmt.Errorf("h3: alt-svc: bad host in %q", clip(s))
		}
	} else if strings.ContainsAny(host, ":[]") {
		return "", 0, fmt.Errorf("h3: alt-svc: bad host in %q", clip(s))
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f || c == '/' || c == '@' {
			return "", 0, fmt.Errorf("h3: alt-svc: bad host in %q", clip(s))
		}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || port[0] == '+' {
		return "", 0, fmt.Errorf("h3: alt-svc: bad port in %q", clip(s))
	}
	return host, uint16(n), nil
}

// quoted reads a quoted-string at the start of s (RFC 9110 section 5.6.4).
func quoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", fmt.Errorf("h3: alt-svc: expected a quoted string at %q", clip(s))
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return b.String(), s[i+1:], nil
		case c == '\\':
			if i+1 == len(s) {
				return "", "", errors.New("h3: alt-svc: unterminated quoted string")
			}
			i++
			b.WriteByte(s[i])
		case c < ' ' && c != '\t' || c == 0x7f:
			return "", "", errors.New("h3: alt-svc: control character in a quoted string")
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("h3: alt-svc: unterminated quoted string")
}

// token reads a token (RFC 9110 tchar) at the start of s.
func token(s string) (string, string) {
	i := 0
	for i < len(s) && isTchar(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func trimOWS(s string) string { return strings.TrimLeft(s, " \t") }

// pctDecode decodes a protocol-id's percent-encoding (RFC 7838 section 3).
func pctDecode(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("h3: alt-svc: bad percent-encoding in %q", clip(s))
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("h3: alt-svc: bad percent-encoding in %q", clip(s))
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}

// clip shortens text quoted in an error.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// IsH3 reports whether an ALPN protocol ID is HTTP/3 (or one of its
// drafts, "h3-29").
func IsH3(proto string) bool { return proto == "h3" || strings.HasPrefix(proto, "h3-") }

// StripH3 returns an Alt-Svc field value without its HTTP/3 alternatives,
// and false when nothing is left (the field should then be dropped). A
// value that cannot be read is dropped whole: it may name HTTP/3.
func StripH3(v string) (string, bool) {
	alts, clear, err := ParseAltSvc(v)
	if err != nil {
		return "", false
	}
	if clear {
		return "clear", true
	}
	var b strings.Builder
	for _, a := range alts {
		if IsH3(a.Proto) {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(FormatAlternative(a))
	}
	return b.String(), b.Len() > 0
}

// FormatAlternative writes a as an alt-value.
func FormatAlternative(a Alternative) string {
	var b strings.Builder
	for i := 0; i < len(a.Proto); i++ {
		c := a.Proto[i]
		if isTchar(c) && c != '%' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	b.WriteString(`="`)
	for i := 0; i < len(a.Host); i++ {
		if c := a.Host[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(a.Host[i])
	}
	fmt.Fprintf(&b, `:%d"`, a.Port)
	if a.MaxAge != DefaultMaxAge {
		fmt.Fprintf(&b, "; ma=%d", int64(a.MaxAge/time.Second))
	}
	if a.Persist {
		b.WriteString("; persist=1")
	}
	return b.String()
}
