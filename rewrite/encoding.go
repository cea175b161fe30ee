package rewrite

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// MaxDecodedBytes bounds what DecodeBody inflates, against compression bombs.
const MaxDecodedBytes = 64 << 20

var (
	// ErrUnsupportedEncoding is returned for a Content-Encoding other than
	// identity, gzip, br or zstd, and for stacked encodings ("gzip, br").
	ErrUnsupportedEncoding = errors.New("unsupported content-encoding")
	// ErrTooLarge is returned when a body inflates past MaxDecodedBytes.
	ErrTooLarge = errors.New("decoded body too large")
)

func normEncoding(ce string) (string, error) {
	ce = strings.ToLower(strings.TrimSpace(ce))
	switch ce {
	case "", "identity":
		return "", nil
	case "gzip", "x-gzip":
		return "gzip", nil
	case "br", "zstd":
		return ce, nil
	}
	if strings.Contains(ce, ",") {
		return "", errorf("content-encoding %q: stacked encodings: %w", ce, ErrUnsupportedEncoding)
	}
	return "", errorf("content-encoding %q: %w", ce, ErrUnsupportedEncoding)
}

// DecodeBody undoes a Content-Encoding ("", identity, gzip, x-gzip, br, zstd;
// case-insensitive). It returns b itself for identity, ErrUnsupportedEncoding
// for anything else, and ErrTooLarge past MaxDecodedBytes.
func DecodeBody(contentEncoding string, b []byte) ([]byte, error) {
	return decodeBody(contentEncoding, b, MaxDecodedBytes)
}

func decodeBody(contentEncoding string, b []byte, limit int) ([]byte, error) {
	ce, err := normEncoding(contentEncoding)
	if err != nil {
		return nil, err
	}
	var r io.Reader
	switch ce {
	case "":
		return b, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, errorf("decode gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(b))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(uint64(limit)+1), zstd.WithDecoderMaxWindow(MaxDecodedBytes))
		if err != nil {
			return nil, errorf("decode zstd: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return nil, errorf("decode %s: %w (over %d bytes)", ce, ErrTooLarge, limit)
	}
	if err != nil {
		return nil, errorf("decode %s: %w", ce, err)
	}
	if len(out) > limit {
		return nil, errorf("decode %s: %w (over %d bytes)", ce, ErrTooLarge, limit)
	}
	return out, nil
}

// EncodeBody applies a Content-Encoding, the inverse of DecodeBody.
func EncodeBody(contentEncoding string, b []byte) ([]byte, error) {
	ce, err := normEncoding(contentEncoding)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	var w io.WriteCloser
	switch ce {
	case "":
		return b, nil
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "br":
		w = brotli.NewWriterLevel(&buf, brotli.DefaultCompression)
	case "zstd":
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, errorf("encode zstd: %w", err)
		}
		w = zw
	}
	if _, err := w.Write(b); err != nil {
		return nil, errorf("encode %s: %w", ce, err)
	}
	if err := w.Close(); err != nil {
		return nil, errorf("encode %s: %w", ce, err)
	}
	return buf.Bytes(), nil
}
