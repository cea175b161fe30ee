package ws

import (
	"errors"
	"strings"
)

// Extension is one element of a Sec-WebSocket-Extensions list (RFC 6455
// section 9.1): a name and its parameters, in order.
type Extension struct {
	Name   string
	Params []Param
}

// Param is an extension parameter; a quoted value is given unquoted.
type Param struct {
	Name     string
	Value    string
	HasValue bool
}

// String writes e as a header element, quoting a value that is not a
// token.
func (e Extension) String() string {
	var b strings.Builder
	b.WriteString(e.Name)
	for _, p := range e.Params {
		b.WriteString("; ")
		b.WriteString(p.Name)
		if p.HasValue {
			b.WriteByte('=')
			if isToken(p.Value) {
				b.WriteString(p.Value)
			} else {
				b.WriteByte('"')
				for i := 0; i < len(p.Value); i++ {
					if c := p.Value[i]; c == '"' || c == '\\' {
						b.WriteByte('\\')
					}
					b.WriteByte(p.Value[i])
				}
				b.WriteByte('"')
			}
		}
	}
	return b.String()
}

var errExtensions = errors.New("ws: malformed Sec-WebSocket-Extensions")

// ParseExtensions reads the Sec-WebSocket-Extensions field values of a
// header, in order: a comma-separated list of extensions, each a token
// followed by parameters ("; name" or "; name=value", the value a token or
// a quoted string). Empty elements are skipped, as lists allow; anything
// else that does not fit the grammar makes the whole field an error.
func ParseExtensions(values []string) ([]Extension, error) {
	var out []Extension
	for _, v := range values {
		s := v
		for {
			s = skipSpace(s)
			if s == "" {
				break
			}
			if s[0] == ',' {
				s = s[1:]
				continue
			}
			var e Extension
			var ok bool
			if e.Name, s, ok = cutToken(s); !ok {
				return nil, errExtensions
			}
			for {
				s = skipSpace(s)
				if s == "" || s[0] == ',' {
					break
				}
				if s[0] != ';' {
					return nil, errExtensions
				}
				var p Param
				if p.Name, s, ok = cutToken(skipSpace(s[1:])); !ok {
					return nil, errExtensions
				}
				if s = skipSpace(s); s != "" && s[0] == '=' {
					s = skipSpace(s[1:])
					p.HasValue = true
					if s != "" && s[0] == '"' {
						if p.Value, s, ok = cutQuoted(s); !ok {
							return nil, errExtensions
						}
					} else if p.Value, s, ok = cutToken(s); !ok {
						return nil, errExtensions
					}
				}
				e.Params = append(e.Params, p)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

func skipSpace(s string) string { return strings.TrimLeft(s, " \t") }

// isTokenByte reports whether c is a tchar (RFC 9110 section 5.6.2).
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

// isCtl reports whether c may not stand in a quoted string, even escaped.
func isCtl(c byte) bool { return c < ' ' && c != '\t' || c == 0x7f }

func cutToken(s string) (tok, rest string, ok bool) {
	i := 0
	for i < len(s) && isTokenByte(s[i]) {
		i++
	}
	return s[:i], s[i:], i > 0
}

// cutQuoted reads a quoted-string (s[0] is '"') and returns its value.
func cutQuoted(s string) (val, rest string, ok bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return b.String(), s[i+1:], true
		case c == '\\':
			if i+1 == len(s) || isCtl(s[i+1]) {
				return "", "", false
			}
			i++
			b.WriteByte(s[i])
		case isCtl(c):
			return "", "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}
