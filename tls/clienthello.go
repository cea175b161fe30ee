package tls

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/cryptobyte"
)

const (
	recordHeaderLen          = 5
	maxPlaintext             = 1 << 14 // the largest TLS record fragment
	recordTypeHandshake      = 0x16
	handshakeTypeClientHello = 1
	handshakeHeaderLen       = 4

	// SniffBufferSize bounds how much Sniff and ParseClientHello read: one
	// full-size TLS record with its header. A ClientHello that does not end
	// within this many bytes, in one record or several, is refused. A
	// bufio.Reader given to Sniff must be at least this large
	// (bufio.NewReaderSize(conn, SniffBufferSize)).
	SniffBufferSize = recordHeaderLen + maxPlaintext
)

var (
	// ErrNotClientHello is wrapped by every error about bytes that are not
	// a well-formed TLS ClientHello (or one larger than SniffBufferSize).
	ErrNotClientHello = errors.New("tls: not a TLS ClientHello")
	// ErrTruncated is wrapped when the bytes end before the ClientHello
	// does.
	ErrTruncated = errors.New("tls: truncated ClientHello")
)

// ClientHello is what Chaperone reads from a TLS ClientHello.
type ClientHello struct {
	// ServerName is the SNI host name as sent (letters, digits, '-', '_',
	// '.'; never a trailing dot); empty when the client sent none.
	ServerName string
	// ALPN lists the protocols offered, in the client's order of preference.
	ALPN []string
	// SupportedVersions lists the supported_versions extension without
	// GREASE values; empty when the client sent none (before TLS 1.3).
	SupportedVersions []uint16
	// LegacyVersion is the hello's legacy_version field (0x0303 for TLS 1.2
	// and 1.3).
	LegacyVersion uint16
}

// MaxVersion returns the highest version the client offers, as "1.3",
// "1.2", "1.1", "1.0" or "ssl3"; an unknown value prints as "0x0305".
func (ch *ClientHello) MaxVersion() string {
	v := ch.LegacyVersion
	if len(ch.SupportedVersions) > 0 {
		v = 0
		for _, s := range ch.SupportedVersions {
			v = max(v, s)
		}
	}
	switch v {
	case 0x0304:
		return "1.3"
	case 0x0303:
		return "1.2"
	case 0x0302:
		return "1.1"
	case 0x0301:
		return "1.0"
	case 0x0300:
		return "ssl3"
	}
	return fmt.Sprintf("0x%04x", v)
}

// LooksLikeTLS reports whether first, the first bytes a client sent, start
// a TLS handshake record (type 0x16, record version 3.0 to 3.4). It needs
// three bytes.
func LooksLikeTLS(first []byte) bool {
	return len(first) >= 3 && first[0] == recordTypeHandshake && first[1] == 3 && first[2] <= 4
}

// LooksLikeSSLv2Hello reports whether first, the first bytes a client
// sent, start an SSL 2.0-compatible ClientHello (RFC 5246 appendix E.2):
// a two-byte record header with the high bit set, message type 1 and
// version 2.0, 3.0 or a TLS version. Such a hello carries no extensions,
// so no server name, and no current server accepts it. It needs five
// bytes.
func LooksLikeSSLv2Hello(first []byte) bool {
	if len(first) < 5 || first[0]&0x80 == 0 || first[2] != 1 {
		return false
	}
	if n := int(first[0]&0x7f)<<8 | int(first[1]); n < 9 { // type, version and three lengths
		return false
	}
	return first[3] == 0 && first[4] == 2 || first[3] == 3 && first[4] <= 4
}

// ParseClientHello parses the ClientHello at the start of data, the raw
// bytes of one or more TLS handshake records. Bytes after the ClientHello
// are ignored. It does not retain data.
func ParseClientHello(data []byte) (*ClientHello, error) {
	msg, need, err := helloMessage(data)
	if err != nil {
		return nil, err
	}
	if need > 0 {
		return nil, fmt.Errorf("%w: have %d bytes, need at least %d", ErrTruncated, len(data), need)
	}
	return parseHello(msg)
}

// Sniff reads the ClientHello at the head of r with Peek only: every byte
// stays in r for whoever reads the connection next (a TLS server, a
// passthrough copy). r's buffer must hold SniffBufferSize bytes; Sniff
// refuses a smaller one rather than fail on large hellos only. Sniff checks
// every byte as it arrives and peeks no further than the records it needs,
// so it fails on garbage without waiting for more and never waits for bytes
// the client has no reason to send; the caller bounds the wait with a read
// deadline.
func Sniff(r *bufio.Reader) (*ClientHello, error) {
	if r.Size() < SniffBufferSize {
		return nil, fmt.Errorf("tls: sniff: reader buffer is %d bytes, want at least SniffBufferSize (%d)", r.Size(), SniffBufferSize)
	}
	n := 1
	for {
		b, rerr := r.Peek(n)
		msg, need, err := helloMessage(b)
		switch {
		case err != nil:
			return nil, err
		case need == 0:
			return parseHello(msg)
		case rerr == nil:
			// Ask for what is needed, but no more than one byte beyond
			// what has arrived: each new byte is checked before Sniff
			// waits for the next, so garbage fails at once.
			n = min(need, r.Buffered()+1)
		case errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("%w: connection ended after %d bytes", ErrTruncated, len(b))
		default:
			return nil, fmt.Errorf("tls: sniff: %w", rerr)
		}
	}
}

// helloMessage finds the ClientHello handshake message (header included)
// in the handshake records at the start of data. When data is a valid but
// incomplete prefix it returns need > 0, the length data must reach before
// anything more can be said. It fails as soon as a byte seen so far rules
// a ClientHello out, so a caller reading incrementally never waits on
// garbage. The message aliases data when one record holds it.
func helloMessage(data []byte) (msg []byte, need int, err error) {
	var joined []byte // the handshake bytes when the hello spans records
	for off := 0; ; {
		h := data[off:]
		if len(h) > 0 && h[0] != recordTypeHandshake {
			return nil, 0, fmt.Errorf("%w: record type %d at byte %d", ErrNotClientHello, h[0], off)
		}
		if len(h) > 2 && (h[1] != 3 || h[2] > 4) {
			return nil, 0, fmt.Errorf("%w: record version %#02x%02x", ErrNotClientHello, h[1], h[2])
		}
		if off+recordHeaderLen > SniffBufferSize {
			return nil, 0, fmt.Errorf("%w: ClientHello does not end within %d bytes", ErrNotClientHello, SniffBufferSize)
		}
		if len(h) < recordHeaderLen {
			return nil, off + recordHeaderLen, nil
		}
		n := int(h[3])<<8 | int(h[4])
		if n == 0 || n > maxPlaintext {
			return nil, 0, fmt.Errorf("%w: record length %d", ErrNotClientHello, n)
		}
		end := off + recordHeaderLen + n
		if end > SniffBufferSize {
			return nil, 0, fmt.Errorf("%w: ClientHello does not end within %d bytes", ErrNotClientHello, SniffBufferSize)
		}
		frag := h[recordHeaderLen:min(len(h), recordHeaderLen+n)]
		hs := frag
		if joined != nil {
			hs = append(joined, frag...)
		}
		if len(hs) > 0 && hs[0] != handshakeTypeClientHello {
			return nil, 0, fmt.Errorf("%w: handshake message type %d", ErrNotClientHello, hs[0])
		}
		if len(hs) >= handshakeHeaderLen {
			mlen := handshakeHeaderLen + (int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3]))
			if mlen > SniffBufferSize-recordHeaderLen {
				return nil, 0, fmt.Errorf("%w: ClientHello of %d bytes exceeds %d", ErrNotClientHello, mlen, SniffBufferSize-recordHeaderLen)
			}
			if len(hs) >= mlen {
				return hs[:mlen], 0, nil
			}
		}
		if end > len(data) {
			return nil, end, nil
		}
		if joined == nil {
			hs = append([]byte(nil), frag...) // own a copy: appending to frag would write into data
		}
		joined = hs
		off = end
	}
}

// parseHello parses a complete ClientHello handshake message.
func parseHello(msg []byte) (*ClientHello, error) {
	bad := func(what string) (*ClientHello, error) {
		return nil, fmt.Errorf("%w: malformed %s", ErrNotClientHello, what)
	}
	s := cryptobyte.String(msg[handshakeHeaderLen:])
	ch := &ClientHello{}
	var sessionID, suites, compression, exts cryptobyte.String
	if !s.ReadUint16(&ch.LegacyVersion) || !s.Skip(32) {
		return bad("version or random")
	}
	if !s.ReadUint8LengthPrefixed(&sessionID) || len(sessionID) > 32 {
		return bad("session id")
	}
	if !s.ReadUint16LengthPrefixed(&suites) || len(suites) < 2 || len(suites)%2 != 0 {
		return bad("cipher suites")
	}
	if !s.ReadUint8LengthPrefixed(&compression) || len(compression) < 1 {
		return bad("compression methods")
	}
	if s.Empty() {
		return ch, nil // no extensions: a pre-TLS-1.2 hello
	}
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return bad("extensions")
	}
	var seenBuf [32]uint16
	seen := seenBuf[:0]
	for !exts.Empty() {
		var typ uint16
		var body cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&body) {
			return bad("extensions")
		}
		for _, t := range seen {
			if t == typ {
				return nil, fmt.Errorf("%w: duplicate extension %d", ErrNotClientHello, typ)
			}
		}
		seen = append(seen, typ)
		switch typ {
		case 0: // server_name
			var list cryptobyte.String
			if !body.ReadUint16LengthPrefixed(&list) || !body.Empty() || list.Empty() {
				return bad("server_name")
			}
			for !list.Empty() {
				var nameType uint8
				var name cryptobyte.String
				if !list.ReadUint8(&nameType) || !list.ReadUint16LengthPrefixed(&name) {
					return bad("server_name")
				}
				if nameType != 0 {
					continue
				}
				if ch.ServerName != "" || !validServerName(name) {
					return bad("server_name")
				}
				ch.ServerName = string(name)
			}
		case 16: // application_layer_protocol_negotiation
			var list cryptobyte.String
			if !body.ReadUint16LengthPrefixed(&list) || !body.Empty() || list.Empty() {
				return bad("alpn")
			}
			for !list.Empty() {
				var proto cryptobyte.String
				if !list.ReadUint8LengthPrefixed(&proto) || proto.Empty() {
					return bad("alpn")
				}
				ch.ALPN = append(ch.ALPN, string(proto))
			}
		case 43: // supported_versions
			var list cryptobyte.String
			if !body.ReadUint8LengthPrefixed(&list) || !body.Empty() || len(list) < 2 || len(list)%2 != 0 {
				return bad("supported_versions")
			}
			for !list.Empty() {
				var v uint16
				list.ReadUint16(&v)
				if !IsGREASE(v) {
					ch.SupportedVersions = append(ch.SupportedVersions, v)
				}
			}
		}
	}
	return ch, nil
}

// validServerName accepts the host names a TLS server may be asked for:
// letters, digits, '-', '_' and '.', no trailing dot (as crypto/tls
// requires), at most 253 bytes. Anything else (NULs, spaces, IP literals
// with ':') is refused so that a policy never sees a name it cannot match.
func validServerName(name []byte) bool {
	if len(name) == 0 || len(name) > 253 || name[len(name)-1] == '.' {
		return false
	}
	for _, c := range name {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// IsGREASE reports whether v is one of RFC 8701's reserved values.
func IsGREASE(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }
