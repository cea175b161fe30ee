package h2

import (
	"bufio"
	"bytes"
	"context"
	stdtls "crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"
	"github.com/chaperone-dev/chaperone/proxy/internal/reqctx"
	"github.com/chaperone-dev/chaperone/proxy/internal/ws"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A tunnel's HTTP/2 connections (h2 over TLS, h2c with prior knowledge)
// are served by h2Conn rather than by net/http's server. That server
// passes every frame through one goroutine of the connection's, over
// channels, and starts a goroutine for each response's HEADERS frame and
// for each flush (writeFrameAsync: measured, a tenth of the proxy's CPU at
// 64 concurrent HTTP/2 requests), besides one for each request. Here a
// connection has one goroutine, its reader, which decodes frames and
// starts each request's handler on an HTTP/2 worker; a handler writes its
// own frames into the connection's buffer under a lock, and the last
// writer in line flushes it, so that answers that finish together leave
// in one write.
//
// The framing, HPACK and header checks are x/net's (http2.Framer with
// ReadMetaHeaders). What is served: streams up to h2MaxStreams at once,
// counted until their handler returns, so that a client resetting its
// streams cannot run more handlers than that; flow control both ways;
// request trailers; 1xx, trailers and aborts (RST_STREAM) in responses;
// PING, SETTINGS and GOAWAY. A header list over the limit gets 431 and an
// event, and one far over it (beyond what the framer will decode) ends the
// connection, with an event too.

const (
	h2MaxStreams   = 250     // requests a connection may have running, as net/http's server
	h2StreamWindow = 1 << 20 // bytes of a request body a client may send ahead, per stream
	h2ConnWindow   = 1 << 20 // and per connection
	h2MaxReadFrame = 16384   // the protocol's default SETTINGS_MAX_FRAME_SIZE, which we keep
	h2Preface      = http2.ClientPreface
)

var (
	errH2StreamReset = errors.New("proxy: HTTP/2 stream reset")
	errH2ConnClosed  = errors.New("proxy: HTTP/2 connection closed")
	errH2BodyClosed  = errors.New("proxy: HTTP/2 request body closed")
)

// Server holds what every HTTP/2 connection it serves shares. Its fields
// are set before the first ServeConn.
type Server struct {
	Handler   http.Handler
	MaxHeader int           // header list limit (SETTINGS_MAX_HEADER_LIST_SIZE)
	Idle      time.Duration // a connection without requests for this long is closed
	Stall     time.Duration // and one whose socket takes no bytes for this long
	Preface   time.Duration // the client's preface and SETTINGS are awaited this long
	Watch     *netx.Watch
	Spawn     func(func()) // runs a request's handler; the function recovers its own panics
	Log       *slog.Logger

	writers sync.Pool // *bufio.Writer, lent to connections between flushes
}

// h2Conn is one client connection.
type h2Conn struct {
	srv    *Server
	c      net.Conn // the connection frames are read from and written to
	ctx    context.Context
	tls    *stdtls.ConnectionState
	remote string
	fault  func(netx.Fault) // publishes what ended the connection before a handler ran
	fr     *http2.Framer
	in     countingReader // what fr reads from
	wait   netx.Deadline  // preface, then idle waits

	// Writing: frames are written into out under wmu; see lockW.
	wmu       sync.Mutex
	queued    atomic.Int32 // goroutines waiting for wmu
	out       pooledWriter
	henc      *hpack.Encoder
	hbuf      bytes.Buffer
	flushOwed bool
	werr      error     // the first write error: every later write fails with it
	sendWin   int64     // the connection's send window
	initWin   int64     // the client's SETTINGS_INITIAL_WINDOW_SIZE (the reader's alone: it reads SETTINGS and opens streams)
	maxFrame  int       // the client's SETTINGS_MAX_FRAME_SIZE
	winCond   sync.Cond // on wmu: a window grew, a stream was reset, or writing failed

	mu       sync.Mutex
	streams  map[uint32]*h2Stream // streams whose handler runs
	maxID    uint32               // the highest stream the client opened
	goAway   bool                 // no new streams; the connection ends with its last one
	recvWin  int64                // bytes the client may still send on the connection
	unacked  int64                // bytes read by handlers and not yet given back to the client
	finished bool                 // the reader is done: streams end with it

	failed bool // the reader's GOAWAY is for an error; only the reader uses it
}

// h2Stream is one request.
type h2Stream struct {
	sc   *h2Conn
	id   uint32
	ctx  *reqctx.Context // cancelled when the stream ends
	body *h2Body         // nil when the request has none
	w    h2Writer

	// Under sc.wmu.
	sendWin int64
	reset   bool // the stream was reset, by either side: writes fail

	// Under sc.mu.
	recvWin    int64 // bytes the client may still send on the stream
	unacked    int64
	remoteDone bool // the client sends no more on the stream: it ended it, or the stream was reset
	ended      bool // the client ended it (END_STREAM)

	// The reader's alone.
	declared int64 // the request's Content-Length; -1 when none
	received int64
}

// ServeConn serves c until it closes.
func (s *Server) ServeConn(c netx.ClientConn) {
	sc := s.newConn(c.C, c.Raw, c.Context)
	if sc.tls != nil && c.Gatherer != nil {
		sc.out.out.Gatherer = c.Gatherer
	}
	if c.Fault != nil {
		sc.fault = c.Fault
	}
	sc.serve()
}

// newConn returns the connection c, whose deadlines raw keeps.
func (s *Server) newConn(c, raw net.Conn, ctx context.Context) *h2Conn {
	sc := &h2Conn{
		srv: s, c: c, ctx: ctx, remote: c.RemoteAddr().String(),
		fault:   func(netx.Fault) {},
		streams: make(map[uint32]*h2Stream),
		initWin: 65535, sendWin: 65535, maxFrame: 16384,
		recvWin: h2ConnWindow,
	}
	if tlsc, ok := c.(*stdtls.Conn); ok {
		st := tlsc.ConnectionState()
		sc.tls = &st
	}
	sc.wait.Conn = raw
	sc.winCond.L = &sc.wmu
	sc.out = pooledWriter{pool: &s.writers, out: netx.NewStallWriter(c, raw, s.Watch, s.Stall)}
	sc.in.r = c
	sc.fr = http2.NewFramer(&sc.out, &sc.in)
	sc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	sc.fr.MaxHeaderListSize = uint32(min(s.MaxHeader, 1<<30))
	sc.fr.SetMaxReadFrameSize(h2MaxReadFrame)
	sc.fr.SetReuseFrames()
	sc.henc = hpack.NewEncoder(&sc.hbuf)
	return sc
}

// serve reads frames until the connection ends, then ends its streams.
// (A panic is not caught on the way: shut would wait for the write lock,
// which the panicking code may hold.)
func (sc *h2Conn) serve() {
	s := sc.srv
	s.Watch.Add(&sc.wait)
	defer s.Watch.Remove(&sc.wait)
	s.Watch.Add(&sc.out.out.Deadline)
	defer s.Watch.Remove(&sc.out.out.Deadline)
	sc.read()
	if sc.failed {
		sc.linger()
	}
	sc.shut()
}

// linger half-closes a connection ended by an error and reads what the
// client still sends for a moment, so that it reads the GOAWAY rather than
// a reset caused by its unread frames.
func (sc *h2Conn) linger() {
	if tlsc, ok := sc.c.(*stdtls.Conn); ok {
		tlsc.CloseWrite() // close_notify, so the client sees the end
	}
	raw := sc.wait.Conn
	netx.CloseWrite(raw)
	raw.SetReadDeadline(time.Now().Add(netx.CloseLinger))
	io.CopyN(io.Discard, raw, 1<<20)
}

// read reads and processes frames until the connection ends.
func (sc *h2Conn) read() {
	s := sc.srv

	sc.lockW()
	sc.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: h2MaxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: sc.fr.MaxHeaderListSize},
		// RFC 8441: WebSocket over a stream (extended CONNECT).
		http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1},
	)
	sc.fr.WriteWindowUpdate(0, h2ConnWindow-65535)
	sc.unlockW(true)

	s.Watch.Arm(&sc.wait, s.Preface)
	if err := sc.readPreface(); err != nil {
		if sc.wait.Disarm() || netx.IsTimeout(err) {
			sc.fault(netx.FaultHeaderTimeout)
		}
		return
	}
	sc.idle()
	for {
		sc.in.n = 0
		f, err := sc.fr.ReadFrame()
		if err != nil {
			if !sc.readFailed(f, err) {
				return
			}
			continue
		}
		if err := sc.process(f); err != nil {
			sc.fail(err)
			return
		}
		if sc.done() {
			return
		}
	}
}

// readPreface reads the client's connection preface and first SETTINGS.
func (sc *h2Conn) readPreface() error {
	var b [len(h2Preface)]byte
	if _, err := io.ReadFull(sc.c, b[:]); err != nil {
		return err
	}
	if string(b[:]) != h2Preface {
		return errors.New("proxy: bad HTTP/2 connection preface")
	}
	f, err := sc.fr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		sc.goAwayWith(http2.ErrCodeProtocol)
		return errors.New("proxy: HTTP/2 preface without SETTINGS")
	}
	return sc.process(sf)
}

// readFailed handles an error from ReadFrame; false means the connection
// is over.
func (sc *h2Conn) readFailed(f http2.Frame, err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		// A header block refused by the framer still opened its stream:
		// the client's next frames on it are not for an idle stream.
		sc.mu.Lock()
		if se.StreamID%2 == 1 && se.StreamID > sc.maxID {
			sc.maxID = se.StreamID
		}
		sc.mu.Unlock()
		sc.resetStream(se.StreamID, se.Code)
		return true
	case errors.Is(err, http2.ErrFrameTooLarge):
		sc.goAwayWith(http2.ErrCodeFrameSize)
		return false
	case errors.As(err, &ce):
		if _, ok := f.(*http2.MetaHeadersFrame); ok && sc.in.n >= int64(sc.srv.MaxHeader)/2 {
			// The framer stopped decoding a header block far over the
			// limit (its fragments, or a field alone, too large); a corrupt
			// block of that size is one too.
			sc.fault(netx.FaultHeaderTooLarge)
		}
		sc.goAwayWith(http2.ErrCode(ce))
		return false
	case netx.IsTimeout(err):
		sc.wait.Disarm()
		sc.goAwayWith(http2.ErrCodeNo) // idle (or, racing it, a request refused below)
		return false
	}
	return false
}

// process handles one frame; an error is a connection error.
func (sc *h2Conn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return sc.processHeaders(f)
	case *http2.DataFrame:
		return sc.processData(f)
	case *http2.SettingsFrame:
		return sc.processSettings(f)
	case *http2.WindowUpdateFrame:
		return sc.processWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return sc.processReset(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			sc.lockW()
			sc.fr.WritePing(true, f.Data)
			sc.unlockW(true)
		}
	case *http2.GoAwayFrame:
		sc.mu.Lock()
		sc.goAway = true
		sc.mu.Unlock()
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // clients do not push
	}
	// PRIORITY and unknown frames are ignored.
	return nil
}

func (sc *h2Conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() }); err != nil {
		return err
	}
	sc.lockW()
	defer sc.unlockW(true)
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - sc.initWin
			sc.initWin = int64(s.Val)
			sc.mu.Lock()
			defer sc.mu.Unlock()
			for _, st := range sc.streams {
				if st.sendWin += delta; st.sendWin > 1<<31-1 {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			sc.winCond.Broadcast()
		case http2.SettingMaxFrameSize:
			sc.maxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			sc.henc.SetMaxDynamicTableSize(s.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return sc.fr.WriteSettingsAck()
}

func (sc *h2Conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	sc.lockW()
	defer sc.unlockW(false)
	if f.StreamID == 0 {
		sc.sendWin += int64(f.Increment)
		if sc.sendWin > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		sc.winCond.Broadcast()
		return nil
	}
	sc.mu.Lock()
	st := sc.streams[f.StreamID]
	idle := f.StreamID > sc.maxID
	sc.mu.Unlock()
	switch {
	case idle:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	case st == nil || st.reset:
		return nil // a stream that has ended
	}
	st.sendWin += int64(f.Increment)
	if st.sendWin > 1<<31-1 {
		st.reset = true
		sc.fr.WriteRSTStream(st.id, http2.ErrCodeFlowControl)
		sc.flushOwed = true
		sc.endRemote(st, errH2StreamReset)
		st.ctx.Cancel()
	}
	sc.winCond.Broadcast()
	return nil
}

func (sc *h2Conn) processReset(f *http2.RSTStreamFrame) error {
	sc.mu.Lock()
	st := sc.streams[f.StreamID]
	idle := f.StreamID > sc.maxID
	sc.mu.Unlock()
	if idle {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if st != nil {
		sc.lockW()
		st.reset = true
		sc.winCond.Broadcast()
		sc.unlockW(false)
		sc.endRemote(st, errH2StreamReset)
		st.ctx.Cancel()
	}
	return nil
}

// resetStream resets stream id, with code, for a stream error.
func (sc *h2Conn) resetStream(id uint32, code http2.ErrCode) {
	sc.mu.Lock()
	st := sc.streams[id]
	sc.mu.Unlock()
	sc.lockW()
	if st != nil {
		st.reset = true
		sc.winCond.Broadcast()
	}
	sc.fr.WriteRSTStream(id, code)
	sc.unlockW(true)
	if st != nil {
		sc.endRemote(st, errH2StreamReset)
		st.ctx.Cancel()
	}
}

// processHeaders opens a stream, or takes its trailers.
func (sc *h2Conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	sc.mu.Lock()
	if id <= sc.maxID {
		st := sc.streams[id]
		sc.mu.Unlock()
		if st == nil {
			// The stream has ended (or never was: ids only grow).
			if id%2 == 0 {
				return http2.ConnectionError(http2.ErrCodeProtocol)
			}
			sc.resetStream(id, http2.ErrCodeStreamClosed)
			return nil
		}
		return sc.processTrailers(st, f)
	}
	if id%2 == 0 {
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	sc.maxID = id
	refuse := sc.goAway || len(sc.streams) >= h2MaxStreams
	sc.mu.Unlock()
	if refuse {
		sc.resetStream(id, http2.ErrCodeRefusedStream)
		return nil
	}
	if f.Truncated {
		sc.fault(netx.FaultHeaderTooLarge)
		sc.answer(id, http.StatusRequestHeaderFieldsTooLarge)
		return nil
	}
	req, declared, err := sc.newRequest(f)
	if err != nil {
		sc.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}
	st := &h2Stream{sc: sc, id: id, declared: declared, recvWin: h2StreamWindow}
	st.w = h2Writer{st: st, req: req}
	st.ctx = reqctx.New(sc.ctx)
	req = req.WithContext(st.ctx)
	st.w.req = req
	if f.StreamEnded() {
		st.remoteDone = true
		req.Body = http.NoBody
		if declared > 0 {
			st.ctx.Cancel()
			sc.resetStream(id, http2.ErrCodeProtocol)
			return nil
		}
	} else {
		st.body = &h2Body{st: st, cont: h1.HasToken(req.Header["Expect"], "100-continue")}
		st.body.cond.L = &st.body.mu
		req.Body = st.body
	}
	st.sendWin = sc.initWin // not yet seen by any writer
	sc.mu.Lock()
	if len(sc.streams) == 0 && sc.wait.Disarm() {
		// The idle wait expired as the request came: the connection's
		// reads fail from now on. Refused, the request is safe to retry.
		sc.mu.Unlock()
		st.ctx.Cancel()
		sc.resetStream(id, http2.ErrCodeRefusedStream)
		return nil
	}
	sc.streams[id] = st
	sc.mu.Unlock()
	sc.srv.Spawn(st.run)
	return nil
}

// newRequest makes the request of a HEADERS frame, with its declared
// Content-Length (-1 when none); an error is a stream error.
func (sc *h2Conn) newRequest(f *http2.MetaHeadersFrame) (*http.Request, int64, error) {
	var method, path, scheme, authority, protocol string
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":path":
			path = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		case ":protocol":
			protocol = hf.Value
		default:
			return nil, 0, fmt.Errorf("pseudo-header %s", hf.Name)
		}
	}
	// An extended CONNECT (RFC 8441) opens a WebSocket on the stream.
	socket := method == http.MethodConnect && protocol != ""
	connect := method == http.MethodConnect && !socket
	switch {
	case protocol != "" && !socket:
		return nil, 0, errors.New(":protocol without CONNECT")
	case socket && !strings.EqualFold(protocol, "websocket"):
		return nil, 0, fmt.Errorf("extended CONNECT for %q", protocol)
	case connect && (path != "" || scheme != "" || authority == ""):
		return nil, 0, errors.New("malformed CONNECT")
	case !connect && (method == "" || path == "" || scheme == ""):
		return nil, 0, errors.New("missing pseudo-header")
	case socket && authority == "":
		return nil, 0, errors.New("extended CONNECT without :authority")
	}
	regular := f.RegularFields()
	h := make(http.Header, len(regular))
	var cookies []string
	for _, hf := range regular {
		switch hf.Name {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
			return nil, 0, errors.New("connection-specific header")
		case "te":
			if hf.Value != "trailers" {
				return nil, 0, errors.New("TE other than trailers")
			}
		case "cookie":
			cookies = append(cookies, hf.Value)
			continue
		}
		k := textproto.CanonicalMIMEHeaderKey(hf.Name)
		h[k] = append(h[k], hf.Value)
	}
	if len(cookies) > 0 {
		h["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	if socket {
		if err := ws.AsUpgrade(h); err != nil {
			return nil, 0, err
		}
		method = http.MethodGet
	}
	if authority == "" {
		authority = h.Get("Host")
	}
	delete(h, "Host")
	if authority != "" && !httpguts.ValidHostHeader(authority) {
		return nil, 0, errors.New("malformed :authority")
	}
	declared := int64(-1)
	if cl := h["Content-Length"]; len(cl) > 0 {
		n, err := strconv.ParseInt(cl[0], 10, 64)
		if err != nil || n < 0 || len(cl) > 1 && !allEqual(cl) {
			return nil, 0, errors.New("malformed Content-Length")
		}
		declared = n
	}
	var u *url.URL
	uri := path
	if connect {
		u, uri = &url.URL{Host: authority}, authority
	} else {
		var err error
		if u, err = url.ParseRequestURI(path); err != nil {
			return nil, 0, err
		}
	}
	req := &http.Request{
		Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: h, Host: authority, RequestURI: uri,
		RemoteAddr: sc.remote, TLS: sc.tls, ContentLength: declared,
	}
	if f.StreamEnded() {
		req.ContentLength = 0
	}
	if tr := h["Trailer"]; len(tr) > 0 {
		// As net/http: the declared trailers become req.Trailer's keys,
		// which the trailers' values fill; others are dropped.
		for _, v := range tr {
			for k := range strings.SplitSeq(v, ",") {
				if k = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(k)); k != "" && httpguts.ValidTrailerHeader(k) {
					if req.Trailer == nil {
						req.Trailer = make(http.Header)
					}
					req.Trailer[k] = nil
				}
			}
		}
		delete(h, "Trailer")
	}
	return req, declared, nil
}

func allEqual(vv []string) bool {
	for _, v := range vv[1:] {
		if v != vv[0] {
			return false
		}
	}
	return true
}

// processTrailers takes the HEADERS frame that ends a request body.
func (sc *h2Conn) processTrailers(st *h2Stream, f *http2.MetaHeadersFrame) error {
	sc.mu.Lock()
	done := st.remoteDone
	sc.mu.Unlock()
	if done {
		sc.resetStream(st.id, http2.ErrCodeStreamClosed)
		return nil
	}
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 || f.Truncated || st.body == nil {
		sc.resetStream(st.id, http2.ErrCodeProtocol)
		return nil
	}
	if st.declared >= 0 && st.received != st.declared {
		sc.resetStream(st.id, http2.ErrCodeProtocol)
		return nil
	}
	// The handler reads req.Trailer after the body's end, which b.mu
	// orders after these writes; the map is the request's from the start.
	b := st.body
	b.mu.Lock()
	if trailer := st.w.req.Trailer; trailer != nil {
		for _, hf := range f.RegularFields() {
			k := textproto.CanonicalMIMEHeaderKey(hf.Name)
			if _, declared := trailer[k]; declared {
				trailer[k] = append(trailer[k], hf.Value)
			}
		}
	}
	b.mu.Unlock()
	sc.endRemote(st, io.EOF)
	return nil
}

func (sc *h2Conn) processData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	sc.mu.Lock()
	if n > sc.recvWin {
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	sc.recvWin -= n
	st := sc.streams[id]
	switch {
	case id > sc.maxID:
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	case st == nil || st.remoteDone:
		// An ended stream: its bytes go back to the connection's window.
		// After END_STREAM they break the rules; after a reset they may
		// have been on their way, and are dropped.
		closed := st != nil && st.ended
		sc.mu.Unlock()
		sc.giveBack(nil, n)
		if closed {
			sc.resetStream(id, http2.ErrCodeStreamClosed)
		}
		return nil
	case n > st.recvWin:
		sc.mu.Unlock()
		sc.giveBack(nil, n)
		sc.resetStream(id, http2.ErrCodeFlowControl)
		return nil
	}
	st.recvWin -= n
	sc.mu.Unlock()
	data := f.Data()
	if pad := n - int64(len(data)); pad > 0 {
		sc.giveBack(st, pad)
	}
	st.received += int64(len(data))
	if st.declared >= 0 && (st.received > st.declared || f.StreamEnded() && st.received != st.declared) {
		sc.giveBack(st, int64(len(data)))
		sc.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}
	if len(data) > 0 && !st.body.push(data) {
		// The handler closed the body: the connection's window is given
		// back, not the stream's, so the client cannot send on for ever.
		sc.giveBack(nil, int64(len(data)))
	}
	if f.StreamEnded() {
		sc.endRemote(st, io.EOF)
	}
	return nil
}

// endRemote ends what the client sends on st: the body reads err after
// what it holds.
func (sc *h2Conn) endRemote(st *h2Stream, err error) {
	sc.mu.Lock()
	st.remoteDone = true
	st.ended = st.ended || err == io.EOF
	sc.mu.Unlock()
	if st.body != nil {
		st.body.end(err)
	}
}

// giveBack returns n bytes of window to the client, once enough have
// gathered: the connection's, and st's when st is not nil.
func (sc *h2Conn) giveBack(st *h2Stream, n int64) {
	var connInc, stInc int64
	sc.mu.Lock()
	sc.unacked += n
	if sc.unacked >= h2ConnWindow/4 {
		connInc, sc.unacked = sc.unacked, 0
		sc.recvWin += connInc
	}
	if st != nil && !st.remoteDone {
		st.unacked += n
		if st.unacked >= h2StreamWindow/4 {
			stInc, st.unacked = st.unacked, 0
			st.recvWin += stInc
		}
	}
	sc.mu.Unlock()
	if connInc == 0 && stInc == 0 {
		return
	}
	sc.lockW()
	if connInc > 0 {
		sc.fr.WriteWindowUpdate(0, uint32(connInc))
	}
	if stInc > 0 {
		sc.fr.WriteWindowUpdate(st.id, uint32(stInc))
	}
	sc.unlockW(true)
}

// answer sends a response of status with no body, outside any handler.
func (sc *h2Conn) answer(id uint32, status int) {
	sc.lockW()
	sc.writeHeaders(id, status, nil, true, false)
	sc.unlockW(true)
}

// idle starts the idle wait when no stream runs.
func (sc *h2Conn) idle() {
	sc.mu.Lock()
	if len(sc.streams) == 0 {
		sc.srv.Watch.Arm(&sc.wait, sc.srv.Idle)
	}
	sc.mu.Unlock()
}

// done reports whether the client said GOAWAY and every stream has ended.
func (sc *h2Conn) done() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.goAway && len(sc.streams) == 0
}

// fail ends the connection for a connection error.
func (sc *h2Conn) fail(err error) {
	var ce http2.ConnectionError
	code := http2.ErrCodeInternal
	if errors.As(err, &ce) {
		code = http2.ErrCode(ce)
	}
	sc.goAwayWith(code)
}

func (sc *h2Conn) goAwayWith(code http2.ErrCode) {
	sc.failed = code != http2.ErrCodeNo
	sc.mu.Lock()
	last := sc.maxID
	sc.mu.Unlock()
	sc.lockW()
	sc.fr.WriteGoAway(last, code, nil)
	sc.flushW()
	sc.wmu.Unlock()
}

// shut ends the connection once the reader is done: every stream's
// handler sees its request end and its writes fail.
func (sc *h2Conn) shut() {
	sc.c.Close() // first: a writer blocked on the socket lets go of wmu
	sc.lockW()
	if sc.werr == nil {
		sc.werr = errH2ConnClosed
	}
	sc.winCond.Broadcast()
	sc.wmu.Unlock()
	sc.mu.Lock()
	sc.finished = true
	streams := make([]*h2Stream, 0, len(sc.streams))
	for _, st := range sc.streams {
		streams = append(streams, st)
	}
	sc.mu.Unlock()
	for _, st := range streams {
		sc.endRemote(st, errH2ConnClosed)
		st.ctx.Cancel()
	}
}

// lockW takes the write lock. A goroutine that holds it and wants what it
// wrote sent (unlockW(true)) flushes only if no other is waiting for it:
// the last in line flushes for all.
func (sc *h2Conn) lockW() {
	sc.queued.Add(1)
	sc.wmu.Lock()
	sc.queued.Add(-1)
}

func (sc *h2Conn) unlockW(flush bool) {
	if flush {
		sc.flushOwed = true
	}
	if sc.flushOwed && sc.queued.Load() == 0 {
		sc.flushW()
	}
	sc.wmu.Unlock()
}

// flushW writes out the buffer; wmu is held.
func (sc *h2Conn) flushW() {
	sc.flushOwed = false
	if sc.werr != nil {
		return
	}
	if err := sc.out.flush(); err != nil {
		sc.werr = err
		sc.winCond.Broadcast()
		sc.c.Close() // the reader ends too
	}
}

// writeHeaders writes a HEADERS frame (and CONTINUATIONs) for stream id:
// the status and h, less the fields in skip, or h alone as trailers. wmu
// is held.
func (sc *h2Conn) writeHeaders(id uint32, status int, h http.Header, end, trailers bool, skip ...string) {
	sc.hbuf.Reset()
	if !trailers {
		sc.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	}
	for k, vv := range h {
		name, ok := wireName(k, trailers)
		if !ok || slices.Contains(skip, k) {
			continue
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) || name == "te" && v != "trailers" {
				continue
			}
			sc.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
		}
	}
	block := sc.hbuf.Bytes()
	first := true
	for first || len(block) > 0 {
		frag := block[:min(len(block), sc.maxFrame)]
		block = block[len(frag):]
		if first {
			sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0})
			first = false
		} else {
			sc.fr.WriteContinuation(id, len(block) == 0, frag)
		}
	}
}

// writeData writes b as DATA frames of stream st, within the windows, waiting
// for them to open as needed. wmu is held.
func (sc *h2Conn) writeData(st *h2Stream, b []byte, end bool) (int, error) {
	written := 0
	for len(b) > 0 || end {
		for len(b) > 0 && sc.werr == nil && !st.reset && (sc.sendWin <= 0 || st.sendWin <= 0) {
			sc.flushW()
			if sc.werr == nil {
				sc.winCond.Wait()
			}
		}
		switch {
		case sc.werr != nil:
			return written, sc.werr
		case st.reset:
			return written, errH2StreamReset
		}
		n := 0 // an empty frame takes no window, which may be below zero
		if len(b) > 0 {
			n = int(min(int64(len(b)), sc.sendWin, st.sendWin, int64(sc.maxFrame)))
		}
		last := end && n == len(b)
		var hdr [9]byte
		hdr[0], hdr[1], hdr[2] = byte(n>>16), byte(n>>8), byte(n)
		hdr[3] = byte(http2.FrameData)
		if last {
			hdr[4] = byte(http2.FlagDataEndStream)
		}
		hdr[5], hdr[6], hdr[7], hdr[8] = byte(st.id>>24), byte(st.id>>16), byte(st.id>>8), byte(st.id)
		sc.out.Write(hdr[:])
		if _, err := sc.out.Write(b[:n]); err != nil {
			sc.werr = err
			sc.c.Close()
			return written, err
		}
		sc.sendWin -= int64(n)
		st.sendWin -= int64(n)
		written += n
		b = b[n:]
		if last {
			break
		}
	}
	return written, nil
}

// run serves the stream's request, on a worker.
func (st *h2Stream) run() {
	sc := st.sc
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				sc.srv.Log.Error("proxy: handler panicked", "panic", v, "stack", string(buf[:runtime.Stack(buf, false)]))
			}
			sc.lockW()
			if !st.reset {
				st.reset = true
				sc.fr.WriteRSTStream(st.id, http2.ErrCodeInternal)
			}
			sc.unlockW(true)
		}
		st.end()
	}()
	sc.srv.Handler.ServeHTTP(&st.w, st.w.req)
	st.w.finish()
}

// end removes the stream once its handler returned.
func (st *h2Stream) end() {
	sc := st.sc
	st.ctx.Cancel()
	if st.body != nil {
		st.body.Close()
	}
	sc.mu.Lock()
	delete(sc.streams, st.id)
	last := len(sc.streams) == 0 && !sc.finished
	if last {
		sc.srv.Watch.Arm(&sc.wait, sc.srv.Idle)
	}
	closing := last && sc.goAway
	sc.mu.Unlock()
	if closing {
		// The client said GOAWAY and this was its last stream: what is
		// left goes out, and the reader ends the connection.
		sc.lockW()
		sc.flushW()
		sc.wmu.Unlock()
		sc.c.Close()
	}
}

// h2Body is a request's body: what the reader received, until the
// handler reads it.
type h2Body struct {
	st   *h2Stream
	mu   sync.Mutex
	cond sync.Cond      // on mu: bytes came, or the body ended
	q    netx.ByteQueue // what came and is not yet read
	err  error          // set when the client ended the stream: read after q
	cont bool           // the client awaits 100 Continue: sent at the first read
	shut bool           // the handler closed the body
}

// push appends b; false means the body is closed and b was dropped.
func (b *h2Body) push(p []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shut {
		return false
	}
	b.cont = false // the client did not wait
	b.q.Write(p)
	b.cond.Signal()
	return true
}

func (b *h2Body) end(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (b *h2Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.cont && b.q.Len() == 0 && b.err == nil {
		b.cont = false
		b.mu.Unlock()
		b.st.sc.sendContinue(b.st)
		b.mu.Lock()
	}
	for b.q.Len() == 0 && b.err == nil && !b.shut {
		b.cond.Wait()
	}
	switch {
	case b.shut:
		b.mu.Unlock()
		return 0, errH2BodyClosed
	case b.q.Len() > 0:
		n := b.q.Read(p)
		b.mu.Unlock()
		b.st.sc.giveBack(b.st, int64(n))
		return n, nil
	}
	err := b.err
	b.mu.Unlock()
	return 0, err
}

// Close drops what is left; the client's further bytes are dropped too.
func (b *h2Body) Close() error {
	b.mu.Lock()
	left := b.q.Len()
	b.q.Reset()
	b.shut = true
	b.cond.Broadcast()
	b.mu.Unlock()
	if left > 0 {
		b.st.sc.giveBack(nil, int64(left))
	}
	return nil
}

// sendContinue sends 100 Continue on st unless its final status went.
func (sc *h2Conn) sendContinue(st *h2Stream) {
	sc.lockW()
	defer sc.unlockW(true)
	if !st.reset && !st.w.final() {
		sc.writeHeaders(st.id, http.StatusContinue, nil, false, false)
	}
}

// h2Writer is the http.ResponseWriter of one stream. The HEADERS frame
// waits for the body's first write, a flush or the handler's return
// (sendHeader); trailers announced in the Trailer header, or set under
// http.TrailerPrefix, end the stream.
type h2Writer struct {
	st         *h2Stream
	req        *http.Request
	header     http.Header
	status     int  // 0 until the final status is written
	headerSent bool // its HEADERS frame is written (under wmu)
	noBody     bool
	done       bool
	trailers   []string
}

func (w *h2Writer) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

// final reports whether the final status was written; wmu is held (the
// status is written under it).
func (w *h2Writer) final() bool { return w.status != 0 }

func (w *h2Writer) WriteHeader(code int) {
	if w.status != 0 || w.done {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	sc := w.st.sc
	sc.lockW()
	defer sc.unlockW(code < 200)
	if code < 200 && code != http.StatusSwitchingProtocols {
		if !w.st.reset {
			sc.writeHeaders(w.st.id, code, w.header, false, false)
		}
		return
	}
	w.status = code
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	for _, v := range w.header["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			if k = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(k)); k != "" {
				w.trailers = append(w.trailers, k)
			}
		}
	}
}

// sendHeader writes the HEADERS frame of the final status, if not yet
// sent; wmu is held. It waits for the first write, flush or the end, so
// that a response without a body is one frame with END_STREAM: gRPC's
// trailers-only answer (an error status) must be, or clients ignore it.
// The header is taken as it is then, less the trailers it announced.
func (w *h2Writer) sendHeader(end bool) {
	if w.headerSent || w.st.reset {
		return
	}
	w.headerSent = true
	w.st.sc.writeHeaders(w.st.id, w.status, w.header, end, false, w.trailers...)
}

func (w *h2Writer) Write(b []byte) (int, error) {
	if w.done {
		return 0, errors.New("proxy: write after the handler returned")
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if len(b) == 0 {
		return 0, nil
	}
	sc := w.st.sc
	sc.lockW()
	defer sc.unlockW(false) // deferred, as wherever a handler holds the lock: a panic must not keep it
	w.sendHeader(false)
	return sc.writeData(w.st, b, false)
}

func (w *h2Writer) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

func (w *h2Writer) Flush() { w.FlushError() }

// FlushError sends what was written; http.ResponseController calls it.
func (w *h2Writer) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	sc := w.st.sc
	sc.lockW()
	defer sc.wmu.Unlock()
	w.sendHeader(false)
	sc.flushW()
	if sc.werr != nil {
		return sc.werr
	}
	if w.st.reset {
		return errH2StreamReset
	}
	return nil
}

// finish ends the stream: trailers, or an empty DATA frame, with
// END_STREAM; and, when the client is still sending a body the handler
// did not read, RST_STREAM with NO_ERROR, as the protocol asks.
func (w *h2Writer) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.done = true
	st := w.st
	sc := st.sc
	trailers := w.trailerHeader()
	sc.mu.Lock()
	sending := !st.remoteDone
	sc.mu.Unlock()
	sc.lockW()
	defer sc.unlockW(true)
	if !st.reset && sc.werr == nil {
		switch {
		case !w.headerSent && trailers == nil:
			w.sendHeader(true) // no body: the header ends the stream
		case trailers != nil:
			w.sendHeader(false)
			sc.writeHeaders(st.id, 0, trailers, true, true)
		default:
			sc.writeData(st, nil, true)
		}
		if sending {
			st.reset = true
			sc.fr.WriteRSTStream(st.id, http2.ErrCodeNo)
		}
	}
}

// trailerHeader returns the trailers set, or nil.
func (w *h2Writer) trailerHeader() http.Header {
	var t http.Header
	for _, k := range w.trailers {
		if vv := w.header[k]; len(vv) > 0 && httpguts.ValidTrailerHeader(k) {
			if t == nil {
				t = make(http.Header)
			}
			t[k] = vv
		}
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && len(vv) > 0 && httpguts.ValidTrailerHeader(name) {
			if t == nil {
				t = make(http.Header)
			}
			t[textproto.CanonicalMIMEHeaderKey(name)] = vv
		}
	}
	return t
}

// wireName is the lower-case name a header field is sent under, and
// whether it is sent at all: not a connection-specific field, not a
// trailer in the header, well formed.
func wireName(k string, trailers bool) (string, bool) {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade":
		return "", false
	}
	if !trailers && strings.HasPrefix(k, http.TrailerPrefix) {
		return "", false
	}
	if name, ok := commonLower[k]; ok {
		return name, true
	}
	if !httpguts.ValidHeaderFieldName(k) {
		return "", false
	}
	return strings.ToLower(k), true
}

// commonLower spares the lower-casing of the most common header names.
var commonLower = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Accept-Ranges", "Access-Control-Allow-Origin",
		"Age", "Authorization", "Cache-Control", "Content-Disposition", "Content-Encoding",
		"Content-Language", "Content-Length", "Content-Location", "Content-Range", "Content-Type",
		"Cookie", "Date", "Etag", "Expires", "Grpc-Message", "Grpc-Status", "Last-Modified", "Link",
		"Location", "Retry-After", "Server", "Set-Cookie", "Strict-Transport-Security", "Te",
		"Trailer", "User-Agent", "Vary", "Via", "Www-Authenticate", "X-Content-Type-Options",
		"X-Request-Id",
	} {
		m[k] = strings.ToLower(k)
	}
	return m
}()

// statusText is a status code as the :status field carries it.
func statusText(code int) string {
	if code >= 100 && code < len(statusCodes) {
		return statusCodes[code]
	}
	return strconv.Itoa(code)
}

var statusCodes = func() (s [600]string) {
	for i := 100; i < len(s); i++ {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// pooledWriter buffers a connection's frames in a writer borrowed from
// the pool at the first write and given back at each flush, so that an
// idle connection holds no write buffer (as net/http's server does not).
// Its socket writes go through a netx.StallWriter: a handler holding the write
// lock on a client that stopped reading would otherwise hold up the
// reader, and every other stream, for good.
// h2WriteBuffer holds a body copy's 64 KiB as DATA frames, with their
// headers, so that they go out in one write (and one system call: see
// gatherer).
const h2WriteBuffer = netx.BatchSize + 1<<10

type pooledWriter struct {
	out  netx.StallWriter
	pool *sync.Pool
	bw   *bufio.Writer // nil between flushes
}

func (w *pooledWriter) Write(b []byte) (int, error) {
	if w.bw == nil {
		if bw, ok := w.pool.Get().(*bufio.Writer); ok {
			bw.Reset(&w.out)
			w.bw = bw
		} else {
			w.bw = bufio.NewWriterSize(&w.out, h2WriteBuffer)
		}
	}
	return w.bw.Write(b)
}

// flush writes out what is buffered and gives the buffer back.
func (w *pooledWriter) flush() error {
	if w.bw == nil {
		return nil
	}
	err := w.bw.Flush()
	if err == nil {
		w.bw.Reset(nil)
		w.pool.Put(w.bw)
		w.bw = nil
	}
	return err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}
