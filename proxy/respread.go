package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// readResponse reads a response as http.ReadResponse does. The responses
// a proxy relays most, an HTTP/1.1 status line, plain header fields and a
// Content-Length, all already buffered, it parses itself, from one string
// for the whole header: six allocations for a response of seven fields,
// where http.ReadResponse makes thirteen (a string per field, a textproto
// reader, a transfer reader, a limited reader). Any other response (a chunked or close-delimited body, a header
// field that net/http would fix up or refuse, a 1xx, 204 or 304, a
// response to HEAD, a header still arriving) goes to http.ReadResponse,
// with nothing consumed. TestReadResponse and FuzzReadResponse compare the
// two.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if res, n := parsePlainResponse(br, req); res != nil {
		br.Discard(n)
		return res, nil
	}
	return http.ReadResponse(br, req)
}

// parsePlainResponse parses the response at the head of br's buffer, if
// it is a plain one, and returns it with the length of its header; nil
// when http.ReadResponse must read it.
func parsePlainResponse(br *bufio.Reader, req *http.Request) (*http.Response, int) {
	if req != nil && req.Method == http.MethodHead {
		return nil, 0
	}
	if _, err := br.Peek(1); err != nil {
		return nil, 0
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil, 0
	}
	// The status line: "HTTP/1.1 200 OK" or "HTTP/1.1 200".
	const proto = "HTTP/1.1 "
	if len(buf) < len(proto)+3 || string(buf[:len(proto)]) != proto {
		return nil, 0
	}
	eol := bytes.Index(buf, []byte("\r\n"))
	if eol < len(proto)+3 {
		return nil, 0
	}
	status := buf[len(proto):eol]
	code := 0
	for _, c := range status[:3] {
		if c < '0' || c > '9' {
			return nil, 0
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified ||
		len(status) > 3 && status[3] != ' ' || hasCTL(status) {
		return nil, 0
	}

	// The status text and the header fields, as substrings of one string.
	all := string(buf[len(proto) : end+2])
	head := all[eol-len(proto)+2:]
	lines := 0
	for i := range len(head) {
		if head[i] == '\n' {
			lines++
		}
	}
	h := make(http.Header, lines)
	vals := make([]string, lines) // each field's first value, cap 1, as textproto does
	contentLength := int64(-1)
	closing := false
	for rest := head; rest != ""; {
		i := strings.IndexByte(rest, '\n')
		if i < 1 || rest[i-1] != '\r' {
			return nil, 0 // a bare LF
		}
		field := rest[:i-1]
		rest = rest[i+1:]
		colon := strings.IndexByte(field, ':')
		if colon <= 0 {
			return nil, 0 // no name, or no colon
		}
		name, value := field[:colon], trimOWS(field[colon+1:])
		if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return nil, 0
		}
		key := name
		if !isCanonicalKey(name) {
			key = http.CanonicalHeaderKey(name)
		}
		switch key {
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil, 0 // chunked, trailers, Pragma's fix-up
		case "Content-Length":
			if contentLength >= 0 || value == "" || len(value) > 18 {
				return nil, 0 // repeated, empty or too long
			}
			n, err := strconv.ParseUint(value, 10, 63)
			if err != nil {
				return nil, 0
			}
			contentLength = int64(n)
		case "Connection":
			closing = closing || httpguts.HeaderValuesContainsToken([]string{value}, "close")
		}
		if vv := h[key]; vv != nil {
			h[key] = append(vv, value)
		} else {
			vals[0] = value
			h[key] = vals[:1:1]
			vals = vals[1:]
		}
	}
	if contentLength < 0 {
		return nil, 0 // a body up to the connection's close
	}
	if closing {
		delete(h, "Connection") // as net/http does for "Connection: close"
	}
	res := &http.Response{
		Status:        all[:len(status)],
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: contentLength,
		Close:         closing,
		Request:       req,
		Body:          http.NoBody,
	}
	if contentLength > 0 {
		res.Body = &lengthBody{r: br, n: contentLength}
	}
	return res, end + 4
}

// lengthBody is a body of known length read from r: io.EOF with its last
// bytes, io.ErrUnexpectedEOF if r ends first, as net/http's body.
type lengthBody struct {
	r *bufio.Reader
	n int64 // bytes left
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
