// Package attribution answers, for an action seen on the network or the
// filesystem, which process did it: the owner of a TCP socket, what that
// process is (exe, argv, cwd, uid, parent, start time), its lineage, and
// whether it descends from a session's root process; the SHA-256 of the
// executable a process runs (ExeDigest), the names of the programs between a
// session's root and a process (LineageNames), which coding agent a
// command line runs (DetectAgent, pure), and which container a process
// runs in (Container, pure, from a cgroup path; ProcessContainer, from
// /proc/PID/cgroup): docker, containerd, cri-o or podman, and under
// Kubernetes the pod's UID.
//
// Everything is read from /proc through the small FS interface, so tests run
// the same code against a fake tree (DirFS) and the real /proc (OSProc). The
// one exception is optional and explicit: a Table made WithSocketLookup
// (SockDiag, NETLINK_SOCK_DIAG on Linux) asks the kernel for a socket's inode
// instead of reading all of /proc/net/tcp{,6}, and reads those only when the
// lookup fails or finds nothing. Matching the inode to a process always reads
// /proc/PID/fd.
//
// Guarantees:
//   - Answers are best effort and true at lookup time only: a process that
//     exits before the lookup gives ErrNotFound, and a pid is the pid at the
//     moment /proc was read. Callers that need the process later must keep the
//     *event.Process, not the pid.
//   - A reused pid is never confused with the process that held it before:
//     cached details are keyed by (pid, start time) and also checked against
//     the current comm and exe, so an exec of another program is seen too.
//     Not seen until the entry is evicted: an exec of the same binary with
//     the same comm (new argv), and a setuid without exec.
//   - Start times assume USER_HZ = 100, the tick of /proc/PID/stat on every
//     Linux ABI Chaperone runs on.
//   - Sockets are looked up in the network namespace of the FS root
//     (/proc/net is the reader's namespace); SockDiag asks in the calling
//     process's namespace, the same one for OSProc.
//   - ExeDigest hashes the file the process runs (opened through PID/exe),
//     not whatever is at its path now, and caches by the file's device,
//     inode, size, mtime and ctime; a digest is never cached from a read
//     during which the file changed.
//   - A Table is safe for concurrent use.
//
// This package imports only event, golang.org/x/sys/unix (for sock_diag) and
// the standard library; it must not import the proxy, redirect or any I/O
// package.
package attribution
