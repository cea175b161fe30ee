// Package redirect sends every TCP connection made inside a session's cgroup
// v2 to Chaperone's transparent proxy, its QUIC to the proxy's QUIC listener
// and its DNS queries to the session's resolver, refuses its other UDP and
// the sockets it cannot
// mediate, and tells the proxy and the resolver where each connection or
// query was going, and Chaperone what it refused, and which process did
// it.
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
// connected UDP socket. UDP to port 443 (QUIC) goes the same way to
// Config.QUICV4 or QUICV6, the proxy's QUIC listeners, which call
// LookupQUIC with a connection's source address and first Initial's
// destination connection ID as its first packet arrives, and
// whose replies come from the address the application asked; for a
// family without a listener, and without listeners at all unless
// Config.AllowQUIC, it fails with EPERM, so clients fall back to TCP
// through the proxy; QUICRefused counts the refusals. UDP to other ports
// fails with EPERM unless Config.AllowUDP, but for datagrams to the
// resolver's or the QUIC listener's own address (a dual-stack socket
// connected to a v4-mapped destination sends through sendmsg4 to the
// address connect6 rewrote).
//
// cgroup/sock_create lets the session create TCP and MPTCP stream sockets
// and UDP datagram sockets only; UDP-Lite, ICMP ping, SCTP and raw sockets
// fail with EPERM at socket() (MPTCP's first subflow is connected through
// connect4/6 like TCP). Each refusal (these, QUIC, UDP, and connections
// refused to fail closed) goes to a ring buffer with the task that made it;
// Refusals reads them.
//
// The cgroup v2 session leaves themselves are made by the Cgroup* and
// Session* types.
//
// Machine-wide mode (Config.MarkedOnly, for the daemon): the same programs
// are attached once at the cgroup v2 root (AttachMachine), all but
// cgroup_skb/egress, which would run for every packet of the machine (so
// LookupUDP finds no record there: the caller finds a query's socket by
// its owner), and redirect and
// refuse the calls of marked processes only; for any other process
// connect4/6, sendmsg4/6 and sock_create return at once after one lookup
// of its tgid in the marks map. The marker (bpf/marker.c, classic
// tracepoints) fills that map: at sched_process_exec, before the new
// program's first instruction, a process keeps the mark it had, or is
// marked MarkPending when its new comm is one of Config.Candidates or the
// execve's environment held CHAPERONE_AGENT= (seen by
// sys_enter_execve/execveat in the first 128 entries); at
// sched_process_fork, before the child first runs, the child inherits
// its parent process's mark; at sched_process_exit the entry goes, and a
// marked process's end is reported. MarkEvents reports execs and exits;
// user space classifies pending processes and gives them session slots
// (Mark) or lets them go (Unmark); Origin.Mark tells the proxy which
// session a connection belongs to.
//
// The root programs are attached with BPF_PROG_ATTACH and the marker's
// links and the marks map are pinned (bpffs, mounted at /sys/fs/bpf when
// it is not), so a daemon that dies fails closed: its marked processes
// and their new children stay marked, and their connections go to its
// dead listener and fail; unmarked processes are not affected. The next
// daemon, loaded with the same Config.PinDir, keeps the marks and takes
// over: each root program is replaced in place with BPF_F_REPLACE (no
// moment without one); each tracepoint link, which the kernel cannot
// update, is attached anew before the old one is detached (both run for
// a moment; marking twice is harmless). RemoveMachine detaches and
// unpins everything.
//
// Cost (BenchmarkMachineConnect, BenchmarkMachineExec; bpf/README.md has
// the figures): the programs' own time, from the kernel's BPF statistics,
// is some 1.4 µs per loopback connect() of an unmarked process (3 µs
// marked) and 12 µs per fork+exec+exit of /bin/true (the environment scan
// is 8 µs of it), on a VM where those take 95 µs and 5.5 ms: 1.4% and
// 0.2%. open() shows no difference.
//
// Guarantees:
//   - Fail closed. A connect() that cannot be redirected (no proxy address
//     for its family, no room for its record) fails with EPERM; it never goes
//     out directly. So does a DNS query with no resolver for its family,
//     once a resolver is configured; with none at all, DNS is UDP like any
//     other (refused unless Config.AllowUDP).
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
//     attachment that Attach made and is still in place (not AttachMachine's:
//     see above) and is safe to call twice.
//   - Load errors wrap ErrNotPermitted without the privileges and
//     ErrNotSupported where the platform or kernel cannot do it; other
//     platforms always return ErrNotSupported.
//
// Limits: a UDP socket's record describes its latest redirected datagram,
// so an unconnected socket querying two servers at once may have a reply
// shown from, or a query attributed to, the other one. For QUIC this is
// the common case: quic-go's http3.Transport sends every connection
// through one socket, so replies are reported from the server it sent to
// last (QUIC matches packets to connections by connection ID, not by
// source, so that is harmless). A connection's origin is not that latest
// record, though: the egress program also publishes the record of each
// QUIC Initial (long header, version 1 or 2) under (source address,
// destination connection ID), and the proxy calls LookupQUIC with the DCID
// of the connection's first Initial, so handshakes started at the same
// instant from one socket to two servers are each attributed to their own.
// LookupQUIC falls back to LookupUDP when no such record exists (an IPv6
// datagram with extension headers, an unknown QUIC version, an evicted
// record). The machine-wide mode
// publishes no UDP records (no egress program), so its callers keep QUIC
// refused or allowed. MPTCP sockets are
// redirected but their additional subflows publish no record, so the proxy
// refuses them. Only inet sockets are seen: sock_create does not run for
// other families (AF_PACKET needs CAP_NET_RAW), nor for sockets made
// outside the cgroup and passed in, whose connect() and sendmsg() still go
// through the hooks. A refusal report is dropped (and counted) when the
// ring buffer is full; the call is refused all the same.
//
// Limits of the machine-wide mode: the marks map holds 262144 entries
// (processes, and threads of marked processes); a child whose mark cannot
// be stored runs unmarked, so unmediated, and is counted (MarksFailed),
// which user space must report. CHAPERONE_AGENT= is seen only among the
// first 128 environment entries and only when the environment's pages
// are resident at execve (the tracepoint cannot fault them in; an
// environment built just before exec is). A process marked only after it
// started (Mark) has its children forked before that unmarked. A marked
// process inside a `chaperone run` session is redirected by both the
// session's programs and the root's, the root's last. A process started
// by a marked one is marked: the daemon must Unmark itself, or its own
// connections would come back to it.
//
// redirect imports cilium/ebpf and the standard library only; it must not
// import policy, proxy or any other Chaperone package but event.
package redirect

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -type config -type origin -type local_key -type quic_key -type refusal redirect bpf/redirect.c -- -O2 -g -Wall -Werror -I./bpf
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -type mark_event marker bpf/marker.c -- -O2 -g -Wall -Werror -I./bpf
