package h1

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes req to bw as req.Write does, byte for byte, and
// closes its body. req.Write costs as much as the rest of sending a
// kept-alive request upstream (two fmt.Fprintf, a transfer writer, the
// request URI and the header sort allocate); this writes the requests the
// proxy sends most (no body, or a body of known length, an ASCII host)
// without an allocation, and hands any other to req.Write: a streamed
// body, which is chunked; a request that asks to close; an opaque URL; a
// host to convert to punycode. It calls none of the request's
// httptrace write hooks, which the proxy does not set.
//
// flushHead sends the header before the body is read, as req.Write does
// for a body not in memory, so that the upstream may answer before the
// body has all come; without it, a small body goes in the header's write.
func WriteRequest(bw *bufio.Writer, req *http.Request, flushHead bool) error {
	if !plainRequest(req) {
		return req.Write(bw)
	}
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	method := cmp.Or(req.Method, "GET")
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !httpguts.ValidHostHeader(host) {
		host = "" // as req.Write does: a Host that could smuggle a field is left empty
	}
	host = removeZone(host)
	path, query := req.URL.EscapedPath(), req.URL.RawQuery
	if path == "" {
		path = "/"
	}
	if hasCTL(path) || hasCTL(query) {
		if body != nil {
			body.Close()
		}
		return errCTLInURL
	}

	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(path)
	if req.URL.ForceQuery || query != "" {
		bw.WriteByte('?')
		bw.WriteString(query)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	ua := "Go-http-client/1.1"
	if vv, ok := req.Header["User-Agent"]; ok {
		ua = ""
		if len(vv) > 0 {
			ua = vv[0]
		}
	}
	if ua != "" {
		WriteField(bw, "User-Agent", []string{ua})
	}
	switch {
	case req.ContentLength > 0:
		var b [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(b[:0], req.ContentLength, 10))
		bw.WriteString("\r\n")
	case method == "POST" || method == "PUT" || method == "PATCH":
		bw.WriteString("Content-Length: 0\r\n")
	}
	// The header fields, sorted by name; the keys of most requests fit
	// on the stack.
	var buf [32]string
	keys := buf[:0]
	for k := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		if httpguts.ValidHeaderFieldName(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		WriteField(bw, k, req.Header[k])
	}
	_, err := bw.WriteString("\r\n")
	if body == nil {
		return err
	}
	// The body, closed once whatever happens, as req.Write does.
	var n, extra int64
	if err == nil && flushHead {
		err = bw.Flush()
	}
	if err == nil {
		n, err = copyRequestBody(bw, io.LimitReader(body, req.ContentLength), req.ContentLength)
	}
	if err == nil {
		extra, err = io.Copy(io.Discard, body)
	}
	if cerr := body.Close(); err == nil {
		err = cerr
	}
	if n += extra; err == nil && n != req.ContentLength {
		err = fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, n)
	}
	return err
}

// copyRequestBody copies a body of length n to bw. One larger than bw's
// buffer is copied through a larger buffer and written past bw's: through
// bw, each of its 4 KiB fills would go out as a TLS record and a system
// call of its own.
func copyRequestBody(bw *bufio.Writer, body io.Reader, n int64) (int64, error) {
	if n <= int64(bw.Available()) {
		return io.Copy(bw, body)
	}
	buf := netx.BatchBufs.Get().(*[netx.BatchSize]byte)
	defer netx.BatchBufs.Put(buf)
	return io.CopyBuffer(struct{ io.Writer }{bw}, body, buf[:])
}

var errCTLInURL = errors.New("net/http: can't write control character in Request.URL")

// plainRequest reports whether writeRequest writes req itself.
func plainRequest(req *http.Request) bool {
	if req.URL == nil || req.URL.Opaque != "" || req.Close || len(req.TransferEncoding) > 0 || req.Method == http.MethodConnect {
		return false
	}
	if noBody := req.Body == nil || req.Body == http.NoBody; noBody != (req.ContentLength == 0) || req.ContentLength < 0 {
		return false // a streamed body, or a length that does not match
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	for i := range len(host) {
		if host[i] >= 0x80 {
			return false // to punycode
		}
	}
	return true
}

// hasCTL reports whether s holds an ASCII control character.
func hasCTL[T string | []byte](s T) bool {
	for i := range len(s) {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}

// removeZone removes the zone of an IPv6 literal host (RFC 6874: an
// intermediary must not send it on).
func removeZone(host string) string {
	if !strings.HasPrefix(host, "[") {
		return host
	}
	i := strings.LastIndex(host, "]")
	if i < 0 {
		return host
	}
	j := strings.LastIndex(host[:i], "%")
	if j < 0 {
		return host
	}
	return host[:j] + host[i:]
}
