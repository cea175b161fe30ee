package netx

import (
	"io"
	"net"
	"sync"
)

// A large body crosses the proxy as TLS records of at most 16 KiB, and
// crypto/tls reads and writes each with a system call of its own: on
// loopback the calls cost about as much as the cipher. BatchConn, beneath
// the upstream's TLS, reads what the socket has in one call, and tells the
// body's copy whether a whole record is already here (copyBody then reads
// it too before writing); Gathering, beneath the client's TLS, sends
// the records of one write in one call. Both hold a buffer only
// while bytes are in it: an idle connection costs nothing more.

const (
	// BatchSize is how much one socket read may bring in.
	BatchSize = 64 << 10
	// MaxPlaintext is the most a TLS record carries.
	MaxPlaintext = 16 << 10
	// MaxRecord is the largest TLS record: 16 KiB of plaintext and the
	// most a record's header, padding and tag may add.
	MaxRecord = 5 + MaxPlaintext + 256
)

// BatchBufs lends buffers of BatchSize.
var BatchBufs = sync.Pool{New: func() any { return new([BatchSize]byte) }}

// BatchConn reads a connection of TLS records in batches of up to
// BatchSize bytes, and hands them on one record at most at a time, so that what
// is buffered here is what the TLS connection above has not yet taken:
// RecordReady can tell whether its next record is here.
type BatchConn struct {
	net.Conn
	buf  *[BatchSize]byte // nil while empty
	r, w int
	hdr  [5]byte // the header of the record being handed on
	hn   int     // bytes of hdr handed on
	left int     // bytes of the record's body still to hand on
}

func (c *BatchConn) Read(p []byte) (int, error) {
	if c.r == c.w {
		if c.buf == nil {
			c.buf = BatchBufs.Get().(*[BatchSize]byte)
		}
		// A socket read returns bytes or an error; an error that came with
		// bytes comes again at the next read.
		n, err := c.Conn.Read(c.buf[:])
		if n == 0 {
			c.release()
			return 0, err
		}
		c.r, c.w = 0, n
	}
	b := c.buf[c.r:c.w]
	switch {
	case c.left > 0:
		b = b[:min(len(b), c.left)]
	case c.hn == 0 && len(b) >= len(c.hdr):
		// A whole header, with what is here of its record's body: the TLS
		// connection above reads a record in one call (and one
		// allocation) rather than two.
		b = b[:min(len(b), len(c.hdr)+(int(b[3])<<8|int(b[4])))]
	default:
		b = b[:min(len(b), len(c.hdr)-c.hn)]
	}
	n := copy(p, b)
	body := n
	if c.left == 0 {
		k := copy(c.hdr[c.hn:], p[:n])
		c.hn += k
		body -= k
		if c.hn == len(c.hdr) {
			c.hn, c.left = 0, int(c.hdr[3])<<8|int(c.hdr[4])
		}
	}
	c.left -= body
	c.r += n
	if c.r == c.w {
		c.release()
	}
	return n, nil
}

// Buffered reports whether bytes are buffered.
func (c *BatchConn) Buffered() bool { return c.r < c.w }

func (c *BatchConn) release() {
	if c.buf != nil {
		BatchBufs.Put(c.buf)
		c.buf, c.r, c.w = nil, 0, 0
	}
}

// RecordReady reports whether the next record is all buffered: the TLS
// connection above reads it without waiting on the network.
func (c *BatchConn) RecordReady() bool {
	if c.buf == nil || c.left > 0 || c.hn > 0 || c.w-c.r < 5 {
		return false
	}
	n := int(c.buf[c.r+3])<<8 | int(c.buf[c.r+4])
	return c.w-c.r >= 5+n
}

// gatherBufs recycles Gathering's buffers: room for a body
// copy's 64 KiB as records, and more.
var gatherBufs = sync.Pool{New: func() any { b := make([]byte, 0, BatchSize+4*MaxRecord); return &b }}

// Gatherer sends a series of writes as one: between Gather(true) and
// Gather(false), writes are kept, and Gather(false) sends them.
type Gatherer interface{ Gather(on bool) error }

// Gathering keeps the writes made between Gather(true) and Gather(false),
// and sends them in one write: the zero value sends each write at once.
// It is safe for concurrent use (an HTTP/2 connection's close_notify may
// be written while a handler gathers).
type Gathering struct {
	mu       sync.Mutex
	gathered *[]byte // nil when not gathering
}

// Write writes b to w, or keeps it while gathering.
func (g *Gathering) Write(w io.Writer, b []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	buf := g.gathered
	if buf == nil {
		return w.Write(b)
	}
	if len(*buf)+len(b) > cap(*buf) {
		// Never grow the buffer: send what it holds, and b alone if
		// it is as large.
		if err := g.send(w); err != nil {
			return 0, err
		}
		if len(b) > cap(*buf) {
			return w.Write(b)
		}
	}
	*buf = append(*buf, b...)
	return len(b), nil
}

// Gather(w, true) starts keeping writes; Gather(w, false) sends what was
// kept to w, in one write.
func (g *Gathering) Gather(w io.Writer, on bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on {
		if g.gathered == nil {
			g.gathered = gatherBufs.Get().(*[]byte)
		}
		return nil
	}
	buf := g.gathered
	if buf == nil {
		return nil
	}
	err := g.send(w)
	g.gathered = nil
	gatherBufs.Put(buf)
	return err
}

// send writes what was gathered. mu is held.
func (g *Gathering) send(w io.Writer) error {
	buf := g.gathered
	if len(*buf) == 0 {
		return nil
	}
	_, err := w.Write(*buf)
	*buf = (*buf)[:0]
	return err
}

// ByteQueue holds bytes in pooled chunks of BatchSize: it grows without
// copying what it holds, and gives each chunk back to the pool once read.
// An empty queue holds no chunk.
type ByteQueue struct {
	chunks []*[BatchSize]byte
	r, w   int // read offset in the first chunk, write offset in the last
	n      int // bytes held
}

// Len is how many bytes the queue holds.
func (q *ByteQueue) Len() int { return q.n }

// Held is how many bytes of buffers the queue holds.
func (q *ByteQueue) Held() int { return len(q.chunks) * BatchSize }

func (q *ByteQueue) Write(p []byte) {
	for len(p) > 0 {
		if len(q.chunks) == 0 || q.w == BatchSize {
			q.chunks = append(q.chunks, BatchBufs.Get().(*[BatchSize]byte))
			q.w = 0
		}
		k := copy(q.chunks[len(q.chunks)-1][q.w:], p)
		q.w += k
		q.n += k
		p = p[k:]
	}
}

func (q *ByteQueue) Read(p []byte) int {
	n := 0
	for n < len(p) && q.n > 0 {
		end := BatchSize
		if len(q.chunks) == 1 {
			end = q.w
		}
		k := copy(p[n:], q.chunks[0][q.r:end])
		q.r += k
		q.n -= k
		n += k
		if q.r == end {
			BatchBufs.Put(q.chunks[0])
			q.chunks[0] = nil
			q.chunks, q.r = q.chunks[1:], 0
		}
	}
	if q.n == 0 {
		q.Reset()
	}
	return n
}

// reset drops what the queue holds.
func (q *ByteQueue) Reset() {
	for i, c := range q.chunks {
		BatchBufs.Put(c)
		q.chunks[i] = nil
	}
	q.chunks, q.r, q.w, q.n = q.chunks[:0], 0, 0, 0
}
