package ws

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Opcode is a frame's opcode (RFC 6455 section 5.2).
type Opcode byte

// The opcodes RFC 6455 defines; the others are reserved and refused.
const (
	OpContinuation Opcode = 0x0
	OpText         Opcode = 0x1
	OpBinary       Opcode = 0x2
	OpClose        Opcode = 0x8
	OpPing         Opcode = 0x9
	OpPong         Opcode = 0xA
)

// IsControl reports whether op is a control opcode (close, ping, pong).
func (op Opcode) IsControl() bool { return op&0x8 != 0 }

func (op Opcode) String() string {
	switch op {
	case OpContinuation:
		return "continuation"
	case OpText:
		return "text"
	case OpBinary:
		return "binary"
	case OpClose:
		return "close"
	case OpPing:
		return "ping"
	case OpPong:
		return "pong"
	}
	return "opcode " + strconv.Itoa(int(op))
}

// The bits of a frame header's first two bytes.
const (
	bitFin  = 0x80
	bitRSV1 = 0x40 // "per-message compressed" under permessage-deflate
	bitsRSV = 0x70
	bitMask = 0x80
)

// MaxControlPayload is the longest payload of a control frame.
const MaxControlPayload = 125

// maxHeaderLen is the longest frame header: 2 bytes, an 8-byte length, a
// 4-byte mask key.
const maxHeaderLen = 14

// Header is a frame's header.
type Header struct {
	Fin    bool
	RSV    byte // the reserved bits, as they sit in the first byte (0x70)
	Op     Opcode
	Masked bool
	Key    [4]byte // the masking key, when Masked
	Length int64   // of the payload
}

// ErrProtocol is wrapped by every error that says the peer broke RFC 6455
// or RFC 7692: the connection is then closed with code 1002.
var ErrProtocol = errors.New("ws: protocol error")

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// ReadHeader reads a frame header from r. It refuses what no endpoint may
// send: a reserved opcode, a control frame that is fragmented or longer
// than MaxControlPayload, a 64-bit length with its most significant bit
// set. Reserved bits and masking depend on the connection and are the
// caller's to check. A length not in its shortest form is accepted, as
// common implementations accept it.
func ReadHeader(r io.Reader) (Header, error) {
	var b [maxHeaderLen]byte
	if _, err := io.ReadFull(r, b[:2]); err != nil {
		return Header{}, err
	}
	h := Header{
		Fin:    b[0]&bitFin != 0,
		RSV:    b[0] & bitsRSV,
		Op:     Opcode(b[0] & 0x0f),
		Masked: b[1]&bitMask != 0,
		Length: int64(b[1] & 0x7f),
	}
	switch h.Op {
	case OpContinuation, OpText, OpBinary:
	case OpClose, OpPing, OpPong:
		if !h.Fin {
			return h, protocolErr("fragmented %s frame", h.Op)
		}
		if h.Length > MaxControlPayload {
			return h, protocolErr("%s frame longer than %d bytes", h.Op, MaxControlPayload)
		}
	default:
		return h, protocolErr("reserved %s", h.Op)
	}
	switch h.Length {
	case 126:
		if _, err := io.ReadFull(r, b[2:4]); err != nil {
			return h, unexpected(err)
		}
		h.Length = int64(binary.BigEndian.Uint16(b[2:4]))
	case 127:
		if _, err := io.ReadFull(r, b[2:10]); err != nil {
			return h, unexpected(err)
		}
		n := binary.BigEndian.Uint64(b[2:10])
		if n>>63 != 0 {
			return h, protocolErr("frame length with its most significant bit set")
		}
		h.Length = int64(n)
	}
	if h.Masked {
		if _, err := io.ReadFull(r, h.Key[:]); err != nil {
			return h, unexpected(err)
		}
	}
	return h, nil
}

// unexpected turns the end of the stream inside a frame into
// io.ErrUnexpectedEOF: only a stream that ends between frames ends cleanly.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendHeader appends h in its shortest form.
func AppendHeader(b []byte, h Header) []byte {
	b0 := byte(h.Op)&0x0f | h.RSV&bitsRSV
	if h.Fin {
		b0 |= bitFin
	}
	var b1 byte
	if h.Masked {
		b1 = bitMask
	}
	switch {
	case h.Length <= 125:
		b = append(b, b0, b1|byte(h.Length))
	case h.Length <= 0xffff:
		b = append(b, b0, b1|126)
		b = binary.BigEndian.AppendUint16(b, uint16(h.Length))
	default:
		b = append(b, b0, b1|127)
		b = binary.BigEndian.AppendUint64(b, uint64(h.Length))
	}
	if h.Masked {
		b = append(b, h.Key[:]...)
	}
	return b
}

// Mask XORs b with key, b being the payload's bytes from offset pos on,
// and returns the offset after b. Masking twice unmasks.
func Mask(key [4]byte, pos int64, b []byte) int64 {
	k := int(pos & 3)
	if len(b) >= 16 {
		// Whole words at a time, the key rotated to where b starts.
		var rk [8]byte
		for i := range rk {
			rk[i] = key[(k+i)&3]
		}
		kw := binary.LittleEndian.Uint64(rk[:])
		n := len(b) &^ 7
		for i := 0; i < n; i += 8 {
			binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:])^kw)
		}
		for i := n; i < len(b); i++ {
			b[i] ^= key[(k+i)&3]
		}
		return pos + int64(len(b))
	}
	for i := range b {
		b[i] ^= key[(k+i)&3]
	}
	return pos + int64(len(b))
}

// Close codes (RFC 6455 section 7.4.1) the relay sends or checks.
const (
	CloseNormal         = 1000
	CloseGoingAway      = 1001
	CloseProtocolError  = 1002
	CloseNoStatus       = 1005 // never sent: a close frame without a code
	ClosePolicy         = 1008
	CloseTooBig         = 1009
	CloseInternalError  = 1011
	maxCloseReasonBytes = MaxControlPayload - 2
)

// validCloseCode reports whether a peer may send code in a close frame.
func validCloseCode(code int) bool {
	switch {
	case code >= 3000 && code <= 4999:
		return true
	case code < 1000 || code > 1014:
		return false
	}
	switch code {
	case 1004, 1005, 1006:
		return false
	}
	return true
}

// ParseClose reads a close frame's payload: empty (code CloseNoStatus) or a
// code a peer may send and a UTF-8 reason.
func ParseClose(payload []byte) (code int, reason string, err error) {
	switch len(payload) {
	case 0:
		return CloseNoStatus, "", nil
	case 1:
		return 0, "", protocolErr("close frame of 1 byte")
	}
	code = int(binary.BigEndian.Uint16(payload))
	if !validCloseCode(code) {
		return 0, "", protocolErr("close code %d", code)
	}
	if !utf8.Valid(payload[2:]) {
		return 0, "", protocolErr("close reason is not UTF-8")
	}
	return code, string(payload[2:]), nil
}

// ClosePayload is a close frame's payload: code (none for CloseNoStatus)
// and reason, cut at a rune boundary to fit a control frame, with "…" at
// the end when cut.
func ClosePayload(code int, reason string) []byte {
	if code == CloseNoStatus {
		return nil
	}
	reason = strings.ToValidUTF8(reason, "\uFFFD")
	if len(reason) > maxCloseReasonBytes {
		const ell = "…"
		n := maxCloseReasonBytes - len(ell)
		for n > 0 && !utf8.RuneStart(reason[n]) {
			n--
		}
		reason = reason[:n] + ell
	}
	b := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), uint16(code))
	return append(b, reason...)
}
