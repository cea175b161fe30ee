// Package privdrop starts the agent's command without the privileges that
// could turn the sandbox off.
//
// Chaperone runs as root (it loads eBPF programs and reads fanotify events);
// the agent it starts must not. Go's SysProcAttr cannot set no_new_privs or
// empty the capability bounding set, so [Wrap] rewrites an *exec.Cmd to start
// chaperone's own binary with the hidden argument [ShimArg]. That process,
// the shim, calls [RunShim] first thing in main: on one locked OS thread it
// sets no_new_privs, empties the bounding set, clears the ambient set,
// changes groups, gid and uid when asked, empties the permitted, effective
// and inheritable sets, and then execve()s the original program with the
// original argv and environment. The shim runs inside whatever the caller set
// in SysProcAttr (a cgroup from UseCgroupFD, a new session, a process group),
// and execve keeps it.
//
// Guarantee: when the wrapped command starts, the program it names runs with
// no_new_privs set and no capabilities in its permitted, effective,
// inheritable and ambient sets, and with an empty bounding set when the shim
// held CAP_SETPCAP (it does when chaperone runs as root). With no_new_privs,
// no later execve (setuid binaries, file capabilities) can add any. If any
// step fails, the program is not started: the shim prints
// "chaperone: <reason>" and exits 126 (127 when the program does not exist).
//
// With [Options.Confine] (chaperone runs as root) the program also starts
// in a private mount namespace whose cgroup mounts are all read-only, under
// a seccomp filter that refuses clone3 and, when it runs as uid 0, new
// cgroup namespaces and signals, ptrace, pidfd_open and prlimit aimed at
// chaperone's pid or process group; [ProtectSelf] makes chaperone
// non-dumpable meanwhile. A uid-0 program without capabilities then cannot
// leave the session's cgroup, nor trace or read chaperone. It may sandbox
// itself further in user namespaces of its own (their copies of the cgroup
// mounts stay read-only); with [Options.ExecNotify] the new mount
// namespaces and mounts are handed to the listener first (see
// Options.ExecNotify). It can still
// signal chaperone's other threads by their ids, and every other root
// process of the machine: the kernel allows it within one uid, and no
// filter knows those ids. Run the agent as an ordinary user.
//
// [FromSudo] and [ForUser] turn the invoking sudo user or a named user into
// [Options]. Other systems than Linux get a Wrap that returns an error
// wrapping errors.ErrUnsupported.
//
// This package imports only the standard library and golang.org/x/sys; it
// must not import other chaperone packages.
package privdrop
