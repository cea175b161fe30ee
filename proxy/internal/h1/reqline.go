package h1

import (
	"bufio"
	"bytes"
	"errors"
)

// An HTTP/1 request line is recognised here the way permissive proxies
// (squid's relaxed parser, tinyproxy) read one, and more permissively
// still, because what such a proxy would act on must never pass a tunnel
// uninspected: blank lines and white space before it, any method token in
// any case, any run of white space (SP, HTAB, VT, FF, a bare CR) between
// its parts, a line ended by LF or CRLF, and an HTTP version in any case
// or none (HTTP/0.9). net/http reads a stricter grammar; a line it would
// read differently, and every CONNECT, is handled by the proxy itself
// (serveRequestLine), which sends the relay, or net/http, a line of its
// own making.

// requestLine is a request line, as parsed by parseRequestLine.
type RequestLine struct {
	Method  string // as sent
	Target  string // the request target, as sent
	Version string // as sent; "" for an HTTP/0.9 line
	// canonical says net/http reads the same request line from these
	// bytes: no blank line or space before it, single spaces, a version
	// "HTTP/d.d", and not a CONNECT (which the proxy always handles).
	Canonical bool
}

// maxSchemeLen bounds the scheme of an absolute-form target: longer is not
// a URI a proxy forwards.
const maxSchemeLen = 32

// isTchar reports whether c is an RFC 9110 token character.
func IsTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// isLineSpace reports whether c separates the parts of a request line for a
// permissive parser: SP, HTAB, VT, FF or CR (a CR not before the LF).
func isLineSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'
}

// isLeadSpace reports whether c may come before a request line: blank
// lines and white space.
func IsLeadSpace(c byte) bool { return isLineSpace(c) || c == '\n' }

func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isSchemeChar(c byte) bool {
	return isAlpha(c) || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// isConnectMethod reports whether m is CONNECT in any case.
func IsConnectMethod(m []byte) bool {
	return len(m) == 7 && string(bytes.ToUpper(m)) == "CONNECT"
}

// requestStart says whether b starts an HTTP/1 request line (or the h2c
// preface): blank lines and white space, a method token, white space, then
// a target in origin form ('/'), asterisk form ('*'), absolute form
// (scheme "://") or, after CONNECT in any case, authority form (anything).
// It decides from as few bytes as it can: maybe means it needs more.
func RequestStart(b []byte) Tristate {
	i := 0
	for i < len(b) && IsLeadSpace(b[i]) {
		i++
	}
	m := i
	for i < len(b) && IsTchar(b[i]) {
		i++
	}
	switch {
	case i == len(b):
		return Maybe
	case i == m || !isLineSpace(b[i]):
		return No
	}
	method := b[m:i]
	for i < len(b) && isLineSpace(b[i]) {
		i++
	}
	if i == len(b) {
		return Maybe
	}
	switch c := b[i]; {
	case c == '/' || c == '*':
		return Yes
	case IsConnectMethod(method):
		if c > ' ' && c != 0x7f {
			return Yes
		}
		return No
	case !isAlpha(c):
		return No
	}
	// An absolute-form target: scheme "://".
	s := i
	for i < len(b) && isSchemeChar(b[i]) && i-s <= maxSchemeLen {
		i++
	}
	switch {
	case i-s > maxSchemeLen:
		return No
	case i == len(b):
		return Maybe
	}
	for _, want := range []byte("://") {
		switch {
		case i == len(b):
			return Maybe
		case b[i] != want:
			return No
		}
		i++
	}
	return Yes
}

// errBadRequestLine is a line that requestStart accepted but that is not a
// request line a proxy could act on (a missing target, a stray token, a
// version that is not HTTP's).
var errBadRequestLine = errors.New("proxy: malformed request line")

// parseRequestLine parses line, the bytes through the LF that ends a
// request line (blank lines before it included), as requestStart reads
// it: method, white space, target, and optionally white space and a
// version "HTTP/d.d" in any case.
func ParseRequestLine(line []byte) (RequestLine, error) {
	var rl RequestLine
	if len(line) == 0 || line[len(line)-1] != '\n' {
		return rl, errBadRequestLine
	}
	lead := 0
	for lead < len(line)-1 && IsLeadSpace(line[lead]) {
		lead++
	}
	body := line[lead : len(line)-1]
	// The parts, each a run of bytes that are neither white space nor a
	// control character.
	var parts [4][]byte
	n := 0
	single := true // the parts are separated by single spaces
	for i := 0; i < len(body); {
		if isLineSpace(body[i]) {
			j := i
			for j < len(body) && isLineSpace(body[j]) {
				j++
			}
			if j < len(body) && (j-i != 1 || body[i] != ' ') || j == len(body) && !(j-i == 1 && body[i] == '\r') {
				single = false
			}
			i = j
			continue
		}
		j := i
		for j < len(body) && !isLineSpace(body[j]) {
			if c := body[j]; c < ' ' || c == 0x7f {
				return rl, errBadRequestLine
			}
			j++
		}
		if n == len(parts) {
			return rl, errBadRequestLine
		}
		parts[n] = body[i:j]
		n++
		i = j
	}
	if n < 2 || n > 3 {
		return rl, errBadRequestLine
	}
	for _, c := range parts[0] {
		if !IsTchar(c) {
			return rl, errBadRequestLine
		}
	}
	rl.Method, rl.Target = string(parts[0]), string(parts[1])
	if n == 3 {
		v := parts[2]
		if len(v) != len("HTTP/1.1") || !bytes.EqualFold(v[:5], []byte("HTTP/")) ||
			!isDigit(v[5]) || v[6] != '.' || !isDigit(v[7]) {
			return rl, errBadRequestLine
		}
		rl.Version = string(v)
	}
	rl.Canonical = lead == 0 && single && n == 3 && string(parts[2][:5]) == "HTTP/" &&
		!IsConnectMethod(parts[0])
	return rl, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// canonicalLine is the request line net/http reads as rl: single spaces,
// the version in upper case, CRLF. An HTTP/0.9 line (no version, no
// header) becomes an HTTP/1.0 request without header fields.
func (rl RequestLine) CanonicalLine() []byte {
	b := make([]byte, 0, len(rl.Method)+len(rl.Target)+16)
	b = append(b, rl.Method...)
	b = append(b, ' ')
	b = append(b, rl.Target...)
	if rl.Version == "" {
		return append(b, " HTTP/1.0\r\n\r\n"...)
	}
	b = append(b, " HTTP/"...)
	b = append(b, rl.Version[5:]...)
	return append(b, "\r\n"...)
}

// ErrLineTooLong is a request or header line longer than the limit.
var ErrLineTooLong = errors.New("proxy: line too long")

// readLine reads from br through the next LF, at most limit bytes.
func ReadLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > limit {
			return nil, ErrLineTooLong
		}
		line = append(line, frag...)
		switch err {
		case nil:
			return line, nil
		case bufio.ErrBufferFull:
			continue
		}
		return line, err
	}
}
