//go:build linux

package redirect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Sessions are cgroup v2 leaves under one Chaperone parent:
//
//	<cgroup2 mount>/<parent>/session-<id>
//
// The agent is started directly into its leaf (SysProcAttr.UseCgroupFD), so
// every descendant inherits it, whatever it does with sessions, process
// groups or double forks; only a process with write access to the hierarchy
// can leave, and the agent has none. The BPF programs are attached to the
// leaf and recognise it by its cgroup id.
//
// cgroup v2 forbids processes in a cgroup whose children have controllers
// enabled ("no internal processes"). Chaperone enables no controller in the
// parent's cgroup.subtree_control, so creating the parent under a populated
// cgroup (or the root) and leaves under the parent is always allowed.

const (
	// killTimeout bounds how long Kill waits for the cgroup to empty. A
	// SIGKILLed process normally leaves within milliseconds; one stuck in
	// uninterruptible sleep (a hung NFS read) is the case this reports.
	killTimeout = 10 * time.Second
	// removeRetry bounds how long Remove retries an rmdir refused with EBUSY:
	// the kernel may still be releasing the last exited tasks.
	removeRetry = time.Second
)

// CgroupRoot returns where the cgroup v2 hierarchy is mounted, as
// /proc/self/mountinfo says: /sys/fs/cgroup on a unified system,
// /sys/fs/cgroup/unified on a hybrid one. The error wraps ErrNotSupported
// when there is no cgroup v2 mount.
func CgroupRoot() (string, error) {
	m, err := cgroupV2Mount()
	if err != nil {
		return "", err
	}
	return m.Point, nil
}

// cgroupMount is one cgroup v2 mount as mountinfo shows it.
type cgroupMount struct {
	// Point is where the hierarchy is mounted.
	Point string
	// Root is the cgroup shown at Point, relative to this process's cgroup
	// namespace: "/" when the whole hierarchy is mounted.
	Root string
}

func cgroupV2Mount() (cgroupMount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cgroupMount{}, fmt.Errorf("redirect: find cgroup2 mount: %w", err)
	}
	m, ok := parseMountinfo(data)
	if !ok {
		return cgroupMount{}, fmt.Errorf("redirect: find cgroup2 mount: none in /proc/self/mountinfo: %w", ErrNotSupported)
	}
	return m, nil
}

// parseMountinfo finds the cgroup v2 mount in the contents of
// /proc/PID/mountinfo (proc(5)): the first one that shows the whole
// hierarchy, else the first one. Malformed lines are skipped.
func parseMountinfo(data []byte) (cgroupMount, bool) {
	var found cgroupMount
	ok := false
	for line := range bytes.Lines(data) {
		// ID parentID major:minor root point options [optional...] - fstype source superoptions
		fields := strings.Fields(string(line))
		sep := slices.Index(fields, "-")
		if sep < 6 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		m := cgroupMount{Root: unescapeMountinfo(fields[3]), Point: unescapeMountinfo(fields[4])}
		if !path.IsAbs(m.Root) || !path.IsAbs(m.Point) {
			continue
		}
		m.Root, m.Point = path.Clean(m.Root), path.Clean(m.Point)
		if m.Root == "/" {
			return m, true
		}
		if !ok {
			found, ok = m, true
		}
	}
	return found, ok
}

// unescapeMountinfo undoes the kernel's octal escapes of space, tab,
// newline and backslash (\040, \011, \012, \134) in a mountinfo field.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// CgroupParent is the cgroup under which every session's leaf is made.
type CgroupParent struct {
	// Path is the parent's directory, e.g. /sys/fs/cgroup/chaperone.
	Path string
}

// OpenParent opens the cgroup named name directly under root (from
// CgroupRoot), creating it with mode 0755 if it does not exist. name is one
// path component of letters, digits, '.', '_' and '-'. root must be a
// cgroup v2 directory.
func OpenParent(root, name string) (*CgroupParent, error) {
	if !validCgroupName(name, 64, true) || name == "." || name == ".." {
		return nil, fmt.Errorf("redirect: open cgroup parent: invalid name %q", name)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("redirect: open cgroup parent: statfs %s: %w", root, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("redirect: open cgroup parent: %s is not a cgroup v2 hierarchy (fs type %#x)", root, st.Type)
	}
	p := filepath.Join(root, name)
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("redirect: open cgroup parent: %w", err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("redirect: open cgroup parent: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("redirect: open cgroup parent: %s is not a directory", p)
	}
	return &CgroupParent{Path: p}, nil
}

// validCgroupName reports whether s is 1 to max characters of
// [a-zA-Z0-9_-], and '.' too when dot is set.
func validCgroupName(s string, max int, dot bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case c == '.' && dot:
		default:
			return false
		}
	}
	return true
}

// SessionCgroup is one session's cgroup v2 leaf.
type SessionCgroup struct {
	// Path is the leaf's directory.
	Path string
	// ID is the cgroup id: the inode number of Path, which is what
	// bpf_get_current_cgroup_id returns for the session's processes.
	ID uint64
}

// NewSession creates the leaf session-<id> under p. id is 1 to 64
// characters of [a-zA-Z0-9_-]. It fails (wrapping fs.ErrExist) if the leaf
// already exists: a leftover leaf may still hold processes of another
// session.
func (p *CgroupParent) NewSession(id string) (*SessionCgroup, error) {
	if !validCgroupName(id, 64, false) {
		return nil, fmt.Errorf("redirect: new session cgroup: invalid id %q (want [a-zA-Z0-9_-]{1,64})", id)
	}
	dir := filepath.Join(p.Path, "session-"+id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redirect: new session cgroup: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("redirect: new session cgroup: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("redirect: new session cgroup: stat %s: no inode", dir)
	}
	return &SessionCgroup{Path: dir, ID: st.Ino}, nil
}

// Open returns the leaf's directory opened O_RDONLY|O_DIRECTORY, for
// exec.Cmd's SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())} (Linux
// 5.7 and later, clone3). The caller closes it once the command has started.
func (s *SessionCgroup) Open() (*os.File, error) {
	f, err := os.OpenFile(s.Path, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("redirect: open session cgroup: %w", err)
	}
	return f, nil
}

// PIDs returns the processes in the leaf (cgroup.procs), sorted, without
// duplicates. It is a snapshot: processes may fork or exit meanwhile.
func (s *SessionCgroup) PIDs() ([]int, error) {
	data, err := os.ReadFile(filepath.Join(s.Path, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("redirect: session cgroup pids: %w", err)
	}
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("redirect: session cgroup pids: %s: bad pid %q", s.Path, f)
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// Kill kills every process in the leaf and returns once it is empty
// (cgroup.events says populated 0). It writes cgroup.kill where the kernel
// has it (5.14 and later); elsewhere it freezes the leaf, when it can, so
// that nothing forks meanwhile, and SIGKILLs each pid in cgroup.procs until
// none is left. It gives up after 10s with an error naming the pids left.
func (s *SessionCgroup) Kill() error {
	return s.kill(true, killTimeout)
}

func (s *SessionCgroup) kill(useKillFile bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if useKillFile {
		err := os.WriteFile(filepath.Join(s.Path, "cgroup.kill"), []byte("1"), 0)
		if err == nil {
			return s.waitKilled(ctx, timeout)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("redirect: kill session cgroup: %w", err)
		}
		if _, err := os.Stat(s.Path); err != nil {
			return fmt.Errorf("redirect: kill session cgroup: %w", err)
		}
	}
	// Frozen processes cannot fork, and still die of SIGKILL. A kernel
	// without cgroup.freeze (before 5.2) leaves the loop to catch forks.
	freeze := filepath.Join(s.Path, "cgroup.freeze")
	if os.WriteFile(freeze, []byte("1"), 0) == nil {
		defer os.WriteFile(freeze, []byte("0"), 0)
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		pids, err := s.PIDs()
		if err != nil {
			return fmt.Errorf("redirect: kill session cgroup: %w", err)
		}
		if len(pids) == 0 {
			return s.waitKilled(ctx, timeout)
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("redirect: kill session cgroup: pid %d: %w", pid, err)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.killTimedOut(timeout, ctx.Err())
		case <-t.C:
		}
	}
}

func (s *SessionCgroup) waitKilled(ctx context.Context, timeout time.Duration) error {
	if err := s.WaitEmpty(ctx); err != nil {
		if ctx.Err() != nil {
			return s.killTimedOut(timeout, ctx.Err())
		}
		return fmt.Errorf("redirect: kill session cgroup: %w", err)
	}
	return nil
}

func (s *SessionCgroup) killTimedOut(timeout time.Duration, cause error) error {
	pids, _ := s.PIDs()
	return fmt.Errorf("redirect: kill session cgroup %s: still populated %v after SIGKILL (pids %v): %w", s.Path, timeout, pids, cause)
}

// WaitEmpty returns nil once the leaf holds no process (cgroup.events says
// populated 0), or ctx's error, wrapped, when ctx ends first. Exited but
// unreaped processes (zombies) no longer count.
func (s *SessionCgroup) WaitEmpty(ctx context.Context) error {
	events := filepath.Join(s.Path, "cgroup.events")
	// Polling, with a delay that grows to 100ms: a session may run for
	// hours, and a process exiting needs no faster answer than that.
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		data, err := os.ReadFile(events)
		if err != nil {
			return fmt.Errorf("redirect: wait for session cgroup to empty: %w", err)
		}
		populated, ok := parsePopulated(data)
		if !ok {
			return fmt.Errorf("redirect: wait for session cgroup to empty: %s has no populated line", events)
		}
		if !populated {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("redirect: wait for session cgroup %s to empty: %w", s.Path, ctx.Err())
		case <-t.C:
		}
	}
}

// parsePopulated reads the "populated 0|1" line of cgroup.events.
func parsePopulated(data []byte) (populated, ok bool) {
	for line := range bytes.Lines(data) {
		k, v, found := strings.Cut(strings.TrimSpace(string(line)), " ")
		if found && k == "populated" {
			return v != "0", true
		}
	}
	return false, false
}

// Remove removes the leaf, which must be empty (see Kill and WaitEmpty). It
// retries for up to a second while the kernel answers EBUSY, and treats a
// leaf already gone as removed.
func (s *SessionCgroup) Remove() error {
	deadline := time.Now().Add(removeRetry)
	for {
		err := unix.Rmdir(s.Path)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY) && time.Now().Before(deadline):
			time.Sleep(10 * time.Millisecond)
		default:
			return fmt.Errorf("redirect: remove session cgroup %s: %w", s.Path, err)
		}
	}
}

// Contains reports whether process pid is in the cgroup at cgroupPath (a
// directory under the cgroup v2 mount) or in one of its descendants, as
// /proc/PID/cgroup's "0::" line says. The error wraps fs.ErrNotExist when
// there is no such process.
func Contains(cgroupPath string, pid int) (bool, error) {
	if pid <= 0 {
		return false, fmt.Errorf("redirect: cgroup contains: invalid pid %d", pid)
	}
	m, err := cgroupV2Mount()
	if err != nil {
		return false, err
	}
	rel, err := filepath.Rel(m.Point, filepath.Clean(cgroupPath))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return false, fmt.Errorf("redirect: cgroup contains: %s is not under the cgroup v2 mount %s", cgroupPath, m.Point)
	}
	want := path.Join(m.Root, filepath.ToSlash(rel))
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false, fmt.Errorf("redirect: cgroup contains: %w", err)
	}
	got, ok := parseProcCgroup(data)
	if !ok {
		return false, fmt.Errorf("redirect: cgroup contains: /proc/%d/cgroup has no cgroup v2 line: %w", pid, ErrNotSupported)
	}
	return got == want || want == "/" || strings.HasPrefix(got, want+"/"), nil
}

// parseProcCgroup returns the cgroup v2 path (the "0::" line) of the
// contents of /proc/PID/cgroup (cgroups(7)).
func parseProcCgroup(data []byte) (string, bool) {
	for line := range bytes.Lines(data) {
		if p, ok := strings.CutPrefix(strings.TrimSuffix(string(line), "\n"), "0::"); ok && path.IsAbs(p) {
			return p, true
		}
	}
	return "", false
}

// cgroupIDLevel is a cgroup v2 directory's id (its inode) and its depth
// under the hierarchy's root (the root's own is 0).
func cgroupIDLevel(dir string) (id uint64, level uint8, err error) {
	root, err := CgroupRoot()
	if err != nil {
		return 0, 0, err
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return 0, 0, fmt.Errorf("%s is not under the cgroup v2 root %s", dir, root)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", dir, err)
	}
	if rel != "." {
		level = uint8(strings.Count(rel, "/") + 1)
	}
	return st.Ino, level, nil
}
