package ws

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
)

// Test servers listen on 127.0.32.0/24, the range given to these tests.
const (
	relayAddr    = "127.0.32.1:0"
	upstreamAddr = "127.0.32.2:0"
)

// testHandler holds text messages whole and passes them through change
// (nil: unchanged); it streams binary messages; it counts what it saw.
type testHandler struct {
	change   func(m Message) Action
	hold     int64
	oversize func(m Message) Action

	mu       sync.Mutex
	seen     []Message
	streamed []int64
	closing  []Direction
}

func (h *testHandler) Begin(dir Direction, op Opcode) int64 {
	if op == OpBinary {
		return 0
	}
	if h.hold > 0 {
		return h.hold
	}
	return 1 << 20
}

func (h *testHandler) Message(m Message) Action {
	h.mu.Lock()
	h.seen = append(h.seen, m)
	h.mu.Unlock()
	if h.change != nil {
		return h.change(m)
	}
	return Action{Send: []Out{{m.Op, m.Data}}}
}

func (h *testHandler) Oversized(m Message) Action {
	if h.oversize != nil {
		return h.oversize(m)
	}
	return Action{Stream: true}
}

func (h *testHandler) Streamed(dir Direction, op Opcode, size int64) {
	h.mu.Lock()
	h.streamed = append(h.streamed, size)
	h.mu.Unlock()
}

func (h *testHandler) Closing(dir Direction) []Out {
	h.mu.Lock()
	h.closing = append(h.closing, dir)
	h.mu.Unlock()
	return nil
}

// harness is a relay between gorilla clients and a gorilla server, doing
// the two handshakes with CheckRequest, CheckResponse and AcceptDeflate
// as the proxy does.
type harness struct {
	t         testing.TB
	url       string
	serverURL string // the server's own, for a client without the relay
	serverWS  chan *websocket.Conn
	ends      chan End
	// upstreamExt is the Sec-WebSocket-Extensions the relay offered the
	// server; clientExt what it answered the client.
	mu                     sync.Mutex
	upstreamExt, clientExt string
}

type harnessOptions struct {
	h                 Handler
	serverCompression bool
	// serve runs the server's side of each connection; nil echoes.
	serve func(c *websocket.Conn)
}

func startHarness(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	hs := &harness{t: t, serverWS: make(chan *websocket.Conn, 4), ends: make(chan End, 4)}
	up := websocket.Upgrader{EnableCompression: o.serverCompression}
	srvLn, err := net.Listen("tcp", upstreamAddr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		select {
		case hs.serverWS <- c:
		default: // nobody waits for it
		}
		if o.serve != nil {
			o.serve(c)
			return
		}
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if c.WriteMessage(typ, msg) != nil {
				return
			}
		}
	})}
	go srv.Serve(srvLn)
	t.Cleanup(func() { srv.Close() })

	ln, err := net.Listen("tcp", relayAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // every relay returned: no goroutine left
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				hs.relay(c, srvLn.Addr().String(), o.h)
			}()
		}
	}()
	hs.url = "ws://" + ln.Addr().String() + "/ws"
	hs.serverURL = "ws://" + srvLn.Addr().String() + "/ws"
	return hs
}

// relay does the handshakes on c and relays it to the server at addr.
func (hs *harness) relay(c net.Conn, addr string, h Handler) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	key, offers, err := CheckRequest(req)
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
		return
	}
	uc, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer uc.Close()
	offered := len(offers) > 0
	ext := ""
	if offered {
		ext = "Sec-WebSocket-Extensions: " + DeflateOffer + "\r\n"
	}
	fmt.Fprintf(uc, "GET /ws HTTP/1.1\r\nHost: upstream\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n%s\r\n", key, ext)
	ubr := bufio.NewReader(uc)
	res, err := http.ReadResponse(ubr, req)
	if err != nil {
		return
	}
	sd, err := CheckResponse(res, key, offered)
	if err != nil {
		hs.t.Errorf("CheckResponse: %v", err)
		return
	}
	cd, answer := AcceptDeflate(offers)
	hs.mu.Lock()
	hs.upstreamExt, hs.clientExt = res.Header.Get("Sec-WebSocket-Extensions"), answer
	hs.mu.Unlock()
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + AcceptKey(key) + "\r\n"
	if answer != "" {
		resp += "Sec-WebSocket-Extensions: " + answer + "\r\n"
	}
	io.WriteString(c, resp+"\r\n")
	end := Relay(NewConn(br, c, c, AsServer, cd), NewConn(ubr, uc, uc, AsClient, sd), h, Options{CloseTimeout: 2 * time.Second})
	select {
	case hs.ends <- end:
	default: // nobody waits for it
	}
}

func (hs *harness) dial(compress bool) *websocket.Conn {
	hs.t.Helper()
	d := websocket.Dialer{EnableCompression: compress, HandshakeTimeout: 10 * time.Second}
	c, res, err := d.Dial(hs.url, nil)
	if err != nil {
		hs.t.Fatalf("dial: %v (%v)", err, res)
	}
	hs.t.Cleanup(func() { c.Close() })
	return c
}

func (hs *harness) end() End {
	hs.t.Helper()
	select {
	case e := <-hs.ends:
		return e
	case <-time.After(20 * time.Second):
		hs.t.Fatal("the relay did not end")
		return End{}
	}
}

// Text and binary messages, small and large, reach the server and come
// back, with compression on both sides, one or neither; a close handshake
// started by either side goes through with its code and reason.
func TestRelayEcho(t *testing.T) {
	for _, tt := range []struct {
		name             string
		client, upstream bool
	}{
		{"no compression", false, false},
		{"both compressed", true, true},
		{"client compressed", true, false},
		{"server compressed", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := &testHandler{}
			hs := startHarness(t, harnessOptions{h: h, serverCompression: tt.upstream})
			c := hs.dial(tt.client)
			big := bytes.Repeat([]byte("0123456789abcdef"), 300000/16) // several fragments
			msgs := []struct {
				typ  int
				data []byte
			}{
				{websocket.TextMessage, []byte(`{"type":"response.create"}`)},
				{websocket.BinaryMessage, big},
				{websocket.TextMessage, big},
				{websocket.TextMessage, nil},
				{websocket.BinaryMessage, []byte{0, 1, 2}},
			}
			for i, m := range msgs {
				if err := c.WriteMessage(m.typ, m.data); err != nil {
					t.Fatal(err)
				}
				typ, got, err := c.ReadMessage()
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if typ != m.typ || !bytes.Equal(got, m.data) {
					t.Errorf("message %d came back as type %d, %d bytes; want %d, %d bytes", i, typ, len(got), m.typ, len(m.data))
				}
			}
			hs.mu.Lock()
			if got := hs.clientExt != ""; got != tt.client {
				t.Errorf("client side compressed: %v (%q)", got, hs.clientExt)
			}
			if got := hs.upstreamExt != ""; got != (tt.client && tt.upstream) {
				t.Errorf("server side compressed: %v (%q)", got, hs.upstreamExt)
			}
			hs.mu.Unlock()

			// The client closes; the server's gorilla answers the close.
			if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4000, "bye")); err != nil {
				t.Fatal(err)
			}
			_, _, err := c.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != 4000 { // gorilla answers with the code alone
				t.Errorf("the client read %v, want the server's answer to its close", err)
			}
			e := hs.end()
			if e.Err != nil || e.ClientClose != 4000 || e.ServerClose != 4000 || e.Closed {
				t.Errorf("end %+v", e)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.seen) != 6 || len(h.streamed) != 4 { // text both ways; binary both ways
				t.Errorf("the handler held %d messages and streamed %d; want 6 and 4", len(h.seen), len(h.streamed))
			}
		})
	}
}

// Pings and pongs pass both ways with their payloads; the server closing
// first is passed on to the client, and its answer back.
func TestRelayControl(t *testing.T) {
	pongs := make(chan string, 2)
	srvPongs := make(chan string, 2)
	h := &testHandler{}
	hs := startHarness(t, harnessOptions{h: h, serve: func(c *websocket.Conn) {
		c.SetPongHandler(func(s string) error { srvPongs <- s; return nil })
		c.WriteControl(websocket.PingMessage, []byte("from server"), time.Now().Add(5*time.Second))
		// Wait for the client's go-ahead, reading (which handles the pong
		// and answers the client's ping).
		if _, _, err := c.ReadMessage(); err != nil {
			return
		}
		c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "done"))
		c.ReadMessage() // the close's answer
	}})
	c := hs.dial(false)
	c.SetPongHandler(func(s string) error { pongs <- s; return nil })
	go func() { // reads, which answers pings and sees pongs
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()
	if err := c.WriteControl(websocket.PingMessage, []byte("from client"), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan string{"client": pongs, "server": srvPongs} {
		select {
		case got := <-ch:
			if !strings.HasPrefix(got, "from ") {
				t.Errorf("the %s got a pong %q", name, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s got no pong", name)
		}
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte("go")); err != nil {
		t.Fatal(err)
	}
	e := hs.end()
	if e.Err != nil || e.ServerClose != websocket.CloseGoingAway || e.ClientClose != websocket.CloseGoingAway {
		t.Errorf("end %+v", e)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.closing) != 2 || h.closing[0] != ToClient {
		t.Errorf("Closing called for %v, want the server's direction first, then the client's", h.closing)
	}
}

// A handler that changes a message, holds one back, closes the connection
// with a reason; an oversized message streamed on or refused.
func TestRelayHandlerActions(t *testing.T) {
	var held []byte
	h := &testHandler{hold: 1000}
	h.change = func(m Message) Action {
		s := string(m.Data)
		switch {
		case m.Dir == ToClient:
			return Action{Send: []Out{{m.Op, m.Data}}}
		case s == "hold":
			held = m.Data
			return Action{}
		case s == "deny":
			return Action{Close: true, CloseCode: ClosePolicy, CloseReason: "chaperone: denied by rule no-way: " + strings.Repeat("x", 200)}
		case held != nil:
			out := []Out{{OpText, held}, {m.Op, bytes.ToUpper(m.Data)}}
			held = nil
			return Action{Send: out}
		}
		return Action{Send: []Out{{m.Op, bytes.ToUpper(m.Data)}}}
	}
	h.oversize = func(m Message) Action {
		if m.Data[0] == 'r' {
			return Action{Close: true, CloseCode: CloseTooBig, CloseReason: "too large"}
		}
		return Action{Stream: true}
	}
	hs := startHarness(t, harnessOptions{h: h, serverCompression: true})
	c := hs.dial(true)
	expect := func(want string) {
		t.Helper()
		_, got, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("got %.40q (%d bytes), want %.40q (%d bytes)", got, len(got), want, len(want))
		}
	}
	c.WriteMessage(websocket.TextMessage, []byte("hello"))
	expect("HELLO")
	c.WriteMessage(websocket.TextMessage, []byte("hold"))
	c.WriteMessage(websocket.TextMessage, []byte("after"))
	expect("hold")
	expect("AFTER")
	long := "s" + strings.Repeat("x", 5000)
	c.WriteMessage(websocket.TextMessage, []byte(long))
	expect(long) // streamed on as it was
	c.WriteMessage(websocket.TextMessage, []byte("deny"))
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != ClosePolicy || !strings.HasPrefix(ce.Text, "chaperone: denied by rule no-way: xxx") || len(ce.Text) > 123 {
		t.Fatalf("the client read %v, want a close 1008 with the reason", err)
	}
	e := hs.end()
	if !e.Closed || e.ServerClose != CloseGoingAway {
		t.Errorf("end %+v; want closed by the handler, the server answering 1001", e)
	}

	// An oversized message refused.
	c = hs.dial(false)
	c.WriteMessage(websocket.TextMessage, []byte("r"+strings.Repeat("y", 3000)))
	_, _, err = c.ReadMessage()
	if !errors.As(err, &ce) || ce.Code != CloseTooBig {
		t.Fatalf("the client read %v, want a close 1009", err)
	}
	hs.end()
}

// stopFilter upper-cases a message as it streams, and refuses it where
// it says STOP, giving out nothing of the read that holds it.
type stopFilter struct {
	r    io.Reader
	tail []byte // the last 3 bytes given out: STOP may straddle two reads
}

func (f *stopFilter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	seen := append(f.tail, p[:n]...)
	if bytes.Contains(seen, []byte("STOP")) {
		return 0, &Refusal{Code: ClosePolicy, Reason: "it says stop"}
	}
	f.tail = append([]byte(nil), seen[max(0, len(seen)-3):]...)
	copy(p, bytes.ToUpper(p[:n]))
	return n, err
}

// An oversized message streamed through a Filter: what goes on is what the
// filter gives out, its first bytes included; a Refusal from it ends the
// connection, the client told why, and the server gets what went before
// it, then 1001.
func TestRelayFilter(t *testing.T) {
	h := &testHandler{hold: 1000}
	h.oversize = func(m Message) Action {
		if m.Dir == ToClient {
			return Action{Stream: true}
		}
		return Action{Stream: true, Filter: func(prefix []byte, rest io.Reader) io.Reader {
			return &stopFilter{r: io.MultiReader(bytes.NewReader(prefix), rest)}
		}}
	}
	type got struct {
		data []byte
		err  error
	}
	gots := make(chan got, 4)
	hs := startHarness(t, harnessOptions{h: h, serve: func(c *websocket.Conn) {
		for {
			typ, rd, err := c.NextReader()
			if err != nil {
				gots <- got{nil, err}
				return
			}
			b, err := io.ReadAll(rd)
			gots <- got{b, err}
			if err != nil || c.WriteMessage(typ, b) != nil {
				return
			}
		}
	}})
	c := hs.dial(false)
	long := "f" + strings.Repeat("x", 5000)
	c.WriteMessage(websocket.TextMessage, []byte(long))
	if _, b, err := c.ReadMessage(); err != nil || string(b) != strings.ToUpper(long) {
		t.Fatalf("read %.20q… (%d bytes), %v; want the message upper-cased", b, len(b), err)
	}
	<-gots

	// Past a frame's worth before STOP, so that some of it has gone on.
	c.WriteMessage(websocket.TextMessage, []byte("f"+strings.Repeat("y", 2*fragment)+"STOP"+strings.Repeat("z", 3000)))
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != ClosePolicy || ce.Text != "it says stop" {
		t.Fatalf("the client read %v, want a close 1008 with the reason", err)
	}
	g := <-gots
	if !errors.As(g.err, &ce) || ce.Code != CloseGoingAway {
		t.Errorf("the server's read ended with %v, want a close 1001", g.err)
	}
	if bytes.Contains(g.data, []byte("STOP")) || bytes.Contains(g.data, []byte("Z")) || len(g.data) < fragment || !bytes.HasPrefix(g.data, []byte("FYYY")) {
		t.Errorf("the server read %.20q… (%d bytes): want what came before STOP only", g.data, len(g.data))
	}
	if e := hs.end(); !e.Closed || e.ServerClose != CloseGoingAway {
		t.Errorf("end %+v; want closed by the handler, the server answering 1001", e)
	}
}

// A client that breaks the protocol is told so with 1002, and the server
// gets 1001; one that goes away has the server's connection closed.
func TestRelayFailures(t *testing.T) {
	closes := make(chan int, 4)
	h := &testHandler{}
	hs := startHarness(t, harnessOptions{h: h, serve: func(c *websocket.Conn) {
		_, _, err := c.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			closes <- ce.Code
		} else {
			closes <- -1
		}
	}})
	for _, tt := range []struct {
		name      string
		send      []byte // raw frames, after the handshake
		closeCode int    // the client's expected close (0: none)
		server    int
	}{
		{"unmasked frame", []byte{0x81, 0x02, 'h', 'i'}, CloseProtocolError, CloseGoingAway},
		{"continuation first", []byte{0x80, 0x80, 0, 0, 0, 0}, CloseProtocolError, CloseGoingAway},
		{"RSV1 without compression", []byte{0xc1, 0x80, 0, 0, 0, 0}, CloseProtocolError, CloseGoingAway},
		{"gone mid-frame", []byte{0x81, 0x85, 0, 0, 0, 0, 'h'}, 0, websocket.CloseAbnormalClosure}, // no close frame: gorilla says 1006
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(hs.url, "/ws"), "ws://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != 101 {
				t.Fatalf("handshake: %v %v", res, err)
			}
			c.Write(tt.send)
			if tt.closeCode == 0 {
				c.Close()
			} else {
				h, err := ReadHeader(br)
				if err != nil || h.Op != OpClose {
					t.Fatalf("read %+v %v, want a close frame", h, err)
				}
				p := make([]byte, h.Length)
				io.ReadFull(br, p)
				if code, _, _ := ParseClose(p); code != tt.closeCode {
					t.Errorf("close code %d, want %d", code, tt.closeCode)
				}
			}
			select {
			case got := <-closes:
				if got != tt.server {
					t.Errorf("the server saw close %d, want %d", got, tt.server)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server saw nothing")
			}
			if e := hs.end(); e.Err == nil {
				t.Errorf("end %+v, want an error", e)
			} else if wantProto := tt.closeCode == CloseProtocolError; errors.Is(e.Err, ErrProtocol) != wantProto {
				t.Errorf("end error %v, protocol error: want %v", e.Err, wantProto)
			}
		})
	}
}

// BenchmarkRelayRoundTrip: a client sends a message of an LLM stream's
// size and waits for its echo, through the relay (a handler that passes
// every message on whole) and straight to the server, side by side.
func BenchmarkRelayRoundTrip(b *testing.B) {
	msg := []byte(`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Here is some streamed text, a few tokens long."}`)
	for _, compress := range []bool{false, true} {
		hs := startHarness(b, harnessOptions{h: &passHandler{}, serverCompression: compress})
		run := func(b *testing.B, url string) {
			d := websocket.Dialer{EnableCompression: compress}
			c, _, err := d.Dial(url, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
					b.Fatal(err)
				}
				if _, _, err := c.ReadMessage(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(fmt.Sprintf("compress=%v/direct", compress), func(b *testing.B) { run(b, hs.serverURL) })
		b.Run(fmt.Sprintf("compress=%v/relay", compress), func(b *testing.B) { run(b, hs.url) })
	}
}

// passHandler passes every message on, held whole.
type passHandler struct{}

func (passHandler) Begin(Direction, Opcode) int64     { return 1 << 20 }
func (passHandler) Message(m Message) Action          { return Action{Send: []Out{{m.Op, m.Data}}} }
func (passHandler) Oversized(Message) Action          { return Action{Stream: true} }
func (passHandler) Streamed(Direction, Opcode, int64) {}
func (passHandler) Closing(Direction) []Out           { return nil }

// After a close frame, a side is sent control frames only: a message
// another goroutine was passing on, or a second close, is dropped.
func TestNothingAfterClose(t *testing.T) {
	var out bytes.Buffer
	c := NewConn(bufio.NewReader(strings.NewReader("")), &out, io.NopCloser(nil), AsServer, nil)
	c.writeMessage(OpText, []byte("before"))
	c.writeControl(OpClose, ClosePayload(CloseNormal, ""))
	c.writeMessage(OpText, []byte("after"))
	c.writeControl(OpPing, []byte("p"))
	c.writeControl(OpClose, ClosePayload(CloseGoingAway, ""))
	var ops []Opcode
	r := bytes.NewReader(out.Bytes())
	for {
		h, err := ReadHeader(r)
		if err != nil {
			break
		}
		ops = append(ops, h.Op)
		r.Seek(h.Length, io.SeekCurrent)
	}
	if diff := cmp.Diff([]Opcode{OpText, OpClose, OpPing}, ops); diff != "" {
		t.Errorf("frames written (-want +got):\n%s", diff)
	}
}
