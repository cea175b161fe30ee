package proxy

import (
	"bytes"
	stdtls "crypto/tls"
	"encoding/binary"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy/internal/ws"
)

// h2Socket is a WebSocket over an HTTP/2 stream (RFC 8441), driven frame
// by frame: the client's messages go out masked in DATA frames, the
// server's are read from them.
type h2Socket struct {
	cl  *h2Client
	id  uint32
	buf []byte // DATA read and not yet parsed
}

func (s *h2Socket) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		f := s.cl.next("DATA", func(f http2.Frame) bool { return f.Header().StreamID == s.id })
		switch f := f.(type) {
		case *http2.DataFrame:
			s.buf = append(s.buf, f.Data()...)
			if len(f.Data()) > 0 {
				s.cl.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
				s.cl.fr.WriteWindowUpdate(s.id, uint32(len(f.Data())))
			}
			if f.StreamEnded() && len(s.buf) == 0 {
				return 0, io.EOF
			}
		case *http2.RSTStreamFrame:
			return 0, io.ErrUnexpectedEOF
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				return 0, io.EOF
			}
		}
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// send writes a masked message in one frame, in one DATA frame.
func (s *h2Socket) send(op ws.Opcode, msg string) {
	s.cl.t.Helper()
	key := [4]byte{1, 2, 3, 4}
	b := ws.AppendHeader(nil, ws.Header{Fin: true, Op: op, Length: int64(len(msg)), Masked: true, Key: key})
	n := len(b)
	b = append(b, msg...)
	ws.Mask(key, 0, b[n:])
	if err := s.cl.fr.WriteData(s.id, false, b); err != nil {
		s.cl.t.Fatal(err)
	}
}

// recv reads a message (of one frame, as the relay sends short ones).
func (s *h2Socket) recv() (ws.Opcode, string) {
	s.cl.t.Helper()
	h, err := ws.ReadHeader(s)
	if err != nil {
		s.cl.t.Fatalf("reading a frame: %v", err)
	}
	b := make([]byte, h.Length)
	if _, err := io.ReadFull(s, b); err != nil {
		s.cl.t.Fatalf("reading a frame: %v", err)
	}
	return h.Op, string(b)
}

// A WebSocket opened by extended CONNECT on an HTTP/2 stream (RFC 8441):
// the proxy offers it in its SETTINGS, answers 200 once the upstream (an
// HTTP/1.1 server) switched, and decides and records the messages as over
// HTTP/1.1; the http event says CONNECT over HTTP/2 for websocket; a
// refused message closes the WebSocket with 1008 and the reason.
func TestWebSocketOverHTTP2(t *testing.T) {
	se := newSocketEnv(t, true)
	c, br, resp := se.connect(hostPort(se.srv), basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the CONNECT answer")
	}
	tc := stdtls.Client(c, &stdtls.Config{RootCAs: se.caPool, ServerName: se.srv.Name, NextProtos: []string{"h2"}})
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("TLS: %v, ALPN %q", err, tc.ConnectionState().NegotiatedProtocol)
	}
	cl := &h2Client{t: t, c: tc, fr: http2.NewFramer(tc, tc)}
	cl.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cl.enc = hpack.NewEncoder(&cl.buf)
	io.WriteString(tc, http2.ClientPreface)
	cl.fr.WriteSettings()
	sf := cl.next("SETTINGS", func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && !s.IsAck() }).(*http2.SettingsFrame)
	if v, ok := sf.Value(http2.SettingEnableConnectProtocol); !ok || v != 1 {
		t.Fatalf("SETTINGS_ENABLE_CONNECT_PROTOCOL = %d, %v; want 1", v, ok)
	}
	cl.fr.WriteSettingsAck()

	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "CONNECT"}, {Name: ":protocol", Value: "websocket"}, {Name: ":scheme", Value: "https"},
		{Name: ":path", Value: "/socket?room=2"}, {Name: ":authority", Value: hostPort(se.srv)},
		{Name: "sec-websocket-version", Value: "13"},
	} {
		cl.enc.WriteField(f)
	}
	if err := cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.buf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	hf := cl.next("the answer", func(f http2.Frame) bool {
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			t.Fatalf("stream reset: %v", r.ErrCode)
		}
		_, ok := f.(*http2.MetaHeadersFrame)
		return ok && f.Header().StreamID == 1
	}).(*http2.MetaHeadersFrame)
	if st := hf.PseudoValue("status"); st != "200" || hf.StreamEnded() {
		t.Fatalf("answered %q (stream ended: %v), want 200 and the stream open", st, hf.StreamEnded())
	}
	s := &h2Socket{cl: cl, id: 1}
	s.send(ws.OpText, "hello")
	if op, msg := s.recv(); op != ws.OpText || msg != "hello" {
		t.Fatalf("read %v %q, want the echo", op, msg)
	}
	s.send(ws.OpText, "a forbidden-word")
	op, msg := s.recv()
	if op != ws.OpClose || len(msg) < 2 || binary.BigEndian.Uint16([]byte(msg)) != ws.ClosePolicy ||
		msg[2:] != "chaperone: denied by rule no-forbidden-word: the message says the forbidden word" {
		t.Fatalf("read %v %q, want a close 1008 with the rule and reason", op, msg)
	}

	he := se.rec.wait(t, "upgrade", func(e *event.Event) bool { return e.Kind == event.KindHTTP })
	type httpSummary struct {
		Method, Proto, Upgrade string
		Status                 int
		Verdict                event.Action
	}
	if diff := cmp.Diff(httpSummary{"CONNECT", "HTTP/2.0", "websocket", http.StatusOK, event.Allow},
		httpSummary{he.HTTP.Method, he.HTTP.Proto, he.HTTP.Upgrade, he.HTTP.Status, he.Verdict.Action}); diff != "" {
		t.Errorf("http event (-want +got):\n%s", diff)
	}
	se.rec.wait(t, "denied ws", func(e *event.Event) bool { return e.Kind == event.KindWS && e.Verdict.Action == event.Deny })
	base := wsSummary{Verdict: event.Allow, Host: hostPort(se.srv), Path: "/socket", Session: testSession, Opcode: "text"}
	with := func(f func(*wsSummary)) wsSummary { s := base; f(&s); return s }
	want := []wsSummary{
		with(func(s *wsSummary) { s.Direction, s.Size, s.Text = "send", 5, "hello" }),
		with(func(s *wsSummary) { s.Direction, s.Size, s.Text = "receive", 5, "hello" }),
		with(func(s *wsSummary) {
			s.Verdict, s.Rule, s.Direction, s.Size, s.Text = event.Deny, "no-forbidden-word", "send", 16, "a forbidden-word"
		}),
	}
	if diff := cmp.Diff(want, summarize(se.rec.kinds(event.KindWS))); diff != "" {
		t.Errorf("ws events (-want +got):\n%s", diff)
	}
	if got := se.echo.received(); !bytes.Equal([]byte(got[0]), []byte("hello")) || len(got) != 1 {
		t.Errorf("the server received %q", got)
	}
}
