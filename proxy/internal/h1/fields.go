package h1

import (
	"bufio"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// plainFields is what parsePlainFields learnt of a header beyond its map.
type plainFields struct {
	contentLength int64  // -1 when there is none
	closing       bool   // Connection: close
	hosts         int    // Host fields
	host          string // the first one's value, for a request
	// verbatim: each line is as writeField writes it ("Canonical-Name: "
	// and the value, trimmed) and none is hop-by-hop, so that the lines
	// can be passed on as they are.
	verbatim bool
	date     bool // a Date field
}

// parsePlainFields parses header fields, each line ending in CRLF, into a
// header map as textproto.ReadMIMEHeader does, its values substrings of
// head. It returns ok false for fields that net/http's reader must read:
// a line it would refuse or fix up (no colon, a name that is not a token,
// a control byte in a value, a bare LF, a folded line), a framing other
// than one plain Content-Length (Transfer-Encoding, Trailer, a repeated,
// empty or signed Content-Length), or Pragma, which net/http fixes up.
// A request's Host fields go to plainFields, not to the map (as
// http.ReadRequest has it), which then stays small for eight other fields.
func parsePlainFields(head string, request bool) (http.Header, plainFields, bool) {
	f := plainFields{contentLength: -1, verbatim: true}
	lines := strings.Count(head, "\n")
	if request && lines > 0 {
		lines-- // for the Host field, as a rule
	}
	h := make(http.Header, lines)
	vals := make([]string, lines) // each field's first value, cap 1, as textproto does
	for rest := head; rest != ""; {
		i := strings.IndexByte(rest, '\n')
		if i < 1 || rest[i-1] != '\r' {
			return nil, f, false // a bare LF
		}
		field := rest[:i-1]
		rest = rest[i+1:]
		colon := strings.IndexByte(field, ':')
		if colon <= 0 {
			return nil, f, false // no name, or no colon
		}
		name, value := field[:colon], trimOWS(field[colon+1:])
		if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return nil, f, false
		}
		key := name
		if !isCanonicalKey(name) {
			key = http.CanonicalHeaderKey(name)
			f.verbatim = false
		} else if f.verbatim && (len(field) < colon+2 || field[colon+1] != ' ' || len(field) != colon+2+len(value) || IsHopHeader(key)) {
			f.verbatim = false
		}
		switch key {
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil, f, false // chunked, trailers, Pragma's fix-up
		case "Content-Length":
			if f.contentLength >= 0 || value == "" || len(value) > 18 {
				return nil, f, false // repeated, empty or too long
			}
			n, err := strconv.ParseUint(value, 10, 63)
			if err != nil {
				return nil, f, false
			}
			f.contentLength = int64(n)
		case "Connection":
			f.closing = f.closing || httpguts.HeaderValuesContainsToken([]string{value}, "close")
		case "Date":
			f.date = true
		case "Host":
			f.hosts++
			if request {
				if f.hosts == 1 {
					f.host = value
				}
				continue
			}
		}
		if vv := h[key]; vv != nil {
			h[key] = append(vv, value)
		} else if len(vals) > 0 {
			vals[0] = value
			h[key] = vals[:1:1]
			vals = vals[1:]
		} else {
			h[key] = []string{value}
		}
	}
	return h, f, true
}

// lengthBody is a body of known length read from r: io.EOF with its last
// bytes, io.ErrUnexpectedEOF if r ends first, as net/http's body.
type lengthBody struct {
	r *bufio.Reader
	n int64 // bytes left
	// head is a response's header as received, when it can be passed on
	// as it is; empty otherwise.
	head VerbatimHead
	// wrap, for a response's, is where h1Upstream may put the body's
	// wrapper, allocated with it; nil otherwise.
	wrap *h1Body
}

// verbatimHead is a response's header fields as received, each line as
// writeField would write it and none hop-by-hop: an HTTP/1 client can be
// sent them as they are instead of the header map's fields written out one
// by one (h1Writer.takeHeader).
type VerbatimHead struct {
	Fields string // the field lines, each ending in CRLF; "" for none
	Length int64  // their Content-Length
	Date   bool   // among them a Date field
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// trimOWS trims a field value of the spaces and tabs around it.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// isCanonicalKey reports whether a valid field name is in canonical form:
// each letter upper case at the start and after a hyphen, else lower case.
func isCanonicalKey(s string) bool {
	upper := true
	for i := range len(s) {
		c := s[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// WriteField writes a header field as net/http does: each CR or LF of a
// value as a space, so that no value can start a field of its own, and the
// value trimmed of ASCII white space.
func WriteField(bw *bufio.Writer, k string, vv []string) {
	for _, v := range vv {
		bw.WriteString(k)
		bw.WriteString(": ")
		if strings.ContainsAny(v, "\r\n") {
			v = newlineToSpace.Replace(v)
		}
		bw.WriteString(textproto.TrimString(v))
		bw.WriteString("\r\n")
	}
}

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// IsHopHeader reports whether a canonical header name is one of the
// hop-by-hop headers removed whatever Connection says.
func IsHopHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// HasToken reports whether a comma-separated header value lists token,
// ignoring ASCII case.
func HasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(t, " \t"), token) {
				return true
			}
		}
	}
	return false
}
