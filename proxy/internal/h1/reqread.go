package h1

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// readRequest reads a request as http.ReadRequest does. The requests a
// client sends most, HTTP/1.1 in origin or absolute form with plain header
// fields and no body or a Content-Length, all already buffered, it parses
// itself, from one string for the whole header: seven allocations for a
// request of eight fields and a body, where http.ReadRequest makes sixteen
// (a string per field, a textproto reader's, a transfer reader). Any
// other request (CONNECT, HTTP/1.0, a chunked body, a field that net/http
// would fix up or refuse, two Host fields, a header still arriving) goes
// to http.ReadRequest, with nothing consumed: whatever decides framing in
// a way a client could play on (RFC 9112 section 11.2, request smuggling)
// is net/http's alone. TestReadRequest and FuzzReadRequest compare the
// two.
//
// The request comes with ctx as its context, made with it rather than
// copied by WithContext. plain says it was parsed here, its header fields
// already checked as CheckRequest would.
func ReadRequest(br *bufio.Reader, ctx context.Context) (req *http.Request, plain bool, err error) {
	if _, err := br.Peek(1); err != nil {
		return nil, false, err // as http.ReadRequest, which has read nothing either
	}
	if req, n := ParsePlainRequest(br, ctx); req != nil {
		br.Discard(n)
		return req, true, nil
	}
	req, err = http.ReadRequest(br)
	if err != nil {
		return nil, false, err
	}
	return req.WithContext(ctx), false, nil
}

// parsePlainRequest parses the request at the head of br's buffer, if it
// is a plain one, and returns it with the length of its header; nil when
// http.ReadRequest must read it.
func ParsePlainRequest(br *bufio.Reader, ctx context.Context) (*http.Request, int) {
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil, 0
	}
	all := string(buf[:end+2]) // the request line and the fields, each ending in CRLF
	eol := strings.Index(all, "\r\n")
	line := all[:eol]
	// "GET /path HTTP/1.1", split as net/http's parseRequestLine does.
	method, rest, ok1 := strings.Cut(line, " ")
	uri, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" || method == http.MethodConnect ||
		!httpguts.ValidHeaderFieldName(method) {
		return nil, 0
	}
	u, err := url.ParseRequestURI(uri) // refuses control bytes too
	if err != nil {
		return nil, 0
	}
	h, f, ok := parsePlainFields(all[eol+2:], true)
	if !ok || f.hosts > 1 {
		return nil, 0 // net/http refuses two Host fields
	}
	req := http.Request{
		Method:     method,
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Body:       http.NoBody,
		Close:      f.closing,
		Host:       u.Host,
		RequestURI: uri,
	}
	if req.Host == "" {
		req.Host = f.host
	}
	if f.contentLength > 0 {
		req.ContentLength = f.contentLength
		req.Body = &lengthBody{r: br, n: f.contentLength}
	}
	return req.WithContext(ctx), end + 4 // req itself stays on the stack
}

// CheckRequest is net/http's server's check of a request it has read
// (http.ReadRequest has moved Host out of the header, and refused a
// repeated one): an HTTP/1.1 request names its host, validly, and every
// header field is well formed. It returns the status to refuse it with,
// or 0. fields false skips the fields, checked already by the reader.
func CheckRequest(req *http.Request, fields bool) (int, string) {
	switch {
	case req.ProtoMajor != 1:
		return http.StatusHTTPVersionNotSupported, ""
	case req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect:
		return http.StatusBadRequest, "missing required Host header"
	case req.Host != "" && !httpguts.ValidHostHeader(req.Host):
		return http.StatusBadRequest, "malformed Host header"
	case !fields:
		return 0, ""
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return http.StatusBadRequest, "invalid header name"
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return http.StatusBadRequest, "invalid header value"
			}
		}
	}
	return 0, ""
}
