package rewrite

import (
	"bytes"

	"github.com/chaperone-dev/chaperone/rewrite/placeholder"
)

// holdFrom returns where a possible placeholder prefix starts at the end of b,
// or len(b). Only the last '[' can start one: '[' cannot occur inside.
func holdFrom(b []byte) int {
	lo := max(0, len(b)-(placeholder.MaxLen-1))
	i := bytes.LastIndexByte(b[lo:], '[')
	if i < 0 {
		return len(b)
	}
	if i += lo; placeholder.IsPartial(b[i:]) {
		return i
	}
	return len(b)
}

// appendRestored appends b to dst, replacing each complete placeholder that
// restore knows by its value, JSON-escaped when jsonEsc.
func appendRestored(dst, b []byte, restore func(string) (string, bool), jsonEsc bool) []byte {
	for {
		i := bytes.Index(b, []byte(placeholder.Prefix))
		if i < 0 {
			return append(dst, b...)
		}
		n := placeholder.Len(b[i:])
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
