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
// WatchFiles is the daemon's: its agents run in the machine's own
// namespaces, where a mount mark would make every process on the machine
// wait for Chaperone on every open. It marks only the files the policy
// protects (CredentialFiles of Homes, other trees' .env, Chaperone's
// state), each by its inode, and directories for the files in them and
// below (up to 1024 directories per path, walked when marked); AddPaths
// marks more. Any other open by any process raises no event. An open of a
// marked file by a process outside the session is a round trip to the
// reader, allowed at once. A marked file replaced by a new inode (renamed
// over, removed and made again) is not covered until it is named again,
// unless its directory is marked. Static, Nested and the mount
// namespaces are WatchMounts's only.
//
// Each open raises FAN_OPEN_PERM, and an exec (the program and its ELF
// interpreter) FAN_OPEN_EXEC_PERM. Access is exec for the latter; for the
// former it is read from the blocked thread's registers in
// /proc/<tid>/syscall (FAN_REPORT_TID names the thread): the flags of open,
// openat and open_by_handle_at with O_WRONLY, O_RDWR, O_CREAT, O_TRUNC or
// O_APPEND make a write, else a read; creat is a write; the second open of
// an exec (execve, execveat) is an exec. Anything else is
// event.FileUnknown, which the policy decides as a read and as a write:
// openat2, whose flags the kernel copied from memory the process may have
// changed since; an io_uring request; registers that stayed hidden (a
// thread woken by the answers to other opens shows none until it sleeps
// again, and is waited for up to five seconds). The path is the event fd's link
// in /proc/self/fd. Directory opens (listing) and, on current kernels,
// FIFOs and device nodes raise no event.
//
// Guarantees:
//   - Every event is answered exactly once, and its fd closed after the
//     answer. An open by a process that is not in the session, or by
//     Chaperone itself, is allowed at once, before anything else is read
//     of it (Process is not called), and is neither decided nor
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
//   - Static: an open allowed (decided, from the cache, or matched by
//     Ignore) of a path for which FileOptions.Static holds, of a regular
//     file with one link (or more, when StaticLinked holds), puts an
//     ignore mark for FAN_OPEN_PERM on the
//     file's inode before the open is answered: later opens of that inode,
//     for reading or writing, by any process, raise no event (nothing is
//     decided, cached, counted or published) and cost what an unwatched
//     open costs. Execs still raise FAN_OPEN_EXEC_PERM and are decided. A
//     denied open, a file with several links that StaticLinked does not
//     allow (another path to the inode may have another verdict) and
//     anything but a regular file are never marked. The kernel clears the mark when the file is modified (no
//     FAN_MARK_IGNORED_SURV_MODIFY), and drops it with the inode when
//     memory is short (FAN_MARK_EVICTABLE, so marks do not pin inodes); the
//     next open is then an event again and marks the file again. A file
//     renamed over the path is a new inode, unmarked, and is decided. At
//     most CacheSize inodes are marked; one more removes every mark first.
//   - Ahead: after such a mark, more entries of the file's directory (16
//     for its first mark, twice as many for each next, up to
//     FileOptions.Ahead; none past half CacheSize marks) are marked the
//     same way when Static holds for them, on a goroutine of their own
//     after the open is answered: each is opened O_PATH from the directory
//     (reached under the session's root, and checked to hold the file
//     just opened), and marked only when that inode is a regular file
//     with one link (or StaticLinked), not Protected and not Alias's.
//   - Forget removes every ignore mark (FAN_MARK_FLUSH of inode marks: the
//     mounts' marks stay) and every cached verdict, so the next open of
//     each file is decided again under the new policy; a verdict looked up
//     before Forget answers its own open but is neither cached nor marked.
//   - Close cancels Decide's context, denies every open still waiting
//     (each published with a "stopped" reason), removes the marks, answers
//     what is left in the queue and closes the group; it returns even if
//     Decide ignores its context. After Close, opens are no longer seen.
//   - InSession and Process are called on handler goroutines and must
//     return promptly; Publish is called after the answer is decided.
//   - Errors wrap ErrUnavailable when fanotify permission events cannot be
//     had (not Linux, not root).
//
// Besides opens:
//   - Calls decides what the session's seccomp filter hands over besides
//     execs (fileexec/execs' ExecOptions.Other): links and renames as a
//     read of their source, truncations by path as a write, on the files
//     the caller's paths resolve to; io_uring_setup is refused. A call is
//     published before it is answered.
//   - Protected is the set of files a session protects whatever its
//     policy (the policy file, the config file, plugins, the audit log,
//     the state directory), by path and by inode: their opens (Files) and
//     changes (Calls) are refused (RuleProtected), and MountProtection
//     mounts each read-only over itself in the session's namespace, and
//     the directories on the way over themselves, so that the kernel
//     refuses the rest by any means.
//   - Nested follows the mount namespaces a session process makes for
//     itself (a sandbox such as bubblewrap): the session's filter hands it
//     unshare and clone asking for one, and mount, umount2 and pivot_root;
//     it freezes the session's cgroup around each (a clone's copies are
//     watched by filesystem marks until then) and marks every mount a
//     process there can reach before the session runs again. An open
//     through such a mount is decided by the file's path in the session's
//     own namespace (a bind mount elsewhere is the file it binds); a file
//     of a tmpfs or FUSE filesystem mounted there is the agent's own and is
//     allowed undecided; one with no path in the session (an overlay's) is
//     refused (RuleNestedPath). Links, renames and truncations there
//     (Calls) name their files the same way.
//
// Limits: an ignore mark follows its inode, not its path: a file marked
// and then renamed, or hard-linked, elsewhere is opened at its new path
// unasked until it is modified or Forget is called — only content Static
// already allowed to be read and written, but the open is not seen.
// Marks are per mount: a mount made in the session's namespace after
// WatchMounts is not seen (the agent has no capability to make one), and
// nested namespaces are followed only through Nested, with a listener
// that lets no signal cancel a received call (otherwise the session's
// filter refuses them). A path lookup already asleep in the kernel when a
// mount call attaches a mount can cross it before it is marked. Files
// opened before WatchMounts (inherited fds) are not decided. Reads and writes through an fd are not events; only opens are.
// The paths of a call are read from the caller's memory, which may change
// before the kernel reads them again once the call goes on: what is
// linked or renamed may then not be what was decided (see Calls).
// An open that races Close may be allowed by the kernel when the group
// closes.
//
// fileexec imports event, golang.org/x/sys and hashicorp/golang-lru; it
// must not import policy, proxy or any other I/O package.
package fileexec
