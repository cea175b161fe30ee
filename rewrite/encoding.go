package rewrite

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// MaxDecodedBytes bounds what DecodeBody inflates, against compression bombs.
const MaxDecodedBytes = 64 << 20

// MaxCodings bounds how many codings one Content-Encoding may stack.
const MaxCodings = 4

var (
	// ErrUnsupportedEncoding is returned for a coding other than identity,
	// gzip, x-gzip, deflate, br or zstd, and for more than MaxCodings.
	ErrUnsupportedEncoding = errors.New("unsupported content-encoding")
	// ErrTooLarge is returned when a body inflates past the limit.
	ErrTooLarge = errors.New("decoded body too large")
)

// coding is one content coding.
type coding uint8

const (
	codingGzip       coding = iota + 1
	codingZlib              // "deflate" as RFC 9110 means it: zlib (RFC 1950)
	codingRawDeflate        // "deflate" as some clients send it: bare RFC 1951
	codingBrotli
	codingZstd
)

func (c coding) String() string {
	switch c {
	case codingGzip:
		return "gzip"
	case codingZlib, codingRawDeflate:
		return "deflate"
	case codingBrotli:
		return "br"
	case codingZstd:
		return "zstd"
	}
	return "coding(" + strconv.Itoa(int(c)) + ")"
}

// Encoding is a body's Content-Encoding: the codings applied to it, in the
// order they were applied ("gzip, br" is gzip, then brotli). The zero value
// is identity. "deflate" is zlib-wrapped until a decode finds it bare.
type Encoding struct {
	codings []coding
}

// EncodingError says why a body could not be decoded: which coding, and
// why, never with any of the body's bytes. Reason is meant for people.
type EncodingError struct {
	Coding string // the coding as the header names it, or a description of it
	Limit  int    // with ErrTooLarge: the limit passed
	Err    error  // ErrUnsupportedEncoding, ErrTooLarge, or the decoder's error
}

func (e *EncodingError) Error() string { return "rewrite: " + e.Reason() }

func (e *EncodingError) Unwrap() error { return e.Err }

// Reason says what went wrong: "Content-Encoding deflate could not be
// decoded: flate: corrupt input before offset 5", "Content-Encoding gzip
// decodes to more than 67108864 bytes (the limit)", "Content-Encoding
// compress is not supported".
func (e *EncodingError) Reason() string {
	switch {
	case errors.Is(e.Err, ErrTooLarge):
		return "Content-Encoding " + e.Coding + " decodes to more than " + strconv.Itoa(e.Limit) + " bytes (the limit)"
	case errors.Is(e.Err, ErrUnsupportedEncoding):
		return "Content-Encoding " + e.Coding + " is not supported"
	}
	return "Content-Encoding " + e.Coding + " could not be decoded: " + e.Err.Error()
}

// ParseEncoding reads a Content-Encoding header's value (its fields joined
// by commas): gzip, x-gzip, deflate, br, zstd, identity, in any case and
// spacing. Identity entries are skipped.
func ParseEncoding(ce string) (Encoding, error) {
	var e Encoding
	for tok := range strings.SplitSeq(ce, ",") {
		tok = strings.ToLower(strings.Trim(tok, " \t"))
		var c coding
		switch tok {
		case "", "identity":
			continue
		case "gzip", "x-gzip":
			c = codingGzip
		case "deflate":
			c = codingZlib
		case "br":
			c = codingBrotli
		case "zstd":
			c = codingZstd
		default:
			return Encoding{}, &EncodingError{Coding: codingName(tok), Err: ErrUnsupportedEncoding}
		}
		if len(e.codings) == MaxCodings {
			return Encoding{}, &EncodingError{Coding: "with more than " + strconv.Itoa(MaxCodings) + " codings stacked", Err: ErrUnsupportedEncoding}
		}
		e.codings = append(e.codings, c)
	}
	return e, nil
}

// codingName is tok for a reason, if it looks like a coding's name: a
// header's value is the client's, and could hold anything.
func codingName(tok string) string {
	if len(tok) > 24 {
		return "(an unknown coding)"
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "(an unknown coding)"
		}
	}
	return tok
}

// IsIdentity reports whether e changes nothing.
func (e Encoding) IsIdentity() bool { return len(e.codings) == 0 }

// String is e as a Content-Encoding value.
func (e Encoding) String() string {
	names := make([]string, len(e.codings))
	for i, c := range e.codings {
		names[i] = c.String()
	}
	return strings.Join(names, ", ")
}

// DecodeBody undoes a Content-Encoding (see ParseEncoding). It returns b
// itself for identity, ErrUnsupportedEncoding for a coding it does not
// know, and ErrTooLarge when a coding inflates past MaxDecodedBytes; every
// error is an *EncodingError.
func DecodeBody(contentEncoding string, b []byte) ([]byte, error) {
	out, _, err := Decode(contentEncoding, b, MaxDecodedBytes)
	return out, err
}

func decodeBody(contentEncoding string, b []byte, limit int) ([]byte, error) {
	out, _, err := Decode(contentEncoding, b, limit)
	return out, err
}

// Decode undoes a Content-Encoding on b, the last coding first, each
// coding's output bounded by limit. The Encoding it returns is the one
// found, for Encode: a "deflate" coding that turned out bare is re-encoded
// bare.
func Decode(contentEncoding string, b []byte, limit int) ([]byte, Encoding, error) {
	e, err := ParseEncoding(contentEncoding)
	if err != nil {
		return nil, Encoding{}, err
	}
	if e.IsIdentity() {
		return b, e, nil
	}
	found := Encoding{codings: make([]coding, len(e.codings))}
	copy(found.codings, e.codings)
	for i := len(e.codings) - 1; i >= 0; i-- {
		c := e.codings[i]
		if c == codingZlib && !zlibHeader(b) {
			c = codingRawDeflate
			found.codings[i] = c
		}
		if b, err = decodeOne(c, b, limit); err != nil {
			return nil, Encoding{}, err
		}
	}
	return b, found, nil
}

// zlibHeader reports whether b starts with a zlib header (RFC 1950 section
// 2.2: deflate, a window of at most 32 KiB, a valid check, no preset
// dictionary). A bare deflate stream cannot start with one unless its
// first block is stored with non-zero padding bits, which no encoder writes.
func zlibHeader(b []byte) bool {
	return len(b) >= 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint(b[0])<<8|uint(b[1]))%31 == 0 && b[1]&0x20 == 0
}

func decodeOne(c coding, b []byte, limit int) ([]byte, error) {
	r, err := newDecoder(c, bytes.NewReader(b), limit)
	if err != nil {
		return nil, &EncodingError{Coding: c.String(), Err: err}
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) || err == nil && len(out) > limit {
		return nil, &EncodingError{Coding: c.String(), Limit: limit, Err: ErrTooLarge}
	}
	if err != nil {
		return nil, &EncodingError{Coding: c.String(), Err: err}
	}
	return out, nil
}

// newDecoder returns a reader of src decoded by c. maxMemory bounds what
// a zstd decoder may hold (its window).
func newDecoder(c coding, src io.Reader, maxMemory int) (io.ReadCloser, error) {
	switch c {
	case codingGzip:
		return gzip.NewReader(src)
	case codingZlib, codingRawDeflate:
		// A deflate stream ends by itself: the readers stop there and
		// ignore what follows, which would then go unchecked.
		br, ok := src.(flate.Reader)
		if !ok {
			br = bufio.NewReader(src)
		}
		var d io.ReadCloser
		if c == codingZlib {
			zr, err := zlib.NewReader(br)
			if err != nil {
				return nil, err
			}
			d = zr
		} else {
			d = flate.NewReader(br)
		}
		return &deflateEnd{ReadCloser: d, src: br}, nil
	case codingBrotli:
		return io.NopCloser(brotli.NewReader(src)), nil
	case codingZstd:
		zr, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(uint64(maxMemory)+1), zstd.WithDecoderMaxWindow(MaxDecodedBytes))
		if err != nil {
			return nil, err
		}
		return zstdCloser{zr}, nil
	}
	return nil, ErrUnsupportedEncoding
}

// errTrailing is data after the end of a deflate stream.
var errTrailing = errors.New("data after the end of the deflate stream")

// deflateEnd fails a deflate stream followed by anything.
type deflateEnd struct {
	io.ReadCloser
	src io.ByteReader // what the deflate reader reads, byte by byte
}

func (d *deflateEnd) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if err == io.EOF {
		if _, berr := d.src.ReadByte(); berr != io.EOF {
			if berr == nil {
				berr = errTrailing
			}
			return n, berr
		}
	}
	return n, err
}

type zstdCloser struct{ *zstd.Decoder }

func (z zstdCloser) Close() error {
	z.Decoder.Close()
	return nil
}

// NewReader returns a reader of src decoded, as it streams: the last
// coding first, each a reader over the one before. A "deflate" coding is
// told zlib or bare by its first two bytes. Errors from Read are
// *EncodingError, naming the coding that failed; Close releases the
// decoders. The reader does not bound what it inflates: its caller counts.
func (e Encoding) NewReader(src io.Reader) (io.ReadCloser, error) {
	if e.IsIdentity() {
		return io.NopCloser(src), nil
	}
	chain := &decoderChain{}
	r := src
	for i := len(e.codings) - 1; i >= 0; i-- {
		c := e.codings[i]
		if c == codingZlib {
			br := bufio.NewReader(r)
			if head, err := br.Peek(2); err == nil && !zlibHeader(head) || errors.Is(err, io.EOF) && len(head) < 2 {
				c = codingRawDeflate
			}
			r = br
		}
		d, err := newDecoder(c, r, MaxDecodedBytes)
		if err != nil {
			chain.Close()
			var ee *EncodingError
			if errors.As(err, &ee) {
				return nil, err
			}
			return nil, &EncodingError{Coding: c.String(), Err: err}
		}
		chain.decoders = append(chain.decoders, d)
		r = &codingReader{r: d, c: c}
	}
	chain.r = r
	return chain, nil
}

// decoderChain is a stack of decoders; reading reads the last.
type decoderChain struct {
	r        io.Reader
	decoders []io.Closer
}

func (d *decoderChain) Read(p []byte) (int, error) { return d.r.Read(p) }

func (d *decoderChain) Close() error {
	for _, c := range d.decoders {
		c.Close()
	}
	return nil
}

// codingReader names the coding in its decoder's errors, unless an inner
// coding (its source) already failed.
type codingReader struct {
	r io.Reader
	c coding
}

func (cr *codingReader) Read(p []byte) (int, error) {
	n, err := cr.r.Read(p)
	if err != nil && err != io.EOF {
		var ee *EncodingError
		if !errors.As(err, &ee) {
			err = &EncodingError{Coding: cr.c.String(), Err: err}
		}
	}
	return n, err
}

// EncodeBody applies a Content-Encoding, the inverse of DecodeBody
// ("deflate" as zlib).
func EncodeBody(contentEncoding string, b []byte) ([]byte, error) {
	e, err := ParseEncoding(contentEncoding)
	if err != nil {
		return nil, err
	}
	return e.Encode(b)
}

// Encode applies e's codings to b, in order.
func (e Encoding) Encode(b []byte) ([]byte, error) {
	for _, c := range e.codings {
		var err error
		if b, err = encodeOne(c, b); err != nil {
			return nil, errorf("encode %s: %w", c, err)
		}
	}
	return b, nil
}

func encodeOne(c coding, b []byte) ([]byte, error) {
	var buf bytes.Buffer
	var w io.WriteCloser
	switch c {
	case codingGzip:
		w = gzip.NewWriter(&buf)
	case codingZlib:
		w = zlib.NewWriter(&buf)
	case codingRawDeflate:
		fw, err := flate.NewWriter(&buf, flate.DefaultCompression)
		if err != nil {
			return nil, err
		}
		w = fw
	case codingBrotli:
		w = brotli.NewWriterLevel(&buf, brotli.DefaultCompression)
	case codingZstd:
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		w = zw
	default:
		return nil, ErrUnsupportedEncoding
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
