package ws

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gorilla/websocket"
)

// frame builds a client's frame: masked with a fixed key.
func frame(fin bool, rsv byte, op Opcode, payload []byte) []byte {
	return frameMasked(true, fin, rsv, op, payload)
}

// serverFrame builds a server's frame: not masked.
func serverFrame(fin bool, rsv byte, op Opcode, payload []byte) []byte {
	return frameMasked(false, fin, rsv, op, payload)
}

func frameMasked(masked, fin bool, rsv byte, op Opcode, payload []byte) []byte {
	h := Header{Fin: fin, RSV: rsv, Op: op, Masked: masked, Key: [4]byte{0xa1, 0xb2, 0xc3, 0xd4}, Length: int64(len(payload))}
	b := AppendHeader(nil, h)
	n := len(b)
	b = append(b, payload...)
	if masked {
		Mask(h.Key, 0, b[n:])
	}
	return b
}

// compressed is a message compressed alone, its tail removed.
func compressed(msg string) []byte {
	var buf bytes.Buffer
	fw, _ := flate.NewWriter(&buf, flate.BestSpeed)
	fw.Write([]byte(msg))
	fw.Flush()
	return bytes.TrimSuffix(buf.Bytes(), deflateTail)
}

type readMsg struct {
	Op   int
	Data string
}

// relayReads runs the relay's reading of what one side sends (the client,
// or with fromServer the server): the frames in, the other side silent
// until the first's end.
func relayReads(in []byte, compress, fromServer bool) ([]readMsg, error) {
	var d *Deflate
	if compress { // as gorilla agrees to it: no context takeover either way
		d = &Deflate{ReadNoContext: true, WriteNoContext: true}
	}
	pr, pw := io.Pipe()
	src := bufio.NewReader(bytes.NewReader(in))
	silent := bufio.NewReader(pr)
	h := &recordHandler{}
	var cl, sv *Conn
	if fromServer {
		cl = NewConn(silent, io.Discard, pw, AsServer, nil)
		sv = NewConn(src, io.Discard, io.NopCloser(nil), AsClient, d)
	} else {
		cl = NewConn(src, io.Discard, io.NopCloser(nil), AsServer, d)
		sv = NewConn(silent, io.Discard, pw, AsClient, nil)
	}
	e := Relay(cl, sv, h, Options{CloseTimeout: time.Millisecond}) // the silent side never answers a close
	return h.msgs, e.Err
}

type recordHandler struct {
	mu   sync.Mutex
	msgs []readMsg
}

func (h *recordHandler) Begin(Direction, Opcode) int64 { return fuzzHold }

// fuzzHold bounds the messages read whole; past it a message is recorded
// as {-1, ""} and ends the reading (a decompression bomb is not read).
const fuzzHold = 1 << 20

func (h *recordHandler) Message(m Message) Action {
	h.mu.Lock()
	h.msgs = append(h.msgs, readMsg{int(m.Op), string(m.Data)})
	h.mu.Unlock()
	return Action{}
}
func (h *recordHandler) Oversized(Message) Action          { return Action{} }
func (h *recordHandler) Streamed(Direction, Opcode, int64) {}
func (h *recordHandler) Closing(Direction) []Out           { return nil }

// gorillaReads is what gorilla, as the server, reads of the same bytes.
func gorillaReads(t testing.TB, in []byte, compress bool) []readMsg {
	r, _ := http.NewRequest("GET", "http://x/", nil)
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if compress {
		r.Header.Set("Sec-WebSocket-Extensions", "permessage-deflate")
	}
	w := &hijackWriter{conn: &fakeConn{r: bytes.NewReader(in)}}
	up := websocket.Upgrader{EnableCompression: compress}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		t.Fatalf("gorilla did not upgrade: %v", err)
	}
	return readAllMessages(c)
}

type hijackWriter struct {
	http.ResponseWriter
	conn *fakeConn
}

func (w *hijackWriter) Header() http.Header { return http.Header{} }
func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// gorillaClientReads is what gorilla, as the client, reads of the same
// bytes from a server that agreed to its handshake.
func gorillaClientReads(t testing.TB, in []byte, compress bool) []readMsg {
	fc := &fakeServer{in: in, compress: compress}
	d := websocket.Dialer{NetDialContext: func(context.Context, string, string) (net.Conn, error) { return fc, nil }, EnableCompression: compress}
	c, _, err := d.Dial("ws://x/", nil)
	if err != nil {
		t.Fatalf("gorilla did not connect: %v", err)
	}
	return readAllMessages(c)
}

func readAllMessages(c *websocket.Conn) []readMsg {
	var out []readMsg
	for {
		typ, rd, err := c.NextReader()
		if err != nil {
			return out
		}
		b, err := io.ReadAll(io.LimitReader(rd, fuzzHold+1))
		if len(b) > fuzzHold {
			return append(out, readMsg{-1, ""})
		}
		if err != nil {
			return out
		}
		out = append(out, readMsg{typ, string(b)})
	}
}

type fakeConn struct {
	net.Conn
	r io.Reader
}

func (c *fakeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// fakeServer answers the handshake written to it, then gives in.
type fakeServer struct {
	fakeConn
	in       []byte
	compress bool
	wrote    bytes.Buffer
}

func (f *fakeServer) Write(p []byte) (int, error) { return f.wrote.Write(p) }
func (f *fakeServer) Read(p []byte) (int, error) {
	if f.r == nil {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(f.wrote.Bytes())))
		if err != nil {
			return 0, err
		}
		resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			AcceptKey(req.Header.Get("Sec-WebSocket-Key")) + "\r\n"
		if f.compress {
			resp += "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n"
		}
		f.r = io.MultiReader(strings.NewReader(resp+"\r\n"), bytes.NewReader(f.in))
	}
	return f.r.Read(p)
}

// The relay reads a client's frames, and a server's, as gorilla/websocket
// does: the same messages, in order, decompressed; it may stop earlier
// only where it is stricter than gorilla, on a reserved bit gorilla lets
// by (RSV1 on a control or continuation frame).
func FuzzReadMessages(f *testing.F) {
	seed := func(compress, fromServer bool, frames ...[]byte) {
		b := []byte{0}
		if compress {
			b[0] |= 1
		}
		if fromServer {
			b[0] |= 2
		}
		f.Add(append(b, bytes.Join(frames, nil)...))
	}
	seed(false, false, frame(true, 0, OpText, []byte("hello")))
	seed(false, false, frame(false, 0, OpText, []byte("hel")), frame(true, 0, OpPing, []byte("p")), frame(true, 0, OpContinuation, []byte("lo")),
		frame(true, 0, OpBinary, []byte{0, 1, 2}), frame(true, 0, OpClose, []byte{0x03, 0xe8}))
	seed(true, false, frame(true, bitRSV1, OpText, compressed(`{"type":"response.create","input":"hi"}`)),
		frame(true, 0, OpText, []byte("plain")), frame(true, bitRSV1, OpBinary, compressed("")))
	c := compressed(strings.Repeat("abc", 100))
	seed(true, false, frame(false, bitRSV1, OpText, c[:5]), frame(true, 0, OpContinuation, c[5:]))
	seed(true, false, frame(true, bitRSV1, OpPing, nil), frame(true, 0, OpText, []byte("x")))
	seed(false, false, frame(true, 0, OpText, nil), []byte{0x81, 0x7e, 0x00, 0x01, 0, 0, 0, 0, 'a'})
	seed(false, true, serverFrame(true, 0, OpText, []byte(`{"type":"response.output_text.delta","delta":"hi"}`)), serverFrame(true, 0, OpPong, nil))
	seed(true, true, serverFrame(false, bitRSV1, OpBinary, c[:7]), serverFrame(true, 0, OpPing, []byte("x")), serverFrame(true, 0, OpContinuation, c[7:]),
		serverFrame(true, 0, OpClose, []byte{0x03, 0xe9, 'b', 'y', 'e'}))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		compress, fromServer := in[0]&1 == 1, in[0]&2 == 2
		in = in[1:]
		ours, err := relayReads(in, compress, fromServer)
		var theirs []readMsg
		if fromServer {
			theirs = gorillaClientReads(t, in, compress)
		} else {
			theirs = gorillaReads(t, in, compress)
		}
		if len(ours) > len(theirs) || len(ours) < len(theirs) && !(errors.Is(err, ErrProtocol) && strings.Contains(err.Error(), "reserved bits")) {
			t.Fatalf("the relay read %d messages (ending with %v), gorilla %d", len(ours), err, len(theirs))
		}
		if diff := cmp.Diff(theirs[:len(ours)], ours, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("messages differ (-gorilla +relay):\n%s", diff)
		}
	})
}

// ParseExtensions never fails on what Extension.String writes, and reads
// it back the same.
func FuzzParseExtensions(f *testing.F) {
	for _, s := range []string{"permessage-deflate; client_max_window_bits", `foo; a="b,c"; d=1, bar`, ",,", "x; y=\"\\\"\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		exts, err := ParseExtensions([]string{s})
		if err != nil {
			return
		}
		var parts []string
		for _, e := range exts {
			parts = append(parts, e.String())
		}
		again, err := ParseExtensions([]string{strings.Join(parts, ", ")})
		if err != nil {
			t.Fatalf("%q: what String wrote does not parse: %v", s, err)
		}
		if diff := cmp.Diff(exts, again); diff != "" {
			t.Errorf("%q: round trip (-first +again):\n%s", s, diff)
		}
		AcceptDeflate(exts) // must not panic
		AcceptDeflateResponse(exts)
	})
}
