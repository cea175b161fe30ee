// Package execs decides every exec of a session's processes before it
// runs, and makes sure that what runs is what was decided.
//
// The session's processes run under a seccomp filter (installed by
// internal/privdrop's shim, which cannot be removed) that sends every
// execve and execveat, of the native ABI and its 32-bit companion, to a
// user notification listener. Serve answers that listener: for each
// notification it reads, out of the blocked thread (/proc/<tid>/mem), the
// path and argv, and its cwd (or the execveat directory descriptor);
// checks that the notification is still valid, so that the pid still names
// that thread; resolves the path (Exec.Path: absolute, lexically cleaned,
// symlinks kept, as the program named it); digests the file
// (Exec.Digest, "sha256:<hex>", cached by device, inode, size, mtime and
// ctime); and asks ExecOptions.Decide with an event.KindExec event whose
// Process is ExecOptions.Process of the thread's process (the process
// before the exec, with its lineage). Deny answers the system call with
// EPERM, and the event's reason ends in "(denied with EPERM)". Allow (or
// rewrite) arms the verifier, then lets the system call continue. The
// event is published after the answer, with its Verdict.
//
// The verifier closes the gap between the check and the kernel's own copy
// of the arguments, which another thread or a shared mapping can change
// in between. A BPF program on tp_btf/sched_process_exec (C in bpf/,
// bpf2go output committed next to this file) runs once the new image is
// in place and before it returns to user space; for a thread that has an
// expectation it compares the new image's argv (mm->arg_start..arg_end)
// and the kernel's file name with what was allowed (FNV-1a 64 hashes and
// lengths) and, when they differ, kills the process with SIGKILL before
// its first instruction. Such an exec is published again as an exec event
// denied with reason "argv changed after the check; killed before it ran"
// ("path changed …" for the file name). Expectations are keyed by the id
// of the thread that called execve, which the tracepoint reports as
// old_pid even when a non-leader thread exec'd and took the process's
// pid; an exiting thread's expectation is dropped.
//
// Guarantees:
//   - Every notification is answered (continue, EPERM, or the errno the
//     kernel would have returned for a bad address or an empty path),
//     unless its process went away first.
//   - Fail closed: an exec whose argv has more than 4096 entries or 256 KiB
//     (NULs included), or a path of 4096 bytes or more, is denied with the
//     reason "argv too large to check" (or "path too long to check");
//     memory that cannot be read denies; a verifier that cannot be armed
//     denies. Close denies the execs still waiting for Decide (without
//     waiting for Decide to return), closes the listener, and from then on
//     every exec of the session's processes fails with ENOSYS.
//   - Execs of processes for which InSession is false continue at once,
//     undecided and unpublished.
//   - Without the verifier (no root or no BTF, a kernel older than 5.17,
//     or Chaperone in a nested pid namespace), Serve still decides every
//     exec: it logs a warning once, Verifier returns why, and each allowed
//     event's reason says "(argv unverified: the exec verifier is off)".
//   - At most 64 notifications are decided at once; more wait in the
//     kernel's queue. Execs's methods are safe for concurrent use.
//
// Limits: a digest is of the file the path names when Chaperone reads it;
// a file replaced between that and the kernel's open (a rename race) is
// not caught here but by the fanotify exec check of package fileexec. The
// path the program passed is kept only where it is absolute; a relative
// one is shown resolved. Each Serve loads its own copy of the programs.
//
// execs imports event, golang.org/x/sys and cilium/ebpf; it must not
// import policy, attribution or any other Chaperone package.
package execs

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -type expectation -type killed_rec verify bpf/verify.c -- -O2 -g -Wall -Werror -I./bpf
