package rewrite

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// socketReader returns what it holds in reads of random sizes, as a socket
// would.
type socketReader struct {
	b   []byte
	rng *rand.Rand
}

func (c *socketReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.b), 1+c.rng.IntN(40<<10))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// textBody is size bytes of lowercase words (compressible) or, with
// random, of base64-like noise (not), with no uppercase letters.
func textBody(size int, random bool, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, 0, size)
	words := []string{"func", "return", "nil", "err", "range", "for", "if", "else", "go", "chan"}
	for len(b) < size {
		if random {
			b = append(b, "abcdefghijklmnopqrstuvwxyz0123456789+/"[rng.IntN(38)])
		} else {
			b = append(b, words[rng.IntN(len(words))]...)
			b = append(b, ' ')
		}
	}
	return b[:size]
}

var errHit = errors.New("secret found")

// streamAll reads a StreamScanner of body to its end or first error, and
// returns what it gave out.
func streamAll(t *testing.T, ce string, body []byte, prefix int, check StreamCheck, o StreamOptions) ([]byte, error) {
	t.Helper()
	enc, err := ParseEncoding(ce)
	if err != nil {
		t.Fatal(err)
	}
	src := &socketReader{b: body[prefix:], rng: rand.New(rand.NewPCG(uint64(len(body)), 1))}
	s, err := NewStreamScanner(body[:prefix], src, enc, check, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out bytes.Buffer
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}

// partialDecode decodes as much of a cut body as its decoders give.
func partialDecode(ce string, b []byte) []byte {
	enc, _ := ParseEncoding(ce)
	r, err := enc.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	defer r.Close()
	var out bytes.Buffer
	io.Copy(&out, r)
	return out.Bytes()
}

// encodeAs encodes plain with the codings of a Content-Encoding header.
func encodeAs(t testing.TB, ce string, plain []byte) []byte {
	t.Helper()
	b := plain
	for _, k := range strings.Split(ce, ",") {
		switch k = strings.TrimSpace(k); k {
		case "":
		case "deflate-raw":
			b = stdEncode(t, "raw", b)
		case "deflate":
			b = stdEncode(t, "zlib", b)
		default:
			b = stdEncode(t, k, b)
		}
	}
	return b
}

// A body without a secret goes through whole and unchanged, whatever its
// encoding, however it arrives.
func TestStreamScannerPassesCleanBodies(t *testing.T) {
	plain := textBody(3<<20, false, 1)
	for _, ce := range []string{"", "gzip", "deflate", "deflate-raw", "br", "zstd", "gzip, br"} {
		t.Run(ce, func(t *testing.T) {
			body := encodeAs(t, ce, plain)
			header := strings.ReplaceAll(ce, "deflate-raw", "deflate")
			var seen int
			check := func(w []byte, final bool) error {
				seen += len(w)
				return nil
			}
			got, err := streamAll(t, header, body, min(len(body), 100<<10), check, StreamOptions{Overlap: 4 << 10, Window: 256 << 10})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, body) {
				t.Fatalf("gave out %d bytes, want the body's %d unchanged", len(got), len(body))
			}
			if seen < len(plain) {
				t.Errorf("the checks saw %d bytes of text, fewer than the body's %d", seen, len(plain))
			}
		})
	}
}

// The property the proxy relies on: when a secret is found, what was
// given out decodes to text that holds no byte of the secret's start,
// wherever it sits (the first window, astride two windows, the body's
// end), whatever the encoding; and the body's end was not given out.
func TestStreamScannerWithholdsTheSecret(t *testing.T) {
	const window, overlap = 256 << 10, 4 << 10
	secret := []byte("SECRET-" + strings.Repeat("QX7", 14))
	for _, random := range []bool{false, true} {
		for _, ce := range []string{"", "gzip", "deflate", "deflate-raw", "br", "zstd", "zstd, gzip"} {
			for _, at := range []int{10, window - 20, 2*window + overlap - 5, 1<<20 + 7, -60} {
				name := fmt.Sprintf("%s/random=%v/at=%d", ce, random, at)
				t.Run(name, func(t *testing.T) {
					plain := textBody(2<<20, random, 2)
					pos := at
					if pos < 0 {
						pos += len(plain)
					}
					copy(plain[pos:], secret)
					body := encodeAs(t, ce, plain)
					header := strings.ReplaceAll(ce, "deflate-raw", "deflate")
					check := func(w []byte, final bool) error {
						if bytes.Contains(w, secret) {
							return errHit
						}
						return nil
					}
					given, err := streamAll(t, header, body, min(len(body), 64<<10), check, StreamOptions{Overlap: overlap, Window: window})
					if !errors.Is(err, errHit) {
						t.Fatalf("err = %v, want the check's", err)
					}
					if len(given) >= len(body) {
						t.Fatalf("gave out all %d bytes of the body", len(given))
					}
					text := given
					if header != "" {
						text = partialDecode(header, given)
					}
					if i := bytes.Index(text, secret[:12]); i >= 0 {
						t.Fatalf("what was given out (%d bytes, %d of text) holds the secret's start at %d (secret at %d)", len(given), len(text), i, pos)
					}
				})
			}
		}
	}
}

// Bombs, corrupt streams, data after a stream's end and bodies that decode
// to nothing fail with an *EncodingError saying so.
func TestStreamScannerEncodingFailures(t *testing.T) {
	zeros := make([]byte, 8<<20)
	good := encodeAs(t, "gzip", textBody(2<<20, true, 3))
	corrupt := append([]byte(nil), good...)
	for i := len(corrupt) / 2; i < len(corrupt)/2+64; i++ {
		corrupt[i] ^= 0xa5
	}
	var empty bytes.Buffer
	gzip.NewWriter(&empty).Close()
	empties := bytes.Repeat(empty.Bytes(), 4<<20/empty.Len())
	tests := []struct {
		name, ce string
		body     []byte
		o        StreamOptions
		reason   string
	}{
		{"bomb", "zstd", compressFast(t, "zstd", zeros), StreamOptions{MaxDecoded: 4 << 20},
			"Content-Encoding zstd decodes to more than 4194304 bytes (the limit)"},
		{"stacked bomb", "gzip, br", compressFast(t, "br", compressFast(t, "gzip", zeros)), StreamOptions{MaxDecoded: 4 << 20},
			"Content-Encoding gzip, br decodes to more than 4194304 bytes (the limit)"},
		{"corrupt", "gzip", corrupt, StreamOptions{}, "Content-Encoding gzip could not be decoded: "},
		{"data after deflate", "deflate", append(encodeAs(t, "deflate", textBody(1<<20, false, 4)), "tail"...), StreamOptions{},
			"Content-Encoding deflate could not be decoded: data after the end of the deflate stream"},
		{"decodes to nothing", "gzip", empties, StreamOptions{MaxPending: 1 << 20},
			"Content-Encoding gzip could not be decoded: more than 1048576 bytes of it decode to too little"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Overlap = 4 << 10
			given, err := streamAll(t, tt.ce, tt.body, 0, func([]byte, bool) error { return nil }, tt.o)
			var ee *EncodingError
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v, want an *EncodingError", err)
			}
			if !strings.HasPrefix(ee.Reason(), tt.reason) {
				t.Errorf("reason %q, want it to start %q", ee.Reason(), tt.reason)
			}
			if len(given) >= len(tt.body) {
				t.Errorf("gave out the whole body (%d bytes)", len(given))
			}
		})
	}
}

// A decoder reads ahead of what it gives out (brotli by 32 KiB): the body
// it has read is given out only Lag behind, so that no byte of a secret
// that it has read and not yet decoded goes with it. Swept over positions
// around the windows' ends, on text brotli compresses well.
func TestStreamScannerDecoderLag(t *testing.T) {
	const window, overlap = 64 << 10, 1 << 10
	secret := []byte("SECRET-" + strings.Repeat("QX7", 14))
	plain := textBody(512<<10, false, 2)
	for at := window - 100; at < 3*window; at += 3061 {
		p := append([]byte(nil), plain...)
		copy(p[at:], secret)
		body := encodeAs(t, "br", p)
		check := func(w []byte, final bool) error {
			if bytes.Contains(w, secret) {
				return errHit
			}
			return nil
		}
		given, err := streamAll(t, "br", body, 0, check, StreamOptions{Overlap: overlap, Window: window})
		if !errors.Is(err, errHit) {
			t.Fatalf("secret at %d: err = %v, want the check's", at, err)
		}
		if bytes.Contains(partialDecode("br", given), secret[:12]) {
			t.Errorf("secret at %d: what was given out holds its start", at)
		}
	}
}

// FuzzStreamScanner holds the stream to the whole-body decoder: a body
// Decode takes is given out unchanged, and every occurrence of a marker in
// its text is in some window the check saw; a body it refuses fails the
// stream with an *EncodingError, unless Decode only found it too large.
// The seeds are bodies encoded by the standard library's writers (and
// brotli's and zstd's), which the fuzzer then mutates.
func FuzzStreamScanner(f *testing.F) {
	kinds := []string{"", "gzip", "deflate", "br", "zstd", "gzip, deflate"}
	for i, ce := range kinds {
		for _, plain := range []string{"hello MARK world", strings.Repeat("abcMARK", 100), ""} {
			f.Add(encodeAs(f, strings.ReplaceAll(ce, "deflate", "deflate-raw"), []byte(plain)), uint8(i), uint16(3))
			f.Add(encodeAs(f, ce, []byte(plain)), uint8(i), uint16(0))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, kind uint8, prefix uint16) {
		header := kinds[int(kind)%len(kinds)]
		want, _, werr := Decode(header, body, 1<<20)
		seen := false
		check := func(w []byte, final bool) error {
			seen = seen || bytes.Contains(w, []byte("MARK"))
			return nil
		}
		enc, _ := ParseEncoding(header)
		pre := min(int(prefix), len(body))
		s, err := NewStreamScanner(body[:pre], &socketReader{b: body[pre:], rng: rand.New(rand.NewPCG(uint64(prefix), 1))},
			enc, check, StreamOptions{Overlap: 16, Window: 64, Lag: 64, MaxPending: 1 << 20, MaxDecoded: 1 << 20})
		var got []byte
		if err == nil {
			got, err = io.ReadAll(s)
			s.Close()
		}
		switch {
		case werr == nil && err != nil:
			t.Fatalf("Decode took the body, the stream failed: %v", err)
		case werr == nil && !bytes.Equal(got, body):
			t.Fatalf("gave out %d bytes, want the body's %d", len(got), len(body))
		case werr == nil && bytes.Contains(want, []byte("MARK")) && !seen:
			t.Fatal("no window held the marker")
		case werr != nil && err == nil && !errors.Is(werr, ErrTooLarge):
			t.Fatalf("Decode failed (%v), the stream did not", werr)
		}
		if err != nil {
			var ee *EncodingError
			if !errors.As(err, &ee) {
				t.Fatalf("stream error %v (%T) is not an *EncodingError", err, err)
			}
		}
	})
}
