// Package redirect sends every TCP connection made inside a session's cgroup
// v2 to Chaperone's transparent proxy, and tells the proxy where each one was
// going and which process made it.
//
// On Linux it owns eBPF programs (C in bpf/, bpf2go output committed next to
// this file, so building needs no clang) attached to the session's cgroup:
// cgroup/connect4 and connect6 rewrite the destination of every SOCK_STREAM
// connect() to the proxy's listener and keep the original in the socket's
// storage; sockops publishes that record, before the SYN leaves, under the
// client's local address; getpeername4/6 make the socket report its original
// peer. The proxy calls Lookup with the accepted connection's remote
// address. The cgroup v2 session leaves themselves are made by the
// Cgroup* and Session* types.
//
// Guarantees:
//   - Fail closed. A connect() that cannot be redirected (no proxy address
//     for its family, no room for its record) fails with EPERM; it never goes
//     out directly. The programs stay attached to the cgroup if Chaperone
//     dies, so the session's connections then fail against the dead proxy.
//   - A connection to the proxy's own address is left alone, and so is
//     everything outside the attached cgroup and its descendants.
//   - Lookup deletes the record it returns. Records the proxy never reads sit
//     in a bounded LRU map (65536) and are evicted, never leaked; per-socket
//     records are freed with their socket.
//   - Redirector's methods are safe for concurrent use; Close detaches every
//     attachment still in place and is safe to call twice.
//   - Load errors wrap ErrNotPermitted without the privileges and
//     ErrNotSupported where the platform or kernel cannot do it; other
//     platforms always return ErrNotSupported.
//
// Not yet: UDP (DNS, QUIC) through sendmsg4/6 and recvmsg4/6; the key and
// record formats carry the protocol and hook family for it. MPTCP sockets are
// redirected but their subflows publish no record, so the proxy refuses
// them.
//
// redirect imports cilium/ebpf and the standard library only; it must not
// import policy, proxy or any other Chaperone package but event.
package redirect

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -type config -type origin -type local_key redirect bpf/redirect.c -- -O2 -g -Wall -Werror -I./bpf
