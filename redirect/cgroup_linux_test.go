//go:build linux

package redirect

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// hybridMountinfo is the shape of /proc/self/mountinfo on a hybrid system
// (v1 controllers plus cgroup2 at /sys/fs/cgroup/unified).
const hybridMountinfo = `22 1 253:1 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   cgroupMount
		wantOK bool
	}{
		{name: "hybrid", in: hybridMountinfo, want: cgroupMount{Point: "/sys/fs/cgroup/unified", Root: "/"}, wantOK: true},
		{
			name: "unified with optional fields",
			in: "25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n" +
				"26 25 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 master:1 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			want: cgroupMount{Point: "/sys/fs/cgroup", Root: "/"}, wantOK: true,
		},
		{
			name:   "none",
			in:     "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n",
			wantOK: false,
		},
		{name: "empty", in: "", wantOK: false},
		{
			name: "octal escapes",
			in:   `50 22 0:40 / /mnt/my\040cgroups\134v2 rw - cgroup2 none rw` + "\n",
			want: cgroupMount{Point: `/mnt/my cgroups\v2`, Root: "/"}, wantOK: true,
		},
		{
			name: "whole hierarchy preferred over a subtree",
			in: "50 22 0:40 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n" +
				"51 22 0:40 / /host/cgroup rw - cgroup2 cgroup2 rw\n",
			want: cgroupMount{Point: "/host/cgroup", Root: "/"}, wantOK: true,
		},
		{
			name: "only a subtree",
			in:   "50 22 0:40 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			want: cgroupMount{Point: "/sys/fs/cgroup", Root: "/kubepods/pod1"}, wantOK: true,
		},
		{
			name: "malformed lines skipped",
			in: "garbage\n- cgroup2\n1 2 3 - cgroup2 x y\n41 31 0:38 / relative rw - cgroup2 cgroup2 rw\n41 31 0:38 / /ok rw -\n" +
				"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
			want: cgroupMount{Point: "/sys/fs/cgroup/unified", Root: "/"}, wantOK: true,
		},
		{
			name:   "cgroup2 as a source, not a type",
			in:     "41 31 0:38 / /x rw - tmpfs cgroup2 rw\n",
			wantOK: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseMountinfo([]byte(tt.in))
			if ok != tt.wantOK {
				t.Fatalf("parseMountinfo ok = %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseMountinfo (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte(hybridMountinfo))
	f.Add([]byte("26 25 0:24 / /sys/fs/cgroup rw shared:8 - cgroup2 cgroup2 rw\n"))
	f.Add([]byte(`50 22 0:40 /a\040b /mnt/x\134\01 rw - cgroup2 none rw`))
	f.Add([]byte("- cgroup2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, ok := parseMountinfo(data)
		if !ok {
			if m != (cgroupMount{}) {
				t.Fatalf("not found but returned %+v", m)
			}
			return
		}
		if !strings.Contains(string(data), "cgroup2") {
			t.Fatalf("found %+v in input without cgroup2", m)
		}
		for _, p := range []string{m.Point, m.Root} {
			if !path.IsAbs(p) || path.Clean(p) != p {
				t.Fatalf("path %q is not absolute and clean", p)
			}
		}
	})
}

func TestUnescapeMountinfo(t *testing.T) {
	tests := []struct{ in, want string }{
		{`/plain`, `/plain`},
		{`/a\040b`, `/a b`},
		{`/a\011b\012c`, "/a\tb\nc"},
		{`/a\134b`, `/a\b`},
		{`/trailing\04`, `/trailing\04`},
		{`/not\08octal`, `/not\08octal`},
		{`\`, `\`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := unescapeMountinfo(tt.in); got != tt.want {
				t.Errorf("unescapeMountinfo(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   string
		wantOK bool
	}{
		{name: "hybrid root", in: "9:name=systemd:/\n4:memory:/x/y\n1:cpu:/\n0::/\n", want: "/", wantOK: true},
		{name: "unified", in: "0::/chaperone/session-a\n", want: "/chaperone/session-a", wantOK: true},
		{name: "no trailing newline", in: "0::/a/b", want: "/a/b", wantOK: true},
		{name: "v1 only", in: "4:memory:/x\n1:cpu:/\n", wantOK: false},
		{name: "relative", in: "0::a\n", wantOK: false},
		{name: "empty", in: "", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseProcCgroup([]byte(tt.in))
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("parseProcCgroup = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add([]byte("9:name=systemd:/\n0::/\n"))
	f.Add([]byte("0::/chaperone/session-a (deleted)\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ok := parseProcCgroup(data)
		if ok != path.IsAbs(p) {
			t.Fatalf("parseProcCgroup = %q, %v", p, ok)
		}
	})
}

func TestParsePopulated(t *testing.T) {
	tests := []struct {
		in                  string
		wantPopulated, want bool
	}{
		{"populated 1\nfrozen 0\n", true, true},
		{"populated 0\nfrozen 0\n", false, true},
		{"frozen 0\n", false, false},
		{"", false, false},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			p, ok := parsePopulated([]byte(tt.in))
			if p != tt.wantPopulated || ok != tt.want {
				t.Errorf("parsePopulated = %v, %v; want %v, %v", p, ok, tt.wantPopulated, tt.want)
			}
		})
	}
}

func TestNewSessionInvalidID(t *testing.T) {
	p := &CgroupParent{Path: t.TempDir()}
	for _, id := range []string{"", "a/b", "..", ".", "a.b", "a b", "é", strings.Repeat("a", 65)} {
		t.Run(strconv.Quote(id), func(t *testing.T) {
			if s, err := p.NewSession(id); err == nil {
				t.Fatalf("NewSession(%q) = %+v, want error", id, s)
			}
		})
	}
	entries, err := os.ReadDir(p.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("invalid ids created %d entries", len(entries))
	}
}

func TestOpenParentInvalid(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "a b", strings.Repeat("a", 65)} {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			if p, err := OpenParent(t.TempDir(), name); err == nil {
				t.Fatalf("OpenParent(%q) = %+v, want error", name, p)
			}
		})
	}
	t.Run("not cgroup2", func(t *testing.T) {
		dir := t.TempDir()
		if p, err := OpenParent(dir, "chaperone"); err == nil {
			t.Fatalf("OpenParent(tmpdir) = %+v, want error", p)
		}
		if _, err := os.Stat(filepath.Join(dir, "chaperone")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("OpenParent on a non-cgroup dir created a directory (stat: %v)", err)
		}
	})
}

// requireCgroup skips unless this process is root on a machine with a
// cgroup v2 hierarchy, and returns its mount point.
func requireCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root to create cgroups (euid %d)", os.Geteuid())
	}
	root, err := CgroupRoot()
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("no cgroup v2 hierarchy: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// testParent opens a parent cgroup of the test's own and removes it at the
// end of the test.
func testParent(t *testing.T) *CgroupParent {
	t.Helper()
	root := requireCgroup(t)
	name := "chaperone-test-" + strconv.Itoa(os.Getpid()) + "-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 64 {
		name = name[:64]
	}
	p, err := OpenParent(root, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Rmdir(p.Path); err != nil && !errors.Is(err, unix.ENOENT) {
			t.Errorf("remove test parent cgroup: %v", err)
		}
	})
	return p
}

// testSession creates a session leaf that is killed and removed at the end
// of the test, whatever happened.
func testSession(t *testing.T, p *CgroupParent, id string) *SessionCgroup {
	t.Helper()
	s, err := p.NewSession(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A test may have removed it already.
		if err := s.Kill(); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cleanup: %v", err)
		}
		if err := s.Remove(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s
}

// startIn starts a command directly into s.
func startIn(t *testing.T, s *SessionCgroup, name string, args ...string) *exec.Cmd {
	t.Helper()
	f, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	err = cmd.Start()
	f.Close()
	if err != nil {
		t.Fatalf("start %s in session cgroup: %v", name, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// waitPIDs polls s until it holds n processes, and returns them.
func waitPIDs(t *testing.T, s *SessionCgroup, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := s.PIDs()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("session cgroup holds pids %v, want %d of them", pids, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procStat returns the parent pid and session id of pid from /proc/PID/stat.
func procStat(t *testing.T, pid int) (ppid, sid int) {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid pgrp session ...; comm may hold spaces and ')'.
	rest := string(data[strings.LastIndexByte(string(data), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 4 {
		t.Fatalf("short /proc/%d/stat: %q", pid, data)
	}
	ppid, err1 := strconv.Atoi(f[1])
	sid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		t.Fatalf("bad /proc/%d/stat: %q", pid, data)
	}
	return ppid, sid
}

// becomeSubreaper makes orphans of this test's processes children of the
// test process, so that the test can reap them and see them truly gone
// (whatever pid 1 of this machine does with orphans).
func becomeSubreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// reapGone reaps pid, a child of this process, and checks that it no
// longer exists.
func reapGone(t *testing.T, pid int) {
	t.Helper()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil && !errors.Is(err, unix.ECHILD) {
		t.Errorf("wait4(%d): %v", pid, err)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("kill(%d, 0) = %v after kill and reap, want ESRCH", pid, err)
	}
}

func TestCgroupRoot(t *testing.T) {
	root := requireCgroup(t)
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Errorf("CgroupRoot() = %s, whose fs type is %#x, want cgroup2 (%#x)", root, st.Type, unix.CGROUP2_SUPER_MAGIC)
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		t.Errorf("CgroupRoot() = %s: %v", root, err)
	}
}

func TestOpenParent(t *testing.T) {
	p := testParent(t)
	fi, err := os.Stat(p.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("parent %s: mode %v, want a 0755 directory", p.Path, fi.Mode())
	}
	again, err := OpenParent(filepath.Dir(p.Path), filepath.Base(p.Path))
	if err != nil {
		t.Fatalf("OpenParent of an existing parent: %v", err)
	}
	if again.Path != p.Path {
		t.Errorf("OpenParent again: path %s, want %s", again.Path, p.Path)
	}
}

func TestSessionID(t *testing.T) {
	p := testParent(t)
	s := testSession(t, p, "id")
	if want := filepath.Join(p.Path, "session-id"); s.Path != want {
		t.Errorf("Path = %s, want %s", s.Path, want)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(s.Path, &st); err != nil {
		t.Fatal(err)
	}
	if s.ID != st.Ino {
		t.Errorf("ID = %d, want the inode %d", s.ID, st.Ino)
	}
	// The kernel's own cgroup id, the one BPF sees, is the file handle of
	// the cgroup directory.
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, s.Path, 0)
	if err != nil {
		t.Fatalf("name_to_handle_at: %v", err)
	}
	if b := h.Bytes(); len(b) != 8 {
		t.Errorf("cgroup file handle has %d bytes, want 8", len(b))
	} else if id := binary.NativeEndian.Uint64(b); id != s.ID {
		t.Errorf("ID = %d, kernel cgroup id = %d", s.ID, id)
	}
	if _, err := p.NewSession("id"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("NewSession of an existing id: %v, want fs.ErrExist", err)
	}
}

func TestSessionProcesses(t *testing.T) {
	becomeSubreaper(t)
	p := testParent(t)
	s := testSession(t, p, "procs")
	cmd := startIn(t, s, "sh", "-c", "sleep 30 & sleep 30 & wait")
	sh := cmd.Process.Pid
	pids := waitPIDs(t, s, 3)
	if !slices.Contains(pids, sh) {
		t.Fatalf("PIDs() = %v, want the sh %d among them", pids, sh)
	}
	var children []int
	for _, pid := range pids {
		if pid == sh {
			continue
		}
		if ppid, _ := procStat(t, pid); ppid != sh {
			t.Errorf("pid %d in the cgroup has parent %d, want the sh %d", pid, ppid, sh)
		}
		children = append(children, pid)
	}

	root := requireCgroup(t)
	tests := []struct {
		name string
		path string
		pid  int
		want bool
	}{
		{"child in session", s.Path, children[0], true},
		{"sh in session", s.Path, sh, true},
		{"child in parent", p.Path, children[1], true},
		{"child in root", root, children[0], true},
		{"test process not in session", s.Path, os.Getpid(), false},
		{"test process not in parent", p.Path, os.Getpid(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Contains(tt.path, tt.pid)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Contains(%s, %d) = %v, want %v", tt.path, tt.pid, got, tt.want)
			}
		})
	}
	t.Run("sibling prefix", func(t *testing.T) {
		// session-proc must not contain what is in session-procs.
		other := testSession(t, p, "proc")
		if got, err := Contains(other.Path, sh); err != nil || got {
			t.Errorf("Contains(%s, %d) = %v, %v; want false, nil", other.Path, sh, got, err)
		}
	})

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if pids, err := s.PIDs(); err != nil || len(pids) != 0 {
		t.Errorf("after Kill: PIDs() = %v, %v; want none", pids, err)
	}
	if err := cmd.Wait(); err == nil {
		t.Errorf("sh exited cleanly, want killed")
	}
	for _, pid := range children {
		reapGone(t, pid)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Remove: stat %s: %v, want not exist", s.Path, err)
	}
	if err := s.Remove(); err != nil {
		t.Errorf("second Remove: %v, want nil", err)
	}
	if err := s.Kill(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Kill of a removed session = %v, want fs.ErrNotExist", err)
	}
}

func TestContainsErrors(t *testing.T) {
	root := requireCgroup(t)
	t.Run("outside the mount", func(t *testing.T) {
		if _, err := Contains(filepath.Dir(root), os.Getpid()); err == nil {
			t.Error("Contains(parent of the mount) succeeded, want error")
		}
	})
	t.Run("no such process", func(t *testing.T) {
		// Above the largest pid_max (2^22).
		if _, err := Contains(root, 1<<22+1); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Contains(no such pid) = %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("invalid pid", func(t *testing.T) {
		if _, err := Contains(root, 0); err == nil {
			t.Error("Contains(pid 0) succeeded, want error")
		}
	})
}

func TestDoubleForkStaysInSession(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("needs python3: %v", err)
	}
	becomeSubreaper(t)
	p := testParent(t)
	s := testSession(t, p, "escape")
	f, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	// The grandchild leaves the parent's session and process group and is
	// orphaned: everything a process can do to get away from its parent.
	cmd := exec.Command(python, "-c", `
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        sys.stdout.write("%d\n" % os.getpid()); sys.stdout.flush()
        null = os.open(os.devnull, os.O_WRONLY); os.dup2(null, 1)
        time.sleep(30)
        os._exit(0)
    os._exit(0)
os.wait()
`)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Start()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read grandchild pid: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("python: %v", err)
	}
	gc, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Kill(gc, unix.SIGKILL); unix.Wait4(gc, nil, 0, nil) })

	own, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	if ppid, sid := procStat(t, gc); sid == own || ppid != os.Getpid() {
		t.Fatalf("grandchild %d: parent %d, session %d; want orphaned (reparented to the test process %d) in a session other than %d",
			gc, ppid, sid, os.Getpid(), own)
	}
	if pids := waitPIDs(t, s, 1); pids[0] != gc {
		t.Errorf("PIDs() = %v, want only the grandchild %d", pids, gc)
	}
	if in, err := Contains(s.Path, gc); err != nil || !in {
		t.Errorf("Contains(session, grandchild) = %v, %v; want true", in, err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	reapGone(t, gc)
}

func TestKill(t *testing.T) {
	tests := []struct {
		name        string
		useKillFile bool
	}{
		{"cgroup.kill", true},
		{"sigkill loop", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			becomeSubreaper(t)
			p := testParent(t)
			s := testSession(t, p, "kill")
			if _, err := os.Stat(filepath.Join(s.Path, "cgroup.kill")); tt.useKillFile && err != nil {
				t.Skipf("kernel has no cgroup.kill: %v", err)
			}
			// The shell ignores TERM, INT and HUP; only SIGKILL works.
			cmd := startIn(t, s, "sh", "-c", "trap '' TERM INT HUP; sleep 30 & sleep 30 & wait")
			pids := waitPIDs(t, s, 3)
			if err := s.kill(tt.useKillFile, killTimeout); err != nil {
				t.Fatal(err)
			}
			if got, err := s.PIDs(); err != nil || len(got) != 0 {
				t.Errorf("after kill: PIDs() = %v, %v; want none", got, err)
			}
			data, err := os.ReadFile(filepath.Join(s.Path, "cgroup.events"))
			if err != nil {
				t.Fatal(err)
			}
			if populated, ok := parsePopulated(data); !ok || populated {
				t.Errorf("after kill: cgroup.events = %q, want populated 0", data)
			}
			if !tt.useKillFile {
				if data, err := os.ReadFile(filepath.Join(s.Path, "cgroup.freeze")); err == nil && strings.TrimSpace(string(data)) != "0" {
					t.Errorf("after kill: cgroup.freeze = %q, want thawed", data)
				}
			}
			cmd.Wait()
			for _, pid := range pids {
				if pid != cmd.Process.Pid {
					reapGone(t, pid)
				}
			}
			if err := unix.Kill(cmd.Process.Pid, 0); !errors.Is(err, unix.ESRCH) {
				t.Errorf("sh still exists after kill: %v", err)
			}
			if err := s.Kill(); err != nil {
				t.Errorf("Kill of an empty session: %v", err)
			}
		})
	}
}

func TestWaitEmpty(t *testing.T) {
	p := testParent(t)
	t.Run("processes exit by themselves", func(t *testing.T) {
		s := testSession(t, p, "exits")
		cmd := startIn(t, s, "sh", "-c", "sleep 0.2 & sleep 0.3 & wait")
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.WaitEmpty(ctx); err != nil {
			t.Fatal(err)
		}
		if pids, err := s.PIDs(); err != nil || len(pids) != 0 {
			t.Errorf("after WaitEmpty: PIDs() = %v, %v; want none", pids, err)
		}
		if err := <-waited; err != nil {
			t.Errorf("sh: %v, want a clean exit (not killed)", err)
		}
	})
	t.Run("context ends first", func(t *testing.T) {
		s := testSession(t, p, "stays")
		startIn(t, s, "sleep", "30")
		waitPIDs(t, s, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := s.WaitEmpty(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitEmpty on a populated cgroup = %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestRemovePopulated(t *testing.T) {
	p := testParent(t)
	s := testSession(t, p, "busy")
	startIn(t, s, "sleep", "30")
	waitPIDs(t, s, 1)
	if err := s.Remove(); !errors.Is(err, unix.EBUSY) {
		t.Errorf("Remove of a populated cgroup = %v, want EBUSY", err)
	}
	if _, err := os.Stat(s.Path); err != nil {
		t.Errorf("populated cgroup gone after a failed Remove: %v", err)
	}
}
