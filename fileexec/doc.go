// Package fileexec mediates the file opens and executions of an agent
// session with fanotify permission events: each open by a session process
// waits until the session's Decider has allowed or denied it, and becomes a
// file event (event.KindFile with File{Path, Access}).
//
// It owns the fanotify group, its marks and the one reader goroutine.
// WatchMounts marks the mounts of the mount namespace of one process — the
// session's private copy of the mount tree, made when the agent starts — so
// opens by everything outside that namespace (the rest of the machine,
// Chaperone itself through its own mounts) raise no event at all and cost
// nothing. Mounts of pseudo filesystems (proc, sysfs, devtmpfs, devpts,
// cgroup and the like) are left unmarked (see pseudoFS); tmpfs mounts
// (/tmp, /dev/shm, /run) are marked.
//
// Each open raises FAN_OPEN_PERM, and an exec (the program and its ELF
// interpreter) FAN_OPEN_EXEC_PERM. Access is exec for the latter; for the
// former it is read from the blocked thread's registers in
// /proc/<tid>/syscall (FAN_REPORT_TID names the thread): the flags of open,
// openat and open_by_handle_at with O_WRONLY, O_RDWR, O_CREAT, O_TRUNC or
// O_APPEND make a write, else a read; the second open of an exec (execve,
// execveat) is an exec; openat2, whose flags live in memory the process can
// change, and anything unknown, are writes. The path is the event fd's link
// in /proc/self/fd. Directory opens (listing) and, on current kernels,
// FIFOs and device nodes raise no event.
//
// Guarantees:
//   - Every event is answered exactly once, and its fd closed after the
//     answer. An open by a process that is not in the session, or by
//     Chaperone itself, is allowed at once and is neither decided nor
//     published. An open by a session process is allowed only on an allow
//     or rewrite verdict; any failure to learn which process or file it is
//     denies it (EPERM), and is published.
//   - The reader only reads and starts one goroutine per event; it calls no
//     option function, so a slow Decide (a person asked) or Chaperone's own
//     opens into the namespace (hashing an executable through
//     /proc/<pid>/exe) never stop it. At most 64 Decide calls run at once;
//     further opens wait, blocked in the kernel, for a free slot.
//   - Verdicts, allow and deny, are cached per (path, access, executable) in
//     an LRU; opens of the same key while a decision is pending wait for
//     it. Only decisions are published, not the opens answered from the
//     cache or a shared decision (FileStats.CacheHits counts those), so a
//     loop opening one file does not flood the audit log.
//   - Close cancels Decide's context, denies every open still waiting
//     (each published with a "stopped" reason), removes the marks, answers
//     what is left in the queue and closes the group; it returns even if
//     Decide ignores its context. After Close, opens are no longer seen.
//   - InSession and Process are called on handler goroutines and must
//     return promptly; Publish is called after the answer is decided.
//   - Errors wrap ErrUnavailable when fanotify permission events cannot be
//     had (not Linux, not root).
//
// Limits: marks are per mount, so a mount made in the namespace after
// WatchMounts, and the mounts of a namespace a session process makes for
// itself (unshare -m, which needs a user namespace when unprivileged), are
// not seen: the session must be kept from making mount or user
// namespaces. Files opened before WatchMounts (inherited fds) are not
// decided. Reads and writes through an fd are not events; only opens are.
// An open that races Close may be allowed by the kernel when the group
// closes.
//
// fileexec imports event, golang.org/x/sys and hashicorp/golang-lru; it
// must not import policy, proxy or any other I/O package.
package fileexec
