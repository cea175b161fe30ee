//go:build linux

package privdrop

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// selfExe names chaperone's own binary in the child between fork and exec,
// even if the file on disk was replaced or removed since chaperone started.
const selfExe = "/proc/self/exe"

// Wrap rewrites cmd, built by exec.Command (Path resolved in chaperone's
// PATH, Args, Env, Dir, SysProcAttr set), so that it starts chaperone's own
// binary as the shim, which drops privileges and execs the original program
// with the original argv and environment. The program path is used as
// resolved; a relative path stays relative to cmd.Dir, as without Wrap.
// SysProcAttr is kept and applies to the shim (and so to the program):
// UseCgroupFD starts it in the session's cgroup, Setsid/Setpgid/Setctty keep,
// and Pdeathsig is re-armed after the uid change would clear it.
// SysProcAttr.Credential and AmbientCaps are refused: Options replaces them.
// With o.Confine (or o.MountNS), Cloneflags gains CLONE_NEWNS.
// When o.Name is set, USER, LOGNAME and HOME in cmd.Env are set for that
// user. Wrap returns cmd.Err if exec.Command could not find the program.
// Call Wrap once, before Start; main must call RunShim first.
func Wrap(cmd *exec.Cmd, o Options) error {
	if o.MountNS || o.ExecNotify {
		return errors.New("privdrop: MountNS and ExecNotify need WrapGated")
	}
	return wrap(cmd, o, -1)
}

// wrap is Wrap; gate is the shim's fd of the gate socket, or -1.
func wrap(cmd *exec.Cmd, o Options, gate int) error {
	if cmd.Err != nil {
		return fmt.Errorf("privdrop: %w", cmd.Err)
	}
	if cmd.Process != nil {
		return errors.New("privdrop: command already started")
	}
	if cmd.Path == "" {
		return errors.New("privdrop: command has no path")
	}
	if len(cmd.Args) >= 2 && cmd.Path == selfExe && cmd.Args[1] == ShimArg {
		return errors.New("privdrop: command already wrapped")
	}
	sp := cmd.SysProcAttr
	if sp != nil && sp.Credential != nil {
		return errors.New("privdrop: SysProcAttr.Credential conflicts with Options")
	}
	if sp != nil && len(sp.AmbientCaps) > 0 {
		return errors.New("privdrop: SysProcAttr.AmbientCaps conflicts with dropping capabilities")
	}
	if err := o.validate(); err != nil {
		return err
	}
	argv := cmd.Args
	if len(argv) == 0 {
		argv = []string{cmd.Path}
	}
	spec := shimSpec{UID: o.UID, GID: o.GID, Groups: o.Groups, Path: cmd.Path, Argv: argv,
		Gate: gate, MountNS: o.MountNS, Notify: o.ExecNotify, Confine: o.Confine}
	if spec.Groups == nil && (o.UID >= 0 || o.GID >= 0) {
		spec.Groups = []int{} // never leave chaperone's groups to another identity
	}
	if sp != nil {
		spec.Pdeathsig = int(sp.Pdeathsig)
	}
	if o.Name != "" {
		cmd.Env = o.environ(cmd.Environ())
	}
	if o.MountNS || o.Confine {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &unix.SysProcAttr{}
		}
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWNS
	}
	cmd.Path = selfExe
	cmd.Args = append([]string{"chaperone", ShimArg}, spec.args()...)
	return nil
}

// RunShim must be called first thing in main. If argv[1] is ShimArg, it
// drops privileges and execs the program named on the rest of the command
// line, never returning: on failure it prints "chaperone: <reason>" to
// stderr and exits 126, or 127 when the program does not exist. Otherwise it
// returns false at once.
func RunShim() bool {
	if len(os.Args) < 2 || os.Args[1] != ShimArg {
		return false
	}
	code, err := shim(os.Args[2:])
	fmt.Fprintf(os.Stderr, "chaperone: %v\n", err)
	os.Exit(code)
	return true
}

// shim returns only on failure, with the exit code and the reason.
func shim(args []string) (int, error) {
	// Capabilities, the bounding set and no_new_privs belong to a thread:
	// everything from here to execve happens on this one.
	runtime.LockOSThread()
	ppid := os.Getppid()
	s, err := parseShimArgs(args)
	if err != nil {
		return 126, err
	}
	if s.Gate >= 0 {
		unix.CloseOnExec(s.Gate)
	}
	if s.MountNS || s.Confine {
		if err := makeMountsPrivate(); err != nil {
			return 126, err
		}
	}
	if s.Confine {
		if err := readOnlyCgroups(); err != nil {
			return 126, err
		}
	}
	if err := drop(s); err != nil {
		return 126, fmt.Errorf("drop privileges: %w", err)
	}
	listener := -1
	if s.Notify || s.Confine {
		root := unix.Getuid() == 0 || unix.Geteuid() == 0
		// With file mediation, a new mount namespace's mounts are marked
		// as they appear; without it there is nothing to carry into one.
		f := filterSpec{notify: s.Notify, noCgroupNS: root}
		if s.Notify {
			f.ns = nsTrack
		}
		if s.Confine && root {
			// Same uid as chaperone: the kernel would let the program
			// signal it, limit it and name it to pidfd_open.
			f.guard = ppid
			if f.pgid, err = unix.Getpgid(ppid); err != nil {
				return 126, fmt.Errorf("chaperone's process group: %w", err)
			}
		}
		if listener, err = installFilter(f); err != nil {
			return 126, err
		}
	}
	if s.Pdeathsig != 0 {
		// Changing the euid cleared the parent-death signal; arm it again and
		// catch a parent that died in between.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(s.Pdeathsig), 0, 0, 0); err != nil {
			return 126, fmt.Errorf("set parent-death signal: %w", err)
		}
		if os.Getppid() != ppid {
			return 126, errors.New("parent exited")
		}
	}
	if s.Gate >= 0 {
		if err := waitAtGate(s.Gate, listener); err != nil {
			return 126, err
		}
	}
	if s.MountNS {
		// Chaperone may have mounted over a directory on the way to the
		// working directory while the shim waited (fileexec protects
		// files so): enter it again by its path, so that the program's
		// relative paths go through those mounts and not under them.
		if wd, err := os.Getwd(); err == nil {
			_ = unix.Chdir(wd)
		}
	}
	err = unix.Exec(s.Path, s.Argv, os.Environ())
	code := 126
	if errors.Is(err, unix.ENOENT) {
		code = 127
	}
	return code, fmt.Errorf("exec %s: %w", s.Path, err)
}

// drop applies s to the calling thread, in the order that keeps each step
// permitted: no_new_privs, the bounding set (needs CAP_SETPCAP), ambient,
// then the ids (need CAP_SETGID/CAP_SETUID), and last the capability sets.
func drop(s shimSpec) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := dropBounding(); err != nil {
		return err
	}
	// EINVAL: a kernel before 4.3 has no ambient set to clear.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if s.Groups != nil {
		if err := unix.Setgroups(s.Groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	if s.GID >= 0 {
		if err := unix.Setresgid(s.GID, s.GID, s.GID); err != nil {
			return fmt.Errorf("setresgid %d: %w", s.GID, err)
		}
	}
	if s.UID >= 0 {
		if err := unix.Setresuid(s.UID, s.UID, s.UID); err != nil {
			return fmt.Errorf("setresuid %d: %w", s.UID, err)
		}
	}
	// A uid change away from 0 already emptied permitted and effective, but
	// not inheritable, and uid 0 keeps everything: clear all three.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	return nil
}

// dropBounding empties the bounding set when the thread may change it. A
// thread without CAP_SETPCAP (chaperone not run as root) cannot, but it has
// no capabilities to lose either: with no_new_privs and empty permitted and
// inheritable sets, execve cannot grant any from the bounding set.
func dropBounding() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) == 0 {
		return nil
	}
	// Probe upward until the kernel says the capability does not exist, so
	// capabilities newer than this binary are dropped too.
	for c := 0; c < 64; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) && c > unix.CAP_SETPCAP {
			return nil
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}
