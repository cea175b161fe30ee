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
// symlinks kept, as the program named it) and opens the file as the
// process would (in its root; /proc/self, /dev/fd and /dev/std* name the
// process's own entries).
//
// It then finds every program the exec runs (a plan), reading each file
// once per version (digest and format cached by device, inode, size,
// mtime and ctime):
//   - the file itself (for a descriptor exec, /proc/self/fd/N, /dev/fd/N
//     or execveat(AT_EMPTY_PATH), also the path the descriptor names);
//   - for a #! script, its interpreter, read from the first line as
//     fs/binfmt_script.c reads it, and that interpreter's own, up to the
//     kernel's five scripts (more fail with ELOOP, as in the kernel);
//   - the ELF interpreter (PT_INTERP) of the binary, unless it is one of
//     the system's dynamic loaders (by content: the loaders the system's
//     programs name, read when Serve starts);
//   - for a dynamic loader run as a command (the system's, a copy, or an
//     ELF without PT_INTERP whose SONAME says it is one), the program its
//     argv names, parsed as glibc's and musl's ld.so parse it, resolved as
//     they resolve it (a bare name: in the cwd, and in /etc/ld.so.cache),
//     and that program's ELF interpreter, and so on for a loader of a
//     loader;
//   - for a file without a name (a memfd, a deleted file), the installed
//     programs with its content (same size and sha256, in the system's
//     program directories and the process's PATH).
//
// Each program is decided by ExecOptions.Decider as an exec of its own
// (event.KindExec, Exec.Path, Argv and Digest its own; Exec.Program and
// Interpreter the whole exec's), the exec's own first, until one is
// denied: a deny of any denies the exec, its reason naming the program
// ("(as /usr/bin/openssl: the #! interpreter)"). The published event is
// the exec as the process asked it, with Program (the program that
// finally runs, symlinks resolved; "memfd:NAME" for a memfd),
// Interpreter (the last #! interpreter, or a PT_INTERP that is not a
// loader) and Digest (the program's "sha256:<hex>"). Process is
// ExecOptions.Process of the thread's process (the process before the
// exec, with its lineage). Deny answers the system call with EPERM, and
// the event's reason ends in "(denied with EPERM)". Allow (or rewrite)
// arms the verifier, then lets the system call continue. The event is
// published after the answer, with its Verdict.
//
// The verifier closes the gap between the check and the kernel's own work,
// which another thread, a shared mapping or a rename can change in
// between. A BPF program on tp_btf/sched_process_exec (C in bpf/,
// bpf2go output committed next to this file) runs once the new image is
// in place and before it returns to user space; for a thread that has an
// expectation it compares, with what was allowed: the kernel's file name;
// the #! interpreter it started (bprm->interp; none when no script was
// planned); the new image's whole argv (mm->arg_start..arg_end, which
// for a script is the argv the kernel built, computed in user space the
// same way); and the file it loaded (bprm->file: inode number, size,
// ctime and device, where the filesystem reports them through stat:
// ext4, xfs, tmpfs and memfds, btrfs without the device, …). When they
// differ it kills the process with SIGKILL before its first instruction.
// Such an exec is published again as an exec event denied with reason
// "argv changed after the check; killed before it ran" (or "path …",
// "interpreter …", "program changed after the check; …"). Expectations
// are keyed by the id of the thread that called execve, which the
// tracepoint reports as old_pid even when a non-leader thread exec'd and
// took the process's pid; an exiting thread's expectation is dropped. A
// file in a format the kernel does not run itself (not a native ELF, not
// #!) may go to a binfmt_misc handler nobody decided: for it only the
// file name and argv[1:] are compared.
//
// Guarantees:
//   - Every notification is answered (continue, EPERM, or the errno the
//     kernel would have returned for a bad address or an empty path),
//     unless its process went away first.
//   - Fail closed: an exec whose argv has more than 1,048,576 entries or
//     6 MiB (NULs included), or a path of 4096 bytes or more, is denied
//     with the reason "argv too large to check" (or "path too long to
//     check"); memory that cannot be read denies; a program that cannot be
//     opened or read denies, except one that is not there (ENOENT,
//     ENOTDIR, ELOOP) or not a regular file (EACCES), which fail as the
//     kernel fails them, undecided; a loader's program that is not there,
//     and too many loaders in a row, deny; a verifier that cannot be armed
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
// Limits: a digest is of the file when Chaperone reads it; the verifier
// checks the version of the final file the kernel loads, not of a script
// in a #! chain (its name and interpreter are checked) nor of the program
// a loader opens itself (the loader's open is a file event of package
// fileexec). A write through a shared mapping made before the check, to a
// page already dirty, changes a file's content without a new ctime. A
// path that reaches a file through a /proc link in any other way than
// /proc/self, /proc/PID, /dev/fd and /dev/std* is denied: Chaperone would
// follow it to its own files. Programs a process loads itself (a
// user-space exec, an interpreter's script) are not execs. The path the
// program passed is kept only where it is absolute; a relative one is
// shown resolved. Each Serve loads its own copy of the programs.
//
// execs imports event, golang.org/x/sys and cilium/ebpf; it must not
// import policy, attribution or any other Chaperone package.
package execs

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -type expectation -type killed_rec verify bpf/verify.c -- -O2 -g -Wall -Werror -I./bpf
