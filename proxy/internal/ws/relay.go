package ws

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Direction is the way a message travels.
type Direction uint8

const (
	ToServer Direction = iota // from the client
	ToClient                  // from the server
)

func (d Direction) String() string {
	if d == ToServer {
		return "client to server"
	}
	return "server to client"
}

// Message is a data message, whole and decompressed.
type Message struct {
	Dir  Direction
	Op   Opcode // OpText or OpBinary
	Data []byte
}

// Out is a message to send.
type Out struct {
	Op   Opcode
	Data []byte
}

// Action is what becomes of a message a Handler was given.
type Action struct {
	// Send lists the messages to send on in its place, in order: the
	// message itself, changed or not; none (held back to go out with a
	// later one); or several (with ones held back before).
	Send []Out
	// Stream (from Oversized only) passes the message on as it comes,
	// what was read of it first, after the messages of Send. Without
	// Stream or Close, the rest of an oversized message is dropped.
	Stream bool
	// Filter, with Stream, is what the message is read through as it
	// streams: given what was read of it first (Oversized's m.Data) and
	// the reader of the rest, it returns the reader of the whole message.
	// It is called, and read, on the goroutine of the message's
	// direction. A *Refusal its reader returns closes the connection as
	// Close does, with the Refusal's code and reason; what it gave out
	// before has gone on, a message the close frame cuts short.
	Filter func(prefix []byte, rest io.Reader) io.Reader
	// Close ends the connection instead of sending anything: the client
	// gets a close frame with CloseCode and CloseReason (cut to fit a
	// control frame), the server one with CloseGoingAway (the relay goes
	// away: the server did nothing wrong). Nothing more is relayed either
	// way.
	Close       bool
	CloseCode   int
	CloseReason string
}

// Refusal is the error of a Filter's reader that closes the connection:
// the client gets a close frame with Code and Reason, as from an Action's
// Close.
type Refusal struct {
	Code   int
	Reason string
}

func (e *Refusal) Error() string { return "ws: refused: " + e.Reason }

// Handler decides what becomes of the data messages of one connection.
// Relay calls it from two goroutines, one per direction; the calls for one
// direction come one at a time, in the order of the messages.
type Handler interface {
	// Begin is called as a message begins. It returns how many bytes of
	// it (decompressed) to hold at most, to give the message whole to
	// Message; 0 passes it on frame by frame as it comes, holding
	// nothing, and tells Streamed at its end.
	Begin(dir Direction, op Opcode) (hold int64)
	// Message is given a held message; m.Data is the handler's.
	Message(m Message) Action
	// Oversized is given the first hold+1 bytes of a held message that is
	// longer than hold.
	Oversized(m Message) Action
	// Streamed is told of a message passed on as it came, once it has
	// gone whole: its size, decompressed.
	Streamed(dir Direction, op Opcode, size int64)
	// Closing is called before a close frame is passed on in dir: it
	// returns the messages it held back, to send before it.
	Closing(dir Direction) []Out
}

// Options configure Relay.
type Options struct {
	// CloseTimeout bounds the wait for a side's close frame once the relay
	// sent it one; 5 s when zero.
	CloseTimeout time.Duration
	// Rand seeds the masking keys of the frames sent to the server; nil
	// means crypto/rand.
	Rand io.Reader
}

// End is how a relayed connection ended.
type End struct {
	// ClientClose and ServerClose are the codes of the close frames each
	// side sent (CloseNoStatus for one without a code); 0 for none.
	ClientClose, ServerClose int
	// Closed is true when the handler closed the connection.
	Closed bool
	// Err says what ended the connection other than a close handshake: a
	// side that broke the protocol (wrapping ErrProtocol: it was sent a
	// close frame with code 1002), went away, could not be written, or
	// did not answer a close frame in time. Nil after a handshake.
	Err error
}

const defaultCloseTimeout = 5 * time.Second

// The sides of a relay, as indexes.
const (
	client = 0
	server = 1
)

type relay struct {
	conns   [2]*Conn
	h       Handler
	timeout time.Duration

	mu     sync.Mutex
	sent   [2]bool // a close frame was sent to the side
	got    [2]int  // the code of the close frame the side sent; 0 for none
	closed bool    // by the handler
	err    error
	timer  *time.Timer
	shut   bool
}

// Relay passes the messages of a WebSocket connection between client (the
// relay is its server) and server (the relay is its client) through h,
// and control frames as they are: pings and pongs both ways, a close frame
// on to the other side, whose answer comes back the same way. It returns
// when both sides are done (a close handshake each, or a failure, after
// which both are closed at once), having closed both.
//
// A side that breaks the protocol is sent a close frame with code 1002,
// and the other one with 1001. A side that closes its connection without
// a close frame has the other one's closed the same way.
func Relay(clientSide, serverSide *Conn, h Handler, o Options) End {
	r := &relay{conns: [2]*Conn{clientSide, serverSide}, h: h, timeout: o.CloseTimeout}
	if r.timeout <= 0 {
		r.timeout = defaultCloseTimeout
	}
	rnd := o.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	if err := serverSide.seedMasks(rnd); err != nil {
		r.stop(fmt.Errorf("ws: masking keys: %w", err))
		return r.end()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.pump(ToServer)
	}()
	r.pump(ToClient)
	wg.Wait()
	r.stop(nil)
	return r.end()
}

func (r *relay) end() End {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
	}
	return End{ClientClose: r.got[client], ServerClose: r.got[server], Closed: r.closed, Err: r.err}
}

// ends returns the indexes of the side a direction reads and the one it
// writes.
func ends(dir Direction) (src, dst int) {
	if dir == ToServer {
		return client, server
	}
	return server, client
}

func sideName(i int) string {
	if i == client {
		return "client"
	}
	return "server"
}

// pump relays what one side sends until its close frame or a failure.
func (r *relay) pump(dir Direction) {
	s, _ := ends(dir)
	src := r.conns[s]
	for {
		h, err := src.readHeader()
		if err != nil {
			r.fail(s, err)
			return
		}
		if h.Op.IsControl() {
			payload, err := src.readControl(h)
			if err != nil {
				r.fail(s, err)
				return
			}
			if err := r.control(dir, h.Op, payload); err != nil {
				if !errors.Is(err, errControl) {
					r.fail(s, err)
				}
				return
			}
			continue
		}
		if h.Op == OpContinuation {
			r.fail(s, protocolErr("a continuation frame outside a message"))
			return
		}
		if err := r.message(dir, h); err != nil {
			if !errors.Is(err, errControl) {
				r.fail(s, err)
			}
			return
		}
	}
}

// writeErr marks an error as the failure of the side written to.
type writeErr struct {
	side int
	err  error
}

func (e *writeErr) Error() string {
	return "ws: writing to the " + sideName(e.side) + ": " + e.err.Error()
}
func (e *writeErr) Unwrap() error { return e.err }

// control passes a control frame on. It returns errControl after a close
// frame: the direction is over.
func (r *relay) control(dir Direction, op Opcode, payload []byte) error {
	s, d := ends(dir)
	dst := r.conns[d]
	if op != OpClose {
		if r.closing(d) {
			return nil
		}
		if err := dst.writeControl(op, payload); err != nil {
			return &writeErr{d, err}
		}
		return nil
	}
	code, reason, err := ParseClose(payload)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.got[s] = code
	forward := !r.sent[d]
	r.sent[d] = true
	r.mu.Unlock()
	if forward {
		for _, m := range r.h.Closing(dir) {
			if err := dst.writeMessage(m.Op, m.Data); err != nil {
				return &writeErr{d, err}
			}
		}
		if err := dst.writeControl(OpClose, ClosePayload(code, reason)); err != nil {
			return &writeErr{d, err}
		}
	}
	r.settle()
	return errControl
}

// closing reports whether a close frame was sent to side i: nothing more
// may follow it.
func (r *relay) closing(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[i]
}

// settle ends the relay once both sides completed their close handshake,
// and otherwise, once a close frame went out, gives the other side
// CloseTimeout to answer.
func (r *relay) settle() {
	r.mu.Lock()
	done := r.sent[client] && r.sent[server] && r.got[client] != 0 && r.got[server] != 0
	if !done && r.timer == nil && (r.sent[client] || r.sent[server]) {
		r.timer = time.AfterFunc(r.timeout, func() {
			r.stop(fmt.Errorf("ws: no close frame in answer within %v", r.timeout))
		})
	}
	r.mu.Unlock()
	if done {
		r.stop(nil)
	}
}

// message relays a data message that h begins.
func (r *relay) message(dir Direction, h Header) error {
	s, d := ends(dir)
	src := r.conns[s]
	b := src.newBody(h, func(op Opcode, p []byte) error { return r.control(dir, op, p) })
	var rd io.Reader = b
	if h.RSV&bitRSV1 != 0 {
		rd = src.inf.reader(b)
	}
	if err := r.pass(dir, h.Op, d, b, rd); err != nil {
		return err
	}
	// Whatever of the frames the decompressor left (after a final block).
	_, err := io.Copy(io.Discard, b)
	return err
}

// pass gives the message rd reads (decompressed from b, or b itself) to
// the handler and does what it says.
func (r *relay) pass(dir Direction, op Opcode, d int, b *body, rd io.Reader) error {
	dst := r.conns[d]
	if r.closing(d) {
		// Nothing more may reach dst: skipped, not decompressed, as the
		// connection is closing.
		_, err := io.Copy(io.Discard, b)
		return err
	}
	hold := r.h.Begin(dir, op)
	if hold <= 0 {
		return r.stream(dir, op, dst, d, nil, rd)
	}
	data, err := io.ReadAll(io.LimitReader(rd, hold+1))
	if err != nil {
		return err
	}
	m := Message{Dir: dir, Op: op, Data: data}
	over := int64(len(data)) > hold
	var act Action
	if over {
		act = r.h.Oversized(m)
	} else {
		act = r.h.Message(m)
	}
	if act.Close {
		r.closeBoth(act.CloseCode, act.CloseReason)
		if over {
			_, err = io.Copy(io.Discard, b)
		}
		return err
	}
	for _, o := range act.Send {
		if err := dst.writeMessage(o.Op, o.Data); err != nil {
			return &writeErr{d, err}
		}
	}
	if !over {
		return nil
	}
	if !act.Stream {
		_, err = io.Copy(io.Discard, rd)
		return err
	}
	if act.Filter != nil {
		rd, data = act.Filter(data, rd), nil
	}
	err = r.stream(dir, op, dst, d, data, rd)
	if ref := (*Refusal)(nil); errors.As(err, &ref) {
		r.closeBoth(ref.Code, ref.Reason)
		_, err = io.Copy(io.Discard, b)
	}
	return err
}

// stream passes a message on as it comes, prefix first.
func (r *relay) stream(dir Direction, op Opcode, dst *Conn, d int, prefix []byte, rd io.Reader) error {
	w := dst.newMessage(op)
	if len(prefix) > 0 {
		if _, err := w.Write(prefix); err != nil {
			return &writeErr{d, err}
		}
	}
	buf := make([]byte, fragment)
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return &writeErr{d, werr}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return &writeErr{d, err}
	}
	r.h.Streamed(dir, op, w.n)
	return nil
}

// closeBoth sends both sides a close frame (the client with code and the
// reason, the server 1001) and waits for their answers.
func (r *relay) closeBoth(code int, reason string) {
	r.mu.Lock()
	r.closed = true
	toClient, toServer := !r.sent[client], !r.sent[server]
	r.sent[client], r.sent[server] = true, true
	r.mu.Unlock()
	if toClient {
		r.conns[client].writeControl(OpClose, ClosePayload(code, reason))
	}
	if toServer {
		r.conns[server].writeControl(OpClose, ClosePayload(CloseGoingAway, ""))
	}
	r.settle()
}

// fail ends the relay after side s failed: it broke the protocol (it is
// told so with 1002, the other side with 1001), went away, or (a
// writeErr) could not be written.
func (r *relay) fail(s int, err error) {
	var we *writeErr
	if errors.As(err, &we) {
		s = we.side
	} else {
		err = fmt.Errorf("ws: %s: %w", sideName(s), err)
	}
	if errors.Is(err, ErrProtocol) {
		r.mu.Lock()
		toS, toOther := !r.sent[s], !r.sent[1-s]
		r.sent[s], r.sent[1-s] = true, true
		r.mu.Unlock()
		if toS {
			r.conns[s].writeControl(OpClose, ClosePayload(CloseProtocolError, "protocol error"))
		}
		if toOther {
			r.conns[1-s].writeControl(OpClose, ClosePayload(CloseGoingAway, ""))
		}
	}
	r.stop(err)
}

// stop closes both sides, noting why (the first reason stays).
func (r *relay) stop(err error) {
	r.mu.Lock()
	if r.shut {
		r.mu.Unlock()
		return
	}
	r.shut = true
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.conns[client].close()
	r.conns[server].close()
}
