package rewrite

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// stdEncode compresses b with the standard library (gzip, zlib, bare
// deflate) or the dependencies the proxy decodes with (br, zstd), as a
// client would: the reference the decoders are held to.
func stdEncode(t testing.TB, kind string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch kind {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "zlib":
		w = zlib.NewWriter(&buf)
	case "raw":
		w, _ = flate.NewWriter(&buf, flate.BestSpeed)
	case "br":
		w = brotli.NewWriter(&buf)
	case "zstd":
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		t.Fatalf("unknown kind %q", kind)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The header's name of each kind stdEncode makes.
var headerName = map[string]string{"gzip": "gzip", "zlib": "deflate", "raw": "deflate", "br": "br", "zstd": "zstd"}

// Bodies as clients encode them, one coding or stacked, decode to what
// was sent, in memory and as a stream; deflate is taken zlib-wrapped or
// bare, and encoded again the way it came.
func TestDecodeClientBodies(t *testing.T) {
	plain := bytes.Repeat([]byte(`{"note":"token=ghp_example and more text"} `), 300)
	stacks := [][]string{
		{"gzip"}, {"zlib"}, {"raw"}, {"br"}, {"zstd"},
		{"gzip", "br"}, {"raw", "gzip"}, {"zlib", "zstd", "br"}, {"zstd", "raw", "gzip", "zlib"},
	}
	for _, stack := range stacks {
		t.Run(strings.Join(stack, "+"), func(t *testing.T) {
			body := plain
			var names []string
			for _, k := range stack {
				body = stdEncode(t, k, body)
				names = append(names, headerName[k])
			}
			ce := strings.Join(names, ", ")
			got, enc, err := Decode(ce, body, MaxDecodedBytes)
			if err != nil {
				t.Fatalf("Decode(%q): %v", ce, err)
			}
			if !bytes.Equal(got, plain) {
				t.Fatalf("Decode(%q) changed the body", ce)
			}
			if enc.String() != ce {
				t.Errorf("encoding %q, want %q", enc, ce)
			}
			// Encoded again, each layer is what the client's reader takes.
			again, err := enc.Encode(plain)
			if err != nil {
				t.Fatal(err)
			}
			b := again
			for i := len(stack) - 1; i >= 0; i-- {
				b = stdDecode(t, stack[i], b)
			}
			if !bytes.Equal(b, plain) {
				t.Errorf("re-encoded body does not decode with the client's own codings")
			}
			// As a stream.
			r, err := enc.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			streamed, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(streamed, plain) {
				t.Errorf("streamed: %d bytes, err %v; want %d bytes", len(streamed), err, len(plain))
			}
		})
	}
}

func stdDecode(t testing.TB, kind string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	switch kind {
	case "gzip":
		r, err = gzip.NewReader(bytes.NewReader(b))
	case "zlib":
		r, err = zlib.NewReader(bytes.NewReader(b))
	case "raw":
		r = flate.NewReader(bytes.NewReader(b))
	case "br":
		r = brotli.NewReader(bytes.NewReader(b))
	case "zstd":
		var zr *zstd.Decoder
		zr, err = zstd.NewReader(bytes.NewReader(b))
		if err == nil {
			defer zr.Close()
			r = zr
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	return out
}

// What cannot be decoded is an *EncodingError whose reason names the
// coding and says why, never with the body's bytes or a header value that
// is not a coding's name.
func TestDecodeErrors(t *testing.T) {
	secret := "ghp_" + strings.Repeat("Ab1", 12)
	gz := stdEncode(t, "gzip", []byte("hello "+secret))
	tests := []struct {
		name, ce string
		body     []byte
		want     error
		reason   string
	}{
		{"unknown", "compress", []byte("x"), ErrUnsupportedEncoding, "Content-Encoding compress is not supported"},
		{"value not a name", "x-" + secret + "!", []byte("x"), ErrUnsupportedEncoding, "Content-Encoding (an unknown coding) is not supported"},
		{"too many", "gzip, gzip, gzip, gzip, gzip", []byte("x"), ErrUnsupportedEncoding, "Content-Encoding with more than 4 codings stacked is not supported"},
		{"corrupt deflate", "deflate", []byte("\xff\xff\xff\xff" + secret), nil, "Content-Encoding deflate could not be decoded: flate: corrupt input before offset "},
		{"corrupt gzip", "gzip", []byte("not gzip " + secret), nil, "Content-Encoding gzip could not be decoded: gzip: invalid header"},
		{"truncated gzip", "gzip", gz[:len(gz)-6], nil, "Content-Encoding gzip could not be decoded: unexpected EOF"},
		{"gzip said, br sent", "gzip, br", gz, nil, "Content-Encoding br could not be decoded: "},
		{"deflate then more", "deflate", append(stdEncode(t, "zlib", []byte("hello")), secret...), nil, "Content-Encoding deflate could not be decoded: data after the end of the deflate stream"},
		{"bare deflate then more", "deflate", append(stdEncode(t, "raw", []byte("hello")), secret...), nil, "Content-Encoding deflate could not be decoded: data after the end of the deflate stream"},
		{"gzip then more", "gzip", append(stdEncode(t, "gzip", []byte("hello")), secret...), nil, "Content-Encoding gzip could not be decoded: gzip: invalid header"},
		{"br then more", "br", append(stdEncode(t, "br", []byte("hello")), secret...), nil, "Content-Encoding br could not be decoded: brotli: excessive input"},
		{"zstd then more", "zstd", append(stdEncode(t, "zstd", []byte("hello")), secret...), nil, "Content-Encoding zstd could not be decoded: "},
		{"not zstd", "zstd", []byte("not zstd " + secret), nil, "Content-Encoding zstd could not be decoded: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Decode(tt.ce, tt.body, MaxDecodedBytes)
			var ee *EncodingError
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v (%T), want an *EncodingError", err, err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if !strings.HasPrefix(ee.Reason(), tt.reason) {
				t.Errorf("reason %q, want it to start %q", ee.Reason(), tt.reason)
			}
			if !strings.HasPrefix(err.Error(), "rewrite: ") {
				t.Errorf("err = %q, want the package prefix", err)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "hello") {
				t.Errorf("the error holds the body or header: %q", err)
			}
		})
	}
}

// A stack of codings is bounded at every layer: a bomb inside another
// coding is found as such, and the reason says the limit was exceeded.
func TestDecodeBombs(t *testing.T) {
	const limit = 1 << 20
	zeros := make([]byte, limit+1)
	for _, stack := range [][]string{{"zlib"}, {"raw"}, {"gzip", "gzip"}, {"raw", "br"}} {
		t.Run(strings.Join(stack, "+"), func(t *testing.T) {
			body := zeros
			var names []string
			for _, k := range stack {
				body = stdEncode(t, k, body)
				names = append(names, headerName[k])
			}
			_, _, err := Decode(strings.Join(names, ","), body, limit)
			var ee *EncodingError
			if !errors.Is(err, ErrTooLarge) || !errors.As(err, &ee) {
				t.Fatalf("err = %v, want ErrTooLarge", err)
			}
			if want := "decodes to more than 1048576 bytes (the limit)"; !strings.Contains(ee.Reason(), want) {
				t.Errorf("reason %q, want %q", ee.Reason(), want)
			}
		})
	}
}

// A stream's decoding error names the coding that failed, also when it is
// an inner one.
func TestNewReaderErrors(t *testing.T) {
	good := stdEncode(t, "gzip", bytes.Repeat([]byte("abc"), 1000))
	corrupt := append([]byte(nil), good...)
	for i := 20; i < len(corrupt)-8; i++ {
		corrupt[i] ^= 0x5a
	}
	for _, tt := range []struct {
		name, ce, coding string
		body             []byte
	}{
		{"outer", "gzip", "gzip", corrupt},
		{"inner", "gzip, br", "gzip", stdEncode(t, "br", corrupt)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseEncoding(tt.ce)
			if err != nil {
				t.Fatal(err)
			}
			r, err := e.NewReader(bytes.NewReader(tt.body))
			if err == nil {
				_, err = io.ReadAll(r)
				r.Close()
			}
			var ee *EncodingError
			if !errors.As(err, &ee) || ee.Coding != tt.coding {
				t.Fatalf("err = %v, want an *EncodingError of %s", err, tt.coding)
			}
		})
	}
}

// FuzzDecodeDeflate holds the deflate, zlib and gzip decoders (whole and
// streamed) to the standard library's readers: what they decode, ours
// decodes the same; what they refuse, ours refuses. The seeds are round
// trips of the standard library's writers.
func FuzzDecodeDeflate(f *testing.F) {
	for _, s := range []string{"", "hello", strings.Repeat("token=abc ", 100)} {
		for kind := range 3 {
			f.Add(uint8(kind), stdEncode(f, []string{"raw", "zlib", "gzip"}[kind], []byte(s)))
		}
	}
	f.Add(uint8(0), []byte{0x78, 0x9c, 0x03, 0x00})
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		const limit = 64 << 10
		var ref io.Reader
		ce := "deflate"
		src := bytes.NewReader(body)
		switch kind % 3 {
		case 0:
			if zlibHeader(body) {
				return // ours takes it as zlib: compared below
			}
			ref = flate.NewReader(src)
		case 1:
			if !zlibHeader(body) {
				return
			}
			zr, err := zlib.NewReader(src)
			if err != nil {
				ref = errReader{noEOF(err)}
			} else {
				ref = zr
			}
		case 2:
			ce = "gzip"
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				ref = errReader{noEOF(err)}
			} else {
				ref = zr
			}
		}
		want, werr := io.ReadAll(io.LimitReader(ref, limit+1))
		if werr == nil && len(want) > limit {
			werr = ErrTooLarge
		}
		if werr == nil && ce == "deflate" && src.Len() > 0 {
			werr = errTrailing // the standard library's readers stop at the stream's end
		}
		got, _, err := Decode(ce, body, limit)
		if (err == nil) != (werr == nil) {
			t.Fatalf("Decode(%s) err = %v, the standard library's = %v", ce, err, werr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("Decode(%s) = %d bytes, the standard library's %d", ce, len(got), len(want))
		}
		// The stream decodes the same, or fails where the whole did.
		e, _ := ParseEncoding(ce)
		r, serr := e.NewReader(bytes.NewReader(body))
		var streamed []byte
		if serr == nil {
			streamed, serr = io.ReadAll(io.LimitReader(r, limit+1))
			r.Close()
		}
		if err == nil && (serr != nil || !bytes.Equal(streamed, got)) {
			t.Fatalf("streamed: %d bytes, err %v; whole: %d bytes", len(streamed), serr, len(got))
		}
		if serr != nil {
			var ee *EncodingError
			if !errors.As(serr, &ee) {
				t.Fatalf("stream error %v (%T) is not an *EncodingError", serr, serr)
			}
		}
	})
}

// FuzzDecodeRoundTrip: what the standard library's writers encode, in any
// stack, decodes to what was written.
func FuzzDecodeRoundTrip(f *testing.F) {
	f.Add([]byte("hello, world"), uint8(0), uint8(1))
	f.Add(bytes.Repeat([]byte{0}, 5000), uint8(2), uint8(5))
	f.Fuzz(func(t *testing.T, plain []byte, a, b uint8) {
		kinds := []string{"gzip", "zlib", "raw", "br", "zstd", ""}
		body := plain
		var names []string
		for _, k := range []string{kinds[int(a)%len(kinds)], kinds[int(b)%len(kinds)]} {
			if k == "" {
				continue
			}
			body = stdEncode(t, k, body)
			names = append(names, headerName[k])
		}
		got, enc, err := Decode(strings.Join(names, ", "), body, MaxDecodedBytes)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("round trip of %v: %d bytes, err %v; want %d bytes", names, len(got), err, len(plain))
		}
		if enc.String() != strings.Join(names, ", ") {
			t.Fatalf("encoding %q, want %q", enc, strings.Join(names, ", "))
		}
	})
}

// noEOF is err, unless it is io.EOF, which a reader's constructor returns
// for an empty body: that is no body of the coding.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
