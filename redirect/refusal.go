package redirect

import (
	"fmt"
	"net/netip"
	"strconv"
)

// RefusalKind says why the programs refused a call.
type RefusalKind uint8

// The kinds of refusal; the values are the programs' REFUSAL_* constants.
const (
	// RefusalQUIC: UDP to port 443, without Config.AllowQUIC.
	RefusalQUIC RefusalKind = 1
	// RefusalUDP: UDP to a port other than 53 and 443, without
	// Config.AllowUDP.
	RefusalUDP RefusalKind = 2
	// RefusalSocket: a socket of a kind the programs cannot mediate
	// (UDP-Lite, ICMP ping, SCTP, raw), refused at socket(), or at
	// connect() or sendmsg() when it was made outside the cgroup.
	RefusalSocket RefusalKind = 3
	// RefusalFailClosed: a connection or DNS query that cannot be
	// redirected: no proxy or resolver for its address family, or no room
	// for its record.
	RefusalFailClosed RefusalKind = 4
)

var refusalKindNames = map[RefusalKind]string{
	RefusalQUIC:       "quic",
	RefusalUDP:        "udp",
	RefusalSocket:     "socket",
	RefusalFailClosed: "fail_closed",
}

func (k RefusalKind) String() string {
	if n, ok := refusalKindNames[k]; ok {
		return n
	}
	return "refusal(" + strconv.Itoa(int(k)) + ")"
}

// Call is the system call a refusal failed.
type Call uint8

// The calls; the values are the programs' CALL_* constants.
const (
	CallConnect Call = 1
	CallSendmsg Call = 2 // sendto, sendmsg, sendmmsg with an address
	CallSocket  Call = 3
)

func (c Call) String() string {
	switch c {
	case CallConnect:
		return "connect"
	case CallSendmsg:
		return "sendmsg"
	case CallSocket:
		return "socket"
	}
	return "call(" + strconv.Itoa(int(c)) + ")"
}

// Refusal is a connect(), datagram or socket() that the programs refused
// with EPERM, and who tried.
type Refusal struct {
	Kind RefusalKind
	Call Call
	// Dst is the destination asked for, as Origin.Dst is (a dual-stack
	// socket's v4-mapped destination keeps its mapped form); invalid for
	// CallSocket.
	Dst netip.AddrPort
	// Family, Type and Protocol are the socket's: AF_INET or AF_INET6,
	// SOCK_STREAM, SOCK_DGRAM, SOCK_RAW…, and IPPROTO_* (MPTCP is 262).
	Family, Type, Protocol int
	// PID is the process (the kernel's tgid), TID its thread.
	PID, TID uint32
	// UID and GID are the thread's real ids.
	UID, GID uint32
	// CgroupID is the id of the task's cgroup v2.
	CgroupID uint64
	// Comm is the thread's command name (at most 15 bytes).
	Comm string
}

// ProtocolName names the socket's protocol as a transport: "tcp", "udp",
// "udplite", "icmp", "icmpv6", "sctp", "mptcp", "raw" (IPPROTO_RAW), else
// "ipproto-N".
func (r Refusal) ProtocolName() string {
	switch r.Protocol {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	case 132:
		return "sctp"
	case 136:
		return "udplite"
	case 255:
		return "raw"
	case 262:
		return "mptcp"
	}
	return fmt.Sprintf("ipproto-%d", r.Protocol)
}

// SocketName says what kind of socket it is, for people: "UDP-Lite
// datagram socket", "ICMP ping socket", "raw ICMP socket", "SCTP stream
// socket"….
func (r Refusal) SocketName() string {
	const (
		sockStream    = 1
		sockDgram     = 2
		sockRaw       = 3
		sockSeqpacket = 5
	)
	proto := map[int]string{1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP", 136: "UDP-Lite", 255: "IP", 262: "MPTCP"}[r.Protocol]
	if proto == "" {
		proto = "protocol " + strconv.Itoa(r.Protocol)
	}
	switch {
	case r.Type == sockRaw:
		return "raw " + proto + " socket"
	case r.Type == sockDgram && (r.Protocol == 1 || r.Protocol == 58):
		return proto + " ping socket"
	case r.Type == sockDgram:
		return proto + " datagram socket"
	case r.Type == sockStream:
		return proto + " stream socket"
	case r.Type == sockSeqpacket:
		return proto + " seqpacket socket"
	}
	return proto + " socket of type " + strconv.Itoa(r.Type)
}
