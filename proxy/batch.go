package proxy

import (
	"net"
	"sync"
)

// A large body crosses the proxy as TLS records of at most 16 KiB, and
// crypto/tls reads and writes each with a system call of its own: on
// loopback the calls cost about as much as the cipher. batchConn, beneath
// the upstream's TLS, reads what the socket has in one call, and tells the
// body's copy whether a whole record is already here (copyBody then reads
// it too before writing); the client's tunnelConn, beneath its TLS, sends
// the records of one write in one call (gather). Both hold a buffer only
// while bytes are in it: an idle connection costs nothing more.

const (
	// batchSize is how much one socket read may bring in.
	batchSize = 64 << 10
	// maxPlaintext is the most a TLS record carries.
	maxPlaintext = 16 << 10
	// maxRecord is the largest TLS record: 16 KiB of plaintext and the
	// most a record's header, padding and tag may add.
	maxRecord = 5 + maxPlaintext + 256
)

var batchBufs = sync.Pool{New: func() any { return new([batchSize]byte) }}

// batchConn reads a connection of TLS records in batches of up to
// batchSize bytes, and hands them on one record at most at a time, so that what
// is buffered here is what the TLS connection above has not yet taken:
// recordReady can tell whether its next record is here.
type batchConn struct {
	net.Conn
	buf  *[batchSize]byte // nil while empty
	r, w int
	hdr  [5]byte // the header of the record being handed on
	hn   int     // bytes of hdr handed on
	left int     // bytes of the record's body still to hand on
}

func (c *batchConn) Read(p []byte) (int, error) {
	if c.r == c.w {
		if c.buf == nil {
			c.buf = batchBufs.Get().(*[batchSize]byte)
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

// buffered reports whether bytes are buffered.
func (c *batchConn) buffered() bool { return c.r < c.w }

func (c *batchConn) release() {
	if c.buf != nil {
		batchBufs.Put(c.buf)
		c.buf, c.r, c.w = nil, 0, 0
	}
}

// recordReady reports whether the next record is all buffered: the TLS
// connection above reads it without waiting on the network.
func (c *batchConn) recordReady() bool {
	if c.buf == nil || c.left > 0 || c.hn > 0 || c.w-c.r < 5 {
		return false
	}
	n := int(c.buf[c.r+3])<<8 | int(c.buf[c.r+4])
	return c.w-c.r >= 5+n
}

// gatherBufs recycles tunnelConn's gathering buffers: room for a body
// copy's 64 KiB as records, and more.
var gatherBufs = sync.Pool{New: func() any { b := make([]byte, 0, batchSize+4*maxRecord); return &b }}

// gatherer sends a series of writes as one: between gather(true) and
// gather(false), writes are kept, and gather(false) sends them.
type gatherer interface{ gather(on bool) error }

func (c *tunnelConn) Write(b []byte) (int, error) {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	g := c.gathered
	if g == nil {
		return c.Conn.Write(b)
	}
	if len(*g)+len(b) > cap(*g) {
		// Never grow the buffer: send what it holds, and b alone if
		// it is as large.
		if err := c.send(); err != nil {
			return 0, err
		}
		if len(b) > cap(*g) {
			return c.Conn.Write(b)
		}
	}
	*g = append(*g, b...)
	return len(b), nil
}

// gather(true) starts keeping writes; gather(false) sends what was kept,
// in one write.
func (c *tunnelConn) gather(on bool) error {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	if on {
		if c.gathered == nil {
			c.gathered = gatherBufs.Get().(*[]byte)
		}
		return nil
	}
	g := c.gathered
	if g == nil {
		return nil
	}
	err := c.send()
	c.gathered = nil
	gatherBufs.Put(g)
	return err
}

// send writes what was gathered. gmu is held.
func (c *tunnelConn) send() error {
	g := c.gathered
	if len(*g) == 0 {
		return nil
	}
	_, err := c.Conn.Write(*g)
	*g = (*g)[:0]
	return err
}

// byteQueue holds bytes in pooled chunks of batchSize: it grows without
// copying what it holds, and gives each chunk back to the pool once read.
// An empty queue holds no chunk.
type byteQueue struct {
	chunks []*[batchSize]byte
	r, w   int // read offset in the first chunk, write offset in the last
	n      int // bytes held
}

func (q *byteQueue) len() int { return q.n }

func (q *byteQueue) write(p []byte) {
	for len(p) > 0 {
		if len(q.chunks) == 0 || q.w == batchSize {
			q.chunks = append(q.chunks, batchBufs.Get().(*[batchSize]byte))
			q.w = 0
		}
		k := copy(q.chunks[len(q.chunks)-1][q.w:], p)
		q.w += k
		q.n += k
		p = p[k:]
	}
}

func (q *byteQueue) read(p []byte) int {
	n := 0
	for n < len(p) && q.n > 0 {
		end := batchSize
		if len(q.chunks) == 1 {
			end = q.w
		}
		k := copy(p[n:], q.chunks[0][q.r:end])
		q.r += k
		q.n -= k
		n += k
		if q.r == end {
			batchBufs.Put(q.chunks[0])
			q.chunks[0] = nil
			q.chunks, q.r = q.chunks[1:], 0
		}
	}
	if q.n == 0 {
		q.reset()
	}
	return n
}

// reset drops what the queue holds.
func (q *byteQueue) reset() {
	for i, c := range q.chunks {
		batchBufs.Put(c)
		q.chunks[i] = nil
	}
	q.chunks, q.r, q.w, q.n = q.chunks[:0], 0, 0, 0
}
