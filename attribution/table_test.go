package attribution

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

const fakeBtime = 1700000000

// fakeProc is a /proc tree under t.TempDir.
type fakeProc struct {
	t    *testing.T
	root string
}

type fakeProcess struct {
	pid, ppid  int
	comm       string
	startTicks uint64
	uid        int
	exe, cwd   string // symlink targets; none when empty
	argv       []string
	fds        map[int]string // fd -> link target
}

func newFakeProc(t *testing.T) *fakeProc {
	t.Helper()
	f := &fakeProc{t: t, root: t.TempDir()}
	f.write("stat", "cpu  1 2 3 4\nbtime "+strconv.Itoa(fakeBtime)+"\nprocesses 100\n")
	// Entries a real /proc has besides pids.
	f.write("net/unix", "")
	f.symlink("self", "1")
	return f
}

func (f *fakeProc) write(name, content string) {
	f.t.Helper()
	p := filepath.Join(f.root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) symlink(name, target string) {
	f.t.Helper()
	p := filepath.Join(f.root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
}

// add writes (or rewrites) a process's directory.
func (f *fakeProc) add(p fakeProcess) {
	f.t.Helper()
	dir := strconv.Itoa(p.pid)
	if err := os.RemoveAll(filepath.Join(f.root, dir)); err != nil {
		f.t.Fatal(err)
	}
	f.write(dir+"/stat", statLine(p.pid, p.comm, p.ppid, p.startTicks))
	f.write(dir+"/status", "Name:\t"+p.comm+"\nUid:\t"+strconv.Itoa(p.uid)+"\t0\t0\t0\nGid:\t0\t0\t0\t0\n")
	var cmdline strings.Builder
	for _, a := range p.argv {
		cmdline.WriteString(a + "\x00")
	}
	f.write(dir+"/cmdline", cmdline.String())
	if p.exe != "" {
		f.symlink(dir+"/exe", p.exe)
	}
	if p.cwd != "" {
		f.symlink(dir+"/cwd", p.cwd)
	}
	if err := os.MkdirAll(filepath.Join(f.root, dir, "fd"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	for fd, target := range p.fds {
		f.symlink(dir+"/fd/"+strconv.Itoa(fd), target)
	}
}

func startTime(ticks uint64) time.Time {
	return time.Unix(fakeBtime, 0).Add(time.Duration(ticks) * 10 * time.Millisecond).UTC()
}

func TestProcessFake(t *testing.T) {
	f := newFakeProc(t)
	f.add(fakeProcess{pid: 1, ppid: 0, comm: "init", startTicks: 1, exe: "/sbin/init", argv: []string{"/sbin/init"}})
	f.add(fakeProcess{pid: 20, ppid: 1, comm: "agent", startTicks: 100, uid: 1000, exe: "/usr/bin/node", cwd: "/home/u", argv: []string{"node", "agent.js"}})
	f.add(fakeProcess{pid: 30, ppid: 20, comm: "bash", startTicks: 200, uid: 1000, exe: "/usr/bin/bash", cwd: "/home/u/repo", argv: []string{"bash", "-c", "curl x"}})
	f.add(fakeProcess{pid: 40, ppid: 30, comm: "a) (b c", startTicks: 12345, uid: 1000,
		exe: "/usr/bin/python3 (deleted)", cwd: "/home/u/repo dir", argv: []string{"python3", "-c", "print(1)", "", "arg with space"}})
	f.add(fakeProcess{pid: 50, ppid: 2, comm: "kworker/0:1", startTicks: 5}) // kernel thread: no exe, cwd or argv
	f.add(fakeProcess{pid: 60, ppid: 999, comm: "orphan", startTicks: 500, exe: "/bin/true", argv: []string{"true"}})

	tests := []struct {
		pid     int
		want    *event.Process
		wantErr error
	}{
		{pid: 40, want: &event.Process{
			PID: 40, PPID: 30, Exe: "/usr/bin/python3 (deleted)", Argv: []string{"python3", "-c", "print(1)", "", "arg with space"},
			Cwd: "/home/u/repo dir", UID: 1000, StartTime: startTime(12345), Lineage: []int{30, 20, 1},
		}},
		{pid: 1, want: &event.Process{PID: 1, Exe: "/sbin/init", Argv: []string{"/sbin/init"}, StartTime: startTime(1)}},
		{pid: 50, want: &event.Process{PID: 50, PPID: 2, StartTime: startTime(5), Lineage: []int{2}}},
		{pid: 60, want: &event.Process{PID: 60, PPID: 999, Exe: "/bin/true", Argv: []string{"true"}, StartTime: startTime(500), Lineage: []int{999}}},
		{pid: 999, wantErr: ErrNotFound},
		{pid: 0, wantErr: ErrNotFound},
		{pid: -3, wantErr: ErrNotFound},
	}
	tbl := NewTable(DirFS(f.root))
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.pid), func(t *testing.T) {
			got, err := tbl.Process(tt.pid)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Process(%d) error = %v, want %v", tt.pid, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Process(%d) (-want +got):\n%s", tt.pid, diff)
			}
		})
	}
}

func TestLineage(t *testing.T) {
	f := newFakeProc(t)
	f.add(fakeProcess{pid: 1, comm: "init", startTicks: 1})
	// A chain deeper than maxLineage: 1000 <- 1001 <- ... <- 1099.
	for i := range 100 {
		ppid := 1000 + i - 1
		if i == 0 {
			ppid = 1
		}
		f.add(fakeProcess{pid: 1000 + i, ppid: ppid, comm: "deep", startTicks: uint64(10 + i)})
	}
	// A cycle, which only a broken tree has.
	f.add(fakeProcess{pid: 70, ppid: 71, comm: "c", startTicks: 50})
	f.add(fakeProcess{pid: 71, ppid: 70, comm: "c", startTicks: 40})
	// 80's parent pid now names a process that started after 80: reused.
	f.add(fakeProcess{pid: 80, ppid: 81, comm: "child", startTicks: 50})
	f.add(fakeProcess{pid: 81, ppid: 1, comm: "reused", startTicks: 90})
	// A parent that cannot be read is named, and the walk stops there.
	f.add(fakeProcess{pid: 90, ppid: 91, comm: "child", startTicks: 50})

	wantDeep := make([]int, 0, maxLineage)
	for i := 98; len(wantDeep) < maxLineage; i-- {
		wantDeep = append(wantDeep, 1000+i)
	}
	tests := []struct {
		name string
		pid  int
		want []int
	}{
		{"to pid 1", 1003, []int{1002, 1001, 1000, 1}},
		{"pid 1 has none", 1, nil},
		{"cut at maxLineage", 1099, wantDeep},
		{"cycle ends", 70, []int{71}},
		{"reused parent pid is not an ancestor", 80, nil},
		{"unreadable parent ends the walk", 90, []int{91}},
	}
	tbl := NewTable(DirFS(f.root))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tbl.Process(tt.pid)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, p.Lineage); diff != "" {
				t.Errorf("Process(%d).Lineage (-want +got):\n%s", tt.pid, diff)
			}
		})
	}
	for _, tt := range []struct {
		name      string
		pid, root int
		want      []int
	}{
		{"ends at the root", 1003, 1001, []int{1002, 1001}},
		{"the root itself has none", 1001, 1001, nil},
		{"root the parent", 1003, 1002, []int{1002}},
		{"root not an ancestor: to pid 1", 1003, 70, []int{1002, 1001, 1000, 1}},
		{"root 0 cuts nothing", 1003, 0, []int{1002, 1001, 1000, 1}},
	} {
		t.Run("under/"+tt.name, func(t *testing.T) {
			p, err := tbl.ProcessUnder(tt.pid, tt.root)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, p.Lineage); diff != "" {
				t.Errorf("ProcessUnder(%d, %d).Lineage (-want +got):\n%s", tt.pid, tt.root, diff)
			}
		})
	}
}

func TestPIDReuse(t *testing.T) {
	f := newFakeProc(t)
	tbl := NewTable(DirFS(f.root))
	base := fakeProcess{pid: 50, ppid: 1, comm: "old", startTicks: 1000, uid: 0, exe: "/usr/bin/old", cwd: "/", argv: []string{"old", "-x"}}
	f.add(base)
	if _, err := tbl.Process(50); err != nil {
		t.Fatal(err)
	}

	// Each step rewrites pid 50 after the first lookup cached it.
	tests := []struct {
		name     string
		proc     func(p fakeProcess) fakeProcess
		wantArgv []string
		wantUID  int
		wantExe  string
	}{
		{
			name:     "same process: argv and uid come from the cache",
			proc:     func(p fakeProcess) fakeProcess { p.argv = []string{"rewritten"}; p.uid = 7; return p },
			wantArgv: []string{"old", "-x"}, wantUID: 0, wantExe: "/usr/bin/old",
		},
		{
			name: "pid reused: a new start time gives fresh info",
			proc: func(p fakeProcess) fakeProcess {
				p.startTicks, p.comm, p.exe, p.argv, p.uid = 2000, "new", "/usr/bin/new", []string{"new", "y"}, 1000
				return p
			},
			wantArgv: []string{"new", "y"}, wantUID: 1000, wantExe: "/usr/bin/new",
		},
		{
			name: "pid reused by the same program: only the start time differs",
			proc: func(p fakeProcess) fakeProcess {
				p.startTicks, p.argv, p.uid = 3000, []string{"old", "-y"}, 1000
				return p
			},
			wantArgv: []string{"old", "-y"}, wantUID: 1000, wantExe: "/usr/bin/old",
		},
		{
			name: "exec of another program: same start time, new exe",
			proc: func(p fakeProcess) fakeProcess {
				p.exe, p.argv, p.uid = "/usr/bin/curl", []string{"curl", "example.test"}, 1000
				return p
			},
			wantArgv: []string{"curl", "example.test"}, wantUID: 1000, wantExe: "/usr/bin/curl",
		},
		{
			name: "exec with a new comm, same exe",
			proc: func(p fakeProcess) fakeProcess {
				p.comm, p.argv = "renamed", []string{"old", "--other"}
				return p
			},
			wantArgv: []string{"old", "--other"}, wantUID: 0, wantExe: "/usr/bin/old",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.add(base)
			if _, err := tbl.Process(50); err != nil {
				t.Fatal(err)
			}
			f.add(tt.proc(base))
			p, err := tbl.Process(50)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantArgv, p.Argv); diff != "" {
				t.Errorf("Argv (-want +got):\n%s", diff)
			}
			if p.UID != tt.wantUID || p.Exe != tt.wantExe {
				t.Errorf("UID, Exe = %d, %q; want %d, %q", p.UID, p.Exe, tt.wantUID, tt.wantExe)
			}
		})
	}

	t.Run("no argv yet, mid-exec: read again next time", func(t *testing.T) {
		execing := base
		execing.startTicks, execing.exe, execing.argv = 4000, "/usr/bin/sleep", nil
		f.add(execing)
		if p, err := tbl.Process(50); err != nil || len(p.Argv) != 0 {
			t.Fatalf("Process mid-exec = %+v, %v; want no argv", p, err)
		}
		execing.argv = []string{"sleep", "30"}
		f.add(execing)
		p, err := tbl.Process(50)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(execing.argv, p.Argv); diff != "" {
			t.Errorf("Argv after the exec (-want +got):\n%s", diff)
		}
	})

	t.Run("returned argv is a copy", func(t *testing.T) {
		f.add(base)
		p, err := tbl.Process(50)
		if err != nil {
			t.Fatal(err)
		}
		p.Argv[0] = "mutated"
		again, err := tbl.Process(50)
		if err != nil {
			t.Fatal(err)
		}
		if again.Argv[0] != "old" {
			t.Errorf("Argv[0] = %q after a caller changed its copy, want %q", again.Argv[0], "old")
		}
	})
}

// processTree is 1 -> {10, 20}, 10 -> {11, 12}, 11 -> {13}, and 14, whose
// ppid 10 started after it (a reused pid).
func processTree(t *testing.T) *fakeProc {
	f := newFakeProc(t)
	for _, p := range []fakeProcess{
		{pid: 1, ppid: 0, startTicks: 1},
		{pid: 10, ppid: 1, startTicks: 100},
		{pid: 20, ppid: 1, startTicks: 100},
		{pid: 12, ppid: 10, startTicks: 120},
		{pid: 11, ppid: 10, startTicks: 110},
		{pid: 13, ppid: 11, startTicks: 130},
		{pid: 14, ppid: 10, startTicks: 50},
	} {
		p.comm = "p" + strconv.Itoa(p.pid)
		f.add(p)
	}
	return f
}

func TestIsDescendant(t *testing.T) {
	tbl := NewTable(DirFS(processTree(t).root))
	tests := []struct {
		pid, root int
		want      bool
	}{
		{13, 10, true},
		{13, 11, true},
		{13, 1, true},
		{13, 13, true},
		{12, 11, false},
		{10, 13, false},
		{20, 10, false},
		{14, 10, false}, // 10 is not really 14's parent
		{999, 1, false},
		{999, 999, true},
	}
	for _, tt := range tests {
		if got := tbl.IsDescendant(tt.pid, tt.root); got != tt.want {
			t.Errorf("IsDescendant(%d, %d) = %v, want %v", tt.pid, tt.root, got, tt.want)
		}
	}
}

func TestDescendants(t *testing.T) {
	tbl := NewTable(DirFS(processTree(t).root))
	tests := []struct {
		root int
		want []int
	}{
		{10, []int{10, 11, 12, 13}},
		{1, []int{1, 10, 20, 11, 12, 13}},
		{13, []int{13}},
		{999, nil},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.root), func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tbl.Descendants(tt.root)); diff != "" {
				t.Errorf("Descendants(%d) (-want +got):\n%s", tt.root, diff)
			}
		})
	}
}

// recordingFS records the processes whose fds were searched (listed or
// read by number), in order, and the files read.
type recordingFS struct {
	FS
	mu        sync.Mutex
	fdReads   []string // "PID/fd", once for each run of reads of one process
	fdLists   int      // fd directories listed
	fileReads []string
}

func (r *recordingFS) noteFDs(dir string) {
	r.mu.Lock()
	if len(r.fdReads) == 0 || r.fdReads[len(r.fdReads)-1] != dir {
		r.fdReads = append(r.fdReads, dir)
	}
	r.mu.Unlock()
}

func (r *recordingFS) Readlink(name string) (string, error) {
	if dir, _, ok := strings.Cut(name, "/fd/"); ok {
		r.noteFDs(dir + "/fd")
	}
	return r.FS.Readlink(name)
}

func (r *recordingFS) ReadFile(name string) ([]byte, error) {
	r.mu.Lock()
	r.fileReads = append(r.fileReads, name)
	r.mu.Unlock()
	return r.FS.ReadFile(name)
}

// reset forgets what was read so far.
func (r *recordingFS) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fdReads, r.fileReads, r.fdLists = nil, nil, 0
}

func (r *recordingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if strings.HasSuffix(name, "/fd") {
		r.noteFDs(name)
		r.mu.Lock()
		r.fdLists++
		r.mu.Unlock()
	}
	return r.FS.ReadDir(name)
}

func TestSocketOwnerFake(t *testing.T) {
	skipUnlessLittleEndian(t)
	ap := netip.MustParseAddrPort
	f := newFakeProc(t)
	f.add(fakeProcess{pid: 1, comm: "init", startTicks: 1})
	f.add(fakeProcess{pid: 100, ppid: 1, comm: "agent", startTicks: 10, fds: map[int]string{0: "/dev/null", 5: "socket:[1004]"}})
	f.add(fakeProcess{pid: 101, ppid: 100, comm: "curl", startTicks: 20, fds: map[int]string{0: "/dev/null", 1: "pipe:[77]", 3: "socket:[1001]", 4: "socket:[1002]"}})
	f.add(fakeProcess{pid: 200, ppid: 1, comm: "other", startTicks: 5, fds: map[int]string{3: "socket:[10011]", 7: "socket:[1003]"}})
	f.write("net/tcp", netTCPHeader+
		netTCPLine(0, ap("127.0.0.1:8080"), ap("0.0.0.0:0"), "0A", 999)+
		netTCPLine(1, ap("127.0.0.1:40000"), ap("127.0.0.1:8080"), "01", 1001)+
		netTCPLine(2, ap("127.0.0.1:40003"), ap("127.0.0.1:8080"), "06", 0)+ // TIME_WAIT: no inode
		netTCPLine(3, ap("127.0.0.1:40003"), ap("127.0.0.1:8080"), "01", 1004)+
		netTCPLine(4, ap("127.0.0.1:40004"), ap("127.0.0.1:8080"), "01", 1005)) // owner gone
	f.write("net/tcp6", netTCPHeader+
		netTCPLine(0, ap("[::ffff:127.0.0.1]:40001"), ap("[::ffff:127.0.0.1]:8080"), "01", 1002)+
		netTCPLine(1, ap("[::1]:40002"), ap("[::1]:8080"), "01", 1003))

	tests := []struct {
		name          string
		local, remote netip.AddrPort
		candidates    []int // nil: no candidates func
		want          int
		wantErr       error
		wantFDReads   []string // nil: not checked
	}{
		{
			name: "ipv4 found among candidates without a full scan", local: ap("127.0.0.1:40000"), remote: ap("127.0.0.1:8080"),
			candidates: []int{100, 101}, want: 101, wantFDReads: []string{"100/fd", "101/fd"},
		},
		{
			name: "ipv4 query matches a v4-mapped tcp6 line", local: ap("127.0.0.1:40001"), remote: ap("127.0.0.1:8080"),
			candidates: []int{100, 101}, want: 101,
		},
		{
			name: "v4-mapped query matches a tcp line", local: ap("[::ffff:127.0.0.1]:40000"), remote: ap("[::ffff:127.0.0.1]:8080"),
			candidates: []int{101}, want: 101, wantFDReads: []string{"101/fd"},
		},
		{
			name: "ipv6 outside the candidates is found by the full scan", local: ap("[::1]:40002"), remote: ap("[::1]:8080"),
			candidates: []int{100, 101, 100}, want: 200, wantFDReads: []string{"100/fd", "101/fd", "1/fd", "200/fd"},
		},
		{
			name: "no candidates", local: ap("[::1]:40002"), remote: ap("[::1]:8080"), want: 200,
		},
		{
			name: "TIME_WAIT line without inode is skipped", local: ap("127.0.0.1:40003"), remote: ap("127.0.0.1:8080"),
			candidates: []int{101, 100}, want: 100,
		},
		{
			name: "socket without owner", local: ap("127.0.0.1:40004"), remote: ap("127.0.0.1:8080"),
			candidates: []int{100, 101}, wantErr: ErrNotFound,
		},
		{
			name: "no such socket", local: ap("127.0.0.1:40009"), remote: ap("127.0.0.1:8080"),
			wantErr: ErrNotFound, wantFDReads: []string{},
		},
		{
			name: "the other direction is another socket", local: ap("127.0.0.1:8080"), remote: ap("127.0.0.1:40000"),
			wantErr: ErrNotFound,
		},
		{
			name: "missing candidate pids are skipped", local: ap("127.0.0.1:40000"), remote: ap("127.0.0.1:8080"),
			candidates: []int{555, 101}, want: 101,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rfs := &recordingFS{FS: DirFS(f.root)}
			tbl := NewTable(rfs)
			var cands func() []int
			if tt.candidates != nil {
				cands = func() []int { return tt.candidates }
			}
			got, err := tbl.SocketOwner(tt.local, tt.remote, cands)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("SocketOwner error = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("SocketOwner = %d, want %d", got, tt.want)
			}
			if tt.wantFDReads != nil {
				if diff := cmp.Diff(tt.wantFDReads, rfs.fdReads, cmp.Comparer(func(a, b []string) bool {
					return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b)
				})); diff != "" {
					t.Errorf("fd directories read (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestSocketOwnerTables(t *testing.T) {
	skipUnlessLittleEndian(t)
	ap := netip.MustParseAddrPort
	local, remote := ap("127.0.0.1:40000"), ap("127.0.0.1:8080")

	t.Run("without tcp6 (no IPv6 in the kernel)", func(t *testing.T) {
		f := newFakeProc(t)
		f.add(fakeProcess{pid: 5, comm: "x", startTicks: 1, fds: map[int]string{3: "socket:[42]"}})
		f.write("net/tcp", netTCPHeader+netTCPLine(0, local, remote, "01", 42))
		got, err := NewTable(DirFS(f.root)).SocketOwner(local, remote, nil)
		if err != nil || got != 5 {
			t.Errorf("SocketOwner = %d, %v; want 5, nil", got, err)
		}
	})
	t.Run("without any table it is an error, not ErrNotFound", func(t *testing.T) {
		f := newFakeProc(t)
		_, err := NewTable(DirFS(f.root)).SocketOwner(local, remote, nil)
		if err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("SocketOwner error = %v, want a read error that is not ErrNotFound", err)
		}
	})
}

func TestDirFSRejectsEscapes(t *testing.T) {
	f := newFakeProc(t)
	fsys := DirFS(f.root)
	for _, name := range []string{"../etc/passwd", "/etc/passwd", "1/../../x", ""} {
		if _, err := fsys.ReadFile(name); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("ReadFile(%q) error = %v, want fs.ErrInvalid", name, err)
		}
		if _, err := fsys.ReadDir(name); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("ReadDir(%q) error = %v, want fs.ErrInvalid", name, err)
		}
		if _, err := fsys.Readlink(name); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Readlink(%q) error = %v, want fs.ErrInvalid", name, err)
		}
	}
	if got, err := fsys.Readlink("self"); err != nil || got != "1" {
		t.Errorf("Readlink(self) = %q, %v; want \"1\", nil", got, err)
	}
}

func TestTableConcurrent(t *testing.T) {
	tbl := NewTable(DirFS(processTree(t).root))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := tbl.Process(13); err != nil {
					t.Error(err)
					return
				}
				tbl.IsDescendant(13, 10)
			}
		})
	}
	wg.Wait()
}

// fdLinkCounter counts Readlink calls under fd directories.
type fdLinkCounter struct {
	FS
	fdReadlinks *int
}

func (c fdLinkCounter) Readlink(name string) (string, error) {
	if strings.Contains(name, "/fd/") {
		*c.fdReadlinks++
	}
	return c.FS.Readlink(name)
}

// A process holding thousands of sockets: the newest, looked up, is found
// with one readlink, not one per fd.
func TestSocketOwnerNewestFDFirst(t *testing.T) {
	f := newFakeProc(t)
	fds := map[int]string{0: "/dev/null"}
	for fd := 3; fd < 2003; fd++ {
		fds[fd] = "socket:[" + strconv.Itoa(10000+fd) + "]"
	}
	f.add(fakeProcess{pid: 100, ppid: 1, comm: "loadgen", startTicks: 10, fds: fds})
	n := 0
	tbl := NewTable(fdLinkCounter{DirFS(f.root), &n})
	if !tbl.holdsFD(100, "socket:[12002]") {
		t.Fatal("the newest socket not found")
	}
	if n != 1 {
		t.Errorf("%d readlinks to find the newest fd, want 1", n)
	}
	if !tbl.holdsFD(100, "socket:[10003]") || tbl.holdsFD(100, "socket:[9]") {
		t.Error("oldest fd not found, or a socket it does not hold found")
	}
}

// TestSocketOwnerFDHint: a process holding many sockets is listed once; its
// next socket, at the following fd, is found by reading the few links
// around the last find, without listing its fds again. One that is
// elsewhere is still found, by a listing.
func TestSocketOwnerFDHint(t *testing.T) {
	skipUnlessLittleEndian(t)
	ap := netip.MustParseAddrPort
	f := newFakeProc(t)
	fds := map[int]string{}
	var tcp strings.Builder
	tcp.WriteString(netTCPHeader)
	for fd := 3; fd < 403; fd++ {
		fds[fd] = "socket:[" + strconv.Itoa(5000+fd) + "]"
		tcp.WriteString(netTCPLine(fd, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(40000+fd)), ap("127.0.0.1:8080"), "01", uint64(5000+fd)))
	}
	f.add(fakeProcess{pid: 300, ppid: 1, comm: "loadgen", startTicks: 5, fds: fds})
	f.write("net/tcp", tcp.String())
	rfs := &recordingFS{FS: DirFS(f.root)}
	tbl := NewTable(rfs)
	cands := func() []int { return []int{300} }
	for _, step := range []struct {
		fd        int
		wantLists int
	}{
		{300, 1}, // no hint yet
		{301, 0}, // next up
		{299, 0}, // just behind
		{330, 0}, // a few ahead
		{100, 1}, // far from the hint
		{101, 0},
	} {
		rfs.reset()
		local := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(40000+step.fd))
		got, err := tbl.SocketOwner(local, ap("127.0.0.1:8080"), cands)
		if err != nil || got != 300 {
			t.Fatalf("socket at fd %d: owner %d, %v; want 300", step.fd, got, err)
		}
		if rfs.fdLists != step.wantLists {
			t.Errorf("socket at fd %d: fd directory listed %d times, want %d", step.fd, rfs.fdLists, step.wantLists)
		}
	}
}
