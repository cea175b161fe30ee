/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The marks map, shared by the marker (marker.c), which marks agents at
 * exec and their children at fork, and the redirection programs
 * (redirect.c), which with config.marked_only redirect marked processes
 * only. User space loads it once and hands the same map to both objects.
 */
#ifndef CHAPERONE_MARKS_H
#define CHAPERONE_MARKS_H

/* A candidate that user space has not classified yet. */
#define MARK_PENDING 1
/* Marks from 2 up are session slots that user space chose. */

/*
 * Key: a process's kernel tgid (or, for a thread's own entry made at
 * clone, its tid); value: its mark. Absent or 0: unmarked.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 262144);
	__type(key, __u32);
	__type(value, __u32);
} marks SEC(".maps");

#endif
