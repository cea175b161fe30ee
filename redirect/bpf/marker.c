// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The marker of the machine-wide daemon: marks agents as they exec, before
 * their first instruction, and their children as they fork, before they
 * first run, in marks (marks.h), which the redirection programs of
 * redirect.c read with config.marked_only. Classic tracepoints, attached
 * machine-wide:
 *
 *   syscalls/sys_enter_execve, syscalls/sys_enter_execveat
 *       Look at the first 16 bytes of up to ENV_MAX entries of the new
 *       environment for CHAPERONE_AGENT= and, when found, flag the thread
 *       in agent_env for sched_process_exec.
 *   sched/sched_process_exec
 *       A marked process keeps its mark across exec. An unmarked one whose
 *       new comm is in candidates, or whose exec was flagged, is marked
 *       MARK_PENDING. Either way the exec is reported on mark_events.
 *   sched/sched_process_fork
 *       The child (a process or a thread) inherits its parent process's
 *       mark, under its own id. The tracepoint fires before the child
 *       first runs. An insert that fails (marks full) is counted in
 *       marks_failed: the child runs unmarked.
 *   sched/sched_process_exit
 *       A thread's entry goes with it; the process's goes with its last
 *       thread (group_dead), and a marked process's end is reported.
 *
 * Unmarked processes pay: one lookup at fork and at exit; at exec, the
 * environment scan and three lookups.
 *
 * The tracepoints' field offsets are fixed where the kernel's layout has
 * not changed (checked against /sys/kernel/tracing/events/.../format on
 * Linux 6.18); the two that changed between versions are constants that
 * the loader sets from the format files.
 */
#include "uapi.h"
#include <bpf/bpf_helpers.h>
#include "marks.h"

#define ENV_MAX 128  /* environment entries looked at */
#define ENV_CHUNK 16 /* pointers read at once */

/* "CHAPERONE_AGENT=" as two words, as they read from memory. */
#define W8(a, b, c, d, e, f, g, h)                                                                      \
	((__u64)(a) | (__u64)(b) << 8 | (__u64)(c) << 16 | (__u64)(d) << 24 | (__u64)(e) << 32 | \
	 (__u64)(f) << 40 | (__u64)(g) << 48 | (__u64)(h) << 56)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define AGENT_W0 W8('C', 'H', 'A', 'P', 'E', 'R', 'O', 'N')
#define AGENT_W1 W8('E', '_', 'A', 'G', 'E', 'N', 'T', '=')
#else
#define AGENT_W0 W8('N', 'O', 'R', 'E', 'P', 'A', 'H', 'C')
#define AGENT_W1 W8('=', 'T', 'N', 'E', 'G', 'A', '_', 'E')
#endif

/* mark_event.kind */
#define MARK_EVENT_EXEC 1
#define MARK_EVENT_EXIT 2

/* mark_event.reason, for an exec */
#define MARK_REASON_KEPT 1      /* it was marked already */
#define MARK_REASON_CANDIDATE 2 /* its comm is a candidate */
#define MARK_REASON_ENV 3       /* CHAPERONE_AGENT= in its environment */

/* An exec or exit of a marked process. */
struct mark_event {
	__u64 cgroup_id;
	__u32 pid; /* process (kernel tgid) */
	__u32 mark;
	__u32 uid;
	__u32 gid;
	__u8 kind;   /* MARK_EVENT_* */
	__u8 reason; /* MARK_REASON_*; 0 for an exit */
	__u8 pad[6];
	char comm[16];
};

/* Puts struct mark_event in the BTF, for bpf2go. */
const struct mark_event *unused_mark_event __attribute__((unused));

/* Comms that are marked at exec (key: the comm, NUL-padded). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, char[16]);
	__type(value, __u8);
} candidates SEC(".maps");

/*
 * Threads whose execve had CHAPERONE_AGENT= in its environment, until
 * their exec completes. LRU: a failed execve's flag is overwritten or
 * cleared by the thread's next one, or evicted.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} agent_env SEC(".maps");

/* Execs and exits of marked processes, for user space. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} mark_events SEC(".maps");

/* Reports dropped because mark_events was full, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} mark_events_dropped SEC(".maps");

/* Marks that could not be stored (marks full), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} marks_failed SEC(".maps");

/*
 * Offsets in the record of sched_process_fork of child_pid (20 since the
 * comms became __data_loc strings, 44 before) and of sched_process_exit of
 * group_dead (32; 0: the kernel has no such field). Set by the loader from
 * the format files.
 */
volatile const __u32 fork_child_pid_off = 20;
volatile const __u32 exit_group_dead_off = 32;

/* syscalls/sys_enter_execve: envp at 32. */
struct execve_args {
	__u64 common;
	__s32 syscall_nr;
	__u32 pad;
	__u64 filename;
	__u64 argv;
	__u64 envp;
};

/* syscalls/sys_enter_execveat: envp at 40. */
struct execveat_args {
	__u64 common;
	__s32 syscall_nr;
	__u32 pad;
	__u64 fd;
	__u64 filename;
	__u64 argv;
	__u64 envp;
	__u64 flags;
};

/* sched/sched_process_exec: old_pid at 16. */
struct exec_args {
	__u64 common;
	__u32 filename_loc;
	__s32 pid;
	__s32 old_pid;
};

static __always_inline void count(void *counter)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(counter, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline void report(__u8 kind, __u8 reason, __u32 pid, __u32 mark)
{
	struct mark_event e = {};
	__u64 uid_gid = bpf_get_current_uid_gid();

	e.cgroup_id = bpf_get_current_cgroup_id();
	e.pid = pid;
	e.mark = mark;
	e.uid = (__u32)uid_gid;
	e.gid = uid_gid >> 32;
	e.kind = kind;
	e.reason = reason;
	bpf_get_current_comm(e.comm, sizeof(e.comm));
	if (bpf_ringbuf_output(&mark_events, &e, sizeof(e), 0))
		count(&mark_events_dropped);
}

/*
 * Whether the string at s starts with CHAPERONE_AGENT=. A read that fails
 * means no: such a string has 17 bytes or more, all readable.
 */
static __always_inline int is_agent_var(const char *s)
{
	__u64 w[2];
	if (bpf_probe_read_user(w, sizeof(w), s))
		return 0;
	return w[0] == AGENT_W0 && w[1] == AGENT_W1;
}

/* Whether envp, a user NULL-terminated array, holds CHAPERONE_AGENT=. */
static __always_inline int agent_in_env(const char *const *envp)
{
	const char *p[ENV_CHUNK];

	if (!envp)
		return 0;
	for (int c = 0; c < ENV_MAX / ENV_CHUNK; c++) {
		const char *const *at = envp + c * ENV_CHUNK;
		if (bpf_probe_read_user(p, sizeof(p), at)) {
			/* The chunk runs past the mapping: one pointer at a time. */
			for (int i = 0; i < ENV_CHUNK; i++) {
				if (bpf_probe_read_user(&p[i], sizeof(p[i]), at + i))
					return 0;
				if (!p[i])
					return 0;
			}
		}
		for (int i = 0; i < ENV_CHUNK; i++) {
			if (!p[i])
				return 0;
			if (is_agent_var(p[i]))
				return 1;
		}
	}
	return 0;
}

static __always_inline int flag_env(const char *const *envp)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (agent_in_env(envp)) {
		__u8 one = 1;
		bpf_map_update_elem(&agent_env, &tid, &one, BPF_ANY);
	} else if (bpf_map_lookup_elem(&agent_env, &tid)) {
		/* A stale flag from an execve that failed. */
		bpf_map_delete_elem(&agent_env, &tid);
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_execve")
int enter_execve(struct execve_args *ctx)
{
	return flag_env((const char *const *)ctx->envp);
}

SEC("tracepoint/syscalls/sys_enter_execveat")
int enter_execveat(struct execveat_args *ctx)
{
	return flag_env((const char *const *)ctx->envp);
}

SEC("tracepoint/sched/sched_process_exec")
int process_exec(struct exec_args *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	/* The exec's thread id before exec: a thread's exec takes the tgid. */
	__u32 old_tid = (__u32)ctx->old_pid;

	int env = 0;
	if (bpf_map_lookup_elem(&agent_env, &old_tid)) {
		env = 1;
		bpf_map_delete_elem(&agent_env, &old_tid);
	}

	/* A thread's exec: its entry under its old id is its process's now. */
	if (old_tid != tgid && bpf_map_lookup_elem(&marks, &old_tid))
		bpf_map_delete_elem(&marks, &old_tid);

	__u32 *m = bpf_map_lookup_elem(&marks, &tgid);
	if (m && *m) {
		report(MARK_EVENT_EXEC, MARK_REASON_KEPT, tgid, *m);
		return 0;
	}

	__u8 reason = MARK_REASON_ENV;
	if (!env) {
		char comm[16] = {};
		bpf_get_current_comm(comm, sizeof(comm));
		if (!bpf_map_lookup_elem(&candidates, comm))
			return 0;
		reason = MARK_REASON_CANDIDATE;
	}
	__u32 pending = MARK_PENDING;
	if (bpf_map_update_elem(&marks, &tgid, &pending, BPF_ANY)) {
		count(&marks_failed);
		return 0;
	}
	report(MARK_EVENT_EXEC, reason, tgid, pending);
	return 0;
}

SEC("tracepoint/sched/sched_process_fork")
int process_fork(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 *m = bpf_map_lookup_elem(&marks, &tgid);
	if (!m || !*m)
		return 0;
	__u32 mark = *m;

	__s32 child = 0;
	if (bpf_probe_read_kernel(&child, sizeof(child), (char *)ctx + fork_child_pid_off) || child <= 0) {
		count(&marks_failed);
		return 0;
	}
	__u32 key = (__u32)child;
	if (bpf_map_update_elem(&marks, &key, &mark, BPF_ANY))
		count(&marks_failed);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int process_exit(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u32 tid = (__u32)pid_tgid;

	if (tid != tgid && bpf_map_lookup_elem(&marks, &tid))
		bpf_map_delete_elem(&marks, &tid);

	int group_dead;
	if (exit_group_dead_off) {
		__u8 dead = 0;
		bpf_probe_read_kernel(&dead, sizeof(dead), (char *)ctx + exit_group_dead_off);
		group_dead = dead != 0;
	} else {
		group_dead = tid == tgid; /* older kernels: the leader's exit */
	}
	if (!group_dead)
		return 0;

	__u32 *m = bpf_map_lookup_elem(&marks, &tgid);
	if (!m)
		return 0;
	__u32 mark = *m;
	bpf_map_delete_elem(&marks, &tgid);
	if (mark)
		report(MARK_EVENT_EXIT, 0, tgid, mark);
	return 0;
}

char _license[] SEC("license") = "Dual MIT/GPL";
