package proxy

import (
	"bytes"
	stdtls "crypto/tls"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
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

// openH2Socket opens a WebSocket on stream 1 of an HTTP/2 connection to
// name through the proxy's tunnel to target, by extended CONNECT to path
// (with fields), having checked that the proxy offers it and answers 200.
func openH2Socket(t *testing.T, e *env, target, name, path string, fields ...hpack.HeaderField) *h2Socket {
	t.Helper()
	c, br, resp := e.connect(target, basicAuth(proxyUser, testToken))
	if resp != nil {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the CONNECT answer")
	}
	tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.caPool, ServerName: name, NextProtos: []string{"h2"}})
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
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: "CONNECT"}, {Name: ":protocol", Value: "websocket"}, {Name: ":scheme", Value: "https"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: target},
		{Name: "sec-websocket-version", Value: "13"},
	}, fields...) {
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
	return &h2Socket{cl: cl, id: 1}
}

// A WebSocket opened by extended CONNECT on an HTTP/2 stream (RFC 8441):
// the proxy offers it in its SETTINGS, answers 200 once the upstream (an
// HTTP/1.1 server) switched, and decides and records the messages as over
// HTTP/1.1; the http event says CONNECT over HTTP/2 for websocket; a
// refused message closes the WebSocket with 1008 and the reason.
func TestWebSocketOverHTTP2(t *testing.T) {
	se := newSocketEnv(t, true)
	s := openH2Socket(t, se.env, hostPort(se.srv), se.srv.Name, "/socket?room=2")
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

// An LLM API's WebSocket over HTTP/2 is the LLM handler's, as over
// HTTP/1.1: the secret of the prompt is redacted upstream and restored in
// the answer.
func TestLLMWebSocketOverHTTP2(t *testing.T) {
	we := newWSEnv(t)
	tok := fakeToken(t)
	s := openH2Socket(t, we.env, hostPort(we.oai), we.oai.Name, "/v1/responses",
		hpack.HeaderField{Name: "openai-beta", Value: "responses_websockets=2026-02-06"})
	b, _ := json.Marshal(map[string]any{"type": "response.create", "model": "gpt-5-codex", "stream": true,
		"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "use " + tok}}}}})
	s.send(ws.OpText, string(b))
	var text strings.Builder
	for {
		op, msg := s.recv()
		if op != ws.OpText {
			t.Fatalf("read a %v frame: %q", op, msg)
		}
		var m struct{ Type, Delta string }
		json.Unmarshal([]byte(msg), &m)
		if strings.HasSuffix(m.Type, ".delta") {
			text.WriteString(m.Delta)
		}
		if m.Type == "response.completed" {
			break
		}
	}
	if got := text.String(); got != "You said: use "+tok {
		t.Errorf("the answer is %q, want the prompt with the secret restored", strings.ReplaceAll(got, tok, "<token>"))
	}
	msgs := we.oaiWS.Messages()
	if len(msgs) != 1 || bytes.Contains(msgs[0].Data, []byte(tok)) || !bytes.Contains(msgs[0].Data, []byte("[REDACTED:github-pat:")) {
		t.Errorf("the upstream received %d messages, the first redacted: %v", len(msgs), len(msgs) > 0 && bytes.Contains(msgs[0].Data, []byte("[REDACTED:")))
	}
	e := we.rec.wait(t, "llm", func(e *event.Event) bool { return e.Kind == event.KindLLM && e.LLM.OutputTokens == 34 })
	if !e.LLM.WebSocket || e.LLM.Restored == 0 || e.Verdict.Action != event.Rewrite {
		t.Errorf("llm event %+v %v", *e.LLM, e.Verdict)
	}
}

// h2Client speaks HTTP/2 frame by frame, to watch the frames of a stream.
type h2Client struct {
	t   testing.TB
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
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
