package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"

	"github.com/chaperone-dev/chaperone/proxy/internal/reqctx"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"
)

// headerFlushDelay bounds how long the header of a response with a known
// length may wait for the first bytes of the body, so that it is sent in
// the same write; a slower body gets its header sent alone.
const headerFlushDelay = time.Millisecond

// roundTrip sends an allowed request that does not ask to switch protocols
// upstream, over HTTP/1.1 for an HTTP/1 client, and copies the response
// back. It does what ReverseProxy (Rewrite p.rewrite, FlushInterval -1)
// did, with fewer allocations and writes:
//   - hop-by-hop headers (RFC 9110 section 7.6.1: Connection, the headers
//     it names, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding,
//     Upgrade) are removed both ways, and Forwarded and X-Forwarded-* from
//     the request; the request's header map is shared, never modified, when
//     there is nothing to remove;
//   - 1xx responses are passed on, trailers are copied, and a failure while
//     copying the body aborts the client's response;
//   - no byte is held: streams (text/event-stream, or a body of unknown
//     length) have their header and every write flushed at once; a body of
//     known length has every write flushed except the one that completes
//     it, which is sent with the header, before the bookkeeping of the
//     request's end (at the handler's return, over HTTP/2), and its header
//     is flushed alone if the body is slower than headerFlushDelay.
//
// A failure while copying the body is recorded in the event's Error;
// abort then says the response must be aborted, once the event is
// published.
func (p *Proxy) roundTrip(x *exchange, r *http.Request) (abort bool) {
	h2 := r.ProtoMajor == 2 && needsH2(r.Header)
	origin, h3dst, h3 := "", netip.AddrPort{}, false
	if !h2 {
		origin, h3dst, h3 = p.h3Route(tunnelFrom(r.Context()))
	}
	x.plain1 = !h2 && !h3
	out := x.outgoing(r, h2 || h3)
	if out.Body != nil {
		defer x.body.Close()
	}
	if x.stream != nil {
		// A body checked as it goes can stop the request half way: it
		// cancels it, which closes the upstream connection (or resets
		// the HTTP/2 stream) before the body's end is sent.
		ctx, cancel := context.WithCancel(out.Context())
		defer cancel()
		out = out.WithContext(ctx)
		x.stream.start(cancel)
	}
	var res *http.Response
	var err error
	fellBack := false
	if h3 {
		res, err, fellBack = p.roundTripH3(out, origin, h3dst)
	}
	switch {
	case h2:
		res, err = tunnelTransport{p: p}.RoundTrip(out)
	case !h3 || fellBack:
		res, err = p.upstreamH1.Send(out, x.got1xx)
	}
	x.mu.Lock()
	x.rtDone = true
	x.mu.Unlock()
	if err != nil {
		if x.stream != nil {
			if _, v := x.stream.outcome(); v != nil {
				status := http.StatusForbidden
				if v.Rule == ruleUndecodable {
					status = http.StatusBadRequest
				}
				if r.ProtoMajor == 1 {
					// Most HTTP/1 clients read no answer before they have
					// sent their whole body: take (and drop) what is left.
					drainBody(x.sw.ResponseWriter, r.Body)
				}
				writeText(&x.sw, status, denyMessage(*v))
				return false
			}
		}
		p.upstreamError(&x.sw, out, err)
		return false
	}
	if x.llm != nil {
		x.wrapLLMResponse(res)
		x.llm.reader.StampToolCalls(p.now) // a tool call's time bounds what it may have caused
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		p.refuseSwitch(&x.sw, out, res)
		return false
	}
	// A changed header is not sent on as it was received (verbatimHead).
	x.headChanged = p.altSvcSeen(tunnelFrom(r.Context()), res.Header)
	announced := x.writeHeader(r, res)
	if err := p.copyBody(x, r, res); err != nil {
		res.Body.Close()
		return true
	}
	res.Body.Close() // now, to populate res.Trailer
	if len(res.Trailer) > 0 {
		// A response with trailers must be chunked: flushing keeps net/http
		// from computing a Content-Length for a short body.
		x.fw.flush()
		copyTrailers(x.sw.Header(), res.Trailer, announced)
	}
	return false
}

// Bounds of what is read of a request body that was stopped, so that the
// client gets to read the refusal.
const (
	maxDrain     = 64 << 20
	drainTimeout = 5 * time.Second
)

// drainBody reads and drops the rest of a request body, within maxDrain
// bytes and drainTimeout.
func drainBody(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(drainTimeout)) != nil {
		return // no deadline: not worth a wait without one
	}
	io.CopyN(io.Discard, body, maxDrain)
	rc.SetReadDeadline(time.Time{})
}

// needsH2 reports whether an HTTP/2 client's request must reach the
// upstream over HTTP/2 too: gRPC (its Content-Type, or the TE: trailers
// that gRPC clients send) does not work over HTTP/1.1.
func needsH2(h http.Header) bool {
	if ct := h["Content-Type"]; len(ct) > 0 && strings.HasPrefix(ct[0], "application/grpc") &&
		!strings.HasPrefix(ct[0], "application/grpc-web") {
		return true
	}
	return h1.HasToken(h["Te"], "trailers")
}

// outgoing returns the request to send upstream for r, made of r and x.
// For http.Transport (traced) its context carries x.got1xx in a client
// trace; h1.Transport is given x.got1xx itself, and the request is x.out, a
// copy of r with r's context, which costs no allocation.
func (x *exchange) outgoing(r *http.Request, traced bool) *http.Request {
	ctx := r.Context()
	var out *http.Request
	if traced {
		x.trace.Got1xxResponse = x.got1xx
		octx := httptrace.WithClientTrace(ctx, &x.trace)
		if rc, ok := ctx.(*reqctx.Context); ok {
			x.octx = reqctx.Values{Context: octx, Req: rc}
			octx = &x.octx
		}
		out = r.WithContext(octx)
	} else {
		x.out = *r
		out = &x.out
	}
	out.RequestURI = ""
	out.Close = false
	out.Header = outboundHeader(r.Header)
	// x.url is r.URL, completed by newExchange.
	x.url.RawQuery = cleanQuery(x.url.RawQuery)
	out.URL = &x.url
	if t := tunnelFrom(ctx); t != nil {
		x.url.Scheme, x.url.Host = t.scheme, t.authority
		if t.host != "" {
			out.Host = "" // from URL: the host the tunnel was allowed for
		}
	}
	switch {
	case x.stream != nil:
		// The body is checked as it goes: it is sent as it came (with
		// the client's Content-Length, or chunked), maybe while the
		// response comes back.
		out.Body = &x.body
		out.ContentLength = x.sendLen
		if r.ProtoMajor == 1 {
			http.NewResponseController(x.sw.ResponseWriter).EnableFullDuplex()
		}
	case x.sendLen != 0:
		// The rewrite stage read the body (and may have changed it).
		out.Body = &x.body
		out.ContentLength = x.sendLen
	case r.ContentLength == 0:
		out.Body = nil // lets the transport retry on a pooled connection that died
	case r.Body != nil:
		x.body.rc = r.Body
		out.Body = &x.body
		if r.ProtoMajor == 1 {
			// The body is sent upstream while the response comes back (an
			// echo, an upload answered early): without full duplex, net/http
			// would discard up to 256 KiB of the body still in flight as
			// soon as the response header is written.
			http.NewResponseController(x.sw.ResponseWriter).EnableFullDuplex()
		}
	}
	if out.ContentLength == 0 && out.Body != nil {
		out.Body = nil
	}
	return out
}

// writeHeader writes the status and header of res, less hop-by-hop
// headers, and returns how many trailers it announced.
func (x *exchange) writeHeader(r *http.Request, res *http.Response) (announced int) {
	// res.Header is not used again: a writer that can take it as its own
	// does, if there is nothing to remove; else it is copied to the empty
	// header of the writer.
	var h http.Header
	if ht, ok := x.sw.ResponseWriter.(headerTaker); ok && x.takenBy(ht, res) {
		h = res.Header
	} else {
		h = x.sw.Header()
		copyEndToEnd(h, res.Header)
	}
	announced = len(res.Trailer)
	if announced > 0 {
		announceTrailers(h, res.Trailer)
		if r.ProtoMajor == 1 {
			// Trailers need a chunked body in HTTP/1.1, which a
			// Content-Length (an HTTP/2 upstream sends both) rules out.
			delete(h, "Content-Length")
		}
	}
	x.sw.WriteHeader(res.StatusCode)
	return announced
}

// refuseSwitch answers a 101 to a request that asked for no protocol
// switch with 502.
func (p *Proxy) refuseSwitch(w http.ResponseWriter, out *http.Request, res *http.Response) {
	res.Body.Close()
	err := errors.New("internal error: 101 switching protocols response with non-writable body")
	if up := upgradeOf(res.Header); up != "" {
		err = fmt.Errorf("backend tried to switch protocol %q when %q was requested", up, "")
	}
	p.upstreamError(w, out, err)
}

// announceTrailers lists the trailers to come in h's Trailer header.
func announceTrailers(h, trailer http.Header) {
	keys := make([]string, 0, len(trailer))
	for k := range trailer {
		keys = append(keys, k)
	}
	h.Add("Trailer", strings.Join(keys, ", "))
}

// copyTrailers adds trailers to h once the body is sent: announced ones
// as they are, others with http.TrailerPrefix.
func copyTrailers(h, trailer http.Header, announced int) {
	if len(trailer) == announced {
		copyHeader(h, trailer)
		return
	}
	for k, vv := range trailer {
		k = http.TrailerPrefix + k
		for _, v := range vv {
			h.Add(k, v)
		}
	}
}

// copyBody copies the response body to the client, flushing as roundTrip
// describes. When it fails, the event's Error says which side failed.
func (p *Proxy) copyBody(x *exchange, r *http.Request, res *http.Response) error {
	fw := &x.fw
	fw.w = &x.sw
	fw.f, _ = x.sw.ResponseWriter.(http.Flusher)
	fw.c, _ = x.sw.ResponseWriter.(bodyCompleter)
	remaining := res.ContentLength // bytes to the end of a known-length body; -1 for a stream
	if remaining < 0 || isEventStream(res.Header["Content-Type"]) {
		remaining = -1
		fw.flush()
	} else if remaining > 0 {
		fw.held = true
		// Most bodies arrive with their header: the timer is only for one
		// that has to be waited for (arming a timer wakes a thread).
		if !ready(res.Body) {
			fw.t = time.AfterFunc(headerFlushDelay, fw.delayedFlush)
			defer fw.stop()
		}
	}
	buf := p.bufs.Get()
	defer p.bufs.Put(buf)
	var sent int64
	for {
		n, rerr := res.Body.Read(buf)
		// Of a known length, what has already arrived goes out with
		// this in one write, and so in one system call.
		for rerr == nil && int64(n) < remaining && len(buf)-n >= netx.MaxPlaintext && ready(res.Body) {
			var m int
			m, rerr = res.Body.Read(buf[n:])
			n += m
		}
		if n > 0 {
			last := remaining > 0 && int64(n) >= remaining
			if remaining > 0 {
				remaining -= int64(n)
			}
			if err := fw.write(buf[:n], !last); err != nil {
				x.http.Error = bodyError(r, nil, sent)
				return err
			}
			sent += int64(n)
			if last {
				fw.complete()
			}
		}
		switch {
		case rerr == io.EOF:
			if r.Context().Err() != nil {
				// The upstream's body ended, but the client had already
				// gone (and the transport may not have said so).
				x.http.Error = bodyError(r, nil, sent)
				return r.Context().Err()
			}
			return nil
		case rerr == nil:
		default:
			p.bodyReadFailed(rerr)
			x.http.Error = bodyError(r, rerr, sent)
			return rerr
		}
	}
}

func (p *Proxy) bodyReadFailed(err error) {
	if !errors.Is(err, context.Canceled) {
		p.log.Debug("proxy: upstream body read failed", "err", err)
	}
}

// bodyError says why a response body stopped after n bytes: the client
// went away (a write to it failed, readErr nil, or its request ended), or
// reading from the upstream failed with readErr.
func bodyError(r *http.Request, readErr error, n int64) string {
	at := " after " + strconv.FormatInt(n, 10) + " bytes of the body"
	switch {
	case readErr == nil || r.Context().Err() != nil:
		return clientClosed(r) + at
	case errors.Is(readErr, syscall.ECONNRESET):
		return "upstream reset the connection" + at
	case errors.Is(readErr, io.ErrUnexpectedEOF):
		return "upstream closed the connection" + at
	case netx.IsTimeout(readErr):
		return "upstream timed out" + at
	}
	return "upstream failed" + at + ": " + readErr.Error()
}

// readyBody is a response body that can tell whether its next Read returns
// at least a byte without waiting on the network.
type readyBody interface{ Ready() bool }

func ready(body io.Reader) bool {
	rb, ok := body.(readyBody)
	return ok && rb.Ready()
}

// flushWriter writes a response body to the client. Its lock orders the
// handler's writes with the timer that flushes a held header.
type flushWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	f       http.Flusher  // nil if the writer cannot flush
	c       bodyCompleter // nil if the writer cannot send a complete body early
	t       *time.Timer
	held    bool // the header is written and may not have been sent
	stopped bool // the handler is done with the writer
}

func (fw *flushWriter) write(b []byte, flush bool) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	n, err := fw.w.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if flush && fw.f != nil {
		fw.f.Flush()
		fw.held = false
	}
	return err
}

func (fw *flushWriter) flush() {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.f != nil {
		fw.f.Flush()
	}
	fw.held = false
}

// complete tells the writer the body is all written.
func (fw *flushWriter) complete() {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.c != nil {
		fw.c.BodyComplete()
		fw.held = false
	}
}

// bodyCompleter is a response writer that can send a response whose body
// is complete before the handler returns (h1.Server's writer).
type bodyCompleter interface{ BodyComplete() }

func (fw *flushWriter) delayedFlush() {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.held && !fw.stopped && fw.f != nil {
		fw.f.Flush()
		fw.held = false
	}
}

// stop ends the timer; after it returns, the timer no longer touches the
// writer.
func (fw *flushWriter) stop() {
	fw.mu.Lock()
	fw.stopped = true
	fw.t.Stop()
	fw.mu.Unlock()
}

// got1xx passes an informational response (103 Early Hints, say) on to the
// client, until RoundTrip has returned. A 100 Continue is not passed on:
// the proxy's own server told the client to continue when it read the
// body.
func (x *exchange) got1xx(code int, header textproto.MIMEHeader) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.rtDone || code == http.StatusContinue {
		return nil
	}
	h := x.sw.Header()
	copyHeader(h, http.Header(header))
	x.sw.WriteHeader(code)
	clear(h) // WriteHeader does not clear the header of a 1xx response
	return nil
}

// guardedBody is the outgoing request's body. The transport may still
// read or close it after the handler returned; its Close only stops later
// reads, and leaves the inbound body to the server.
type guardedBody struct {
	rc     io.ReadCloser
	closed atomic.Bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("proxy: read of a request body after the handler returned")
	}
	return b.rc.Read(p)
}

func (b *guardedBody) Close() error {
	b.closed.Store(true)
	return nil
}

// outboundHeader returns the header of the request sent upstream: in
// without hop-by-hop headers and the client's Forwarded and X-Forwarded-*,
// with "TE: trailers" kept if the client sent it and an empty User-Agent
// if it had none (so the transport adds none). When nothing needs to
// change it is in itself, which neither side modifies.
func outboundHeader(in http.Header) http.Header {
	_, hasUA := in["User-Agent"]
	dirty := !hasUA
	for k := range in {
		if dirty {
			break
		}
		dirty = h1.IsHopHeader(k) || isForwardedHeader(k)
	}
	if !dirty {
		return in
	}
	out := maps.Clone(in) // values are shared, never modified
	removeHopByHop(out)
	for k := range out {
		if isForwardedHeader(k) {
			delete(out, k)
		}
	}
	if h1.HasToken(in["Te"], "trailers") {
		out["Te"] = []string{"trailers"}
	}
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = []string{""}
	}
	return out
}

// headerTaker is a response writer that can take a header map as its own
// (h1.Server's), saving the copy, and the fields as received (vh, when not
// empty) to send as they are; false when it has a header already.
type headerTaker interface {
	TakeHeader(h http.Header, vh h1.VerbatimHead) bool
}

// takenBy has ht take res's header, if it has no hop-by-hop field.
func (x *exchange) takenBy(ht headerTaker, res *http.Response) bool {
	vh := x.verbatimHead(res)
	if vh.Fields == "" && hasHopHeader(res.Header) { // a verbatim head has none
		return false
	}
	return ht.TakeHeader(res.Header, vh)
}

// verbatimHead returns the fields of res as received, when they can be
// sent on as they are: res was read whole by h1.ParsePlainResponse, and
// neither a rewrite of the response (an LLM call's), trailers nor the
// proxy (Alt-Svc's h3 removed: headChanged) change them.
func (x *exchange) verbatimHead(res *http.Response) h1.VerbatimHead {
	if x.llm != nil || len(res.Trailer) > 0 || x.headChanged {
		return h1.VerbatimHead{}
	}
	return h1.Verbatim(res)
}

// hasHopHeader reports whether h has a hop-by-hop header (any header that
// a Connection header names is one only if Connection is there).
func hasHopHeader(h http.Header) bool {
	for k := range h {
		if h1.IsHopHeader(k) {
			return true
		}
	}
	return false
}

// copyEndToEnd adds to dst the headers of src that are not hop-by-hop:
// removeHopByHop and a copy in one pass. The value slices are shared.
func copyEndToEnd(dst, src http.Header) {
	for k, vv := range src {
		if !h1.IsHopHeader(k) {
			dst[k] = vv
		}
	}
	for _, f := range src["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				delete(dst, textproto.CanonicalMIMEHeaderKey(sf))
			}
		}
	}
}

// removeHopByHop deletes from h the headers that its Connection header
// names and the hop-by-hop headers that are always removed.
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				delete(h, textproto.CanonicalMIMEHeaderKey(sf))
			}
		}
	}
	for k := range h {
		if h1.IsHopHeader(k) {
			delete(h, k)
		}
	}
}

// isForwardedHeader reports whether a canonical header name is one of the
// forwarding headers a client may not set for the upstream.
func isForwardedHeader(k string) bool {
	switch k {
	case "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}

// isEventStream reports whether a Content-Type is text/event-stream
// (Server-Sent Events), parameters aside.
func isEventStream(ct []string) bool {
	if len(ct) == 0 {
		return false
	}
	base, _, _ := strings.Cut(ct[0], ";")
	return strings.EqualFold(strings.TrimSpace(base), "text/event-stream")
}

// maxQueryParams is ReverseProxy's limit on query parameters passed on
// without re-encoding.
const maxQueryParams = 10000

// cleanQuery re-encodes a query that Go's URL parsing would not take as
// is (a ';', a bad escape, too many parameters), dropping what it rejects,
// as ReverseProxy does: a parameter that the upstream might split
// differently is not passed on.
func cleanQuery(s string) string {
	if strings.Count(s, "&")+1 > maxQueryParams {
		return reencodeQuery(s)
	}
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			return reencodeQuery(s)
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return reencodeQuery(s)
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

// reencodeQuery is kept out of line: its frame is large, and cleanQuery
// runs on every request, often on a fresh handler goroutine's small stack.
//
//go:noinline
func reencodeQuery(s string) string {
	v, _ := url.ParseQuery(s)
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
