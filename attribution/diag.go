package attribution

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// The inet_diag wire format (linux/netlink.h, linux/sock_diag.h,
// linux/inet_diag.h), kept free of build tags so that it is tested and
// fuzzed on every system. Netlink headers and inet_diag's counters are in
// host byte order; ports and addresses in network byte order.
const (
	nlmsgHdrLen = 16
	nlmsgError  = 2
	nlmsgDone   = 3
	nlmFRequest = 0x1

	sockDiagByFamily = 20

	// inet_diag_sockid: sport, dport, src[16], dst[16], if, cookie[2].
	inetDiagSockIDLen = 48
	// inet_diag_req_v2: family, protocol, ext, pad, states, id.
	inetDiagReqV2Len = 8 + inetDiagSockIDLen
	// inet_diag_msg: family, state, timer, retrans, id, expires, rqueue,
	// wqueue, uid, inode.
	inetDiagMsgLen = 4 + inetDiagSockIDLen + 20

	// Linux numbering, which differs from syscall's on other systems.
	linuxAFInet  = 2
	linuxAFInet6 = 10
	linuxENOENT  = 2
	ipprotoTCP   = 6

	inetDiagNoCookie = ^uint32(0)
	allTCPStates     = ^uint32(0)
)

// diagSocket is what the kernel says of one socket.
type diagSocket struct {
	family        uint8
	state         uint8
	local, remote netip.AddrPort // as the kernel wrote them: v4-mapped in an AF_INET6 socket
	uid           uint32
	inode         uint32 // 0 for a socket without one (TIME_WAIT)
}

// inetDiagRequest builds a SOCK_DIAG_BY_FAMILY request for the one TCP
// socket of family (linuxAFInet or linuxAFInet6) whose local address is
// local and whose peer is remote. Without NLM_F_DUMP the kernel looks the
// 4-tuple up in its hash tables instead of walking every socket. An IPv4
// address in an AF_INET6 request is written v4-mapped.
func inetDiagRequest(seq uint32, family uint8, local, remote netip.AddrPort) []byte {
	b := make([]byte, nlmsgHdrLen+inetDiagReqV2Len)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], sockDiagByFamily)
	ne.PutUint16(b[6:], nlmFRequest)
	ne.PutUint32(b[8:], seq)
	// b[12:16], the sender's port id, is left 0: the kernel fills it in.

	r := b[nlmsgHdrLen:]
	r[0] = family
	r[1] = ipprotoTCP
	ne.PutUint32(r[4:], allTCPStates)
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	putDiagAddr(id[4:20], family, local.Addr())
	putDiagAddr(id[20:36], family, remote.Addr())
	ne.PutUint32(id[40:], inetDiagNoCookie)
	ne.PutUint32(id[44:], inetDiagNoCookie)
	return b
}

func putDiagAddr(dst []byte, family uint8, a netip.Addr) {
	if family == linuxAFInet {
		a4 := a.Unmap().As4()
		copy(dst, a4[:])
		return
	}
	a16 := a.As16()
	copy(dst, a16[:])
}

var errDiagMalformed = errors.New("attribution: sock_diag: malformed reply")

// parseInetDiag parses the kernel's reply to the inet_diag request with
// sequence number seq. Messages with another sequence number are skipped.
// A netlink error of ENOENT, or the end of a dump without a socket, gives
// an error wrapping ErrNotFound; any other netlink error wraps its
// syscall.Errno (Linux numbering).
func parseInetDiag(b []byte, seq uint32) (diagSocket, error) {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		n := ne.Uint32(b[0:])
		if n < nlmsgHdrLen || uint64(n) > uint64(len(b)) {
			return diagSocket{}, fmt.Errorf("%w: message length %d of %d bytes", errDiagMalformed, n, len(b))
		}
		typ := ne.Uint16(b[4:])
		msgSeq := ne.Uint32(b[8:])
		body := b[nlmsgHdrLen:n]
		// Messages are padded to 4 bytes; the last one may not be.
		if next := (uint64(n) + 3) &^ 3; next < uint64(len(b)) {
			b = b[next:]
		} else {
			b = nil
		}
		if msgSeq != seq {
			continue
		}
		switch typ {
		case nlmsgError:
			if len(body) < 4 {
				return diagSocket{}, fmt.Errorf("%w: short error message", errDiagMalformed)
			}
			errno := -int32(ne.Uint32(body))
			switch {
			case errno == 0: // an acknowledgement
				continue
			case errno == linuxENOENT:
				return diagSocket{}, fmt.Errorf("%w: sock_diag: no such socket", ErrNotFound)
			case errno < 0:
				return diagSocket{}, fmt.Errorf("%w: error %d", errDiagMalformed, errno)
			}
			return diagSocket{}, fmt.Errorf("attribution: sock_diag: %w", syscall.Errno(errno))
		case nlmsgDone:
			return diagSocket{}, fmt.Errorf("%w: sock_diag: no such socket", ErrNotFound)
		case sockDiagByFamily:
			return parseInetDiagMsg(body)
		}
	}
	return diagSocket{}, fmt.Errorf("%w: no answer to request %d", errDiagMalformed, seq)
}

// parseInetDiagMsg parses an inet_diag_msg; attributes after it are ignored.
func parseInetDiagMsg(m []byte) (diagSocket, error) {
	if len(m) < inetDiagMsgLen {
		return diagSocket{}, fmt.Errorf("%w: inet_diag_msg of %d bytes", errDiagMalformed, len(m))
	}
	s := diagSocket{family: m[0], state: m[1]}
	id := m[4 : 4+inetDiagSockIDLen]
	var local, remote netip.Addr
	switch s.family {
	case linuxAFInet:
		local = netip.AddrFrom4([4]byte(id[4:8]))
		remote = netip.AddrFrom4([4]byte(id[20:24]))
	case linuxAFInet6:
		local = netip.AddrFrom16([16]byte(id[4:20]))
		remote = netip.AddrFrom16([16]byte(id[20:36]))
	default:
		return diagSocket{}, fmt.Errorf("%w: address family %d", errDiagMalformed, s.family)
	}
	s.local = netip.AddrPortFrom(local, binary.BigEndian.Uint16(id[0:]))
	s.remote = netip.AddrPortFrom(remote, binary.BigEndian.Uint16(id[2:]))
	rest := m[4+inetDiagSockIDLen:]
	s.uid = binary.NativeEndian.Uint32(rest[12:])
	s.inode = binary.NativeEndian.Uint32(rest[16:])
	return s, nil
}

// diagFamilies returns the request families and address forms to try for
// the socket (local, remote), already normalized: an IPv4 pair is asked as
// AF_INET first, then as AF_INET6 v4-mapped (an AF_INET6 socket connected
// to an IPv4 address). It returns nothing for a pair that mixes families.
func diagFamilies(local, remote netip.AddrPort) []uint8 {
	switch {
	case local.Addr().Is4() && remote.Addr().Is4():
		return []uint8{linuxAFInet, linuxAFInet6}
	case local.Addr().Is6() && remote.Addr().Is6():
		return []uint8{linuxAFInet6}
	}
	return nil
}

// matchDiag returns the inode of s when it is the socket (local, remote),
// both normalized. The kernel's exact lookup falls back to a listening
// socket on the local port, so the reply is checked, not trusted.
func matchDiag(s diagSocket, local, remote netip.AddrPort) (uint64, error) {
	if normalize(s.local) != local || normalize(s.remote) != remote {
		return 0, fmt.Errorf("%w: sock_diag answered for %v -> %v", ErrNotFound, s.local, s.remote)
	}
	if s.inode == 0 {
		return 0, fmt.Errorf("%w: sock_diag: socket %v -> %v has no inode", ErrNotFound, local, remote)
	}
	return uint64(s.inode), nil
}
