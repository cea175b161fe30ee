package h2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Env is an h2Server alone, serving h2c (prior knowledge) on a loopback
// listener: what the proxy's tunnels give it, without the proxy.
type h2Env struct {
	addr   string
	srv    *Server
	mu     sync.Mutex
	faults []netx.Fault
	served []*h2Conn
	conns  sync.WaitGroup // serve loops running
}

// startH2 serves h on 127.0.0.1 over h2c until the test ends; tune, if not
// nil, changes the server before it starts.
func startH2(t testing.TB, h http.Handler, tune func(*Server)) *h2Env {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &h2Env{addr: ln.Addr().String()}
	e.srv = &Server{
		Handler:   h,
		MaxHeader: 64 << 10,
		Idle:      time.Minute,
		Stall:     time.Minute,
		Preface:   10 * time.Second,
		Watch:     netx.NewWatch(100 * time.Millisecond),
		Spawn:     func(f func()) { go f() },
		Log:       slog.New(slog.DiscardHandler),
	}
	if tune != nil {
		tune(e.srv)
	}
	var open sync.Map // net.Conn -> struct{}: closed when the test ends
	e.conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Store(c, struct{}{})
			e.conns.Go(func() {
				defer open.Delete(c)
				sc := e.srv.newConn(c, c, context.Background())
				e.mu.Lock()
				e.served = append(e.served, sc)
				e.mu.Unlock()
				sc.fault = func(f netx.Fault) {
					e.mu.Lock()
					e.faults = append(e.faults, f)
					e.mu.Unlock()
				}
				sc.serve()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(c, _ any) bool {
			c.(net.Conn).Close()
			return true
		})
		e.conns.Wait()
	})
	return e
}

// faultList returns the faults the connections reported so far.
func (e *h2Env) faultList() []netx.Fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]netx.Fault(nil), e.faults...)
}

// h2Client speaks HTTP/2 frame by frame to an h2Env, for what real
// clients do not do: break the rules, or watch the frames.
type h2Client struct {
	t   testing.TB
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

// dialH2 connects and sends the preface with settings; it reads nothing.
func dialH2(t testing.TB, addr string, settings ...http2.Setting) *h2Client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(faultWait))
	cl := &h2Client{t: t, c: c, fr: http2.NewFramer(c, c)}
	cl.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cl.enc = hpack.NewEncoder(&cl.buf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := cl.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return cl
}

// headers sends a request's HEADERS frame: the pseudo-headers of a GET of
// path (method and more fields may follow, as name, value pairs).
func (cl *h2Client) headers(id uint32, path string, end bool, fields ...string) {
	cl.t.Helper()
	cl.buf.Reset()
	pseudo := map[string]string{":method": "GET", ":scheme": "http", ":authority": "h2.example.test", ":path": path}
	for i := 0; i+1 < len(fields); i += 2 {
		if _, ok := pseudo[fields[i]]; ok {
			pseudo[fields[i]] = fields[i+1]
		}
	}
	for _, k := range []string{":method", ":scheme", ":authority", ":path"} {
		cl.enc.WriteField(hpack.HeaderField{Name: k, Value: pseudo[k]})
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == ":protocol" { // extended CONNECT's (RFC 8441)
			cl.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i][0] != ':' {
			cl.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
	}
	block := cl.buf.Bytes()
	frag := block[:min(len(block), 16384)]
	block = block[len(frag):]
	if err := cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0}); err != nil {
		cl.t.Fatal(err)
	}
	for len(block) > 0 {
		frag = block[:min(len(block), 16384)]
		block = block[len(frag):]
		if err := cl.fr.WriteContinuation(id, len(block) == 0, frag); err != nil {
			cl.t.Fatal(err)
		}
	}
}

// next reads frames until one satisfies pred, and returns it; it fails on
// a read error (the connection closing included).
func (cl *h2Client) next(what string, pred func(http2.Frame) bool) http2.Frame {
	cl.t.Helper()
	for {
		f, err := cl.fr.ReadFrame()
		if err != nil {
			cl.t.Fatalf("waiting for %s: %v", what, err)
		}
		if pred(f) {
			return f
		}
	}
}

// goAway waits for the server's GOAWAY and returns its code.
func (cl *h2Client) goAway() http2.ErrCode {
	cl.t.Helper()
	return cl.next("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame).ErrCode
}

// reset waits for RST_STREAM on id and returns its code.
func (cl *h2Client) reset(id uint32) http2.ErrCode {
	cl.t.Helper()
	return cl.next("RST_STREAM", func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == id
	}).(*http2.RSTStreamFrame).ErrCode
}

// response reads stream id's response to its end: status and body.
func (cl *h2Client) response(id uint32) (string, string) {
	cl.t.Helper()
	var status string
	var body []byte
	cl.next("the end of the response", func(f http2.Frame) bool {
		if f.Header().StreamID != id {
			return false
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" && s[0] != '1' {
				status = s
			}
			return f.StreamEnded()
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			return f.StreamEnded()
		case *http2.RSTStreamFrame:
			cl.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
		}
		return false
	})
	return status, string(body)
}

// closed waits for the server to close the connection.
func (cl *h2Client) closed() {
	cl.t.Helper()
	for {
		if _, err := cl.fr.ReadFrame(); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				cl.t.Fatalf("want the connection closed, got %v", err)
			}
			return
		}
	}
}

// h2TestHandler serves the protocol tests: /echo echoes the body, /block
// waits for the request's end and then sends on ended, /abort aborts
// after a first write, anything else answers "hello" in 100 bytes.
type h2TestHandler struct {
	ended   chan string   // paths of /block requests whose context ended
	release chan struct{} // lets /hold end
	running atomic.Int32
	peak    atomic.Int32
}

func newH2TestHandler() *h2TestHandler {
	return &h2TestHandler{ended: make(chan string, 4096), release: make(chan struct{})}
}

func (h *h2TestHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	switch r.URL.Path {
	case "/echo":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		w.Write(b)
	case "/block":
		<-r.Context().Done()
		h.ended <- r.URL.Path
	case "/hold": // ten bytes at once, the end when released
		io.WriteString(w, "0123456789")
		w.(http.Flusher).Flush()
		<-h.release
	case "/trailers": // the request's trailers, as the handler sees them
		io.ReadAll(r.Body)
		keys := slices.Sorted(maps.Keys(r.Trailer))
		for _, k := range keys {
			fmt.Fprintf(w, "%s=%s;", k, strings.Join(r.Trailer[k], ","))
		}
	case "/flood": // more than any socket buffer, to a client that reads none
		for chunk := make([]byte, 1<<20); ; {
			if _, err := w.Write(chunk); err != nil {
				h.ended <- r.URL.Path
				return
			}
		}
	case "/abort":
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	default:
		io.WriteString(w, "hello"+strings.Repeat(".", 95))
	}
}

// (the /trailers, /hold and /flood paths are documented where served)

// within waits for a value on ch for at most faultWait.
func within[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(faultWait):
		t.Fatalf("waited %v for %s", faultWait, what)
	}
	var zero T
	return zero
}

// TestH2Protocol breaks the protocol's rules, or follows its less common
// paths, one way per case, each on a connection of its own, and checks
// the server's answer; the connection serves a request afterwards when
// the answer was only a stream's.
func TestH2Protocol(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, cl *h2Client, h *h2TestHandler) (usable bool)
	}{
		{"ping is answered", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
			cl.fr.WritePing(false, data)
			f := cl.next("PING ack", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() }).(*http2.PingFrame)
			if f.Data != data {
				t.Errorf("ping ack carries %v, want %v", f.Data, data)
			}
			return true
		}},
		{"even stream id", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(2, "/", true)
			if code := cl.goAway(); code != http2.ErrCodeProtocol {
				t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", code)
			}
			return false
		}},
		{"connection-specific header", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/", true, "connection", "keep-alive")
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true
		}},
		{"TE other than trailers", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/", true, "te", "gzip")
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true
		}},
		// RFC 8441: :protocol with CONNECT for websocket only, and the
		// key is the proxy's.
		{":protocol on a GET", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/", false, ":protocol", "websocket", "sec-websocket-version", "13")
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true
		}},
		{"extended CONNECT for another protocol", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/", false, ":method", "CONNECT", ":protocol", "connect-udp")
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true
		}},
		{"extended CONNECT with a key", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/", false, ":method", "CONNECT", ":protocol", "websocket", "sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true
		}},
		{"missing :path", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "", true)
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true
		}},
		{"body longer than its Content-Length", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/echo", false, ":method", "POST", "content-length", "5")
			cl.fr.WriteData(1, false, []byte("0123456789")) // refused before the stream ends
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true
		}},
		{"body shorter than its Content-Length", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/echo", false, ":method", "POST", "content-length", "50")
			cl.fr.WriteData(1, true, []byte("0123456789"))
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true
		}},
		{"body with its trailers", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/echo", false, ":method", "POST", "trailer", "x-sum")
			cl.fr.WriteData(1, false, []byte("body"))
			cl.buf.Reset()
			cl.enc.WriteField(hpack.HeaderField{Name: "x-sum", Value: "1"})
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.buf.Bytes(), EndStream: true, EndHeaders: true})
			if status, body := cl.response(1); status != "200" || body != "body" {
				t.Errorf("got %s %q, want 200 %q", status, body, "body")
			}
			return true
		}},
		{"header field refused by the framer, then the stream's data", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/echo", false, ":method", "POST", "X-Upper", "v") // names are lower case in HTTP/2
			cl.fr.WriteData(1, true, []byte("abc"))
			if code := cl.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v, want PROTOCOL_ERROR", code)
			}
			return true // the data on the refused stream does not end the connection
		}},
		{"trailers the request did not declare", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/trailers", false, ":method", "POST", "trailer", "x-sum")
			cl.fr.WriteData(1, false, []byte("body"))
			cl.buf.Reset()
			cl.enc.WriteField(hpack.HeaderField{Name: "x-sum", Value: "1"})
			cl.enc.WriteField(hpack.HeaderField{Name: "x-other", Value: "2"})
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.buf.Bytes(), EndStream: true, EndHeaders: true})
			if status, body := cl.response(1); status != "200" || body != "X-Sum=1;" {
				t.Errorf("got %s %q, want 200 %q", status, body, "X-Sum=1;")
			}
			return true
		}},
		{"window below zero when the response ends", func(t *testing.T, cl *h2Client, h *h2TestHandler) bool {
			cl.headers(1, "/hold", true)
			cl.next("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
			// 10 bytes sent of a window now 0: the stream's is -10.
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			cl.next("SETTINGS ack", func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
			close(h.release)
			cl.next("END_STREAM", func(f http2.Frame) bool {
				return f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream)
			})
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
			return true
		}},
		{"a response without a body is one HEADERS frame", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/", true, ":method", "HEAD")
			f := cl.next("the response", func(f http2.Frame) bool { return f.Header().StreamID == 1 })
			if m, ok := f.(*http2.MetaHeadersFrame); !ok || !m.StreamEnded() || m.PseudoValue("status") != "200" {
				t.Errorf("first frame of the response %v, want HEADERS :status 200 with END_STREAM", f.Header())
			}
			return true
		}},
		{"data beyond the connection's window", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/block", false, ":method", "POST")
			chunk := make([]byte, 16384)
			for sent := 0; sent <= h2ConnWindow; sent += len(chunk) {
				if err := cl.fr.WriteData(1, false, chunk); err != nil {
					t.Fatal(err)
				}
			}
			if code := cl.goAway(); code != http2.ErrCodeFlowControl {
				t.Errorf("GOAWAY %v, want FLOW_CONTROL_ERROR", code)
			}
			return false
		}},
		{"data on a stream never opened", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.fr.WriteData(5, true, []byte("x"))
			if code := cl.goAway(); code != http2.ErrCodeProtocol {
				t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", code)
			}
			return false
		}},
		{"headers on a stream the client ended", func(t *testing.T, cl *h2Client, h *h2TestHandler) bool {
			cl.headers(1, "/block", true)
			cl.headers(1, "/block", true)
			if code := cl.reset(1); code != http2.ErrCodeStreamClosed {
				t.Errorf("RST_STREAM %v, want STREAM_CLOSED", code)
			}
			if p := within(t, h.ended, "end of the reset stream's handler"); p != "/block" {
				t.Errorf("ended %q", p)
			}
			return true
		}},
		{"client resets a stream", func(t *testing.T, cl *h2Client, h *h2TestHandler) bool {
			cl.headers(1, "/block", true)
			cl.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			if p := within(t, h.ended, "end of the reset stream's handler"); p != "/block" {
				t.Errorf("ended %q", p)
			}
			return true
		}},
		{"handler aborts", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/abort", true)
			if code := cl.reset(1); code != http2.ErrCodeInternal {
				t.Errorf("RST_STREAM %v, want INTERNAL_ERROR", code)
			}
			return true
		}},
		{"100-continue", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.headers(1, "/echo", false, ":method", "POST", "expect", "100-continue")
			cl.next("100 Continue", func(f http2.Frame) bool {
				m, ok := f.(*http2.MetaHeadersFrame)
				return ok && m.PseudoValue("status") == "100"
			})
			cl.fr.WriteData(1, true, []byte("sent after 100"))
			if status, body := cl.response(1); status != "200" || body != "sent after 100" {
				t.Errorf("got %s %q", status, body)
			}
			return true
		}},
		{"small window of the client's", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
			cl.headers(1, "/", true)
			granted, got := 10, 0
			for got < 100 {
				f := cl.next("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
				got += len(f.(*http2.DataFrame).Data())
				if got > granted {
					t.Fatalf("%d bytes sent, %d granted", got, granted)
				}
				if got == granted && got < 100 {
					cl.fr.WriteWindowUpdate(1, 30)
					granted += 30
				}
			}
			// Back to the default, for the next request.
			cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
			return true
		}},
		{"window update overflows the connection's", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.fr.WriteWindowUpdate(0, 1<<31-1)
			if code := cl.goAway(); code != http2.ErrCodeFlowControl {
				t.Errorf("GOAWAY %v, want FLOW_CONTROL_ERROR", code)
			}
			return false
		}},
		{"push promise from the client", func(t *testing.T, cl *h2Client, _ *h2TestHandler) bool {
			cl.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: []byte{0x82}, EndHeaders: true})
			if code := cl.goAway(); code != http2.ErrCodeProtocol {
				t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", code)
			}
			return false
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newH2TestHandler()
			e := startH2(t, h, nil)
			cl := dialH2(t, e.addr)
			if tc.run(t, cl, h) {
				cl.headers(11, "/after", true)
				if status, body := cl.response(11); status != "200" || !strings.HasPrefix(body, "hello") {
					t.Errorf("the next request: %s %q, want 200 hello", status, body)
				}
			} else {
				cl.closed()
			}
		})
	}
}

// TestH2Streams: no more than h2MaxStreams handlers run at once on a
// connection, whatever the client does: streams beyond them are refused,
// and a client that resets each stream as soon as it opens it (the rapid
// reset attack) does not get more running; the connection then serves as
// before.
func TestH2Streams(t *testing.T) {
	h := newH2TestHandler()
	e := startH2(t, h, nil)
	cl := dialH2(t, e.addr)
	for i := range uint32(h2MaxStreams) {
		cl.headers(1+2*i, "/block", true)
	}
	refused := uint32(1 + 2*h2MaxStreams)
	cl.headers(refused, "/block", true)
	if code := cl.reset(refused); code != http2.ErrCodeRefusedStream {
		t.Fatalf("stream %d beyond the limit: RST_STREAM %v, want REFUSED_STREAM", refused, code)
	}
	for deadline := time.Now().Add(faultWait); h.running.Load() < h2MaxStreams && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := h.running.Load(); n != h2MaxStreams {
		t.Errorf("%d handlers running, want %d", n, h2MaxStreams)
	}
	// Rapid reset: reset them all, and open and reset new ones at once.
	id := refused + 2
	for i := range uint32(h2MaxStreams) {
		cl.fr.WriteRSTStream(1+2*i, http2.ErrCodeCancel)
	}
	for range 2000 {
		cl.headers(id, "/block", true)
		cl.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		id += 2
	}
	// Every handler started ends (the refused ones never start).
	go func() {
		for {
			f, err := cl.fr.ReadFrame()
			if err != nil || f.Header().Type == http2.FrameGoAway {
				return
			}
		}
	}()
	for deadline := time.Now().Add(faultWait); h.running.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n, peak := h.running.Load(), h.peak.Load(); n != 0 || peak > h2MaxStreams {
		t.Errorf("after the resets: %d handlers running, at most %d; want 0, at most %d", n, peak, h2MaxStreams)
	}
	cl.c.Close()
	// A new connection is served.
	cl2 := dialH2(t, e.addr)
	cl2.headers(1, "/", true)
	if status, _ := cl2.response(1); status != "200" {
		t.Errorf("a new connection's request: %s, want 200", status)
	}
}

// TestH2Limits: a header list over the limit gets 431 on its stream and a
// fault, one far over it (beyond what the framer decodes) ends the
// connection with a fault; a client that sends no preface in time, or
// nothing more while idle, is closed; a client's GOAWAY lets its streams
// finish, and the connection then ends.
func TestH2Limits(t *testing.T) {
	const limit = 4096
	t.Run("header list over the limit", func(t *testing.T) {
		e := startH2(t, newH2TestHandler(), func(s *Server) { s.MaxHeader = limit })
		cl := dialH2(t, e.addr)
		cl.headers(1, "/", true, "x-a", strings.Repeat("a", limit/2), "x-b", strings.Repeat("b", limit/2))
		if status, _ := cl.response(1); status != "431" {
			t.Errorf("status %s, want 431", status)
		}
		cl.headers(3, "/", true)
		if status, _ := cl.response(3); status != "200" {
			t.Errorf("the next request: %s, want 200", status)
		}
		if f := e.faultList(); len(f) != 1 || f[0] != netx.FaultHeaderTooLarge {
			t.Errorf("faults %v, want one header-too-large", f)
		}
	})
	t.Run("header list far over the limit", func(t *testing.T) {
		e := startH2(t, newH2TestHandler(), func(s *Server) { s.MaxHeader = limit })
		cl := dialH2(t, e.addr)
		cl.headers(1, "/", true, "x-a", strings.Repeat("a", 3*limit))
		if code := cl.goAway(); code != http2.ErrCodeCompression {
			t.Errorf("GOAWAY %v, want COMPRESSION_ERROR (a field longer than the limit)", code)
		}
		cl.closed()
		if f := e.faultList(); len(f) != 1 || f[0] != netx.FaultHeaderTooLarge {
			t.Errorf("faults %v, want one header-too-large", f)
		}
	})
	t.Run("header block far over the limit", func(t *testing.T) {
		e := startH2(t, newH2TestHandler(), func(s *Server) { s.MaxHeader = limit })
		cl := dialH2(t, e.addr)
		var fields []string
		for i := range 40 { // 50 KB with Huffman coding: four frames
			fields = append(fields, fmt.Sprintf("x-%d", i), strings.Repeat("a", limit/2))
		}
		cl.headers(1, "/", true, fields...)
		if code := cl.goAway(); code != http2.ErrCodeProtocol {
			t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", code)
		}
		cl.closed()
		if f := e.faultList(); len(f) != 1 || f[0] != netx.FaultHeaderTooLarge {
			t.Errorf("faults %v, want one header-too-large", f)
		}
	})
	t.Run("corrupt header block", func(t *testing.T) {
		e := startH2(t, newH2TestHandler(), nil)
		cl := dialH2(t, e.addr)
		cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff}, EndStream: true, EndHeaders: true})
		if code := cl.goAway(); code != http2.ErrCodeCompression {
			t.Errorf("GOAWAY %v, want COMPRESSION_ERROR", code)
		}
		cl.closed()
		if f := e.faultList(); len(f) != 0 {
			t.Errorf("faults %v, want none", f)
		}
	})
	t.Run("frames still coming after the error", func(t *testing.T) {
		// The connection half-closes and reads on for a moment: the
		// client reads the GOAWAY, then the end, and its frames still in
		// flight are not answered with a reset.
		e := startH2(t, newH2TestHandler(), nil)
		cl := dialH2(t, e.addr)
		var pings bytes.Buffer
		pf := http2.NewFramer(&pings, nil)
		for range 3000 { // 51 KB the server has not read when it fails
			pf.WritePing(false, [8]byte{})
		}
		var headers bytes.Buffer
		http2.NewFramer(&headers, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff}, EndStream: true, EndHeaders: true})
		if _, err := cl.c.Write(append(headers.Bytes(), pings.Bytes()...)); err != nil {
			t.Fatal(err)
		}
		if code := cl.goAway(); code != http2.ErrCodeCompression {
			t.Errorf("GOAWAY %v, want COMPRESSION_ERROR", code)
		}
		if _, err := cl.fr.ReadFrame(); !errors.Is(err, io.EOF) {
			t.Errorf("after the GOAWAY: %v, want the end of the stream", err)
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := cl.c.Write(pings.Bytes()[:9+8]); err != nil {
			t.Errorf("a frame sent after the GOAWAY: %v, want it read and dropped", err)
		}
	})
	t.Run("no preface", func(t *testing.T) {
		e := startH2(t, newH2TestHandler(), func(s *Server) { s.Preface = 100 * time.Millisecond })
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(faultWait))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("want the connection closed, got %v", err)
		}
		for deadline := time.Now().Add(faultWait); len(e.faultList()) == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if f := e.faultList(); len(f) != 1 || f[0] != netx.FaultHeaderTimeout {
			t.Errorf("faults %v, want one header timeout", f)
		}
	})
	t.Run("bad preface", func(t *testing.T) {
		e := startH2(t, newH2TestHandler(), nil)
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(faultWait))
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("want the connection closed, got %v", err)
		}
		if f := e.faultList(); len(f) != 0 {
			t.Errorf("faults %v, want none", f)
		}
	})
	t.Run("idle", func(t *testing.T) {
		e := startH2(t, newH2TestHandler(), func(s *Server) { s.Idle = 200 * time.Millisecond })
		cl := dialH2(t, e.addr)
		cl.headers(1, "/", true)
		cl.response(1)
		if code := cl.goAway(); code != http2.ErrCodeNo {
			t.Errorf("GOAWAY %v, want NO_ERROR", code)
		}
		cl.closed()
		if f := e.faultList(); len(f) != 0 {
			t.Errorf("faults %v, want none", f)
		}
	})
	t.Run("client goes away", func(t *testing.T) {
		h := newH2TestHandler()
		e := startH2(t, h, nil)
		cl := dialH2(t, e.addr)
		cl.headers(1, "/echo", false, ":method", "POST")
		cl.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		cl.fr.WriteData(1, true, []byte("last words"))
		if status, body := cl.response(1); status != "200" || body != "last words" {
			t.Errorf("the stream in flight: %s %q, want 200 %q", status, body, "last words")
		}
		cl.closed()
	})
}

// h2Seeds are frame sequences, after the preface, that the fuzz target
// starts from: requests with and without bodies and trailers, a header
// block in fragments, and the control frames.
func h2Seeds() [][]byte {
	var seeds [][]byte
	block := func(fields ...string) []byte {
		var b bytes.Buffer
		enc := hpack.NewEncoder(&b)
		for i := 0; i+1 < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return b.Bytes()
	}
	get := block(":method", "GET", ":scheme", "https", ":authority", "h2.example.test", ":path", "/", "cookie", "a=1", "cookie", "b=2")
	post := block(":method", "POST", ":scheme", "https", ":authority", "h2.example.test", ":path", "/echo", "content-length", "4", "trailer", "x-sum")
	seq := func(write func(fr *http2.Framer)) {
		var b bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384})
		write(fr)
		seeds = append(seeds, b.Bytes())
	}
	seq(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get, EndStream: true, EndHeaders: true})
	})
	seq(func(fr *http2.Framer) { // RFC 8441's extended CONNECT, its DATA a WebSocket's
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: block(":method", "CONNECT", ":protocol", "websocket",
			":scheme", "https", ":authority", "h2.example.test", ":path", "/socket", "sec-websocket-version", "13")})
		fr.WriteData(1, false, []byte{0x81, 0x82, 1, 2, 3, 4, 'h' ^ 1, 'i' ^ 2})
	})
	seq(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: post, EndHeaders: true})
		fr.WriteData(1, false, []byte("body"))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block("x-sum", "1"), EndStream: true, EndHeaders: true})
		fr.WriteWindowUpdate(1, 1000)
		fr.WriteWindowUpdate(0, 1000)
	})
	seq(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: get[:5]})
		fr.WriteContinuation(3, true, get[5:])
		fr.WritePing(false, [8]byte{1})
		fr.WriteRSTStream(3, http2.ErrCodeCancel)
		fr.WritePriority(5, http2.PriorityParam{StreamDep: 3, Weight: 9})
		fr.WriteRawFrame(0xfa, 0, 0, []byte("unknown"))
		fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	})
	seq(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":method", "GET", ":scheme", "https", ":authority", "h2.example.test", ":path", "/block"), EndStream: true, EndHeaders: true})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":method", "POST", ":scheme", "https", ":authority", "h2.example.test", ":path", "/abort", "expect", "100-continue"), EndHeaders: true})
		fr.WriteData(3, true, nil)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	})
	return seeds
}

// FuzzH2Server feeds a connection arbitrary frames after the preface:
// whatever they are, the server must not panic, must end the connection
// once the client closes it, and must leave no handler running.
func FuzzH2Server(f *testing.F) {
	for _, s := range h2Seeds() {
		f.Add(s)
	}
	h := newH2TestHandler()
	f.Fuzz(func(t *testing.T, data []byte) {
		var handlers sync.WaitGroup
		srv := &Server{
			Handler: h, MaxHeader: 8 << 10, Idle: time.Minute, Stall: time.Minute, Preface: time.Minute,
			Watch: netx.NewWatch(time.Second),
			Spawn: func(f func()) { handlers.Go(f) },
			Log:   slog.New(slog.DiscardHandler),
		}
		server, client := net.Pipe()
		sc := srv.newConn(server, server, context.Background())
		done := make(chan struct{})
		go func() {
			sc.serve()
			close(done)
		}()
		go io.Copy(io.Discard, client)
		go func() {
			client.Write(append([]byte(http2.ClientPreface), data...))
			client.Close()
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not end the connection")
		}
		ended := make(chan struct{})
		go func() {
			handlers.Wait()
			close(ended)
		}()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("handlers still running after the connection ended")
		}
		for len(h.ended) > 0 {
			<-h.ended
		}
	})
}

// TestH2IdleBuffers: between responses a connection holds no write
// buffer, and a request body read slowly holds no more than what is
// unread, however long the upload.
func TestH2IdleBuffers(t *testing.T) {
	t.Run("write buffer", func(t *testing.T) {
		e := startH2(t, newH2TestHandler(), nil)
		cl := dialH2(t, e.addr)
		for id := uint32(1); id < 10; id += 2 {
			cl.headers(id, "/", true)
			if status, _ := cl.response(id); status != "200" {
				t.Fatalf("status %s", status)
			}
			e.mu.Lock()
			sc := e.served[0]
			e.mu.Unlock()
			sc.wmu.Lock()
			held := sc.out.bw != nil
			sc.wmu.Unlock()
			if held {
				t.Fatalf("after response %d the connection holds its write buffer", id)
			}
		}
	})
	t.Run("request body", func(t *testing.T) {
		server, client := net.Pipe()
		defer client.Close()
		go io.Copy(io.Discard, client) // the window updates
		sc := (&Server{MaxHeader: 4096, Watch: netx.NewWatch(time.Second), Stall: time.Minute}).newConn(server, server, context.Background())
		b := &h2Body{st: &h2Stream{sc: sc, id: 1}}
		b.cond.L = &b.mu
		chunk := make([]byte, 16384)
		p := make([]byte, 12000) // less than arrives each time: never drained
		peak := 0
		for range 600 { // 9.6 MB
			b.push(chunk)
			b.Read(p)
			peak = max(peak, b.q.Held())
		}
		if unread := b.q.Len(); peak > unread+2*netx.BatchSize {
			t.Errorf("body buffers grew to %d bytes holding %d unread", peak, unread)
		}
		for b.q.Len() > 0 {
			b.Read(p)
		}
		if held := b.q.Held(); held != 0 {
			t.Errorf("%d bytes of buffers held once the body is read", held)
		}
	})
}

// TestH2WriteStall: a client that stops reading while a response is being
// written loses its connection once the socket has taken nothing for the
// stall time; the handler's write fails and it ends.
func TestH2WriteStall(t *testing.T) {
	h := newH2TestHandler()
	e := startH2(t, h, func(s *Server) { s.Stall = 300 * time.Millisecond })
	cl := dialH2(t, e.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	cl.fr.WriteWindowUpdate(0, 1<<31-1-65535)
	cl.headers(1, "/flood", true)
	// The client reads nothing more.
	if p := within(t, h.ended, "the end of the stalled handler"); p != "/flood" {
		t.Errorf("ended %q", p)
	}
	e.mu.Lock()
	sc := e.served[0]
	e.mu.Unlock()
	sc.wmu.Lock()
	werr := sc.werr
	sc.wmu.Unlock()
	if werr == nil {
		t.Error("the connection's writes did not fail")
	}
}

// faultWait bounds how long a test waits for a fault to be dealt with: a
// guard against a hang, not a measurement.
const faultWait = 20 * time.Second
