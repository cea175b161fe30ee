package rewrite

import (
	"errors"
	"io"
	"strconv"
	"sync"
)

// Defaults of StreamOptions.
const (
	DefaultStreamWindow     = 1 << 20
	DefaultStreamLag        = 1 << 20
	DefaultMaxPending       = 16 << 20
	DefaultMaxStreamDecoded = 1 << 30
)

// streamLead is context carried into the next window before the held
// tail, so that a rule looking back from a secret (a "NAME=" before its
// value) still sees what is there.
const streamLead = 1 << 10

// StreamCheck looks at one window of a body's decoded text: its first
// bytes were in the previous window already (context), the rest is new.
// final says the window ends the body. A non-nil error stops the stream:
// every Read from then returns it.
type StreamCheck func(window []byte, final bool) error

// StreamOptions tune a StreamScanner. Overlap is required; the zero value
// of the others means their default.
type StreamOptions struct {
	// Overlap is how many bytes of decoded text are held back at the end
	// of each window and checked again at the start of the next: at least
	// the longest secret check can find.
	Overlap int
	// Window is how many new bytes of decoded text each check is given
	// (DefaultStreamWindow).
	Window int
	// Lag bounds, for each coding, how many bytes a decoder reads ahead of
	// what its output shows (DefaultStreamLag; a zstd block is at most
	// 128 KiB, flate's and brotli's input buffers 32 KiB).
	Lag int
	// MaxPending bounds the raw bytes read and not yet given out
	// (DefaultMaxPending): a body that decodes to too little for any of
	// it to be given out fails past it.
	MaxPending int
	// MaxDecoded bounds the decoded text of an encoded body
	// (DefaultMaxStreamDecoded), against compression bombs.
	MaxDecoded int64
}

// StreamScanner is a request body checked as it streams. It reads the
// body as sent, decodes it (its Encoding), gives check each window of the
// decoded text, and gives out the body's bytes (as sent) only once what
// they decode to has been checked, less the window's last Overlap bytes,
// which are held until the next window shows what follows them. So what
// it has given out holds no secret that check has not seen whole, and
// when check fails, the body's end has not been given out.
//
// Memory is bounded: a window (Window plus Overlap and a little context)
// and the raw bytes held back (at most MaxPending). It is not safe for
// concurrent use.
type StreamScanner struct {
	o      StreamOptions
	check  StreamCheck
	enc    Encoding
	lag    int64
	ident  bool
	src    countingSource
	dec    io.Reader
	closer io.Closer

	pend  []byte // raw bytes read and not given out: a window into buf
	buf   []byte // pend's buffer, from its start (len 0), reused
	out   int    // pend[:out] may be given out
	given int64  // raw bytes given out

	win     []byte // decoded: context, then new text
	ctx     int    // the context's length
	decoded int64
	cps     []checkpoint // raw read and text decoded, at each decoder read
	err     error
	final   bool // the body's last window passed: all of pend goes
}

// checkpoint says that once raw bytes of the body had been read, dec
// bytes of text had come out.
type checkpoint struct{ raw, dec int64 }

// countingSource reads prefix, then r, keeping what it reads in pend.
type countingSource struct {
	s      *StreamScanner
	prefix []byte
	r      io.Reader
	n      int64
}

func (c *countingSource) Read(p []byte) (int, error) {
	if len(c.s.pend) > c.s.o.MaxPending {
		// A decoder that reads on without giving out text (one read may
		// go through any number of empty gzip members) stops here.
		return 0, c.s.stalled()
	}
	var n int
	var err error
	if len(c.prefix) > 0 {
		n = copy(p, c.prefix)
		c.prefix = c.prefix[n:]
	} else {
		n, err = c.r.Read(p)
	}
	c.n += int64(n)
	c.s.keep(p[:n])
	return n, err
}

// NewStreamScanner returns the body made of prefix (bytes already read
// from it) and the rest of src, checked as it streams. With a
// Content-Encoding, reading the first coding's header may read src now.
func NewStreamScanner(prefix []byte, src io.Reader, enc Encoding, check StreamCheck, o StreamOptions) (*StreamScanner, error) {
	if o.Overlap <= 0 {
		return nil, errors.New("rewrite: stream scanner: no overlap")
	}
	if o.Window <= 0 {
		o.Window = DefaultStreamWindow
	}
	if o.Lag <= 0 {
		o.Lag = DefaultStreamLag
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.MaxDecoded <= 0 {
		o.MaxDecoded = DefaultMaxStreamDecoded
	}
	s := &StreamScanner{o: o, check: check, enc: enc, ident: enc.IsIdentity(), lag: int64(o.Lag) * int64(len(enc.codings))}
	s.src = countingSource{s: s, prefix: prefix, r: src}
	if s.ident {
		s.dec = &s.src
		return s, nil
	}
	d, err := enc.NewReader(&s.src)
	if err != nil {
		return nil, err
	}
	s.dec, s.closer = d, d
	return s, nil
}

// Read gives out the body's bytes as they pass; see StreamScanner.
func (s *StreamScanner) Read(p []byte) (int, error) {
	for s.out == 0 {
		switch {
		case s.final && len(s.pend) == 0:
			s.release()
			return 0, io.EOF
		case s.final:
			s.out = len(s.pend)
		case s.err != nil:
			s.release()
			return 0, s.err
		default:
			s.fill()
		}
	}
	n := copy(p, s.pend[:s.out])
	s.out -= n
	s.given += int64(n)
	s.pend = s.pend[n:]
	if len(s.pend) == 0 {
		s.pend = s.buf
	}
	return n, nil
}

// bufs holds the buffers of StreamScanners that ended: each large body or
// WebSocket message would otherwise allocate a window and a buffer of its
// own, over 2 MB.
var bufs sync.Pool // *[]byte

// getBuf returns an empty buffer of at least n bytes.
func getBuf(n int) []byte {
	if p, ok := bufs.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, n)
}

func putBuf(b []byte) {
	if cap(b) > 0 {
		b = b[:0]
		bufs.Put(&b)
	}
}

// release gives the buffers back once the body was given out whole or
// failed: nothing reads them after.
func (s *StreamScanner) release() {
	putBuf(s.win)
	putBuf(s.buf)
	s.win, s.buf, s.pend = nil, nil, nil
}

// keep adds b to pend, moving pend to the front of its buffer first when
// b fits there and not after it: a body streams through one buffer, not
// a new one for each window.
func (s *StreamScanner) keep(b []byte) {
	if s.buf == nil { // room for a window and the tail held before it: all an identity body needs
		s.buf = getBuf(s.o.Window + s.o.Overlap + streamLead)
		s.pend = s.buf
	}
	n := len(s.pend) + len(b)
	if n > cap(s.pend) && n <= cap(s.buf) {
		s.pend = s.buf[:copy(s.buf[:cap(s.buf)], s.pend)]
	}
	if n > cap(s.pend) {
		s.pend = append(s.pend, b...)
		s.buf = s.pend[:0]
		return
	}
	s.pend = append(s.pend, b...)
}

// Close releases the decoders. It does not close the source.
func (s *StreamScanner) Close() error {
	if s.closer != nil {
		s.closer.Close()
	}
	return nil
}

// Decoded is how much text the body has decoded to so far.
func (s *StreamScanner) Decoded() int64 { return s.decoded }

// fill decodes the next window, checks it and works out how much of the
// body may be given out.
func (s *StreamScanner) fill() {
	if s.win == nil {
		s.win = getBuf(s.o.Overlap + streamLead + s.o.Window)
	}
	final := false
	for len(s.win)-s.ctx < s.o.Window && len(s.pend) <= s.o.MaxPending {
		n, err := s.dec.Read(s.win[len(s.win) : s.ctx+s.o.Window])
		s.win = s.win[:len(s.win)+n]
		s.decoded += int64(n)
		if !s.ident && n > 0 {
			s.cps = append(s.cps, checkpoint{s.src.n, s.decoded})
		}
		if !s.ident && s.decoded > s.o.MaxDecoded {
			s.err = &EncodingError{Coding: s.enc.String(), Limit: int(s.o.MaxDecoded), Err: ErrTooLarge}
			return
		}
		if err == io.EOF {
			final = true
			break
		}
		if err != nil {
			s.err = err
			return
		}
	}
	if err := s.check(s.win, final); err != nil {
		s.err = err
		return
	}
	if final {
		s.final = true
		s.out = len(s.pend)
		putBuf(s.win)
		s.win, s.cps = nil, nil
		return
	}
	// What may go: raw bytes whose text lies wholly before the held tail.
	safe := s.decoded - int64(s.o.Overlap)
	upTo := s.given
	if s.ident {
		upTo = max(upTo, safe)
	} else {
		last := -1
		for i, c := range s.cps {
			if c.dec > safe {
				break
			}
			upTo = max(upTo, c.raw-s.lag)
			last = i
		}
		if last > 0 {
			s.cps = append(s.cps[:0], s.cps[last:]...)
		}
	}
	s.out = int(min(upTo-s.given, int64(len(s.pend))))
	if s.out == 0 && len(s.pend) > s.o.MaxPending {
		s.err = s.stalled()
		return
	}
	// The next window starts with the held tail and some context.
	keep := min(len(s.win), s.o.Overlap+streamLead)
	s.win = s.win[:copy(s.win, s.win[len(s.win)-keep:])]
	s.ctx = keep
}

// stalled is the error of a body that decodes to too little for any of
// it to be given out.
func (s *StreamScanner) stalled() error {
	return &EncodingError{Coding: s.enc.String(), Err: errors.New("more than " + strconv.Itoa(s.o.MaxPending) +
		" bytes of it decode to too little to be checked as they stream")}
}
