//go:build linux

package execs

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// selfRequest is an exec of path with argv by this process, as Serve
// would read it.
func selfRequest(t testing.TB, path string, argv ...string) *request {
	t.Helper()
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return &request{tid: os.Getpid(), tgid: os.Getpid(), path: path, resolved: path, argv: argv, cwd: cwd,
		kernel: path, args: execArgs{dirfd: atFDCWD}}
}

func newTestExecs() *Execs {
	x := &Execs{files: newFiles(fileCache), dirs: newDirIndex(dirCache)}
	x.learnLoaders()
	return x
}

// BenchmarkExecPlan times what Serve does for one exec before it asks the
// policy, with the file's digest cached (a program run before): "digest"
// is what it did before programs were followed (open the path, fstat,
// cached digest), "plan" what it does now (also the #! line, the ELF
// interpreter, a loader's program, and the verifier's expectation);
// "plan-uncached" the same for a file not seen before (read and hashed).
// Side by side:
//
//	go test -run '^$' -bench ExecPlan ./fileexec/execs
func BenchmarkExecPlan(b *testing.B) {
	needRoot(b)
	dir := b.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	ldso := systemLoader(b)
	for _, tt := range []struct {
		name string
		r    *request
	}{
		{"binary", selfRequest(b, "/bin/true", "true")},
		{"script", selfRequest(b, script, "script")},
		{"loader", selfRequest(b, ldso, ldso, "/bin/true")},
	} {
		x := newTestExecs()
		b.Run(tt.name+"/plan-uncached", func(b *testing.B) {
			// The exec's own file not seen before: it is read and hashed.
			fd, err := openTarget(tt.r)
			if err != nil {
				b.Fatal(err)
			}
			_, key, _, _ := x.files.of(fd)
			unix.Close(fd)
			for b.Loop() {
				b.StopTimer()
				x.files.mu.Lock()
				delete(x.files.m, key)
				clear(x.files.reals)
				x.files.mu.Unlock()
				b.StartTimer()
				fd, err := openTarget(tt.r)
				if err != nil {
					b.Fatal(err)
				}
				x.plan(tt.r, fd)
				unix.Close(fd)
				tt.r.close()
			}
		})
		b.Run(tt.name+"/digest", func(b *testing.B) {
			for b.Loop() {
				fd, err := openTarget(tt.r)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, _, err := x.files.of(fd); err != nil {
					b.Fatal(err)
				}
				unix.Close(fd)
				tt.r.close()
			}
		})
		b.Run(tt.name+"/plan", func(b *testing.B) {
			for b.Loop() {
				fd, err := openTarget(tt.r)
				if err != nil {
					b.Fatal(err)
				}
				p := x.plan(tt.r, fd)
				unix.Close(fd)
				tt.r.close()
				if p.deny != "" || p.errno != 0 {
					b.Fatalf("%+v", p)
				}
				_ = p.expectation(tt.r)
			}
		})
	}
}

// TestPlan checks the plan of a few execs by this process: the programs
// decided, with the argv each gets, and the verifier's expectation.
func TestPlan(t *testing.T) {
	needRoot(t)
	x := newTestExecs()
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh -e\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ldso := systemLoader(t)
	tests := []struct {
		name      string
		r         *request
		views     []string // path: argv
		interp    string
		kernel    []string
		lenient   bool
		identical bool // the final file's inode is checked
	}{
		{name: "binary", r: selfRequest(t, "/bin/true", "true", "x"), views: []string{`/bin/true: ["true" "x"]`}, kernel: []string{"true", "x"}, identical: true},
		{name: "script", r: selfRequest(t, script, "s", "x"), views: []string{script + `: ["s" "x"]`, `/bin/sh: ["/bin/sh" "-e" "` + script + `" "x"]`},
			interp: "/bin/sh", kernel: []string{"/bin/sh", "-e", script, "x"}, identical: true},
		{name: "loader", r: selfRequest(t, ldso, "ld.so", "--argv0", "a0", "/bin/true", "x"),
			views: []string{ldso + `: ["ld.so" "--argv0" "a0" "/bin/true" "x"]`, `/bin/true: ["a0" "x"]`}, kernel: []string{"ld.so", "--argv0", "a0", "/bin/true", "x"}, identical: true},
		{name: "not a program", r: selfRequest(t, "/etc/hostname", "h"), views: []string{`/etc/hostname: ["h"]`}, kernel: []string{"h"}, lenient: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := openTarget(tt.r)
			if err != nil {
				t.Fatal(err)
			}
			p := x.plan(tt.r, fd)
			unix.Close(fd)
			tt.r.close()
			var views []string
			for _, v := range p.views {
				views = append(views, v.path+": "+quoteAll(v.argv))
			}
			if got, want := quoteAll(views), quoteAll(tt.views); got != want {
				t.Errorf("views %s, want %s", got, want)
			}
			e := p.expectation(tt.r)
			want := expect(tt.kernel, tt.r.kernel)
			if tt.lenient {
				want = expect(tt.r.argv, tt.r.kernel)
			}
			if e.ArgvHash != want.ArgvHash || e.ArgvLen != want.ArgvLen {
				t.Errorf("expected argv is not %q", tt.kernel)
			}
			if got := e.Flags&expectLenient != 0; got != tt.lenient {
				t.Errorf("lenient %v, want %v", got, tt.lenient)
			}
			if got := e.Flags&expectInode != 0; got != tt.identical {
				t.Errorf("inode checked %v, want %v", got, tt.identical)
			}
			if tt.interp != "" && (e.Flags&expectInterp == 0 || e.InterpHash != fnv64a([]byte(tt.interp))) {
				t.Errorf("interpreter not expected as %q: %+v", tt.interp, e)
			}
		})
	}
}

func quoteAll(s []string) string {
	out := "["
	for i, a := range s {
		if i > 0 {
			out += " "
		}
		out += `"` + a + `"`
	}
	return out + "]"
}

func TestProcPath(t *testing.T) {
	tests := []struct {
		name, want string
		ok         bool
	}{
		{"/proc/self/fd/3", "/proc/10/fd/3", true},
		{"/proc/self/exe", "/proc/10/exe", true},
		{"/usr/bin/../../proc/self/exe", "/proc/10/exe", true},
		{"/proc/thread-self/fd/4", "/proc/10/task/11/fd/4", true},
		{"/dev/fd/5", "/proc/10/fd/5", true},
		{"/dev/stdin", "/proc/10/fd/0", true},
		{"/proc/1234/root/usr/bin/true", "/proc/1234/root/usr/bin/true", true},
		{"/proc/sys/kernel/x", "", false},
		{"/proc/1234", "", false},
		{"/usr/bin/true", "", false},
		{"fd/3", "", false},
	}
	for _, tt := range tests {
		got, ok := procPath(tt.name, 11, 10)
		if got != tt.want || ok != tt.ok {
			t.Errorf("procPath(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// Askers for a file whose read is in flight wait for it: a file version is
// read once however many execs of it are notified at once.
func TestFilesReadOnce(t *testing.T) {
	c := newFiles(fileCache)
	release := make(chan struct{})
	var reads atomic.Int32
	c.read = func(fd int) (*fileInfo, error) {
		reads.Add(1)
		<-release
		return c.readFile(fd)
	}
	fd, err := unix.Open("/bin/sh", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const askers = 8
	digests := make(chan string, askers)
	for range askers {
		go func() {
			info, _, _, err := c.of(fd)
			if err != nil {
				t.Error(err)
				digests <- ""
				return
			}
			digests <- info.digest
		}()
	}
	// Every asker but the reader waits for the read in flight.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		waiting := 0
		for _, r := range c.reading {
			waiting = r.waiters
		}
		c.mu.Unlock()
		if waiting == askers-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d askers wait for the read in flight and %d reads started, want %d waiting and one read", waiting, reads.Load(), askers-1)
		}
	}
	close(release)
	first := <-digests
	for range askers - 1 {
		if d := <-digests; d != first || d == "" {
			t.Errorf("digests %q and %q of one file", first, d)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the file was read %d times, want once", n)
	}
}
