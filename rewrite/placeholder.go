package rewrite

import "bytes"

// The placeholder format shared with rewrite/secrets:
// "[REDACTED:<rule-id>:<hex>]", rule-id in [a-z0-9-]+, at least 4 lowercase
// hex digits, at most maxPlaceholderLen bytes in all.
const (
	placeholderPrefix = "[REDACTED:"
	maxPlaceholderLen = 64
)

func isRuleByte(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' }
func isHexByte(c byte) bool  { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// placeholderLen returns the length of the complete placeholder b starts
// with, or 0.
func placeholderLen(b []byte) int {
	if !bytes.HasPrefix(b, []byte(placeholderPrefix)) {
		return 0
	}
	i := len(placeholderPrefix)
	for i < len(b) && i < maxPlaceholderLen && isRuleByte(b[i]) {
		i++
	}
	if i == len(placeholderPrefix) || i >= len(b) || b[i] != ':' {
		return 0
	}
	i++
	h := i
	for i < len(b) && i < maxPlaceholderLen && isHexByte(b[i]) {
		i++
	}
	if i-h < 4 || i >= len(b) || b[i] != ']' || i+1 > maxPlaceholderLen {
		return 0
	}
	return i + 1
}

// isPartialPlaceholder reports whether t could grow into a placeholder: it is
// a proper prefix of one.
func isPartialPlaceholder(t []byte) bool {
	if len(t) == 0 || len(t) >= maxPlaceholderLen {
		return false
	}
	p := placeholderPrefix
	if len(t) <= len(p) {
		return string(t) == p[:len(t)]
	}
	if string(t[:len(p)]) != p {
		return false
	}
	rest := t[len(p):]
	i := 0
	for i < len(rest) && isRuleByte(rest[i]) {
		i++
	}
	if i == len(rest) {
		return true
	}
	if i == 0 || rest[i] != ':' {
		return false
	}
	i++
	for i < len(rest) && isHexByte(rest[i]) {
		i++
	}
	return i == len(rest)
}

// holdFrom returns where a possible placeholder prefix starts at the end of b,
// or len(b). Only the last '[' can start one: '[' cannot occur inside.
func holdFrom(b []byte) int {
	lo := max(0, len(b)-(maxPlaceholderLen-1))
	i := bytes.LastIndexByte(b[lo:], '[')
	if i < 0 {
		return len(b)
	}
	if i += lo; isPartialPlaceholder(b[i:]) {
		return i
	}
	return len(b)
}

// appendRestored appends b to dst, replacing each complete placeholder that
// restore knows by its value, JSON-escaped when jsonEsc.
func appendRestored(dst, b []byte, restore func(string) (string, bool), jsonEsc bool) []byte {
	for {
		i := bytes.Index(b, []byte(placeholderPrefix))
		if i < 0 {
			return append(dst, b...)
		}
		n := placeholderLen(b[i:])
		if n == 0 {
			dst = append(dst, b[:i+1]...)
			b = b[i+1:]
			continue
		}
		v, ok := restore(string(b[i : i+n]))
		if !ok {
			dst = append(dst, b[:i+n]...)
			b = b[i+n:]
			continue
		}
		dst = append(dst, b[:i]...)
		if jsonEsc {
			dst = appendEscaped(dst, v)
		} else {
			dst = append(dst, v...)
		}
		b = b[i+n:]
	}
}

// byteRestorer restores placeholders in a byte stream, holding back at the end
// of each chunk the few bytes that could begin one.
type byteRestorer struct {
	restore func(string) (string, bool)
	jsonEsc bool
	tail    []byte
	join    []byte
}

// feed appends the restored form of b to dst; final releases the held tail.
func (s *byteRestorer) feed(dst, b []byte, final bool) []byte {
	if len(s.tail) > 0 {
		s.join = append(append(s.join[:0], s.tail...), b...)
		b = s.join
	}
	cut := len(b)
	if !final {
		cut = holdFrom(b)
	}
	dst = appendRestored(dst, b[:cut], s.restore, s.jsonEsc)
	s.tail = append(s.tail[:0], b[cut:]...)
	return dst
}
