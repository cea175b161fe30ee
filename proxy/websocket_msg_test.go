package proxy

import (
	"bytes"
	stdtls "crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
)

const denyWordRule = `rules:
  - name: no-forbidden-word
    on: ws
    when: ws.direction == "send" && ws.text.contains("forbidden-word")
    action: deny
    reason: the message says the forbidden word
  - name: no-large-messages
    on: ws
    when: ws.size == -1 && ws.path == "/small-only"
    action: deny
    reason: messages here are small
`

// echoSocket is a WebSocket server (gorilla's) that answers each text
// message with itself, a JSON-RPC tools/call with its result (same id),
// and a binary message with its size in text, having read it as it came.
// It records the text messages it got, what it read of one a close frame
// cut short, and the close code it was sent.
type echoSocket struct {
	mu     sync.Mutex
	texts  []string
	bins   int      // binary messages read whole
	cut    []byte   // what came of a text message cut short
	cutBin int64    // how much came of a binary message cut short
	closed chan int // the close code the server read
}

// closedBy sends the code of the close frame err is, if it is one.
func (s *echoSocket) closedBy(err error) {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		s.closed <- ce.Code
	}
}

func newEchoSocket() *echoSocket { return &echoSocket{closed: make(chan int, 1)} }

func (s *echoSocket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{EnableCompression: true}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	for {
		op, rd, err := c.NextReader()
		if err != nil {
			s.closedBy(err)
			return
		}
		if op == websocket.BinaryMessage {
			n, err := io.Copy(io.Discard, rd)
			if err != nil {
				s.mu.Lock()
				s.cutBin = n
				s.mu.Unlock()
				s.closedBy(err)
				return
			}
			s.mu.Lock()
			s.bins++
			s.mu.Unlock()
			c.WriteMessage(websocket.TextMessage, []byte(strconv.FormatInt(n, 10)))
			continue
		}
		b, err := io.ReadAll(rd)
		if err != nil {
			s.mu.Lock()
			s.cut = b
			s.mu.Unlock()
			s.closedBy(err)
			return
		}
		s.mu.Lock()
		s.texts = append(s.texts, string(b))
		s.mu.Unlock()
		var call struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(b, &call) == nil && call.Method == "tools/call" {
			b = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"3 results"}]}}`, call.ID)
		}
		c.WriteMessage(websocket.TextMessage, b)
	}
}

// wantClosed waits for the close frame the server is sent, with code.
func (s *echoSocket) wantClosed(t testing.TB, code int) {
	t.Helper()
	select {
	case got := <-s.closed:
		if got != code {
			t.Errorf("the server was sent close code %d, want %d", got, code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server was sent no close frame")
	}
}

func (s *echoSocket) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.texts...)
}

// socketEnv is a proxy deciding by the default policy and a rule refusing
// a word in messages, with rewrites for the test session, and an echo
// WebSocket server at chat.example.test on this test's loopback address.
type socketEnv struct {
	*env
	srv  *upstream.Server
	echo *echoSocket
}

func newSocketEnv(t testing.TB, rewrites bool) *socketEnv {
	t.Helper()
	var src []byte
	if rewrites {
		src = bytes.Replace(policy.DefaultPolicyYAML(), []byte("rules:\n"), []byte(denyWordRule), 1)
	}
	return newSocketEnvPolicy(t, src)
}

// newSocketEnvPolicy is a socketEnv deciding by the policy src, with
// rewrites; nil is none of either.
func newSocketEnvPolicy(t testing.TB, src []byte) *socketEnv {
	t.Helper()
	o := envOptions{}
	if src != nil {
		o.decider, o.rewrites = policyRewrites(t, src)
	}
	se := &socketEnv{env: newEnv(t, o), echo: newEchoSocket()}
	se.srv = se.upstream(upstream.Options{Name: "chat.example.test", Addr: "127.0.44.1:0", CA: se.upCA, HTTP1Only: true, Handler: se.echo})
	return se
}

// dial opens a WebSocket to the echo server through the proxy.
func (se *socketEnv) dial(t testing.TB, path string, compress bool) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{
		Proxy:             http.ProxyURL(se.proxyURL(proxyUser, testToken)),
		TLSClientConfig:   &stdtls.Config{RootCAs: se.caPool},
		HandshakeTimeout:  10 * time.Second,
		EnableCompression: compress,
	}
	c, res, err := d.Dial("wss://"+hostPort(se.srv)+path, nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, res)
	}
	if got := strings.Contains(res.Header.Get("Sec-Websocket-Extensions"), "permessage-deflate"); got != compress {
		t.Errorf("the client's side agreed on %q", res.Header.Get("Sec-Websocket-Extensions"))
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	return c
}

// wsSummary is what a test checks of a ws event.
type wsSummary struct {
	Verdict            event.Action
	Rule               string
	Host, Path         string
	Direction, Opcode  string
	Size               int64
	Text               string
	Truncated          bool
	Secrets            []string
	MCPMethod, MCPTool string
	Session            string
}

func summarize(evs []*event.Event) []wsSummary {
	var out []wsSummary
	for _, e := range evs {
		w := e.WS
		out = append(out, wsSummary{Verdict: e.Verdict.Action, Rule: e.Verdict.Rule, Host: w.Host, Path: w.Path,
			Direction: w.Direction, Opcode: w.Opcode, Size: w.Size, Text: w.Text, Truncated: w.Truncated, Secrets: w.Secrets,
			MCPMethod: w.MCPMethod, MCPTool: w.MCPTool, Session: e.Session})
	}
	return out
}

// Every message of a WebSocket to a host that is not an LLM API, both
// ways, is a ws event decided and recorded with its fields; an MCP
// tools/call and its result name the method and tool; a rule refusing a
// message's text closes the connection with 1008 and the reason to the
// client, 1001 to the server; permessage-deflate is agreed either way.
func TestWebSocketMessages(t *testing.T) {
	for _, compress := range []bool{true, false} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			se := newSocketEnv(t, true)
			c := se.dial(t, "/socket?room=1", compress)
			call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{"q":"go"}}}`
			result := `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"3 results"}]}}`
			steps := []struct {
				op        int
				send, got string
			}{
				{websocket.TextMessage, "hello", "hello"},
				{websocket.BinaryMessage, "\x01\x02\x03", "3"},
				{websocket.TextMessage, call, result},
			}
			for _, s := range steps {
				if err := c.WriteMessage(s.op, []byte(s.send)); err != nil {
					t.Fatal(err)
				}
				if _, b, err := c.ReadMessage(); err != nil || string(b) != s.got {
					t.Fatalf("read %q, %v; want %q", b, err, s.got)
				}
			}
			c.WriteMessage(websocket.TextMessage, []byte("the forbidden-word, said"))
			_, _, err := c.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation ||
				ce.Text != "chaperone: denied by rule no-forbidden-word: the message says the forbidden word" {
				t.Fatalf("read %v, want a close 1008 with the rule and reason", err)
			}
			se.echo.wantClosed(t, websocket.CloseGoingAway)
			if got := se.echo.received(); strings.Contains(strings.Join(got, "\n"), "forbidden") {
				t.Errorf("the refused message reached the server: %q", got)
			}
			httpEv := se.rec.wait(t, "upgrade", func(e *event.Event) bool { return e.Kind == event.KindHTTP })
			if httpEv.HTTP.Status != http.StatusSwitchingProtocols || httpEv.HTTP.Upgrade != "websocket" {
				t.Errorf("http event %+v", httpEv.HTTP)
			}
			se.rec.wait(t, "denied ws", func(e *event.Event) bool { return e.Kind == event.KindWS && e.Verdict.Action == event.Deny })
			base := wsSummary{Verdict: event.Allow, Host: hostPort(se.srv), Path: "/socket", Session: testSession}
			with := func(f func(*wsSummary)) wsSummary { s := base; f(&s); return s }
			want := []wsSummary{
				with(func(s *wsSummary) { s.Direction, s.Opcode, s.Size, s.Text = "send", "text", 5, "hello" }),
				with(func(s *wsSummary) { s.Direction, s.Opcode, s.Size, s.Text = "receive", "text", 5, "hello" }),
				with(func(s *wsSummary) { s.Direction, s.Opcode, s.Size = "send", "binary", 3 }),
				with(func(s *wsSummary) { s.Direction, s.Opcode, s.Size, s.Text = "receive", "text", 1, "3" }),
				with(func(s *wsSummary) {
					s.Direction, s.Opcode, s.Size, s.Text, s.MCPMethod, s.MCPTool = "send", "text", int64(len(call)), call, "tools/call", "search"
				}),
				with(func(s *wsSummary) {
					s.Direction, s.Opcode, s.Size, s.Text, s.MCPMethod, s.MCPTool = "receive", "text", int64(len(result)), result, "tools/call", "search"
				}),
				with(func(s *wsSummary) {
					s.Verdict, s.Rule, s.Direction, s.Opcode, s.Size, s.Text = event.Deny, "no-forbidden-word", "send", "text", 24, "the forbidden-word, said"
				}),
			}
			if diff := cmp.Diff(want, summarize(se.rec.kinds(event.KindWS))); diff != "" {
				t.Errorf("ws events (-want +got):\n%s", diff)
			}
		})
	}
}

// A text message carrying a secret to a host that is not an LLM API is
// refused by the default policy: 1008 with the rule, the reason and where
// the secret was; the server never reads it, and the event names the
// secret's rule, never its value.
func TestWebSocketSecretRefused(t *testing.T) {
	se := newSocketEnv(t, true)
	tok := fakeToken(t)
	c := se.dial(t, "/socket", true)
	c.WriteMessage(websocket.TextMessage, []byte(`{"note":"deploy with `+tok+`"}`))
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation ||
		!strings.HasPrefix(ce.Text, "chaperone: denied by rule no-secrets-over-websocket: ") || !strings.Contains(ce.Text, "github-pat in WebSocket message") {
		t.Fatalf("read %v, want a close 1008 with the rule, reason and place", err)
	}
	if got := se.echo.received(); len(got) != 0 {
		t.Errorf("the server received %d messages", len(got))
	}
	e := se.rec.wait(t, "denied ws", func(e *event.Event) bool { return e.Kind == event.KindWS })
	if diff := cmp.Diff([]string{"github-pat"}, e.WS.Secrets); diff != "" {
		t.Errorf("ws.secrets (-want +got):\n%s", diff)
	}
	if strings.Contains(e.WS.Text, tok) || strings.Contains(e.Verdict.Reason, tok) || !strings.Contains(e.WS.Text, "[REDACTED:github-pat:") {
		t.Errorf("the event's text is %q: want the secret replaced by its placeholder", strings.ReplaceAll(e.WS.Text, tok, "<token>"))
	}
	if e.Verdict.Action != event.Deny || e.Verdict.Rule != "no-secrets-over-websocket" {
		t.Errorf("verdict %v", e.Verdict)
	}
}

// A 50 MB binary message passes frame by frame: decided at its start (its
// size unknown then), recorded at its end with its size, and the proxy
// holds none of it: what the whole process allocates during the transfer
// is a small part of the message.
func TestWebSocketLargeBinaryStreams(t *testing.T) {
	const size = 50 << 20
	se := newSocketEnv(t, true)
	c := se.dial(t, "/audio", false)
	chunk := bytes.Repeat([]byte{0xa5}, 32<<10)
	// Warm up: the first message's buffers (TLS records, frames) are not
	// the transfer's.
	c.WriteMessage(websocket.BinaryMessage, chunk)
	if _, b, err := c.ReadMessage(); err != nil || string(b) != strconv.Itoa(len(chunk)) {
		t.Fatalf("warm-up: %q %v", b, err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w, err := c.NextWriter(websocket.BinaryMessage)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < size; n += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, b, err := c.ReadMessage()
	runtime.ReadMemStats(&after)
	if err != nil || string(b) != strconv.Itoa(size) {
		t.Fatalf("the server read %q, %v; want %d bytes", b, err, size)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated during a %d MB message: %.1f MB", size>>20, float64(allocated)/(1<<20))
	// The race detector's sync.Pool drops what it is given back: its
	// allocations say nothing of what the proxy holds.
	if allocated > 8<<20 && !raceDetector {
		t.Errorf("%d bytes allocated while a %d-byte message passed: it was held, not streamed", allocated, size)
	}
	e := se.rec.wait(t, "streamed ws", func(e *event.Event) bool {
		return e.Kind == event.KindWS && e.WS.Direction == event.WSSend && e.WS.Size == size
	})
	if !e.WS.Truncated || e.WS.Opcode != "binary" || e.Verdict.Action != event.Allow {
		t.Errorf("the large message's event: %+v %v", *e.WS, e.Verdict)
	}
}

// Every outgoing message is searched for secrets, text or binary, all of
// it: one held whole is refused before any of it goes on; one past the
// bound is searched as it streams, its event decided again once the
// secret comes, and refused there: the server reads what came before it,
// never the secret, then 1001.
func TestWebSocketSecretsPastTheBound(t *testing.T) {
	tok := fakeToken(t)
	tests := []struct {
		name     string
		op       int
		size, at int // the message's size, and where the secret is in it
		streamed bool
	}{
		{"binary, held whole", websocket.BinaryMessage, 4 << 10, 1 << 10, false},
		{"binary past the bound", websocket.BinaryMessage, 3 << 20, 5 << 19, true},
		{"text past the bound", websocket.TextMessage, 3 << 20, 2<<20 + 7, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := newSocketEnv(t, true)
			c := se.dial(t, "/socket", false)
			msg := bytes.Repeat([]byte("lorem ipsum "), tt.size/12+1)[:tt.size]
			copy(msg[tt.at:], " "+tok+" ")
			c.WriteMessage(tt.op, msg)
			_, _, err := c.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation ||
				!strings.HasPrefix(ce.Text, "chaperone: denied by rule no-secrets-over-websocket: ") || !strings.Contains(ce.Text, "github-pat in WebSocket message") {
				t.Fatalf("read %v, want a close 1008 with the rule, reason and place", err)
			}
			e := se.rec.wait(t, "denied ws", func(e *event.Event) bool { return e.Kind == event.KindWS && e.Verdict.Action == event.Deny })
			if diff := cmp.Diff([]string{"github-pat"}, e.WS.Secrets); diff != "" {
				t.Errorf("ws.secrets (-want +got):\n%s", diff)
			}
			if e.Verdict.Rule != "no-secrets-over-websocket" || strings.Contains(e.Verdict.Reason, tok) || strings.Contains(e.WS.Text, tok) {
				t.Errorf("verdict %v; want no-secrets-over-websocket, the secret named by its rule only", e.Verdict)
			}
			if got := e.WS.Size == -1; got != tt.streamed {
				t.Errorf("ws.size %d: decided at its start %v, want %v", e.WS.Size, got, tt.streamed)
			}
			se.echo.wantClosed(t, websocket.CloseGoingAway)
			se.echo.mu.Lock()
			defer se.echo.mu.Unlock()
			if se.echo.bins != 0 || len(se.echo.texts) != 0 {
				t.Errorf("the server read %d binary and %d text messages whole", se.echo.bins, len(se.echo.texts))
			}
			read := max(se.echo.cutBin, int64(len(se.echo.cut)))
			if bytes.Contains(se.echo.cut, []byte(tok)) || read > int64(tt.at) {
				t.Errorf("the server read %d bytes of the message, the secret at %d", read, tt.at)
			}
			if tt.streamed && read < 1<<20 {
				t.Errorf("the server read %d bytes of the message before the secret: want what came before its window", read)
			}
		})
	}
}

// A path that holds a secret is never shown, even where the policy lets
// it go: the http event's URL and the ws events' path are redacted.
func TestWebSocketSecretPathRedacted(t *testing.T) {
	se := newSocketEnvPolicy(t, []byte("default: allow\n"))
	tok := fakeToken(t)
	c := se.dial(t, "/socket/"+tok, false)
	c.WriteMessage(websocket.TextMessage, []byte("hi"))
	if _, b, err := c.ReadMessage(); err != nil || string(b) != "hi" {
		t.Fatalf("read %q, %v", b, err)
	}
	w := se.rec.wait(t, "ws", func(e *event.Event) bool { return e.Kind == event.KindWS })
	h := se.rec.wait(t, "http", func(e *event.Event) bool { return e.Kind == event.KindHTTP })
	if w.WS.Path != "/"+Redacted || !strings.HasSuffix(h.HTTP.URL, "/"+Redacted) || !slices.Contains(h.HTTP.Secrets, "github-pat") {
		t.Errorf("ws.path %q, http.url %q, http.secrets %v: want the path redacted, its secret named",
			strings.ReplaceAll(w.WS.Path, tok, "<token>"), strings.ReplaceAll(h.HTTP.URL, tok, "<token>"), h.HTTP.Secrets)
	}
}

// Without rewrites (a session whose secrets are not searched), messages
// are decided and recorded all the same, without their text.
func TestWebSocketWithoutRewrites(t *testing.T) {
	se := newSocketEnv(t, false)
	c := se.dial(t, "/plain", true)
	c.WriteMessage(websocket.TextMessage, []byte("hi"))
	if _, b, err := c.ReadMessage(); err != nil || string(b) != "hi" {
		t.Fatalf("read %q %v", b, err)
	}
	se.rec.wait(t, "echo", func(e *event.Event) bool { return e.Kind == event.KindWS && e.WS.Direction == event.WSReceive })
	want := []wsSummary{
		{Verdict: event.Allow, Host: hostPort(se.srv), Path: "/plain", Direction: "send", Opcode: "text", Size: 2, Session: testSession},
		{Verdict: event.Allow, Host: hostPort(se.srv), Path: "/plain", Direction: "receive", Opcode: "text", Size: 2, Session: testSession},
	}
	if diff := cmp.Diff(want, summarize(se.rec.kinds(event.KindWS))); diff != "" {
		t.Errorf("ws events (-want +got):\n%s", diff)
	}
}

// BenchmarkWSRoundTrip measures a message's round trip to the echo
// server (a 1 KB text message out, its echo back), direct and through the
// proxy, where each of the two is a ws event decided by the default
// policy and recorded, the outgoing one searched for secrets, with and
// without permessage-deflate.
func BenchmarkWSRoundTrip(b *testing.B) {
	se := newSocketEnv(b, true)
	msg := bytes.Repeat([]byte("a line of text, "), 64)
	for _, compress := range []bool{false, true} {
		for _, path := range []string{"direct", "proxy"} {
			b.Run(fmt.Sprintf("deflate=%v/%s", compress, path), func(b *testing.B) {
				var c *websocket.Conn
				if path == "proxy" {
					c = se.dial(b, "/bench", compress)
				} else {
					d := websocket.Dialer{TLSClientConfig: &stdtls.Config{RootCAs: se.upCA.Pool, ServerName: se.srv.Name}, EnableCompression: compress}
					var err error
					if c, _, err = d.Dial("wss://"+se.srv.Addr.String()+"/bench", nil); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { c.Close() })
				}
				b.SetBytes(int64(2 * len(msg)))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
						b.Fatal(err)
					}
					if _, got, err := c.ReadMessage(); err != nil || len(got) != len(msg) {
						b.Fatalf("read %d bytes, %v", len(got), err)
					}
				}
			})
		}
	}
}

// BenchmarkWSBinaryStream measures a large outgoing binary message (16
// MiB, past the bound: searched for secrets as it streams) through the
// proxy, beside the same message sent to the server directly.
func BenchmarkWSBinaryStream(b *testing.B) {
	se := newSocketEnv(b, true)
	msg := bytes.Repeat([]byte("binary\x00\x01\x02\x03 data "), (16<<20)/16)
	for _, path := range []string{"direct", "proxy"} {
		b.Run(path, func(b *testing.B) {
			var c *websocket.Conn
			if path == "proxy" {
				c = se.dial(b, "/bench", false)
			} else {
				d := websocket.Dialer{TLSClientConfig: &stdtls.Config{RootCAs: se.upCA.Pool, ServerName: se.srv.Name}}
				var err error
				if c, _, err = d.Dial("wss://"+se.srv.Addr.String()+"/bench", nil); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
			}
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				c.SetReadDeadline(time.Now().Add(time.Minute))
				if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
					b.Fatal(err)
				}
				if _, got, err := c.ReadMessage(); err != nil || string(got) != strconv.Itoa(len(msg)) {
					b.Fatalf("read %q, %v", got, err)
				}
			}
		})
	}
}

// In transparent mode a WebSocket is decided message by message as in
// explicit mode, its events the redirected process's: an echo passes, a
// secret closes the connection with 1008.
func TestWebSocketTransparent(t *testing.T) {
	src := bytes.Replace(policy.DefaultPolicyYAML(), []byte("rules:\n"), []byte(denyWordRule), 1)
	eng, rw := policyRewrites(t, src)
	e := newTransparentEnv(t, envOptions{decider: eng, rewrites: rw})
	echo := newEchoSocket()
	up := e.upstream(upstream.Options{Name: "chat.example.test", Addr: "127.0.44.2:0", CA: e.upCA, HTTP1Only: true, Handler: echo})
	tc := stdtls.Client(e.dial(t, up.Addr, true), &stdtls.Config{RootCAs: e.caPool, ServerName: up.Name, NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	u, _ := url.Parse("ws://" + hostPort(up) + "/live") // over tc: gorilla adds no TLS of its own
	c, _, err := websocket.NewClient(tc, u, nil, 0, 0)
	if err != nil {
		t.Fatalf("handshake: %v; events %s", err, describe(e.rec.all()))
	}
	c.WriteMessage(websocket.TextMessage, []byte("hi"))
	if _, b, err := c.ReadMessage(); err != nil || string(b) != "hi" {
		t.Fatalf("read %q %v", b, err)
	}
	c.WriteMessage(websocket.TextMessage, []byte("key "+fakeToken(t)))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "no-secrets-over-websocket") {
		t.Fatalf("read %v, want a close 1008 by no-secrets-over-websocket", err)
	}
	e.rec.wait(t, "denied ws", func(e *event.Event) bool { return e.Kind == event.KindWS && e.Verdict.Action == event.Deny })
	type summary struct {
		Direction string
		Verdict   event.Action
		PID       int
		Session   string
	}
	var got []summary
	for _, ev := range e.rec.kinds(event.KindWS) {
		s := summary{Direction: ev.WS.Direction, Verdict: ev.Verdict.Action, Session: ev.Session}
		if ev.Process != nil {
			s.PID = ev.Process.PID
		}
		got = append(got, s)
	}
	want := []summary{{"send", event.Allow, 4242, testSession}, {"receive", event.Allow, 4242, testSession}, {"send", event.Deny, 4242, testSession}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ws events (-want +got):\n%s", diff)
	}
}

// A message past the bound is decided at its start: refused there, none of
// it reaches the server, and the client reads 1008.
func TestWebSocketLargeRefusedAtStart(t *testing.T) {
	se := newSocketEnv(t, true)
	c := se.dial(t, "/small-only", false)
	c.WriteMessage(websocket.BinaryMessage, []byte("small"))
	if _, b, err := c.ReadMessage(); err != nil || string(b) != "5" {
		t.Fatalf("read %q %v", b, err)
	}
	c.WriteMessage(websocket.BinaryMessage, make([]byte, maxWSBinary+1))
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "no-large-messages") {
		t.Fatalf("read %v, want a close 1008 by no-large-messages", err)
	}
	e := se.rec.wait(t, "denied ws", func(e *event.Event) bool { return e.Kind == event.KindWS && e.Verdict.Action == event.Deny })
	if e.WS.Size != -1 || !e.WS.Truncated || e.WS.Opcode != "binary" {
		t.Errorf("the refused message's event: %+v", *e.WS)
	}
	se.echo.wantClosed(t, websocket.CloseGoingAway)
	se.echo.mu.Lock()
	defer se.echo.mu.Unlock()
	if se.echo.bins != 1 {
		t.Errorf("the server read %d binary messages, want only the small one", se.echo.bins)
	}
}
