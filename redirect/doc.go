// Package redirect sends every TCP connection made inside a session's cgroup
// v2 to Chaperone's transparent proxy and its DNS queries to the session's
// resolver, refuses its QUIC, and tells the proxy and the resolver where
// each connection or query was going and which process made it.
//
// On Linux it owns eBPF programs (C in bpf/, bpf2go output committed next to
// this file, so building needs no clang) attached to the session's cgroup:
// cgroup/connect4 and connect6 rewrite the destination of every SOCK_STREAM
// connect() to the proxy's listener and keep the original in the socket's
// storage; sockops publishes that record, before the SYN leaves, under the
// client's local address; getpeername4/6 make the socket report its original
// peer. The proxy calls Lookup with the accepted connection's remote
// address.
//
// UDP: sendmsg4/6 (and connect4/6 on a UDP socket) send datagrams to port
// 53 to Config.DNSV4 or DNSV6 and keep the original destination in the
// socket's storage; a dual-stack socket's datagram to ::ffff:a.b.c.d goes
// through sendmsg4 and to DNSV4 as ::ffff:DNSV4. A cgroup_skb/egress
// program publishes that record under the datagram's source (address,
// port) as it leaves: the sendmsg hooks know the port (the kernel binds
// before they run) but not the source address of a socket bound to the
// wildcard, and connect4/6 run before a connected socket has a port. The
// resolver calls LookupUDP with the query's source address. recvmsg4/6 make
// the resolver's replies come from the address the application asked (glibc
// and dig drop replies from elsewhere); getpeername4/6 do the same for a
// connected UDP socket. UDP to port 443 (QUIC) fails with EPERM unless
// Config.AllowQUIC, so clients fall back to TCP through the proxy;
// QUICRefused counts the refusals. Other UDP passes unchanged for now.
//
// The cgroup v2 session leaves themselves are made by the Cgroup* and
// Session* types.
//
// Guarantees:
//   - Fail closed. A connect() that cannot be redirected (no proxy address
//     for its family, no room for its record) fails with EPERM; it never goes
//     out directly. So does a DNS query with no resolver for its family,
//     once a resolver is configured; with none at all, DNS is left alone.
//     The programs stay attached to the cgroup if Chaperone dies, so the
//     session's connections and queries then fail against the dead proxy
//     and resolver.
//   - A connection to the proxy's own address is left alone, and so is
//     everything outside the attached cgroup and its descendants.
//   - Lookup deletes the record it returns. Records the proxy never reads,
//     and the UDP ones (a socket sends many queries, so LookupUDP keeps
//     them), sit in a bounded LRU map (65536) and are evicted, never
//     leaked; per-socket records are freed with their socket.
//   - Redirector's methods are safe for concurrent use; Close detaches every
//     attachment still in place and is safe to call twice.
//   - Load errors wrap ErrNotPermitted without the privileges and
//     ErrNotSupported where the platform or kernel cannot do it; other
//     platforms always return ErrNotSupported.
//
// Limits: a UDP socket's record describes its latest redirected datagram,
// so an unconnected socket querying two servers at once may have a reply
// shown from, or a query attributed to, the other one. UDP-Lite and other
// datagram protocols are not touched. MPTCP sockets are redirected but
// their subflows publish no record, so the proxy refuses them.
//
// redirect imports cilium/ebpf and the standard library only; it must not
// import policy, proxy or any other Chaperone package but event.
package redirect

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -type config -type origin -type local_key redirect bpf/redirect.c -- -O2 -g -Wall -Werror -I./bpf
