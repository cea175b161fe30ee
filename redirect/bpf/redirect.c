// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Transparent redirection of a session's TCP connections to Chaperone's
 * proxy. Attached to the session's cgroup v2 leaf:
 *
 *   cgroup/connect4, cgroup/connect6
 *       Every SOCK_STREAM connect() is rewritten to the proxy's address,
 *       except a connect() to the proxy itself. The original destination and
 *       the connecting task go into the socket's local storage (sk_origin),
 *       which the kernel frees with the socket.
 *   sockops (BPF_SOCK_OPS_TCP_CONNECT_CB)
 *       Runs after the local port is chosen and before the SYN leaves, so
 *       the record is published under the client's local (address, port) in
 *       origin_by_local before the proxy can accept the connection. The
 *       proxy computes that key from the accepted connection's remote
 *       address and deletes the entry after reading it.
 *   cgroup/getpeername4, cgroup/getpeername6
 *       A redirected socket reports its original destination as its peer.
 *
 * Fail closed: when the configuration is missing, when a family has no proxy
 * address, or when the record cannot be stored, connect() fails with EPERM
 * instead of going out directly.
 *
 * Keys and records are shaped for UDP (sendmsg/recvmsg) to be added: the
 * key carries the protocol, the record the hook family and protocol.
 */
#include "uapi.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* A context load the compiler can neither move nor merge. */
#define READ_CTX(x) (*(volatile typeof(x) *)&(x))

#define CONNECT_ALLOW 1
#define CONNECT_REJECT 0

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
	__u8 family;    /* AF_INET: connect4, AF_INET6: connect6 */
	__u8 proto;     /* IPPROTO_TCP */
	__u8 flags;     /* ORIGIN_F_* */
	__u8 pad[3];
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
 * Records waiting for the proxy. LRU and bounded: an entry the proxy never
 * reads (the client gave up before accept) is evicted, never leaked.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct local_key);
	__type(value, struct origin);
} origin_by_local SEC(".maps");

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

/* Fills everything but the destination. */
static __always_inline void origin_fill(struct origin *o, struct bpf_sock_addr *ctx, __u8 family)
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
	o->proto = IPPROTO_TCP;
	o->flags = 0;
	bpf_get_current_comm(o->comm, sizeof(o->comm));
}

SEC("cgroup/connect4")
int connect4(struct bpf_sock_addr *ctx)
{
	if (ctx->type != SOCK_STREAM)
		return CONNECT_ALLOW; /* UDP comes with sendmsg4 */

	const struct config *cfg = config_get();
	if (!cfg || !cfg->has4)
		return CONNECT_REJECT;

	__u32 ip = ctx->user_ip4;
	__u16 port = bpf_ntohs((__u16)ctx->user_port);

	if (ip == cfg->proxy4_ip && port == cfg->proxy4_port) {
		/* A reused socket must not keep a stale record. */
		bpf_sk_storage_delete(&sk_origin, ctx->sk);
		return CONNECT_ALLOW;
	}

	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!o)
		return CONNECT_REJECT;
	origin_fill(o, ctx, AF_INET);
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
	if (ctx->type != SOCK_STREAM)
		return CONNECT_ALLOW; /* UDP comes with sendmsg6 */

	const struct config *cfg = config_get();
	if (!cfg)
		return CONNECT_REJECT;

	__u32 ip6[4];
	ip6[0] = ctx->user_ip6[0];
	ip6[1] = ctx->user_ip6[1];
	ip6[2] = ctx->user_ip6[2];
	ip6[3] = ctx->user_ip6[3];
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	int mapped = is_v4mapped(ip6);

	if (mapped) {
		/*
		 * A dual-stack socket reaching an IPv4 host: send it to the
		 * IPv4 proxy in mapped form, which such a socket can reach.
		 */
		if (!cfg->has4)
			return CONNECT_REJECT;
		if (ip6[3] == cfg->proxy4_ip && port == cfg->proxy4_port) {
			bpf_sk_storage_delete(&sk_origin, ctx->sk);
			return CONNECT_ALLOW;
		}
	} else {
		if (!cfg->has6)
			return CONNECT_REJECT;
		if (ip6[0] == cfg->proxy6_ip[0] && ip6[1] == cfg->proxy6_ip[1] &&
		    ip6[2] == cfg->proxy6_ip[2] && ip6[3] == cfg->proxy6_ip[3] &&
		    port == cfg->proxy6_port) {
			bpf_sk_storage_delete(&sk_origin, ctx->sk);
			return CONNECT_ALLOW;
		}
	}

	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!o)
		return CONNECT_REJECT;
	origin_fill(o, ctx, AF_INET6);
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

SEC("cgroup/getpeername4")
int getpeername4(struct bpf_sock_addr *ctx)
{
	const struct config *cfg = config_get();
	if (!cfg)
		return 1;
	if (ctx->user_ip4 != cfg->proxy4_ip || bpf_ntohs((__u16)ctx->user_port) != cfg->proxy4_port)
		return 1;

	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, 0);
	if (!o || o->family != AF_INET)
		return 1;
	ctx->user_ip4 = o->dst_ip6[3];
	ctx->user_port = bpf_htons(o->dst_port);
	return 1;
}

SEC("cgroup/getpeername6")
int getpeername6(struct bpf_sock_addr *ctx)
{
	const struct config *cfg = config_get();
	if (!cfg)
		return 1;

	__u32 ip6[4];
	ip6[0] = ctx->user_ip6[0];
	ip6[1] = ctx->user_ip6[1];
	ip6[2] = ctx->user_ip6[2];
	ip6[3] = ctx->user_ip6[3];
	__u16 port = bpf_ntohs((__u16)ctx->user_port);

	int to_proxy4 = is_v4mapped(ip6) && ip6[3] == cfg->proxy4_ip && port == cfg->proxy4_port;
	int to_proxy6 = ip6[0] == cfg->proxy6_ip[0] && ip6[1] == cfg->proxy6_ip[1] &&
			ip6[2] == cfg->proxy6_ip[2] && ip6[3] == cfg->proxy6_ip[3] &&
			port == cfg->proxy6_port;
	if (!(cfg->has4 && to_proxy4) && !(cfg->has6 && to_proxy6))
		return 1;

	struct origin *o = bpf_sk_storage_get(&sk_origin, ctx->sk, 0, 0);
	if (!o || o->family != AF_INET6)
		return 1;
	ctx->user_ip6[0] = o->dst_ip6[0];
	ctx->user_ip6[1] = o->dst_ip6[1];
	ctx->user_ip6[2] = o->dst_ip6[2];
	ctx->user_ip6[3] = o->dst_ip6[3];
	ctx->user_port = bpf_htons(o->dst_port);
	return 1;
}

char _license[] SEC("license") = "Dual MIT/GPL";
