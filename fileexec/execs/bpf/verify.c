// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The exec verifier of package execs. User space decides on an execve or
 * execveat from the arguments it read out of the blocked process, writes
 * what it read into `expect` under the calling thread's id, and only then
 * lets the system call continue. The kernel copies the arguments again
 * after that, so another thread (or a shared mapping) may have changed
 * them in between. These programs compare what the kernel actually copied
 * with what was decided:
 *
 *   tp_btf/sched_process_exec
 *       Fires once the new image is loaded (after the point of no return)
 *       and before the process returns to user space. Only a thread with
 *       an entry in `expect` is checked, keyed by old_pid: the id of the
 *       thread that called execve, which is not the new image's pid when
 *       a non-leader thread exec'd. The entry is deleted, then checked:
 *         - bprm->filename, hashed with FNV-1a 64, with its length;
 *         - the interpreter: with EXPECT_INTERP, bprm->interp (the last
 *           #! line's interpreter, as written) hashed and compared; without
 *           it, bprm->interp must still be bprm->filename (no #! script,
 *           no binfmt_misc handler ran);
 *         - the new argv (mm->arg_start..arg_end): the whole area, which
 *           user space computed as the kernel builds it for a #! chain;
 *         - with EXPECT_INODE, the file the kernel loaded (bprm->file: the
 *           binary, or the last #! interpreter): its inode number, size
 *           and ctime (a write, a chmod or a rename changes it), and with
 *           EXPECT_DEVICE its superblock's device.
 *       Any difference, or memory that cannot be read, sends SIGKILL to
 *       the process, which dies before its first instruction, and a record
 *       to `killed`. With EXPECT_LENIENT (a file user space does not know
 *       how the kernel runs: binfmt_misc may hand it to a program) the
 *       interpreter is not checked, and when one ran only argv[1:] (the
 *       end of the area, starting right after a NUL) is compared.
 *   tp_btf/sched_process_exit
 *       Deletes the exiting thread's entry, so that an exec that failed
 *       after the check never leaves an entry for a reused thread id.
 */
#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

#define CHUNK 4096
/* Longest argv area user space allows (NULs included). */
#define MAX_ARGV (6 * 1024 * 1024)
/* bpf_probe_read_kernel_str's bound for bprm->filename. */
#define MAX_FILENAME CHUNK

/* killed_rec.reason */
#define REASON_ARGV 1     /* argv differs */
#define REASON_FILENAME 2 /* the path differs */
#define REASON_UNREADABLE 3
#define REASON_INTERP 4  /* another interpreter ran */
#define REASON_PROGRAM 5 /* another file, or another version of it, was loaded */

/* expectation.flags */
#define EXPECT_INTERP 1
#define EXPECT_LENIENT 2
#define EXPECT_INODE 4
#define EXPECT_DEVICE 8

/* The nanoseconds of a ctime; the bits above are flags (multigrain
 * timestamps mark a queried ctime in bit 31). */
#define NSEC_MASK 0x3fffffff

/* What user space allowed, by the id of the thread that asked. */
struct expectation {
	__u64 argv_hash;   /* FNV-1a 64 of the whole argv area */
	__u64 tail_hash;   /* FNV-1a 64 of argv[1:] (the end of the area) */
	__u64 file_hash;   /* FNV-1a 64 of bprm->filename, without its NUL */
	__u64 interp_hash; /* FNV-1a 64 of bprm->interp, with EXPECT_INTERP */
	__u32 argv_len;
	__u32 tail_len;
	__u32 file_len;
	__u32 interp_len;
	__u32 flags; /* EXPECT_* */
	__u32 pad;
	__u64 ino; /* of bprm->file's inode, with EXPECT_INODE */
	__s64 size;
	__s64 ctime_sec;
	__u32 ctime_nsec;
	__u32 dev; /* its superblock's s_dev, with EXPECT_DEVICE */
};

/* One killed exec, for user space to publish. */
struct killed_rec {
	__u32 pid;  /* the thread id that called execve (the key) */
	__u32 tgid; /* the process, as it is after exec */
	__u32 reason;
	__u32 pad;
};

struct scratch {
	char buf[CHUNK];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct expectation);
} expect SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 4096);
} killed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define BYTE(w, k) (((w) >> (8 * (k))) & 0xff)
#else
#define BYTE(w, k) (((w) >> (56 - 8 * (k))) & 0xff)
#endif

#define FNV_STEP(h, b)            \
	do {                      \
		(h) ^= (b);       \
		(h) *= FNV_PRIME; \
	} while (0)

struct hash_state {
	__u64 addr; /* user address of the area; 0: the area is in scratch */
	__u32 len;  /* its length */
	__u32 err;
	__u64 hash;
};

/*
 * One bpf_loop step: hash the i-th eight bytes of the area, first reading
 * the next CHUNK of it into scratch when addr is set. Loops go through
 * bpf_loop so that the verifier checks the step once, whatever the length.
 */
static long hash_step(__u32 i, void *ctx)
{
	struct hash_state *st = ctx;
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	/* 64-bit, so that the bounds the verifier learns stay on the register
	 * passed as the read's size. */
	__u64 pos = (__u64)i * 8, off = pos & (CHUNK - 8), left, n;
	__u64 h = st->hash, w;

	if (!s) {
		st->err = 1;
		return 1;
	}
	if (pos >= st->len)
		return 1;
	left = st->len - pos;
	if (off == 0 && st->addr) {
		n = left > CHUNK ? CHUNK : left;
		if (bpf_probe_read_user(s->buf, n, (const void *)(st->addr + pos))) {
			st->err = 1;
			return 1;
		}
	}
	w = *(const __u64 *)(s->buf + off);
	if (left >= 8) {
		FNV_STEP(h, BYTE(w, 0));
		FNV_STEP(h, BYTE(w, 1));
		FNV_STEP(h, BYTE(w, 2));
		FNV_STEP(h, BYTE(w, 3));
		FNV_STEP(h, BYTE(w, 4));
		FNV_STEP(h, BYTE(w, 5));
		FNV_STEP(h, BYTE(w, 6));
		FNV_STEP(h, BYTE(w, 7));
	} else {
		for (__u64 k = 0; k < 7; k++) {
			if (k >= left)
				break;
			FNV_STEP(h, BYTE(w, k));
		}
	}
	st->hash = h;
	return 0;
}

/* hash returns in *out the FNV-1a 64 hash of len bytes at user address
 * addr, or, addr 0, of the first len bytes of scratch; 0 on success. */
static __always_inline int hash(__u64 addr, __u32 len, __u64 *out)
{
	struct hash_state st = {.addr = addr, .len = len, .hash = FNV_OFFSET};

	if (len > MAX_ARGV || (!addr && len > CHUNK))
		return -1;
	if (len > 0)
		bpf_loop((len + 7) / 8, hash_step, &st, 0);
	if (st.err)
		return -1;
	*out = st.hash;
	return 0;
}

/* Not inlined, so that struct killed_rec reaches the BTF bpf2go reads. */
static __attribute__((noinline)) int kill(struct killed_rec *r)
{
	bpf_send_signal(9);
	return bpf_ringbuf_output(&killed, r, sizeof(*r), 0);
}

/* check_argv returns 0 when the new image's argv is the one allowed. */
static __always_inline __u32 check_argv(struct task_struct *p, struct linux_binprm *bprm, struct expectation *e)
{
	struct mm_struct *mm = p->mm;
	__u64 start, end, h;
	__u32 len;

	if (!mm)
		return REASON_UNREADABLE;
	start = mm->arg_start;
	end = mm->arg_end;
	if (end < start || end - start > MAX_ARGV)
		return REASON_ARGV;
	len = end - start;

	if (!(e->flags & EXPECT_LENIENT) || bprm->interp == bprm->filename) {
		if (len != e->argv_len)
			return REASON_ARGV;
		if (hash(start, len, &h))
			return REASON_UNREADABLE;
		return h == e->argv_hash ? 0 : REASON_ARGV;
	}

	/* An unknown handler took argv[0]'s place: compare argv[1:], which
	 * must start right after a NUL. */
	if (e->tail_len >= len)
		return REASON_ARGV;
	char before = 1;
	if (bpf_probe_read_user(&before, 1, (const void *)(end - e->tail_len - 1)))
		return REASON_UNREADABLE;
	if (before != 0)
		return REASON_ARGV;
	if (hash(end - e->tail_len, e->tail_len, &h))
		return REASON_UNREADABLE;
	return h == e->tail_hash ? 0 : REASON_ARGV;
}

/* check_kstr returns 0 when the kernel string s is len bytes hashing to
 * want, else mismatch. */
static __always_inline __u32 check_kstr(const char *s, __u32 len, __u64 want, __u32 mismatch)
{
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	__u64 h;
	long n;

	if (!sc)
		return REASON_UNREADABLE;
	n = bpf_probe_read_kernel_str(sc->buf, MAX_FILENAME, s);
	if (n <= 0)
		return REASON_UNREADABLE;
	n--; /* the NUL */
	if (n != len || n >= MAX_FILENAME)
		return mismatch;
	if (hash(0, n, &h))
		return REASON_UNREADABLE;
	return h == want ? 0 : mismatch;
}

static __always_inline __u32 check_interp(struct linux_binprm *bprm, struct expectation *e)
{
	if (e->flags & EXPECT_LENIENT)
		return 0;
	if (!(e->flags & EXPECT_INTERP))
		return bprm->interp == bprm->filename ? 0 : REASON_INTERP;
	if (bprm->interp == bprm->filename)
		return REASON_INTERP;
	return check_kstr(bprm->interp, e->interp_len, e->interp_hash, REASON_INTERP);
}

/* check_program returns 0 when bprm->file is the version of the file
 * user space decided on. */
static __always_inline __u32 check_program(struct linux_binprm *bprm, struct expectation *e)
{
	struct file *f;
	struct inode *in;
	__s64 sec;
	__u32 nsec;

	if (!(e->flags & EXPECT_INODE))
		return 0;
	f = bprm->file;
	if (!f)
		return REASON_UNREADABLE;
	in = f->f_inode;
	if (!in)
		return REASON_UNREADABLE;
	if (in->i_ino != e->ino || in->i_size != e->size)
		return REASON_PROGRAM;
	if (bpf_core_field_exists(struct inode___v611, i_ctime_sec)) {
		struct inode___v611 *t = (void *)in;
		sec = t->i_ctime_sec;
		nsec = t->i_ctime_nsec;
	} else if (bpf_core_field_exists(struct inode___v66, __i_ctime)) {
		struct inode___v66 *t = (void *)in;
		sec = t->__i_ctime.tv_sec;
		nsec = t->__i_ctime.tv_nsec;
	} else {
		struct inode___v5 *t = (void *)in;
		sec = t->i_ctime.tv_sec;
		nsec = t->i_ctime.tv_nsec;
	}
	if (sec != e->ctime_sec || (nsec & NSEC_MASK) != e->ctime_nsec)
		return REASON_PROGRAM;
	if ((e->flags & EXPECT_DEVICE) && in->i_sb->s_dev != e->dev)
		return REASON_PROGRAM;
	return 0;
}

SEC("tp_btf/sched_process_exec")
int on_exec(__u64 *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	__u32 old_pid = (__u32)ctx[1];
	struct linux_binprm *bprm = (struct linux_binprm *)ctx[2];
	struct expectation *found, e;
	__u32 reason;

	found = bpf_map_lookup_elem(&expect, &old_pid);
	if (!found)
		return 0;
	e = *found;
	bpf_map_delete_elem(&expect, &old_pid);

	reason = check_kstr(bprm->filename, e.file_len, e.file_hash, REASON_FILENAME);
	if (!reason)
		reason = check_interp(bprm, &e);
	if (!reason)
		reason = check_program(bprm, &e);
	if (!reason)
		reason = check_argv(p, bprm, &e);
	if (reason) {
		struct killed_rec r = {.pid = old_pid, .tgid = p->tgid, .reason = reason};
		kill(&r);
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int on_exit(__u64 *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	__u32 pid = p->pid;

	bpf_map_delete_elem(&expect, &pid);
	return 0;
}

char _license[] SEC("license") = "Dual MIT/GPL";
