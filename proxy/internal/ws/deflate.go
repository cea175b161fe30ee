package ws

import (
	"bufio"
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Deflate is what permessage-deflate (RFC 7692) agreed on one side of a
// relayed connection, seen from the relay. Compressed messages are always
// read, whatever their window; context takeover is kept unless the peer
// said it will not use it.
type Deflate struct {
	// ReadNoContext: the peer starts its compressor afresh with each
	// message, so no window need be kept between the messages read.
	ReadNoContext bool
	// WriteNoContext: the relay starts its compressor afresh with each
	// message it sends (the peer asked for that).
	WriteNoContext bool
	// WriteOff: the relay sends its messages uncompressed, as a sender
	// may: the peer limited the relay's window below 32 KiB, which the
	// standard library's compressor cannot keep to.
	WriteOff bool
}

const extDeflate = "permessage-deflate"

// The parameters of permessage-deflate.
const (
	paramServerNoContext = "server_no_context_takeover"
	paramClientNoContext = "client_no_context_takeover"
	paramServerBits      = "server_max_window_bits"
	paramClientBits      = "client_max_window_bits"
)

// deflateParams reads the parameters of one permessage-deflate element:
// each at most once, the no_context ones without a value, the window bits
// 8 to 15 (client_max_window_bits may go without in an offer).
type deflateParams struct {
	serverNoContext, clientNoContext bool
	serverBits, clientBits           int // 0 when absent
	clientBitsBare                   bool
}

func readDeflateParams(e Extension, offer bool) (deflateParams, error) {
	var d deflateParams
	seen := map[string]bool{}
	for _, p := range e.Params {
		if seen[p.Name] {
			return d, fmt.Errorf("ws: permessage-deflate: %s given twice", p.Name)
		}
		seen[p.Name] = true
		switch p.Name {
		case paramServerNoContext, paramClientNoContext:
			if p.HasValue {
				return d, fmt.Errorf("ws: permessage-deflate: %s with a value", p.Name)
			}
			if p.Name == paramServerNoContext {
				d.serverNoContext = true
			} else {
				d.clientNoContext = true
			}
		case paramServerBits, paramClientBits:
			if !p.HasValue {
				if p.Name == paramClientBits && offer {
					d.clientBitsBare = true
					continue
				}
				return d, fmt.Errorf("ws: permessage-deflate: %s without a value", p.Name)
			}
			n, err := strconv.Atoi(p.Value)
			if err != nil || n < 8 || n > 15 || len(p.Value) > 2 {
				return d, fmt.Errorf("ws: permessage-deflate: %s=%q", p.Name, p.Value)
			}
			if p.Name == paramServerBits {
				d.serverBits = n
			} else {
				d.clientBits = n
			}
		default:
			return d, fmt.Errorf("ws: permessage-deflate: unknown parameter %s", p.Name)
		}
	}
	return d, nil
}

// AcceptDeflate answers a client's offers as a server: the first
// permessage-deflate offer whose parameters are valid is accepted, and
// the element to send back is returned; nil and "" when there is none
// (the connection goes uncompressed on that side).
func AcceptDeflate(offers []Extension) (*Deflate, string) {
	for _, e := range offers {
		if e.Name != extDeflate {
			continue
		}
		p, err := readDeflateParams(e, true)
		if err != nil {
			continue
		}
		d := &Deflate{ReadNoContext: p.clientNoContext, WriteNoContext: p.serverNoContext}
		resp := Extension{Name: extDeflate}
		if p.serverNoContext {
			resp.Params = append(resp.Params, Param{Name: paramServerNoContext})
		}
		if p.clientNoContext {
			resp.Params = append(resp.Params, Param{Name: paramClientNoContext})
		}
		if p.serverBits != 0 {
			// Accepted as asked; the relay then sends uncompressed below
			// 15 bits.
			resp.Params = append(resp.Params, Param{Name: paramServerBits, Value: strconv.Itoa(p.serverBits), HasValue: true})
			d.WriteOff = p.serverBits < 15
		}
		return d, resp.String()
	}
	return nil, ""
}

// DeflateOffer is the relay's offer as a client: permessage-deflate, the
// server free to limit the relay's window (it then sends uncompressed).
const DeflateOffer = extDeflate + "; " + paramClientBits

// AcceptDeflateResponse reads a server's answer to DeflateOffer: nil when
// it accepted no extension; an error when it accepted one that was not
// offered or with parameters the offer did not allow.
func AcceptDeflateResponse(exts []Extension) (*Deflate, error) {
	switch {
	case len(exts) == 0:
		return nil, nil
	case len(exts) > 1 || exts[0].Name != extDeflate:
		return nil, errors.New("ws: the server accepted an extension that was not offered")
	}
	p, err := readDeflateParams(exts[0], false)
	if err != nil {
		return nil, err
	}
	return &Deflate{
		ReadNoContext:  p.serverNoContext,
		WriteNoContext: p.clientNoContext,
		WriteOff:       p.clientBits != 0 && p.clientBits < 15,
	}, nil
}

// deflateTail ends the compressed data of every message (RFC 7692 section
// 7.2.1): removed by the sender, put back by the receiver.
var deflateTail = []byte{0x00, 0x00, 0xff, 0xff}

// deflateEnd is what a receiver appends: the tail, then an empty final
// stored block, so that the decompressor ends cleanly after the message.
var deflateEnd = []byte{0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff}

// windowSize is deflate's largest window, the history kept between
// messages for context takeover.
const windowSize = 32 << 10

// inflater decompresses the messages read on one side of a connection.
// It belongs to the goroutine that reads that side.
type inflater struct {
	fr        io.ReadCloser
	noContext bool
	history   []byte // the last windowSize bytes of the messages decompressed
	buf       *bufio.Reader
	src       endReader
}

// reader returns a reader of the decompressed message whose compressed
// payload body gives.
func (f *inflater) reader(body io.Reader) io.Reader {
	// body ends with the message, so buffering it reads nothing beyond.
	if f.buf == nil {
		f.buf = bufio.NewReaderSize(body, 4<<10)
	} else {
		f.buf.Reset(body)
	}
	f.src = endReader{r: f.buf}
	var dict []byte
	if !f.noContext {
		dict = f.history
	}
	if f.fr == nil {
		f.fr = flate.NewReaderDict(&f.src, dict)
	} else {
		f.fr.(flate.Resetter).Reset(&f.src, dict)
	}
	if f.noContext {
		return f.fr
	}
	return historyReader{f}
}

// historyReader keeps what it reads as the next message's window.
type historyReader struct{ f *inflater }

func (h historyReader) Read(p []byte) (int, error) {
	n, err := h.f.fr.Read(p)
	if n > 0 {
		f := h.f
		if n >= windowSize {
			f.history = append(f.history[:0], p[n-windowSize:n]...)
		} else {
			if extra := len(f.history) + n - windowSize; extra > 0 {
				f.history = f.history[:copy(f.history, f.history[extra:])]
			}
			f.history = append(f.history, p[:n]...)
		}
	}
	return n, err
}

// endReader gives r, then deflateEnd; it is a ByteReader, so that the
// decompressor wraps it in no buffer of its own.
type endReader struct {
	r   *bufio.Reader // nil once it has ended
	end int           // bytes of deflateEnd given
}

func (e *endReader) Read(p []byte) (int, error) {
	if e.r != nil {
		n, err := e.r.Read(p)
		if errors.Is(err, io.EOF) {
			e.r, err = nil, nil
		}
		return n, err
	}
	if e.end == len(deflateEnd) {
		return 0, io.EOF
	}
	n := copy(p, deflateEnd[e.end:])
	e.end += n
	return n, nil
}

func (e *endReader) ReadByte() (byte, error) {
	if e.r != nil {
		c, err := e.r.ReadByte()
		if err == nil || !errors.Is(err, io.EOF) {
			return c, err
		}
		e.r = nil
	}
	if e.end == len(deflateEnd) {
		return 0, io.EOF
	}
	e.end++
	return deflateEnd[e.end-1], nil
}

// deflateLevel is the relay's compression level: the fastest that keeps
// its window across flushes (level 1 encodes a block under 128 bytes,
// such as a streamed delta, without any, and so gains little).
const deflateLevel = 2

// deflater compresses the messages sent on one side of a connection. It
// belongs to the goroutine that writes that side's data messages.
type deflater struct {
	fw        *flate.Writer
	noContext bool
	out       tailHolder
}

// start begins a message whose compressed bytes go to emit, the last four
// held back until end: the tail the sender removes.
func (d *deflater) start(emit func([]byte) error) {
	d.out.emit, d.out.err = emit, nil
	d.out.held = d.out.held[:0]
	if d.fw == nil {
		d.fw, _ = flate.NewWriter(&d.out, deflateLevel) // the level is valid: no error
	} else if d.noContext {
		d.fw.Reset(&d.out)
	}
}

func (d *deflater) Write(p []byte) (int, error) {
	n, err := d.fw.Write(p)
	if err == nil {
		err = d.out.err
	}
	return n, err
}

// end finishes the message: the compressor flushed to a byte boundary, the
// tail removed; it returns the last bytes, not yet emitted.
func (d *deflater) end() ([]byte, error) {
	if err := d.fw.Flush(); err != nil {
		return nil, err
	}
	if d.out.err != nil {
		return nil, d.out.err
	}
	if !bytes.HasSuffix(d.out.held, deflateTail) { // cannot happen: Flush ends with it
		return nil, errors.New("ws: compressor did not end with a sync marker")
	}
	return d.out.held[:len(d.out.held)-len(deflateTail)], nil
}

// tailHolder passes what is written to emit, less its last four bytes.
type tailHolder struct {
	held []byte
	emit func([]byte) error
	err  error
}

func (t *tailHolder) Write(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	t.held = append(t.held, p...)
	if n := len(t.held) - len(deflateTail); n >= 32<<10 {
		if t.err = t.emit(t.held[:n]); t.err != nil {
			return 0, t.err
		}
		t.held = t.held[:copy(t.held, t.held[n:])]
	}
	return len(p), nil
}
