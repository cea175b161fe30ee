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
	// QUICV4 and QUICV6 are the proxy's QUIC listeners. When either is
	// valid, UDP to port 443 is sent to the listener of its family (a
	// dual-stack socket's v4-mapped destinations to QUICV4) with its
	// origin recorded as for DNS (LookupUDP), and the listener's replies
	// come from the original destination; for a family without one it
	// fails with EPERM and is counted (QUICRefused), so the client falls
	// back to TCP. Not with AllowQUIC.
	QUICV4, QUICV6 netip.AddrPort
	// AllowQUIC lets UDP to port 443 through unchanged; by default (without
	// QUICV4 and QUICV6 too) it fails with EPERM and is counted (see
	// QUICRefused), so clients fall back to TCP, which the proxy sees.
	AllowQUIC bool
	// AllowUDP lets UDP to ports other than 53 and 443 through unchanged
	// and unseen; by default it fails with EPERM and is reported (see
	// Refusals). Datagrams to DNSV4, DNSV6, QUICV4 or QUICV6 themselves always
	// pass.
	AllowUDP bool

	// MarkedOnly is the machine-wide daemon's mode: the programs, attached
	// at the cgroup v2 root with AttachMachine, redirect and refuse the
	// calls of marked processes only and leave every other process alone.
	// Load then loads the marker too, which marks processes at exec (see
	// Candidates) and their children at fork. Without it (`chaperone
	// run`'s mode), everything in the cgroups the programs are attached to
	// is redirected and nothing is marked.
	MarkedOnly bool
	// Candidates are the command names (comm, 1 to 15 bytes, no NUL or
	// slash) that the marker marks MarkPending at exec, as does
	// CHAPERONE_AGENT= in an exec's environment. Only with MarkedOnly;
	// SetCandidates changes them.
	Candidates []string
	// PinDir is where AttachMachine pins the marks map and the marker's
	// links (on bpffs). When a marks map is pinned there already (a
	// previous daemon's), Load uses it, so the marks of processes that
	// outlived that daemon are kept. Only with MarkedOnly; empty: a new
	// map, and AttachMachine refuses a pinDir that holds another one.
	PinDir string
	// SkipCgroup, with MarkedOnly, is a cgroup v2 directory whose tasks
	// the programs leave alone even when marked: the parent of `chaperone
	// run`'s session cgroups, whose own hooks redirect them. Empty: none.
	SkipCgroup string
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
	// Mark is the connecting process's mark (MarkPending or the session
	// slot user space gave it) with Config.MarkedOnly; 0 otherwise. It is
	// taken at connect() or sendmsg(), so it is known even when the
	// process is gone by the time the proxy accepts.
	Mark uint32
}
