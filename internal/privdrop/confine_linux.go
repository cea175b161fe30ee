//go:build linux

package privdrop

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ProtectSelf makes chaperone's process non-dumpable while a program
// started with o runs as uid 0, chaperone's own uid: the kernel then
// refuses ptrace and the reading of /proc/<pid>/mem, environ and fd to
// every process without CAP_SYS_PTRACE, whatever its uid. (The capability
// check already refuses them to a program without capabilities; this
// holds even if chaperone had none left.) Core dumps are off meanwhile. It
// does nothing for a program that runs as another uid. Call the returned
// function when the program has ended.
func ProtectSelf(o Options) (undo func(), err error) {
	if !runsAsRoot(o, os.Geteuid()) {
		return func() {}, nil
	}
	prev, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("privdrop: read the dumpable flag: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("privdrop: make chaperone non-dumpable: %w", err)
	}
	return func() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(prev), 0, 0, 0) }, nil
}

// runsAsRoot says whether o runs the program as uid 0 in a process whose
// effective uid is euid.
func runsAsRoot(o Options, euid int) bool {
	return o.UID == 0 || (o.UID < 0 && euid == 0)
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	ID     int
	Point  string   // mount point, unescaped
	Opts   []string // per-mount options (rw, nosuid, relatime...)
	FSType string
}

// parseMountinfo reads /proc/<pid>/mountinfo. Lines it cannot read are
// an error: a cgroup mount missed would stay writable.
func parseMountinfo(b []byte) ([]mountEntry, error) {
	var out []mountEntry
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 1 {
			return nil, fmt.Errorf("mountinfo: bad line %q", line)
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("mountinfo: bad mount id in %q", line)
		}
		out = append(out, mountEntry{ID: id, Point: unescapeMountinfo(f[4]), Opts: strings.Split(f[5], ","), FSType: g[0]})
	}
	return out, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isCgroupFS says whether fstype is a cgroup hierarchy, v1 or v2.
func isCgroupFS(fstype string) bool { return fstype == "cgroup" || fstype == "cgroup2" }

// remountFlags are the mount(2) flags that remount m read-only and keep
// its other per-mount flags, which a bind remount would otherwise clear.
func remountFlags(m mountEntry) uintptr {
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	for _, o := range m.Opts {
		switch o {
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		case "noatime":
			flags |= unix.MS_NOATIME
		case "nodiratime":
			flags |= unix.MS_NODIRATIME
		case "relatime":
			flags |= unix.MS_RELATIME
		}
	}
	return flags
}

// readOnlyCgroups remounts every cgroup mount of the calling process's
// mount namespace read-only. It must run in a new, private namespace:
// the flag is per mount, and these mounts are the program's copies. A
// process without CAP_SYS_ADMIN cannot make them writable again, so even
// as uid 0 (owner of every cgroup.procs) it cannot move a process to
// another cgroup through them. A mount hidden under another one is left:
// no path reaches it.
func readOnlyCgroups() error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read-only cgroups: %w", err)
	}
	mounts, err := parseMountinfo(b)
	if err != nil {
		return fmt.Errorf("read-only cgroups: %w", err)
	}
	for _, m := range mounts {
		if !isCgroupFS(m.FSType) {
			continue
		}
		if err := remountReadOnly(m); err != nil {
			return fmt.Errorf("read-only cgroups: %s: %w", m.Point, err)
		}
	}
	return nil
}

// remountReadOnly remounts m through a descriptor of its mount point, so
// that the mount changed is the one checked to be m.
func remountReadOnly(m mountEntry) error {
	fd, err := unix.Open(m.Point, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // under a mount that hides it
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &st); err == nil && st.Mask&unix.STATX_MNT_ID != 0 && int(st.Mnt_id) != m.ID {
		return nil // hidden: the path reaches a mount on top of it
	}
	return unix.Mount("", "/proc/self/fd/"+strconv.Itoa(fd), "", remountFlags(m), "")
}
