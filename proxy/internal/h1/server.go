package h1

import (
	"bufio"
	"context"
	stdtls "crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/reqctx"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"golang.org/x/net/http/httpguts"
)

// A tunnel's HTTP/1 requests are served by clientConn's loop rather than by
// an http.Server, which costs per connection a goroutine stack grown by
// the handler and 8 KiB of buffers held while idle, and per request a
// background read, five updates of the runtime's timers and a goroutine
// switch. The loop reads requests with readRequest and answers them
// through h1Writer on its own goroutine; between requests it holds no
// buffer, only its goroutine parked in a one-byte read. Its timeouts
// (ReadHeaderTimeout, and idleTimeout between requests) are kept by a
// deadlineWatch, which keeps HTTP/2 connections' too.

const (
	// headerSlack is read beyond the header limit before a header counts
	// as too large: it is read along with the first body bytes.
	headerSlack = 4096
)

// errHeaderLimit ends a read of a request header over the hard limit.
var errHeaderLimit = errors.New("request header over the limit")

// clientConn is one tunnel's HTTP/1 connection (plain, or TLS over the
// tunnel) as the loop serves it.
type clientConn struct {
	srv   *Server
	raw   net.Conn // the socket
	c     net.Conn // raw, or TLS over it
	tls   *stdtls.ConnectionState
	ctx   context.Context // the requests' parent
	fault func(netx.Fault)

	br    *bufio.Reader // nil while idle
	bw    *bufio.Writer // nil while idle
	first [1]byte       // the byte that ended the idle wait, until br reads it
	has1  bool
	limit int // bytes a request header may still take; < 0 when not reading one

	wait netx.Deadline    // idle, then header timeouts
	out  netx.StallWriter // the connection, as bw writes to it
	body *bodyEOF         // the current request's body; nil when it has none
	w    h1Writer

	// The watch for the client going away while a response streams.
	watching  bool
	watchDone chan struct{}
	watchByte [1]byte
	watchGot  bool        // the watch read the next request's first byte
	gone      atomic.Bool // the watch saw the connection end
	stopping  atomic.Bool
}

// h1Bufs recycles the loop's buffers between connections' requests.
type h1Bufs struct{ readers, writers sync.Pool }

func (b *h1Bufs) reader(r io.Reader) *bufio.Reader {
	if br, ok := b.readers.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, 4096)
}

func (b *h1Bufs) writer(w io.Writer) *bufio.Writer {
	if bw, ok := b.writers.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, 4096)
}

// Server serves HTTP/1 connections with one loop each: see the top of
// this file. Its fields are set before the first ServeConn.
type Server struct {
	Handler           http.Handler
	Watch             *netx.Watch // keeps the header, idle and stall waits
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration // between requests
	StallTimeout      time.Duration // a write that makes no progress for this long fails
	// MaxHeaderBytes is the hard limit of a request header: one over it
	// is answered TooLargeReply and reported as FaultHeaderTooLarge.
	MaxHeaderBytes int
	Log            *slog.Logger // a handler's panic; nil for none

	bufs h1Bufs
}

// ServeConn serves c until it closes or a handler hijacks it.
func (s *Server) ServeConn(c netx.ClientConn) {
	cc := &clientConn{srv: s, raw: c.Raw, c: c.C, ctx: c.Context, fault: c.Fault, limit: -1}
	if cc.fault == nil {
		cc.fault = func(netx.Fault) {}
	}
	if tlsc, ok := c.C.(*stdtls.Conn); ok {
		st := tlsc.ConnectionState()
		cc.tls = &st
	}
	cc.wait.Conn = c.Raw
	s.Watch.Add(&cc.wait)
	defer s.Watch.Remove(&cc.wait)
	cc.out = netx.NewStallWriter(c.C, c.Raw, s.Watch, s.StallTimeout)
	if cc.tls != nil && c.Gatherer != nil {
		cc.out.Gatherer = c.Gatherer
	}
	s.Watch.Add(&cc.out.Deadline)
	defer s.Watch.Remove(&cc.out.Deadline)
	for cc.next() && cc.serve() {
	}
	if !cc.w.hijacked {
		cc.release()
	}
}

// Read is the request reader's source: the byte that ended the idle wait,
// then the connection, bounded while a header is read.
func (cc *clientConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if cc.has1 {
		// With what follows it, if the connection has more: a request
		// read whole is read by readRequest's fast path.
		b[0], cc.has1 = cc.first[0], false
		if len(b) == 1 {
			return 1, nil
		}
		n, err := cc.read(b[1:])
		return n + 1, err
	}
	return cc.read(b)
}

func (cc *clientConn) read(b []byte) (int, error) {
	if cc.limit >= 0 {
		if cc.limit == 0 {
			return 0, errHeaderLimit
		}
		b = b[:min(len(b), cc.limit)]
	}
	n, err := cc.c.Read(b)
	if cc.limit >= 0 {
		cc.limit -= n
	}
	return n, err
}

// next waits for the next request. With nothing buffered, the buffers go
// back to their pools and the wait reads one byte, for at most
// innerIdleTimeout. False means the connection is over (and closed).
func (cc *clientConn) next() bool {
	if cc.br != nil && (cc.br.Buffered() > 0 || cc.has1) {
		return true
	}
	cc.release()
	cc.w, cc.body = h1Writer{}, nil // nothing of the last request stays while idle
	if !cc.has1 {
		cc.srv.Watch.Arm(&cc.wait, cc.srv.IdleTimeout)
		n, err := cc.c.Read(cc.first[:])
		cc.wait.Disarm()
		if n == 0 || err != nil && !errors.Is(err, io.EOF) {
			cc.c.Close()
			return false
		}
		cc.has1 = true
	}
	cc.br = cc.srv.bufs.reader(cc)
	cc.bw = cc.srv.bufs.writer(&cc.out)
	return true
}

// release returns the buffers to their pools.
func (cc *clientConn) release() {
	if cc.br != nil {
		cc.br.Reset(nil)
		cc.srv.bufs.readers.Put(cc.br)
		cc.br = nil
	}
	if cc.bw != nil {
		cc.bw.Reset(nil)
		cc.srv.bufs.writers.Put(cc.bw)
		cc.bw = nil
	}
}

// serve reads one request and answers it; false means the connection is
// over: closed, or hijacked by a protocol switch.
func (cc *clientConn) serve() bool {
	s := cc.srv
	s.Watch.Arm(&cc.wait, s.ReadHeaderTimeout)
	cc.limit = s.MaxHeaderBytes + headerSlack
	ctx := reqctx.New(cc.ctx)
	req, plain, err := ReadRequest(cc.br, ctx)
	overLimit := cc.limit == 0
	cc.limit = -1
	// A read cut short by the timeout or the limit may end a line early:
	// readRequest then says the request is malformed.
	switch {
	case cc.wait.Disarm():
		err = errTimeout{}
	case err != nil && overLimit:
		err = errHeaderLimit
	}
	if err != nil {
		cc.refuseRead(err)
		return false
	}
	if status, msg := CheckRequest(req, !plain); status != 0 {
		cc.closeWith(status, msg)
		return false
	}
	req.TLS = cc.tls
	// A body of its own for each request: after a handler returns, the
	// goroutine writing a body upstream may still be reading it.
	cc.body = nil
	if req.Body != http.NoBody {
		cc.body = &bodyEOF{rc: req.Body}
		req.Body = cc.body
		if ex := req.Header["Expect"]; len(ex) > 0 {
			if !strings.EqualFold(ex[0], "100-continue") || req.ProtoMinor == 0 {
				ctx.Cancel()
				cc.closeWith(http.StatusExpectationFailed, "")
				return false
			}
			// At once, before the handler: its body may be read by
			// another goroutine, while the handler writes the response.
			io.WriteString(cc.bw, "HTTP/1.1 100 Continue\r\n\r\n")
			if cc.bw.Flush() != nil {
				ctx.Cancel()
				cc.c.Close()
				return false
			}
		}
	}
	w := &cc.w
	w.reset(cc, req, ctx)
	aborted := cc.run(w, req)
	ctx.Cancel()
	cc.stopWatch()
	switch {
	case w.hijacked:
		return false
	case aborted || cc.gone.Load():
		cc.c.Close()
		return false
	}
	if err := w.finish(); err != nil {
		cc.c.Close()
		return false
	}
	// A body the handler left unread closes the connection: what may
	// still be reading it is not known (a client waiting for 100 Continue
	// may not send it at all).
	if w.closeAfter || req.Close || cc.body != nil && !cc.body.eof.Load() {
		cc.closeGracefully()
		return false
	}
	return true
}

// run calls the handler; true means it aborted the response.
func (cc *clientConn) run(w *h1Writer, req *http.Request) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			aborted = true
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				if cc.srv.Log != nil {
					cc.srv.Log.Error("proxy: handler panicked", "panic", v, "stack", string(buf))
				}
			}
		}
	}()
	cc.srv.Handler.ServeHTTP(w, req)
	return false
}

// errTimeout is a wait expired by a deadlineWatch.
type errTimeout struct{}

func (errTimeout) Error() string   { return "timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// refuseRead answers a request that could not be read, publishing the
// faults that net/http would have kept quiet about, and closes.
func (cc *clientConn) refuseRead(err error) {
	switch {
	case errors.Is(err, errHeaderLimit):
		cc.fault(netx.FaultHeaderTooLarge)
		cc.bw.WriteString(TooLargeReply)
		cc.bw.Flush()
		cc.closeGracefully()
	case netx.IsTimeout(err):
		cc.fault(netx.FaultHeaderTimeout)
		cc.c.Close()
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed):
		cc.c.Close()
	default:
		cc.closeWith(http.StatusBadRequest, "")
	}
}

// closeWith answers status in plain text and closes.
func (cc *clientConn) closeWith(status int, msg string) {
	if msg == "" {
		msg = http.StatusText(status)
	}
	fmt.Fprintf(cc.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n%d %s: %s",
		status, http.StatusText(status), status, http.StatusText(status), msg)
	cc.bw.Flush()
	cc.closeGracefully()
}

// closeGracefully half-closes the connection and reads what the client
// still sends for a moment before closing, so that it reads the answer
// rather than a reset caused by its unread request.
func (cc *clientConn) closeGracefully() {
	if tlsc, ok := cc.c.(*stdtls.Conn); ok {
		tlsc.CloseWrite() // close_notify, so the client sees the end
	}
	netx.CloseWrite(cc.raw)
	cc.raw.SetReadDeadline(time.Now().Add(netx.CloseLinger))
	io.CopyN(io.Discard, cc.raw, 1<<20)
	cc.c.Close()
}

// startWatch watches for the client going away while a response streams:
// the handler reads nothing more from the connection then, and a failed
// write is seen only at the next write, which may be long coming. The
// request's context is cancelled if the connection ends. Only with
// nothing buffered: a byte read now is the next request's first.
func (cc *clientConn) startWatch(ctx *reqctx.Context) {
	if cc.watching || cc.body != nil && !cc.body.eof.Load() || cc.br.Buffered() > 0 || cc.has1 {
		return
	}
	cc.watching = true
	cc.watchDone = make(chan struct{})
	go func() {
		defer close(cc.watchDone)
		n, err := cc.c.Read(cc.watchByte[:])
		if n == 1 {
			cc.watchGot = true
		} else if err != nil && !cc.stopping.Load() {
			cc.gone.Store(true)
			ctx.Cancel()
		}
	}()
}

// stopWatch ends the watch, keeping the byte it may have read.
func (cc *clientConn) stopWatch() {
	if !cc.watching {
		return
	}
	cc.stopping.Store(true)
	cc.raw.SetReadDeadline(time.Unix(1, 0))
	<-cc.watchDone
	cc.raw.SetReadDeadline(time.Time{})
	cc.watching = false
	cc.stopping.Store(false)
	if cc.watchGot {
		cc.first[0], cc.has1, cc.watchGot = cc.watchByte[0], true, false
	}
}

// bodyEOF is a request body that notes its end. Its reader is the
// handler's goroutine, or the goroutine the handler has write the body
// upstream, one at a time; eof is read by the loop too.
type bodyEOF struct {
	rc  io.ReadCloser
	eof atomic.Bool
}

func (b *bodyEOF) Read(p []byte) (int, error) {
	if b.eof.Load() {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *bodyEOF) Close() error { return nil } // the loop drains or closes

// h1Writer is the http.ResponseWriter of one request served by the loop.
// It frames the body by its Content-Length when the handler sets one,
// else in chunks (or, to an HTTP/1.0 client, up to the connection's
// close); trailers announced in the Trailer header, or set under
// http.TrailerPrefix, follow a chunked body.
type h1Writer struct {
	cc     *clientConn
	req    *http.Request
	ctx    *reqctx.Context
	header http.Header

	status     int  // 0 until a final status is written
	sent       bool // the status line and header are in the buffer
	noBody     bool
	chunked    bool
	closeAfter bool
	hijacked   bool
	done       bool
	clen       int64 // the declared Content-Length; -1 when none
	written    int64
	trailers   []string
	err        error // the first write error

	// The header's fields as received, when takeHeader was given them,
	// and how many keys the header had then.
	verbatim     VerbatimHead
	verbatimKeys int
}

func (w *h1Writer) reset(cc *clientConn, req *http.Request, ctx *reqctx.Context) {
	h := w.header // made by Header when first asked for
	if h != nil {
		clear(h)
	}
	trailers := w.trailers[:0]
	*w = h1Writer{cc: cc, req: req, ctx: ctx, header: h, clen: -1, trailers: trailers}
	w.closeAfter = req.ProtoMinor == 0 // HTTP/1.0: one request a connection
}

// SetReadDeadline bounds the reads of the request's body from the
// connection (for http.ResponseController).
func (w *h1Writer) SetReadDeadline(t time.Time) error { return w.cc.raw.SetReadDeadline(t) }

func (w *h1Writer) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

// takeHeader makes h the response's header, in place of an empty one, before
// anything is written: the handler gives h up, to be changed and reused.
// vh, when not empty, is h's fields as received: they are sent as they
// are, unless h changes meanwhile.
func (w *h1Writer) TakeHeader(h http.Header, vh VerbatimHead) bool {
	if len(w.header) > 0 || w.status != 0 || w.sent || w.hijacked || w.done {
		return false
	}
	w.header = h
	if vh.Fields != "" {
		w.verbatim, w.verbatimKeys = vh, len(h)
	}
	return true
}

func (w *h1Writer) WriteHeader(code int) {
	if w.sent || w.status != 0 || w.hijacked {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.status = code
}

// writeInformational sends a 1xx response at once.
func (w *h1Writer) writeInformational(code int) {
	bw := w.cc.bw
	writeStatusLine(bw, code)
	for k, vv := range w.header {
		WriteField(bw, k, vv)
	}
	bw.WriteString("\r\n")
	w.noteErr(bw.Flush())
}

func (w *h1Writer) Write(b []byte) (int, error) {
	switch {
	case w.done:
		return 0, errors.New("proxy: write after the handler returned")
	case w.hijacked:
		return 0, http.ErrHijacked
	case w.err != nil:
		return 0, w.err
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.sent {
		w.sendHeader(false)
	}
	if w.noBody {
		if w.req.Method == http.MethodHead {
			return len(b), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.clen >= 0 && w.written+int64(len(b)) > w.clen {
		return 0, http.ErrContentLength
	}
	if len(b) == 0 {
		return 0, nil
	}
	bw := w.cc.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(b)), 16))
		bw.WriteString("\r\n")
	}
	n, err := bw.Write(b)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	w.written += int64(n)
	w.noteErr(err)
	return n, err
}

func (w *h1Writer) noteErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

// Flush sends what is buffered, the header first, and watches the client
// from then on.
func (w *h1Writer) Flush() {
	if w.done || w.hijacked {
		return
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.sent {
		w.sendHeader(false)
	}
	w.noteErr(w.cc.bw.Flush())
	w.cc.startWatch(w.ctx)
}

// bodyComplete sends the response now if its body is complete: all of
// its declared length written. What the handler does after the body (the
// upstream connection back to its pool, the request's event) then no
// longer delays the client. Unlike Flush, it starts no watch: the handler
// is about to return.
func (w *h1Writer) BodyComplete() {
	if w.sent && !w.chunked && w.clen >= 0 && w.written == w.clen && !w.done && !w.hijacked && w.err == nil {
		w.noteErr(w.cc.bw.Flush())
	}
}

// FlushError is Flush that reports a write error.
func (w *h1Writer) FlushError() error {
	w.Flush()
	return w.err
}

// Hijack hands the connection over: a protocol switch (WebSocket).
func (w *h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.done || w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	w.cc.stopWatch()
	if w.cc.has1 { // put the byte back in front: the buffer is empty
		w.cc.br.Reset(io.MultiReader(strings.NewReader(string(w.cc.first[:1])), w.cc.c))
		w.cc.has1 = false
	}
	w.hijacked = true
	return w.cc.c, bufio.NewReadWriter(w.cc.br, w.cc.bw), nil
}

// finish ends the response: the header if not sent yet, the last chunk
// and trailers, and sends it all.
func (w *h1Writer) finish() error {
	w.done = true
	if w.err != nil {
		return w.err
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.sent {
		w.sendHeader(true)
	}
	bw := w.cc.bw
	switch {
	case w.chunked:
		bw.WriteString("0\r\n")
		w.writeTrailers()
		bw.WriteString("\r\n")
	case w.clen >= 0 && w.written < w.clen && !w.noBody:
		// Short of its declared length: the client must see it cut.
		bw.Flush()
		return io.ErrShortWrite
	}
	return bw.Flush()
}

// writeTrailers writes the trailers the header announced and those set
// under http.TrailerPrefix.
func (w *h1Writer) writeTrailers() {
	bw := w.cc.bw
	for _, k := range w.trailers {
		if vv := w.header[k]; len(vv) > 0 {
			WriteField(bw, k, vv)
		}
	}
	for k, vv := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if k = strings.TrimPrefix(k, http.TrailerPrefix); httpguts.ValidTrailerHeader(k) {
				WriteField(bw, k, vv)
			}
		}
	}
}

// sendHeader writes the status line and header to the buffer; final says
// the handler is done, so an unset length is what was written (nothing).
func (w *h1Writer) sendHeader(final bool) {
	w.sent = true
	h, code, req := w.Header(), w.status, w.req
	w.noBody = req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	if vh := w.verbatim; vh.Fields != "" && len(h) == w.verbatimKeys && !w.noBody && code >= 200 {
		// The fields as received: framed by their Content-Length, with no
		// trailer, hop-by-hop field or Transfer-Encoding to take out.
		w.clen = vh.Length
		bw := w.cc.bw
		writeStatusLine(bw, code)
		bw.WriteString(vh.Fields)
		if !vh.Date {
			writeDate(bw)
		}
		if w.closeAfter {
			bw.WriteString("Connection: close\r\n")
		}
		bw.WriteString("\r\n")
		return
	}
	for _, v := range h["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" && httpguts.ValidTrailerHeader(k) {
				w.trailers = append(w.trailers, k)
			}
		}
	}
	if cl := h["Content-Length"]; len(cl) > 0 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil && n >= 0 && len(w.trailers) == 0 {
			w.clen = n
		} else {
			delete(h, "Content-Length")
		}
	}
	delete(h, "Transfer-Encoding")
	hasTrailers := len(w.trailers) > 0 || hasTrailerPrefix(h)
	switch {
	case code == http.StatusNoContent || code == http.StatusNotModified:
		delete(h, "Content-Length")
		w.clen = -1
	case w.noBody:
	case w.clen >= 0 && !hasTrailers:
	case final && !hasTrailers:
		w.clen = 0
		h["Content-Length"] = []string{"0"}
	case req.ProtoMinor >= 1:
		w.chunked = true
	default:
		w.closeAfter = true // an HTTP/1.0 body of unknown length ends with the connection
	}
	if HasToken(h["Connection"], "close") {
		w.closeAfter = true
	}
	delete(h, "Connection")
	bw := w.cc.bw
	writeStatusLine(bw, code)
	for k, vv := range h {
		if k == "Trailer" && !w.chunked || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		WriteField(bw, k, vv)
	}
	if _, ok := h["Date"]; !ok {
		writeDate(bw)
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.closeAfter {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
}

// writeDate writes a Date field of the time now.
func writeDate(bw *bufio.Writer) {
	var b [len(http.TimeFormat) + 8]byte
	bw.WriteString("Date: ")
	bw.Write(time.Now().UTC().AppendFormat(b[:0], http.TimeFormat))
	bw.WriteString("\r\n")
}

func hasTrailerPrefix(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

func writeStatusLine(bw *bufio.Writer, code int) {
	if code == http.StatusOK {
		bw.WriteString("HTTP/1.1 200 OK\r\n")
		return
	}
	var b [3]byte
	bw.WriteString("HTTP/1.1 ")
	bw.Write(strconv.AppendInt(b[:0], int64(code), 10))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(code))
	bw.WriteString("\r\n")
}

// TooLargeReply is what net/http writes, in one write, to a connection
// whose request header is over its limit, before closing it. A handler's
// response never looks like it: net/http adds a Date header.
const TooLargeReply = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"
