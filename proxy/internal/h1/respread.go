package h1

import (
	"bufio"
	"bytes"
	"net/http"
)

// readResponse reads a response as http.ReadResponse does. The responses
// a proxy relays most, an HTTP/1.1 status line, plain header fields and a
// Content-Length, all already buffered, it parses itself, from one string
// for the whole header: six allocations for a response of seven fields,
// where http.ReadResponse makes thirteen (a string per field, a textproto
// reader, a transfer reader, a limited reader). Any other response (a
// chunked or close-delimited body, a header field that net/http would fix
// up or refuse, a 1xx, 204 or 304, a response to HEAD, a header still
// arriving) goes to http.ReadResponse, with nothing consumed.
// TestReadResponse and FuzzReadResponse compare the two.
func ReadResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if res, n := ParsePlainResponse(br, req); res != nil {
		br.Discard(n)
		return res, nil
	}
	return http.ReadResponse(br, req)
}

// plainResponse is a response read by parsePlainResponse, its body and
// the room for h1Upstream's wrapper of the body, in one allocation.
type plainResponse struct {
	res  http.Response
	body lengthBody
	wrap h1Body
}

// parsePlainResponse parses the response at the head of br's buffer, if
// it is a plain one, and returns it with the length of its header; nil
// when http.ReadResponse must read it.
func ParsePlainResponse(br *bufio.Reader, req *http.Request) (*http.Response, int) {
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
	h, f, ok := parsePlainFields(all[eol-len(proto)+2:], false)
	if !ok || f.contentLength < 0 {
		return nil, 0 // or a body up to the connection's close
	}
	if f.closing {
		delete(h, "Connection") // as net/http does for "Connection: close"
	}
	pr := &plainResponse{res: http.Response{
		Status:        all[:len(status)],
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: f.contentLength,
		Close:         f.closing,
		Request:       req,
		Body:          http.NoBody,
	}}
	res := &pr.res
	if f.contentLength > 0 {
		b := &pr.body
		*b = lengthBody{r: br, n: f.contentLength, wrap: &pr.wrap}
		if f.verbatim {
			b.head = VerbatimHead{Fields: all[eol-len(proto)+2:], Length: f.contentLength, Date: f.date}
		}
		res.Body = b
	}
	return res, end + 4
}

// Verbatim returns res's header fields as received, when res came from a
// Transport and its header was read whole by ParsePlainResponse; the zero
// VerbatimHead otherwise.
func Verbatim(res *http.Response) VerbatimHead {
	if b, ok := res.Body.(*h1Body); ok {
		if lb, ok := b.rc.(*lengthBody); ok {
			return lb.head
		}
	}
	return VerbatimHead{}
}
