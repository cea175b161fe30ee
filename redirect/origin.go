package redirect

import (
	"net/netip"
)

// Config says where redirected connections and DNS queries go.
type Config struct {
	// ProxyV4 is the proxy's IPv4 listener (normally 127.0.0.1:port).
	// Connections to IPv4 destinations, and to v4-mapped ones from
	// dual-stack IPv6 sockets, are sent here. When it is invalid they fail
	// with EPERM instead.
	ProxyV4 netip.AddrPort
	// ProxyV6 is the proxy's IPv6 listener (normally [::1]:port). When it
	// is invalid, connections to IPv6 destinations fail with EPERM, so the
	// application falls back to IPv4; only v4-mapped ones are redirected
	// (to ProxyV4).
	ProxyV6 netip.AddrPort
	// DNSV4 and DNSV6 are the session's resolver. When both are invalid,
	// UDP to port 53 is left alone. Otherwise it is sent to the resolver
	// of its family (a dual-stack socket's v4-mapped destinations to
	// DNSV4), and fails with EPERM for a family without one.
	DNSV4, DNSV6 netip.AddrPort
	// AllowQUIC lets UDP to port 443 through unchanged; by default it fails
	// with EPERM (and is counted, see QUICRefused), so clients fall back to
	// TCP, which the proxy sees.
	AllowQUIC bool
	// AllowUDP lets UDP to ports other than 53 and 443 through unchanged
	// and unseen; by default it fails with EPERM and is reported (see
	// Refusals). Datagrams to DNSV4 or DNSV6 themselves always pass.
	AllowUDP bool
}

// Origin is what a redirected connection or DNS query asked for, and who
// asked.
type Origin struct {
	// Dst is the destination the application passed to connect() or
	// sendmsg(): an IPv4
	// address from an AF_INET socket, an IPv6 address from an AF_INET6
	// socket. A dual-stack socket's v4-mapped destination keeps its mapped
	// form (Dst.Addr().Is4In6()); Unmap it to get the IPv4 host.
	Dst netip.AddrPort
	// PID is the connecting process (the kernel's tgid), TID its thread.
	PID, TID uint32
	// UID and GID are the connecting thread's real ids.
	UID, GID uint32
	// CgroupID is the id of the connecting task's cgroup v2 (the inode
	// number of its directory).
	CgroupID uint64
	// Cookie is the kernel's socket cookie, unique while the machine runs.
	Cookie uint64
	// Comm is the connecting thread's command name (at most 15 bytes).
	Comm string
}
