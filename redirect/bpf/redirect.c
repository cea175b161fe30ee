// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Transparent redirection of a session's TCP connections to Chaperone's
 * proxy, and of its DNS to the session's resolver. Attached to the
 * session's cgroup v2 leaf:
 *
 *   cgroup/connect4, cgroup/connect6
 *       Every SOCK_STREAM connect() is rewritten to the proxy's address,
 *       except a connect() to the proxy itself. The original destination and
 *       the connecting task go into the socket's local storage (sk_origin),
 *       which the kernel frees with the socket. A UDP connect() follows the
 *       datagram rules below.
 *   sockops (BPF_SOCK_OPS_TCP_CONNECT_CB)
 *       Runs after the local port is chosen and before the SYN leaves, so
 *       the record is published under the client's local (address, port) in
 *       origin_by_local before the proxy can accept the connection. The
 *       proxy computes that key from the accepted connection's remote
 *       address and deletes the entry after reading it.
 *   cgroup/getpeername4, cgroup/getpeername6
 *       A redirected socket reports its original destination as its peer.
 *   cgroup/sendmsg4, cgroup/sendmsg6 (and connect4/6 for UDP)
 *       UDP to port 53 goes to the session's resolver, its origin into
 *       sk_origin; UDP to port 443 (QUIC) goes, likewise, to the proxy's
 *       QUIC listener when there is one, passes when allowed, and is
 *       otherwise refused and counted in quic_refused; other UDP is
 *       refused unless allowed, but for datagrams to the resolver's own
 *       address. A dual-stack socket's datagram to ::ffff:a.b.c.d comes
 *       through sendmsg4.
 *   cgroup/sock_create
 *       Only TCP (and MPTCP) stream sockets and UDP datagram sockets may be
 *       created: UDP-Lite, ICMP ping, SCTP and raw sockets fail with EPERM
 *       at socket(), as the hooks above would not see their traffic.
 *   cgroup_skb/egress
 *       Publishes a DNS or QUIC socket's record under the datagram's source
 *       (address, port): only the packet has the source address of a
 *       socket bound to the wildcard, and a connected socket's port is only
 *       chosen after connect4/6 ran. Records stay until the LRU evicts
 *       them: one socket sends many queries.
 *   cgroup/recvmsg4, cgroup/recvmsg6
 *       A reply from the resolver or the QUIC listener reports the
 *       original destination as its source, which resolvers and QUIC
 *       clients check.
 *
 * Fail closed: when the configuration is missing, when a family has no proxy
 * (or, with DNS or QUIC redirected, no resolver or QUIC listener) address, or when the record cannot
 * be stored, connect() and sendmsg() fail with EPERM instead of going out
 * directly.
 *
 * Every refusal is reported to user space through the refusals ring buffer,
 * with the task that made it; a full buffer drops the report, never blocks
 * the call, and counts the drop in refusals_dropped.
 *
 * Marked only (config.marked_only, the machine-wide daemon's mode, attached
 * at the cgroup v2 root): connect4/6, sendmsg4/6 and sock_create let a task
 * whose process (tgid) has no entry in marks (marks.h, filled by marker.c)
 * through untouched after that one lookup. The others change nothing for a
 * socket that was not redirected. A redirected socket's origin carries the
 * process's mark.
 */
#include "uapi.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "marks.h"

/* A context load the compiler can neither move nor merge. */
#define READ_CTX(x) (*(volatile typeof(x) *)&(x))

#define CONNECT_ALLOW 1
#define CONNECT_REJECT 0

#define SOCK_ADDR_ALLOW 1
#define SOCK_ADDR_REJECT 0

#define DNS_PORT 53
#define QUIC_PORT 443

/* origin.flags */
#define ORIGIN_F_V4MAPPED 0x1 /* connect6 to ::ffff:a.b.c.d */

/* The proxy's addresses, written by the loader into config_map[0]. */
struct config {
	__u32 proxy4_ip;    /* network byte order */
	__u32 proxy6_ip[4]; /* network byte order */
	__u16 proxy4_port;  /* host byte order */
	__u16 proxy6_port;  /* host byte order */
	__u8 has4;
	__u8 has6;
	__u8 has_dns4;
	__u8 has_dns6;
	__u32 dns4_ip;    /* network byte order */
	__u32 dns6_ip[4]; /* network byte order */
	__u16 dns4_port;  /* host byte order */
	__u16 dns6_port;  /* host byte order */
	__u8 allow_quic;
	__u8 allow_udp;   /* UDP to ports other than 53 and 443 */
	__u8 marked_only; /* only marked processes are redirected or refused */
	__u8 skip_level;  /* the depth of skip_cgroup under the root */
	__u64 skip_cgroup; /* with marked_only: a cgroup whose tasks are left alone (0: none) */
	__u32 quic4_ip;    /* network byte order */
	__u32 quic6_ip[4]; /* network byte order */
	__u16 quic4_port;  /* host byte order */
	__u16 quic6_port;  /* host byte order */
	__u8 has_quic4;    /* UDP to port 443 goes to the proxy's QUIC listener */
	__u8 has_quic6;
	__u8 pad[2];
};

/* What the application asked for, and who asked. */
struct origin {
	__u32 dst_ip6[4]; /* network byte order; IPv4 as ::ffff:a.b.c.d */
	__u64 cookie;     /* socket cookie */
	__u64 cgroup_id;
	__u32 pid; /* process (kernel tgid) */
	__u32 tid; /* thread (kernel pid) */
	__u32 uid;
	__u32 gid;
	__u16 dst_port; /* host byte order */
	__u8 family;    /* the socket's: AF_INET or AF_INET6 */
	__u8 proto;     /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 flags;     /* ORIGIN_F_* */
	__u8 pad[3];
	char comm[16];
	__u32 mark; /* the process's mark (marks.h); 0 unless marked_only */
	__u32 pad2;
};

/* refusal.kind */
#define REFUSAL_QUIC 1        /* UDP to port 443 */
#define REFUSAL_UDP 2         /* UDP to another port */
#define REFUSAL_SOCKET 3      /* a socket of a kind the hooks cannot mediate */
#define REFUSAL_FAIL_CLOSED 4 /* no proxy or resolver for the family, or no room for the record */

/* refusal.call */
#define CALL_CONNECT 1
#define CALL_SENDMSG 2
#define CALL_SOCKET 3

/* A refused connect(), datagram or socket(), and who tried. */
struct refusal {
	__u32 dst_ip6[4]; /* network byte order; IPv4 as ::ffff:a.b.c.d; zero for socket() */
	__u64 cgroup_id;
	__u32 pid; /* process (kernel tgid) */
	__u32 tid; /* thread (kernel pid) */
	__u32 uid;
	__u32 gid;
	__u16 dst_port; /* host byte order */
	__u16 protocol; /* the socket's IPPROTO_* (MPTCP is 262) */
	__u8 kind;      /* REFUSAL_* */
	__u8 call;      /* CALL_* */
	__u8 family;    /* the socket's */
	__u8 type;      /* the socket's SOCK_* */
	char comm[16];
};

/* The client's end of a redirected connection, as the proxy sees it. */
struct local_key {
	__u32 ip6[4]; /* network byte order; IPv4 as ::ffff:a.b.c.d */
	__u16 port;   /* host byte order */
	__u8 proto;
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config_map SEC(".maps");

/* Per-socket record: lives exactly as long as the socket. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct origin);
} sk_origin SEC(".maps");

/*
 * Records waiting for the proxy (TCP) or the resolver (UDP). LRU and bounded: an entry the proxy never
 * reads (the client gave up before accept) is evicted, never leaked.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct local_key);
	__type(value, struct origin);
} origin_by_local SEC(".maps");

/* A QUIC connection's first Initial, by its socket's address and its destination connection ID. */
struct quic_key {
	struct local_key local;
	__u8 dcid_len;
	__u8 dcid[20]; /* zero past dcid_len */
	__u8 pad[3];
};

/*
 * The origin of each QUIC Initial redirected, by (source address, DCID): one socket may start
 * handshakes to several servers at once (HTTP/3 clients share one socket), and origin_by_local
 * only keeps its latest datagram's. LRU and bounded, like origin_by_local.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct quic_key);
	__type(value, struct origin);
} origin_by_dcid SEC(".maps");

/* UDP sends to port 443 refused, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} quic_refused SEC(".maps");

/* Refusals for user space; bounded, a full buffer drops. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} refusals SEC(".maps");

/* Puts struct refusal in the BTF, for bpf2go. */
const struct refusal *unused_refusal __attribute__((unused));

/* Refusal reports dropped because the ring buffer was full, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} refusals_dropped SEC(".maps");

/* Fills r's task fields and sends it; never fails the caller. */
static __always_inline void report(struct refusal *r)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 uid_gid = bpf_get_current_uid_gid();

	r->cgroup_id = bpf_get_current_cgroup_id();
	r->pid = pid_tgid >> 32;
	r->tid = (__u32)pid_tgid;
	r->uid = (__u32)uid_gid;
	r->gid = uid_gid >> 32;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	if (bpf_ringbuf_output(&refusals, r, sizeof(*r), 0)) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&refusals_dropped, &zero);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
}

/* Reports a refused connect() or datagram to ip6 (IPv4 as ::ffff:a.b.c.d). */
static __always_inline void report_addr(struct bpf_sock_addr *ctx, __u8 kind, __u8 call, const __u32 ip6[4], __u16 port)
{
	struct refusal r = {};
	r.dst_ip6[0] = ip6[0];
	r.dst_ip6[1] = ip6[1];
	r.dst_ip6[2] = ip6[2];
	r.dst_ip6[3] = ip6[3];
	r.dst_port = port;
	r.kind = kind;
	r.call = call;
	r.family = (__u8)ctx->family;
	r.type = (__u8)ctx->type;
	r.protocol = (__u16)ctx->protocol;
	report(&r);
}

static __always_inline void report_addr4(struct bpf_sock_addr *ctx, __u8 kind, __u8 call, __u32 ip, __u16 port)
{
	__u32 ip6[4] = {0, 0, bpf_htonl(0x0000ffff), ip};
	report_addr(ctx, kind, call, ip6, port);
}

static __always_inline const struct config *config_get(void)
{
	__u32 zero = 0;
	const struct config *cfg = bpf_map_lookup_elem(&config_map, &zero);

	if (!cfg || (!cfg->has4 && !cfg->has6))
		return 0;
	return cfg;
}

static __always_inline int is_v4mapped(const __u32 ip6[4])
{
	return ip6[0] == 0 && ip6[1] == 0 && ip6[2] == bpf_htonl(0x0000ffff);
}

/*
 * Whether the current task is left alone: with marked_only, a process
 * without a mark is, after this one lookup. Otherwise *mark is the
 * process's mark (0 when not marked_only). Without a configuration the
 * task is not left alone, so the caller fails closed.
 */
static __always_inline int unmarked(__u32 *mark)
{
	__u32 zero = 0;
	const struct config *cfg = bpf_map_lookup_elem(&config_map, &zero);

	*mark = 0;
	if (!cfg || !cfg->marked_only)
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const __u32 *m = bpf_map_lookup_elem(&marks, &tgid);
	if (!m || !*m)
		return 1;
	/*
	 * A marked process in a run session's cgroup is that session's: its
	 * own hooks, attached lower in the hierarchy, redirected it already.
	 */
	if (cfg->skip_cgroup && bpf_get_current_ancestor_cgroup_id(cfg->skip_level) == cfg->skip_cgroup)
		return 1;
	*mark = *m;
	return 0;
}

/* Fills everything but the destination. */
static __always_inline void origin_fill(struct origin *o, struct bpf_sock_addr *ctx, __u8 family, __u8 proto, __u32 mark)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 uid_gid = bpf_get_current_uid_gid();

	o->cookie = bpf_get_socket_cookie(ctx);
	o->cgroup_id = bpf_get_current_cgroup_id();
	o->pid = pid_tgid >> 32;
	o->tid = (__u32)pid_tgid;
	o->uid = (__u32)uid_gid;
	o->gid = uid_gid >> 32;
	o->family = family;
	o->proto = proto;
	o->flags = 0;
	o->mark = mark;
	bpf_get_current_comm(o->comm, sizeof(o->comm));
}

/*
 * What happens to a datagram, or a datagram socket's connect(): passed,
 * sent to the resolver or the QUIC listener, or refused (the REFUSAL_*
 * kind).
 */
#define UDP_PASS 0
#define UDP_QUIC 254
#define UDP_DNS 255

static __always_inline void count_quic_refused(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&quic_refused, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
}

/*
 * v4: the destination is IPv4 (or v4-mapped); to_resolver: it is the
 * session's resolver or the QUIC listener itself, which decides what it
 * receives.
 */
static __always_inline int udp_verdict(const struct config *cfg, __u16 port, int v4, int to_resolver)
{
	if (!cfg)
		return REFUSAL_FAIL_CLOSED;
	if (to_resolver)
		return UDP_PASS;
	if (port == QUIC_PORT) {
		if (cfg->allow_quic)
			return UDP_PASS;
		if (v4 ? cfg->has_quic4 : cfg->has_quic6)
			return UDP_QUIC;
		/* Not intercepted, or no listener for this family: the client falls back to TCP. */
		count_quic_refused();
		return REFUSAL_QUIC;
	}
	if (port == DNS_PORT && (cfg->has_dns4 || cfg->has_dns6)) {
		if (v4 ? cfg->has_dns4 : cfg->has_dns6)
			return UDP_DNS;
		return REFUSAL_FAIL_CLOSED; /* no resolver for this family */
	}
	if (cfg->allow_udp)
		return UDP_PASS;
	return REFUSAL_UDP;
}

/*
 * The resolver's and the QUIC listener's own addresses: a datagram there is
 * not redirected. A dual-stack socket connected to a v4-mapped destination
 * sends through sendmsg4 to the address connect6 rewrote.
 */
static __always_inline int is_resolver4(const struct config *cfg, __u32 ip, __u16 port)
{
	return cfg && ((cfg->has_dns4 && ip == cfg->dns4_ip && port == cfg->dns4_port) ||
		       (cfg->has_quic4 && ip == cfg->quic4_ip && port == cfg->quic4_port));
}

static __always_inline int is_resolver6(const struct config *cfg, const __u32 ip6[4], __u16 port)
{
	return cfg && ((cfg->has_dns6 && ip6[0] == cfg->dns6_ip[0] && ip6[1] == cfg->dns6_ip[1] &&
			ip6[2] == cfg->dns6_ip[2] && ip6[3] == cfg->dns6_ip[3] && port == cfg->dns6_port) ||
		       (cfg->has_quic6 && ip6[0] == cfg->quic6_ip[0] && ip6[1] == cfg->quic6_ip[1] &&
			ip6[2] == cfg->quic6_ip[2] && ip6[3] == cfg->quic6_ip[3] && port == cfg->quic6_port));
}

/*
 * An IPv4 destination: sendmsg4, or a UDP connect4. The socket may be
 * AF_INET6 (dual stack) sending to ::ffff:a.b.c.d, which the kernel hands to
 * the IPv4 path; the record then keeps the mapped form.
 */
static __always_inline int udp4(struct bpf_sock_addr *ctx, int is_connect, __u32 mark)
{
	__u32 zero = 0;
	const struct config *cfg = bpf_map_lookup_elem(&config_map, &zero);
	__u32 ip = ctx->user_ip4;
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	__u8 call = is_connect ? CALL_CONNECT : CALL_SENDMSG;

	int v = udp_verdict(cfg, port, 1, is_resolver4(cfg, ip, port));
	if (v == UDP_PASS) {
		/* A reconnected socket must not keep a stale record. */
		if (is_connect)
			bpf_sk_storage_delete(&sk_origin, ctx->sk);
		return SOCK_ADDR_ALLOW;
	}
	if ((v == UDP_DNS || v == UDP_QUIC) && !cfg)
		v = REFUSAL_FAIL_CLOSED; /* udp_verdict saw to it; for the verifier */
	if (v != UDP_DNS && v != UDP_QUIC) {
		report_addr4(ctx, (__u8)v, call, ip, port);
		return SOCK_ADDR_REJECT;
	}
	if (!cfg)
		return SOCK_ADDR_REJECT;

	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!o) {
		report_addr4(ctx, REFUSAL_FAIL_CLOSED, call, ip, port);
		return SOCK_ADDR_REJECT;
	}
	__u8 family = ctx->family == AF_INET6 ? AF_INET6 : AF_INET;
	origin_fill(o, ctx, family, IPPROTO_UDP, mark);
	if (family == AF_INET6)
		o->flags = ORIGIN_F_V4MAPPED;
	o->dst_ip6[0] = 0;
	o->dst_ip6[1] = 0;
	o->dst_ip6[2] = bpf_htonl(0x0000ffff);
	o->dst_ip6[3] = ip;
	o->dst_port = port;

	if (v == UDP_QUIC) {
		ctx->user_ip4 = cfg->quic4_ip;
		ctx->user_port = bpf_htons(cfg->quic4_port);
	} else {
		ctx->user_ip4 = cfg->dns4_ip;
		ctx->user_port = bpf_htons(cfg->dns4_port);
	}
	return SOCK_ADDR_ALLOW;
}

/*
 * An IPv6 destination: sendmsg6, or a UDP connect6. Only connect6 sees
 * v4-mapped ones (sendmsg6 gets them through sendmsg4) and may rewrite to a
 * mapped address.
 */
static __always_inline int udp6(struct bpf_sock_addr *ctx, int is_connect, __u32 mark)
{
	__u32 zero = 0;
	const struct config *cfg = bpf_map_lookup_elem(&config_map, &zero);
	__u32 ip6[4];
	ip6[0] = ctx->user_ip6[0];
	ip6[1] = ctx->user_ip6[1];
	ip6[2] = ctx->user_ip6[2];
	ip6[3] = ctx->user_ip6[3];
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	int mapped = is_v4mapped(ip6);
	__u8 call = is_connect ? CALL_CONNECT : CALL_SENDMSG;

	int to_resolver = mapped ? is_resolver4(cfg, ip6[3], port) : is_resolver6(cfg, ip6, port);
	int v = udp_verdict(cfg, port, mapped, to_resolver);
	if (v == UDP_PASS) {
		if (is_connect)
			bpf_sk_storage_delete(&sk_origin, ctx->sk);
		return SOCK_ADDR_ALLOW;
	}
	if ((v == UDP_DNS || v == UDP_QUIC) && (!cfg || (mapped && !is_connect)))
		v = REFUSAL_FAIL_CLOSED;
	if (v != UDP_DNS && v != UDP_QUIC) {
		report_addr(ctx, (__u8)v, call, ip6, port);
		return SOCK_ADDR_REJECT;
	}
	if (!cfg)
		return SOCK_ADDR_REJECT; /* for the verifier: handled above */

	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!o) {
		report_addr(ctx, REFUSAL_FAIL_CLOSED, call, ip6, port);
		return SOCK_ADDR_REJECT;
	}
	origin_fill(o, ctx, AF_INET6, IPPROTO_UDP, mark);
	o->dst_ip6[0] = ip6[0];
	o->dst_ip6[1] = ip6[1];
	o->dst_ip6[2] = ip6[2];
	o->dst_ip6[3] = ip6[3];
	o->dst_port = port;

	if (mapped) {
		o->flags = ORIGIN_F_V4MAPPED;
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0x0000ffff);
		if (v == UDP_QUIC) {
			ctx->user_ip6[3] = cfg->quic4_ip;
			ctx->user_port = bpf_htons(cfg->quic4_port);
		} else {
			ctx->user_ip6[3] = cfg->dns4_ip;
			ctx->user_port = bpf_htons(cfg->dns4_port);
		}
	} else if (v == UDP_QUIC) {
		ctx->user_ip6[0] = cfg->quic6_ip[0];
		ctx->user_ip6[1] = cfg->quic6_ip[1];
		ctx->user_ip6[2] = cfg->quic6_ip[2];
		ctx->user_ip6[3] = cfg->quic6_ip[3];
		ctx->user_port = bpf_htons(cfg->quic6_port);
	} else {
		ctx->user_ip6[0] = cfg->dns6_ip[0];
		ctx->user_ip6[1] = cfg->dns6_ip[1];
		ctx->user_ip6[2] = cfg->dns6_ip[2];
		ctx->user_ip6[3] = cfg->dns6_ip[3];
		ctx->user_port = bpf_htons(cfg->dns6_port);
	}
	return SOCK_ADDR_ALLOW;
}

static __always_inline int is_udp(struct bpf_sock_addr *ctx)
{
	/* Not ICMP ping sockets, also SOCK_DGRAM; not UDP-Lite. */
	return ctx->type == SOCK_DGRAM && ctx->protocol == IPPROTO_UDP;
}

SEC("cgroup/connect4")
int connect4(struct bpf_sock_addr *ctx)
{
	__u32 mark;
	if (unmarked(&mark))
		return CONNECT_ALLOW;
	if (is_udp(ctx))
		return udp4(ctx, 1, mark);

	__u32 ip = ctx->user_ip4;
	__u16 port = bpf_ntohs((__u16)ctx->user_port);

	if (ctx->type != SOCK_STREAM) {
		/* UDP-Lite, ping, raw: refused at socket(), unless made elsewhere. */
		report_addr4(ctx, REFUSAL_SOCKET, CALL_CONNECT, ip, port);
		return CONNECT_REJECT;
	}

	const struct config *cfg = config_get();
	if (!cfg || !cfg->has4) {
		report_addr4(ctx, REFUSAL_FAIL_CLOSED, CALL_CONNECT, ip, port);
		return CONNECT_REJECT;
	}

	if (ip == cfg->proxy4_ip && port == cfg->proxy4_port) {
		/* A reused socket must not keep a stale record. */
		bpf_sk_storage_delete(&sk_origin, ctx->sk);
		return CONNECT_ALLOW;
	}

	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!o) {
		report_addr4(ctx, REFUSAL_FAIL_CLOSED, CALL_CONNECT, ip, port);
		return CONNECT_REJECT;
	}
	origin_fill(o, ctx, AF_INET, IPPROTO_TCP, mark);
	o->dst_ip6[0] = 0;
	o->dst_ip6[1] = 0;
	o->dst_ip6[2] = bpf_htonl(0x0000ffff);
	o->dst_ip6[3] = ip;
	o->dst_port = port;

	ctx->user_ip4 = cfg->proxy4_ip;
	ctx->user_port = bpf_htons(cfg->proxy4_port);
	return CONNECT_ALLOW;
}

SEC("cgroup/connect6")
int connect6(struct bpf_sock_addr *ctx)
{
	__u32 mark;
	if (unmarked(&mark))
		return CONNECT_ALLOW;
	if (is_udp(ctx))
		return udp6(ctx, 1, mark);

	__u32 ip6[4];
	ip6[0] = ctx->user_ip6[0];
	ip6[1] = ctx->user_ip6[1];
	ip6[2] = ctx->user_ip6[2];
	ip6[3] = ctx->user_ip6[3];
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	int mapped = is_v4mapped(ip6);

	if (ctx->type != SOCK_STREAM) {
		report_addr(ctx, REFUSAL_SOCKET, CALL_CONNECT, ip6, port);
		return CONNECT_REJECT;
	}

	const struct config *cfg = config_get();
	if (!cfg) {
		report_addr(ctx, REFUSAL_FAIL_CLOSED, CALL_CONNECT, ip6, port);
		return CONNECT_REJECT;
	}

	if (mapped) {
		/*
		 * A dual-stack socket reaching an IPv4 host: send it to the
		 * IPv4 proxy in mapped form, which such a socket can reach.
		 */
		if (!cfg->has4) {
			report_addr(ctx, REFUSAL_FAIL_CLOSED, CALL_CONNECT, ip6, port);
			return CONNECT_REJECT;
		}
		if (ip6[3] == cfg->proxy4_ip && port == cfg->proxy4_port) {
			bpf_sk_storage_delete(&sk_origin, ctx->sk);
			return CONNECT_ALLOW;
		}
	} else {
		if (!cfg->has6) {
			report_addr(ctx, REFUSAL_FAIL_CLOSED, CALL_CONNECT, ip6, port);
			return CONNECT_REJECT;
		}
		if (ip6[0] == cfg->proxy6_ip[0] && ip6[1] == cfg->proxy6_ip[1] &&
		    ip6[2] == cfg->proxy6_ip[2] && ip6[3] == cfg->proxy6_ip[3] &&
		    port == cfg->proxy6_port) {
			bpf_sk_storage_delete(&sk_origin, ctx->sk);
			return CONNECT_ALLOW;
		}
	}

	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!o) {
		report_addr(ctx, REFUSAL_FAIL_CLOSED, CALL_CONNECT, ip6, port);
		return CONNECT_REJECT;
	}
	origin_fill(o, ctx, AF_INET6, IPPROTO_TCP, mark);
	o->dst_ip6[0] = ip6[0];
	o->dst_ip6[1] = ip6[1];
	o->dst_ip6[2] = ip6[2];
	o->dst_ip6[3] = ip6[3];
	o->dst_port = port;

	if (mapped) {
		o->flags = ORIGIN_F_V4MAPPED;
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0x0000ffff);
		ctx->user_ip6[3] = cfg->proxy4_ip;
		ctx->user_port = bpf_htons(cfg->proxy4_port);
	} else {
		ctx->user_ip6[0] = cfg->proxy6_ip[0];
		ctx->user_ip6[1] = cfg->proxy6_ip[1];
		ctx->user_ip6[2] = cfg->proxy6_ip[2];
		ctx->user_ip6[3] = cfg->proxy6_ip[3];
		ctx->user_port = bpf_htons(cfg->proxy6_port);
	}
	return CONNECT_ALLOW;
}

SEC("sockops")
int publish_origin(struct bpf_sock_ops *ctx)
{
	if (ctx->op != BPF_SOCK_OPS_TCP_CONNECT_CB)
		return 1;

	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	struct origin *o = bpf_sk_storage_get(&sk_origin, sk, 0, 0);
	if (!o)
		return 1; /* not redirected */

	/*
	 * Context fields are read once, at fixed offsets: the verifier refuses
	 * a context pointer that the compiler offset to merge the branches.
	 */
	__u32 family = READ_CTX(ctx->family);
	__u32 ip4 = READ_CTX(ctx->local_ip4);
	__u32 ip6_0 = READ_CTX(ctx->local_ip6[0]);
	__u32 ip6_1 = READ_CTX(ctx->local_ip6[1]);
	__u32 ip6_2 = READ_CTX(ctx->local_ip6[2]);
	__u32 ip6_3 = READ_CTX(ctx->local_ip6[3]);

	struct local_key key = {};
	if (family == AF_INET) {
		key.ip6[2] = bpf_htonl(0x0000ffff);
		key.ip6[3] = ip4;
	} else {
		/* Already mapped for a dual-stack socket talking IPv4. */
		key.ip6[0] = ip6_0;
		key.ip6[1] = ip6_1;
		key.ip6[2] = ip6_2;
		key.ip6[3] = ip6_3;
	}
	key.port = (__u16)READ_CTX(ctx->local_port);
	key.proto = IPPROTO_TCP;

	/*
	 * sockops cannot fail the connect; without an entry the proxy finds
	 * no origin and refuses the connection, so this still fails closed.
	 */
	bpf_map_update_elem(&origin_by_local, &key, o, BPF_ANY);
	return 1;
}

/*
 * The address a redirected socket was sent to: the proxy for TCP; for
 * UDP, the QUIC listener when the record's destination port is 443, else
 * the resolver. mapped: a dual-stack socket's IPv4 one.
 */
static __always_inline int is_target4(const struct config *cfg, const struct origin *o, __u32 ip, __u16 port)
{
	if (o->proto == IPPROTO_UDP && o->dst_port == QUIC_PORT)
		return cfg->has_quic4 && ip == cfg->quic4_ip && port == cfg->quic4_port;
	if (o->proto == IPPROTO_UDP)
		return cfg->has_dns4 && ip == cfg->dns4_ip && port == cfg->dns4_port;
	return cfg->has4 && ip == cfg->proxy4_ip && port == cfg->proxy4_port;
}

static __always_inline int is_target6(const struct config *cfg, const struct origin *o, const __u32 ip6[4], __u16 port)
{
	if (o->proto == IPPROTO_UDP && o->dst_port == QUIC_PORT)
		return cfg->has_quic6 && ip6[0] == cfg->quic6_ip[0] && ip6[1] == cfg->quic6_ip[1] &&
		       ip6[2] == cfg->quic6_ip[2] && ip6[3] == cfg->quic6_ip[3] && port == cfg->quic6_port;
	if (o->proto == IPPROTO_UDP)
		return cfg->has_dns6 && ip6[0] == cfg->dns6_ip[0] && ip6[1] == cfg->dns6_ip[1] &&
		       ip6[2] == cfg->dns6_ip[2] && ip6[3] == cfg->dns6_ip[3] && port == cfg->dns6_port;
	return cfg->has6 && ip6[0] == cfg->proxy6_ip[0] && ip6[1] == cfg->proxy6_ip[1] &&
	       ip6[2] == cfg->proxy6_ip[2] && ip6[3] == cfg->proxy6_ip[3] && port == cfg->proxy6_port;
}

/*
 * Shows an AF_INET socket its original peer when ctx holds the proxy's,
 * the resolver's or the QUIC listener's address: getpeername4 for the connection's peer,
 * recvmsg4 for a datagram's source.
 */
static __always_inline int disguise4(struct bpf_sock_addr *ctx)
{
	__u32 zero = 0;
	const struct config *cfg = bpf_map_lookup_elem(&config_map, &zero);
	if (!cfg)
		return 1;
	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, 0);
	if (!o || o->family != AF_INET)
		return 1;
	if (!is_target4(cfg, o, ctx->user_ip4, bpf_ntohs((__u16)ctx->user_port)))
		return 1;
	ctx->user_ip4 = o->dst_ip6[3];
	ctx->user_port = bpf_htons(o->dst_port);
	return 1;
}

/* The same for an AF_INET6 socket, whose IPv4 peers are v4-mapped. */
static __always_inline int disguise6(struct bpf_sock_addr *ctx)
{
	__u32 zero = 0;
	const struct config *cfg = bpf_map_lookup_elem(&config_map, &zero);
	if (!cfg)
		return 1;
	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, 0);
	if (!o || o->family != AF_INET6)
		return 1;

	__u32 ip6[4];
	ip6[0] = ctx->user_ip6[0];
	ip6[1] = ctx->user_ip6[1];
	ip6[2] = ctx->user_ip6[2];
	ip6[3] = ctx->user_ip6[3];
	__u16 port = bpf_ntohs((__u16)ctx->user_port);

	/* The record must be of the same kind: mapped or not. */
	int target;
	if (o->flags & ORIGIN_F_V4MAPPED)
		target = is_v4mapped(ip6) && is_target4(cfg, o, ip6[3], port);
	else
		target = is_target6(cfg, o, ip6, port);
	if (!target)
		return 1;
	ctx->user_ip6[0] = o->dst_ip6[0];
	ctx->user_ip6[1] = o->dst_ip6[1];
	ctx->user_ip6[2] = o->dst_ip6[2];
	ctx->user_ip6[3] = o->dst_ip6[3];
	ctx->user_port = bpf_htons(o->dst_port);
	return 1;
}

SEC("cgroup/getpeername4")
int getpeername4(struct bpf_sock_addr *ctx)
{
	return disguise4(ctx);
}

SEC("cgroup/getpeername6")
int getpeername6(struct bpf_sock_addr *ctx)
{
	return disguise6(ctx);
}

SEC("cgroup/sendmsg4")
int sendmsg4(struct bpf_sock_addr *ctx)
{
	__u32 mark;
	if (unmarked(&mark))
		return SOCK_ADDR_ALLOW;
	if (ctx->protocol != IPPROTO_UDP) {
		/* UDP-Lite: refused at socket(), unless made elsewhere. */
		report_addr4(ctx, REFUSAL_SOCKET, CALL_SENDMSG, ctx->user_ip4, bpf_ntohs((__u16)ctx->user_port));
		return SOCK_ADDR_REJECT;
	}
	return udp4(ctx, 0, mark);
}

SEC("cgroup/sendmsg6")
int sendmsg6(struct bpf_sock_addr *ctx)
{
	__u32 mark;
	if (unmarked(&mark))
		return SOCK_ADDR_ALLOW;
	if (ctx->protocol != IPPROTO_UDP) {
		__u32 ip6[4];
		ip6[0] = ctx->user_ip6[0];
		ip6[1] = ctx->user_ip6[1];
		ip6[2] = ctx->user_ip6[2];
		ip6[3] = ctx->user_ip6[3];
		report_addr(ctx, REFUSAL_SOCKET, CALL_SENDMSG, ip6, bpf_ntohs((__u16)ctx->user_port));
		return SOCK_ADDR_REJECT;
	}
	return udp6(ctx, 0, mark);
}

/*
 * The socket kinds whose traffic the hooks above mediate. socket() with
 * protocol 0 arrives here with the protocol the kernel chose (TCP, UDP).
 */
SEC("cgroup/sock_create")
int sock_create(struct bpf_sock *ctx)
{
	__u32 mark;
	if (unmarked(&mark))
		return 1;

	__u32 type = ctx->type;
	__u32 protocol = ctx->protocol;

	if (type == SOCK_STREAM && (protocol == IPPROTO_TCP || protocol == IPPROTO_MPTCP))
		return 1;
	if (type == SOCK_DGRAM && protocol == IPPROTO_UDP)
		return 1;

	struct refusal r = {};
	r.kind = REFUSAL_SOCKET;
	r.call = CALL_SOCKET;
	r.family = (__u8)ctx->family;
	r.type = (__u8)type;
	r.protocol = (__u16)protocol;
	report(&r);
	return 0;
}

SEC("cgroup/recvmsg4")
int recvmsg4(struct bpf_sock_addr *ctx)
{
	if (ctx->protocol != IPPROTO_UDP)
		return 1;
	return disguise4(ctx);
}

SEC("cgroup/recvmsg6")
int recvmsg6(struct bpf_sock_addr *ctx)
{
	if (ctx->protocol != IPPROTO_UDP)
		return 1;
	return disguise6(ctx);
}

#define QUIC_V1 0x00000001
#define QUIC_V2 0x6b3343cf

/*
 * Publishes o under (key, DCID) when the datagram is a QUIC Initial (RFC 9000 17.2.2, RFC 9369): a
 * long header of type Initial (0 in version 1, 1 in version 2), then the version, the DCID length
 * (at most 20) and the DCID. Other datagrams (short headers, Handshake, unknown versions) publish
 * nothing here. IPv6 extension headers are not followed: such a datagram has no DCID record, and the
 * proxy falls back to origin_by_local.
 */
static __always_inline void publish_initial(struct __sk_buff *skb, const struct local_key *key, const struct origin *o, int v4)
{
	__u32 off;
	if (v4) {
		__u8 vihl;
		if (bpf_skb_load_bytes(skb, 0, &vihl, 1))
			return;
		off = (vihl & 0x0f) * 4;
	} else {
		__u8 next;
		if (bpf_skb_load_bytes(skb, 6, &next, 1) || next != IPPROTO_UDP)
			return;
		off = 40;
	}
	off += 8; /* the UDP header */
	__u8 hdr[6];
	if (bpf_skb_load_bytes(skb, off, hdr, sizeof(hdr)))
		return;
	if ((hdr[0] & 0xc0) != 0xc0)
		return; /* not a long header */
	__u32 version = ((__u32)hdr[1] << 24) | ((__u32)hdr[2] << 16) | ((__u32)hdr[3] << 8) | hdr[4];
	__u8 type = (hdr[0] >> 4) & 3;
	if (!((version == QUIC_V1 && type == 0) || (version == QUIC_V2 && type == 1)))
		return;
	__u8 n = hdr[5];
	if (n == 0 || n > 20)
		return;
	struct quic_key qk = {};
	qk.local = *key;
	qk.dcid_len = n;
	/* An Initial is padded to 1200 bytes at least: the 20 bytes are there. */
	if (bpf_skb_load_bytes(skb, off + 6, qk.dcid, sizeof(qk.dcid)))
		return;
#pragma unroll
	for (int i = 0; i < 20; i++)
		if (i >= n)
			qk.dcid[i] = 0;
	bpf_map_update_elem(&origin_by_dcid, &qk, o, BPF_ANY);
}

SEC("cgroup_skb/egress")
int publish_udp(struct __sk_buff *skb)
{
	struct bpf_sock *sk = skb->sk;
	if (!sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk || sk->protocol != IPPROTO_UDP)
		return 1;
	struct origin *o = bpf_sk_storage_get(&sk_origin, sk, 0, 0);
	if (!o || o->proto != IPPROTO_UDP)
		return 1; /* not a redirected DNS or QUIC socket */

	/* skb->data is the network header here. */
	struct local_key key = {};
	__u32 proto = skb->protocol;
	if (proto == bpf_htons(ETH_P_IP)) {
		key.ip6[2] = bpf_htonl(0x0000ffff);
		if (bpf_skb_load_bytes(skb, 12, &key.ip6[3], 4))
			return 1;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, 8, key.ip6, 16))
			return 1;
	} else {
		return 1;
	}
	key.port = (__u16)sk->src_port;
	key.proto = IPPROTO_UDP;

	/*
	 * Egress cannot fail the send usefully; without an entry the resolver
	 * finds no origin for the query and says so.
	 */
	bpf_map_update_elem(&origin_by_local, &key, o, BPF_ANY);
	if (o->dst_port == QUIC_PORT)
		publish_initial(skb, &key, o, proto == bpf_htons(ETH_P_IP));
	return 1;
}

char _license[] SEC("license") = "Dual MIT/GPL";
