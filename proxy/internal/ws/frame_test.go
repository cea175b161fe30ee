package ws

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestHeaderRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		size int // of the encoded header
	}{
		{"small text", Header{Fin: true, Op: OpText, Length: 5}, 2},
		{"125 bytes", Header{Fin: true, Op: OpBinary, Length: 125}, 2},
		{"126 bytes", Header{Op: OpText, Length: 126}, 4},
		{"64 KiB less one", Header{Op: OpContinuation, Length: 0xffff}, 4},
		{"64 KiB", Header{Fin: true, Op: OpContinuation, Length: 0x10000}, 10},
		{"masked compressed", Header{Fin: true, RSV: bitRSV1, Op: OpText, Masked: true, Key: [4]byte{1, 2, 3, 4}, Length: 300}, 8},
		{"close", Header{Fin: true, Op: OpClose, Length: 2}, 2},
		{"ping masked", Header{Fin: true, Op: OpPing, Masked: true, Key: [4]byte{9, 9, 9, 9}}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendHeader(nil, tt.h)
			if len(b) != tt.size {
				t.Errorf("encoded in %d bytes, want %d", len(b), tt.size)
			}
			got, err := ReadHeader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.h, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadHeaderRefuses(t *testing.T) {
	tests := []struct {
		name  string
		in    []byte
		proto bool // ErrProtocol, else a short read
	}{
		{"reserved data opcode", []byte{0x83, 0}, true},
		{"reserved control opcode", []byte{0x8b, 0}, true},
		{"fragmented ping", []byte{0x09, 0}, true},
		{"close of 126 bytes", []byte{0x88, 126, 0, 126}, true},
		{"length with its top bit", []byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, true},
		{"cut in its length", []byte{0x82, 127, 0, 0}, false},
		{"cut in its mask", []byte{0x82, 0x81, 1, 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadHeader(bytes.NewReader(tt.in))
			if tt.proto != errors.Is(err, ErrProtocol) || err == nil {
				t.Errorf("error %v, want a protocol error: %v", err, tt.proto)
			}
			if !tt.proto && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("error %v, want an unexpected EOF", err)
			}
		})
	}
	if _, err := ReadHeader(bytes.NewReader(nil)); err != io.EOF {
		t.Errorf("nothing to read: %v, want io.EOF", err)
	}
}

func TestMask(t *testing.T) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for _, size := range []int{0, 1, 7, 15, 16, 17, 64, 1000} {
		for _, start := range []int64{0, 1, 2, 3, 5} {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i * 7)
			}
			want := bytes.Clone(data)
			for i := range want {
				want[i] ^= key[(int(start)+i)%4]
			}
			// In two pieces, to check the offset carried between them.
			got := bytes.Clone(data)
			half := size / 3
			pos := Mask(key, start, got[:half])
			if end := Mask(key, pos, got[half:]); end != start+int64(size) {
				t.Errorf("size %d start %d: ended at %d", size, start, end)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("size %d start %d: masked wrong", size, start)
			}
		}
	}
}

func TestClose(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	p := ClosePayload(ClosePolicy, long)
	if len(p) > MaxControlPayload || !utf8.Valid(p[2:]) || !strings.HasSuffix(string(p), "…") {
		t.Errorf("a long reason came out as %d bytes %q", len(p), p)
	}
	code, reason, err := ParseClose(p)
	if err != nil || code != ClosePolicy || !strings.HasPrefix(long, strings.TrimSuffix(reason, "…")) {
		t.Errorf("ParseClose = %d %q %v", code, reason, err)
	}
	if ClosePayload(CloseNoStatus, "x") != nil {
		t.Error("a close without a code has a payload")
	}
	for _, bad := range [][]byte{{3}, {0x03, 0xed}, {0x03, 0xe8, 0xff}, {0x0b, 0xb7}} { // 1 byte, 1005, bad UTF-8, 2999
		if _, _, err := ParseClose(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("ParseClose(%x) = %v, want a protocol error", bad, err)
		}
	}
	if code, _, err := ParseClose(nil); code != CloseNoStatus || err != nil {
		t.Errorf("ParseClose(nil) = %d %v", code, err)
	}
}
