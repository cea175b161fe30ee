package proxy

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// SOCKS messages (SOCKS4 and 4a: the 1992 protocol and its hostname
// extension; SOCKS5: RFC 1928, with RFC 1929's username and password),
// parsed from and appended to byte slices, without I/O: the proxy acts as
// a SOCKS server towards a client that asks a relay for a connection, and
// as a SOCKS client towards that relay once the target is allowed.

const (
	socksVersion4 = 0x04
	socksVersion5 = 0x05

	socksCmdConnect   = 0x01
	socksCmdBind      = 0x02
	socksCmdAssociate = 0x03 // UDP ASSOCIATE, SOCKS5 only

	socks5AuthNone     = 0x00
	socks5AuthPassword = 0x02
	socks5NoAcceptable = 0xff // no acceptable method

	socks5AtypIPv4   = 0x01
	socks5AtypDomain = 0x03
	socks5AtypIPv6   = 0x04

	// SOCKS5 replies.
	socks5Succeeded      = 0x00
	socks5GeneralFailure = 0x01
	socks5NotAllowed     = 0x02 // connection not allowed by ruleset
	socks5HostUnreach    = 0x04
	socks5CmdUnsupported = 0x07
	socks5AtypUnsupp     = 0x08

	// SOCKS4 replies.
	socks4Granted  = 0x5a
	socks4Rejected = 0x5b

	// maxSOCKS4Field bounds a SOCKS4 USERID or SOCKS4a hostname: the
	// protocol sets no limit, and a longer one is not a request.
	maxSOCKS4Field = 255
)

var (
	// errSOCKSShort says the bytes so far are the start of a message
	// that needs more.
	errSOCKSShort = errors.New("proxy: socks: message incomplete")
	// errSOCKSMalformed is a message that breaks the protocol.
	errSOCKSMalformed = errors.New("proxy: socks: malformed message")
)

// socksRequest is a client's SOCKS request.
type socksRequest struct {
	version byte // 4 (4a too) or 5
	cmd     byte
	// host is the destination as the client gave it: a domain name
	// (SOCKS4a, SOCKS5 ATYP 3) or an address's text.
	host string
	port uint16
	user string // SOCKS4's USERID
}

// parseSOCKS5Greeting parses a SOCKS5 client's greeting (version, number
// of methods, methods) at the start of b and returns its methods and
// length.
func parseSOCKS5Greeting(b []byte) (methods []byte, n int, err error) {
	if len(b) < 2 {
		return nil, 0, errSOCKSShort
	}
	if b[0] != socksVersion5 || b[1] == 0 {
		return nil, 0, errSOCKSMalformed
	}
	n = 2 + int(b[1])
	if len(b) < n {
		return nil, 0, errSOCKSShort
	}
	return b[2:n], n, nil
}

// parseSOCKS5Password parses an RFC 1929 username and password request.
func parseSOCKS5Password(b []byte) (user, pass string, n int, err error) {
	if len(b) < 2 {
		return "", "", 0, errSOCKSShort
	}
	if b[0] != 0x01 {
		return "", "", 0, errSOCKSMalformed
	}
	ulen := int(b[1])
	if len(b) < 2+ulen+1 {
		return "", "", 0, errSOCKSShort
	}
	plen := int(b[2+ulen])
	n = 3 + ulen + plen
	if len(b) < n {
		return "", "", 0, errSOCKSShort
	}
	return string(b[2 : 2+ulen]), string(b[3+ulen : n]), n, nil
}

// parseSOCKS5Request parses a SOCKS5 request: version, command, reserved
// byte, address type, address, port.
func parseSOCKS5Request(b []byte) (socksRequest, int, error) {
	if len(b) < 5 {
		return socksRequest{}, 0, errSOCKSShort
	}
	if b[0] != socksVersion5 {
		return socksRequest{}, 0, errSOCKSMalformed
	}
	r := socksRequest{version: socksVersion5, cmd: b[1]}
	var end int
	switch b[3] {
	case socks5AtypIPv4:
		end = 4 + 4
		if len(b) >= end {
			r.host = netip.AddrFrom4([4]byte(b[4:8])).String()
		}
	case socks5AtypIPv6:
		end = 4 + 16
		if len(b) >= end {
			r.host = netip.AddrFrom16([16]byte(b[4:20])).Unmap().String()
		}
	case socks5AtypDomain:
		if b[4] == 0 {
			return socksRequest{}, 0, errSOCKSMalformed
		}
		end = 5 + int(b[4])
		if len(b) >= end {
			r.host = string(b[5:end])
		}
	default:
		return socksRequest{}, 0, errSOCKSMalformed
	}
	if len(b) < end+2 {
		return socksRequest{}, 0, errSOCKSShort
	}
	r.port = binary.BigEndian.Uint16(b[end:])
	return r, end + 2, nil
}

// parseSOCKS4Request parses a SOCKS4 or SOCKS4a request: version, command,
// port, IPv4 address, USERID and NUL, then for SOCKS4a (an address
// 0.0.0.x, x not 0) the hostname and NUL.
func parseSOCKS4Request(b []byte) (socksRequest, int, error) {
	if len(b) < 9 {
		if len(b) > 0 && b[0] != socksVersion4 {
			return socksRequest{}, 0, errSOCKSMalformed
		}
		return socksRequest{}, 0, errSOCKSShort
	}
	if b[0] != socksVersion4 {
		return socksRequest{}, 0, errSOCKSMalformed
	}
	r := socksRequest{version: socksVersion4, cmd: b[1], port: binary.BigEndian.Uint16(b[2:4])}
	ip := [4]byte(b[4:8])
	user, n, err := cString(b[8:])
	if err != nil {
		return socksRequest{}, 0, err
	}
	r.user = user
	n += 8
	if ip[0] == 0 && ip[1] == 0 && ip[2] == 0 && ip[3] != 0 {
		host, m, err := cString(b[n:])
		if err != nil {
			return socksRequest{}, 0, err
		}
		if host == "" {
			return socksRequest{}, 0, errSOCKSMalformed
		}
		r.host = host
		return r, n + m, nil
	}
	r.host = netip.AddrFrom4(ip).String()
	return r, n, nil
}

// cString returns the NUL-terminated string at the start of b (at most
// maxSOCKS4Field bytes) and its length with the NUL.
func cString(b []byte) (string, int, error) {
	for i := 0; i < len(b); i++ {
		if b[i] == 0 {
			return string(b[:i]), i + 1, nil
		}
		if i == maxSOCKS4Field {
			return "", 0, errSOCKSMalformed
		}
	}
	return "", 0, errSOCKSShort
}

// parseSOCKS5Reply parses a SOCKS5 server's reply to a request and returns
// its reply code and length.
func parseSOCKS5Reply(b []byte) (rep byte, n int, err error) {
	if len(b) < 5 {
		return 0, 0, errSOCKSShort
	}
	if b[0] != socksVersion5 {
		return 0, 0, errSOCKSMalformed
	}
	switch b[3] {
	case socks5AtypIPv4:
		n = 4 + 4 + 2
	case socks5AtypIPv6:
		n = 4 + 16 + 2
	case socks5AtypDomain:
		n = 5 + int(b[4]) + 2
	default:
		return 0, 0, errSOCKSMalformed
	}
	if len(b) < n {
		return 0, 0, errSOCKSShort
	}
	return b[1], n, nil
}

// appendSOCKS5Greeting appends a greeting offering methods.
func appendSOCKS5Greeting(b []byte, methods ...byte) []byte {
	b = append(b, socksVersion5, byte(len(methods)))
	return append(b, methods...)
}

// appendSOCKS5Password appends an RFC 1929 request; user and pass are at
// most 255 bytes each (as the client's were).
func appendSOCKS5Password(b []byte, user, pass string) []byte {
	b = append(b, 0x01, byte(len(user)))
	b = append(b, user...)
	b = append(b, byte(len(pass)))
	return append(b, pass...)
}

// appendSOCKS5Request appends a request for cmd to d: by address for an
// IP, by name (ATYP 3) otherwise.
func appendSOCKS5Request(b []byte, cmd byte, d relayDest) []byte {
	b = append(b, socksVersion5, cmd, 0)
	switch {
	case d.addr.Is4():
		a := d.addr.As4()
		b = append(b, socks5AtypIPv4)
		b = append(b, a[:]...)
	case d.addr.IsValid():
		a := d.addr.As16()
		b = append(b, socks5AtypIPv6)
		b = append(b, a[:]...)
	default:
		b = append(b, socks5AtypDomain, byte(len(d.host)))
		b = append(b, d.host...)
	}
	return binary.BigEndian.AppendUint16(b, d.port)
}

// appendSOCKS4Request appends a SOCKS4 CONNECT to d, as SOCKS4a for a
// name. An IPv6 address cannot be asked of a SOCKS4 server: the caller
// checks.
func appendSOCKS4Request(b []byte, d relayDest, user string) []byte {
	b = append(b, socksVersion4, socksCmdConnect)
	b = binary.BigEndian.AppendUint16(b, d.port)
	if d.addr.Is4() {
		a := d.addr.As4()
		b = append(b, a[:]...)
		b = append(b, user...)
		return append(b, 0)
	}
	b = append(b, 0, 0, 0, 1)
	b = append(b, user...)
	b = append(b, 0)
	b = append(b, d.host...)
	return append(b, 0)
}

// socks5Reply is a SOCKS5 reply with code rep and an empty bound address.
func socks5Reply(rep byte) []byte {
	return []byte{socksVersion5, rep, 0, socks5AtypIPv4, 0, 0, 0, 0, 0, 0}
}

// socks4Reply is a SOCKS4 reply with code cd.
func socks4Reply(cd byte) []byte {
	return []byte{0, cd, 0, 0, 0, 0, 0, 0}
}
