package ws

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
)

// Side is the part the relay plays on one side of a connection.
type Side uint8

const (
	// AsServer: the relay is the server, facing the client. The frames it
	// reads must be masked; those it writes are not.
	AsServer Side = iota
	// AsClient: the relay is the client, facing the server. The frames it
	// writes are masked; those it reads must not be.
	AsClient
)

// fragment is the size past which a message is sent in more than one
// frame: messages streamed, and compressed output as it comes.
const fragment = 32 << 10

// Conn is one side of a relayed connection: what is read from it (one
// goroutine) and written to it (whole frames, safe from any goroutine).
type Conn struct {
	r       *bufio.Reader
	w       io.Writer
	closer  io.Closer
	side    Side
	deflate *Deflate

	inf *inflater // the reader's
	ctl [MaxControlPayload]byte

	wmu       sync.Mutex
	wbuf      []byte
	werr      error
	closeSent bool // nothing but control frames may follow a close frame
	masks     *rand.ChaCha8
	def       *deflater // the writer of data messages'
}

// NewConn makes a side of a connection: r reads it (with whatever was
// buffered past the handshake), w writes it, c closes it; d is what
// permessage-deflate agreed on this side, nil for none.
func NewConn(r *bufio.Reader, w io.Writer, c io.Closer, side Side, d *Deflate) *Conn {
	conn := &Conn{r: r, w: w, closer: c, side: side, deflate: d}
	if d != nil {
		conn.inf = &inflater{noContext: d.ReadNoContext}
		if !d.WriteOff {
			conn.def = &deflater{noContext: d.WriteNoContext}
		}
	}
	return conn
}

// seedMasks makes the source of this side's masking keys.
func (c *Conn) seedMasks(rnd io.Reader) error {
	if c.side != AsClient {
		return nil
	}
	var seed [32]byte
	if _, err := io.ReadFull(rnd, seed[:]); err != nil {
		return err
	}
	c.masks = rand.NewChaCha8(seed)
	return nil
}

// readHeader reads the next frame header and checks it against this side:
// masking as the side requires, no reserved bit but RSV1 on the first
// frame of a data message where compression was agreed.
func (c *Conn) readHeader() (Header, error) {
	h, err := ReadHeader(c.r)
	if err != nil {
		return h, err
	}
	if h.Masked != (c.side == AsServer) {
		if h.Masked {
			return h, protocolErr("a server's frame is masked")
		}
		return h, protocolErr("a client's frame is not masked")
	}
	rsv := h.RSV
	if c.deflate != nil && (h.Op == OpText || h.Op == OpBinary) {
		rsv &^= bitRSV1
	}
	if rsv != 0 {
		return h, protocolErr("reserved bits %#x set on a %s frame", rsv, h.Op)
	}
	return h, nil
}

// readControl reads a control frame's payload, valid until the next call.
func (c *Conn) readControl(h Header) ([]byte, error) {
	p := c.ctl[:h.Length]
	if _, err := io.ReadFull(c.r, p); err != nil {
		return nil, unexpected(err)
	}
	if h.Masked {
		Mask(h.Key, 0, p)
	}
	return p, nil
}

// errControl is returned by a body's control function to stop reading: a
// close frame arrived inside a message.
var errControl = errors.New("ws: close frame inside a message")

// body reads the payload of one data message, unmasked, across its
// frames; control frames between them are given to control.
type body struct {
	c         *Conn
	remaining int64
	masked    bool
	key       [4]byte
	pos       int64
	fin       bool
	control   func(op Opcode, payload []byte) error
}

func (c *Conn) newBody(h Header, control func(Opcode, []byte) error) *body {
	b := &body{c: c, control: control}
	b.set(h)
	return b
}

func (b *body) set(h Header) {
	b.remaining, b.masked, b.key, b.pos, b.fin = h.Length, h.Masked, h.Key, 0, h.Fin
}

func (b *body) Read(p []byte) (int, error) {
	for b.remaining == 0 {
		if b.fin {
			return 0, io.EOF
		}
		h, err := b.c.readHeader()
		if err != nil {
			return 0, unexpected(err)
		}
		if h.Op.IsControl() {
			payload, err := b.c.readControl(h)
			if err != nil {
				return 0, err
			}
			if err := b.control(h.Op, payload); err != nil {
				return 0, err
			}
			continue
		}
		if h.Op != OpContinuation {
			return 0, protocolErr("a %s frame inside a fragmented message", h.Op)
		}
		b.set(h)
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.c.r.Read(p)
	if n > 0 {
		if b.masked {
			b.pos = Mask(b.key, b.pos, p[:n])
		}
		b.remaining -= int64(n)
	}
	if err != nil {
		return n, unexpected(err)
	}
	return n, nil
}

// writeFrame writes one frame, masked on a client side. A write error
// sticks: every later write fails with it. Once a close frame is written,
// data frames (of a message the other direction was passing on as the
// close went out) are dropped, and so is a second close frame.
func (c *Conn) writeFrame(fin bool, rsv byte, op Opcode, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if c.closeSent && (!op.IsControl() || op == OpClose) {
		return nil
	}
	if op == OpClose {
		c.closeSent = true
	}
	h := Header{Fin: fin, RSV: rsv, Op: op, Length: int64(len(payload)), Masked: c.side == AsClient}
	if h.Masked {
		binary.LittleEndian.PutUint32(h.Key[:], uint32(c.masks.Uint64()))
	}
	b := AppendHeader(c.wbuf[:0], h)
	n := len(b)
	b = append(b, payload...)
	if h.Masked {
		Mask(h.Key, 0, b[n:])
	}
	_, c.werr = c.w.Write(b)
	if cap(b) <= 64<<10 { // keep a buffer of ordinary size only
		c.wbuf = b[:0]
	}
	return c.werr
}

// writeControl writes a control frame.
func (c *Conn) writeControl(op Opcode, payload []byte) error {
	return c.writeFrame(true, 0, op, payload)
}

// msgWriter writes one data message, compressed when this side agreed to
// it; writes of fragment bytes or more go out as frames at once.
type msgWriter struct {
	c        *Conn
	op       Opcode
	started  bool
	compress bool
	buf      []byte
	n        int64
}

// newMessage starts a data message, compressed if the side agreed to it;
// its frames go out as it is written. Only one goroutine writes data
// messages to a side.
func (c *Conn) newMessage(op Opcode) *msgWriter {
	w := &msgWriter{c: c, op: op, compress: c.def != nil}
	if w.compress {
		c.def.start(func(b []byte) error { return w.frame(false, b) })
	}
	return w
}

func (w *msgWriter) frame(fin bool, b []byte) error {
	op, rsv := OpContinuation, byte(0)
	if !w.started {
		op, w.started = w.op, true
		if w.compress {
			rsv = bitRSV1
		}
	}
	return w.c.writeFrame(fin, rsv, op, b)
}

func (w *msgWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if w.compress {
		return w.c.def.Write(p)
	}
	if len(w.buf) == 0 && len(p) >= fragment {
		return len(p), w.frame(false, p)
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= fragment {
		err := w.frame(false, w.buf)
		w.buf = w.buf[:0]
		return len(p), err
	}
	return len(p), nil
}

// Close sends the message's last frame.
func (w *msgWriter) Close() error {
	if !w.compress {
		return w.frame(true, w.buf)
	}
	last, err := w.c.def.end()
	if err != nil {
		return err
	}
	return w.frame(true, last)
}

// writeMessage writes a whole message: in one frame, unless compressed
// output comes to more than fragment bytes. An empty message goes
// uncompressed: there is nothing to gain.
func (c *Conn) writeMessage(op Opcode, msg []byte) error {
	if c.def == nil || len(msg) == 0 {
		return c.writeFrame(true, 0, op, msg)
	}
	w := c.newMessage(op)
	if _, err := w.Write(msg); err != nil {
		return err
	}
	return w.Close()
}

// close closes the underlying connection.
func (c *Conn) close() error { return c.closer.Close() }
