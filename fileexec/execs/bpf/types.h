/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The few kernel types verify.c needs, so that it builds with clang and
 * libbpf's bpf_helpers.h alone: no vmlinux.h, no kernel headers. The
 * structs only name the fields read; preserve_access_index makes clang
 * emit CO-RE relocations, and the loader finds the real offsets in the
 * running kernel's BTF (fields inside anonymous members included).
 */
#ifndef CHAPERONE_EXECS_TYPES_H
#define CHAPERONE_EXECS_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
	BPF_F_NO_PREALLOC = (1U << 0),
};

struct mm_struct {
	unsigned long arg_start;
	unsigned long arg_end;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

struct super_block {
	__u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
	long long i_size;
} __attribute__((preserve_access_index));

/* The inode's ctime, by kernel version (CO-RE flavors of struct inode:
 * the loader uses the one whose field the running kernel has). */
struct timespec64 {
	__s64 tv_sec;
	long tv_nsec;
};

struct inode___v611 { /* Linux 6.11 and later */
	__s64 i_ctime_sec;
	__u32 i_ctime_nsec;
} __attribute__((preserve_access_index));

struct inode___v66 { /* 6.6 to 6.10 */
	struct timespec64 __i_ctime;
} __attribute__((preserve_access_index));

struct inode___v5 { /* before 6.6 */
	struct timespec64 i_ctime;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct linux_binprm {
	struct file *file;
	const char *filename;
	const char *interp;
} __attribute__((preserve_access_index));

#endif
