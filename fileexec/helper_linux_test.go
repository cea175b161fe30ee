//go:build linux

package fileexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// helperEnv selects the helper mode of the test binary: a process in a
// private mount namespace that opens and executes files when told to.
const helperEnv = "FILEEXEC_TEST_HELPER"

// filterEnv makes the helper run under a seccomp filter that hands the
// calls Calls decides to a listener, which it sends on fd 3 before it
// says it is ready. "ns" adds the calls Nested answers (unshare, clone,
// mount, umount2, pivot_root), and a listener the kernel waits for
// whatever signal comes, as the session's filter has.
const filterEnv = "FILEEXEC_TEST_FILTER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// runHelper makes "/" rprivate in its namespace (made by CLONE_NEWNS), says
// "ready", then answers one line per command:
//
//	open PATH r|w|rw|a|t|c    → ok | err ERRNO
//	openn PATH N              → ok | err ERRNO (N opens of PATH for reading, one after another)
//	popen PATH N              → ok | err ERRNO (N opens at once, each on its own thread)
//	pdir DIR N [FILE M]       → ok | err ERRNO (every file of DIR opened for reading, on N threads at once,
//	                            while M more threads open FILE in a loop)
//	exec PATH                 → ok | err ERRNO
//	fsop OP PATH [PATH2]      → ok | err ERRNO: OP is read, write, append, trunc (truncate(2)), rename,
//	                            link, symlink, unlink, rmdir, mkdir
//	cd DIR                    → ok | err ERRNO
//	recd .                    → ok | err ERRNO (chdir to the working directory's path again)
//	bench PATH N              → ok NANOSECONDS (N open+close of PATH)
//	renames PATH N            → ok NANOSECONDS (N renames of PATH to PATH.2 and back, 2N in all)
func runHelper(in io.Reader, out io.Writer) int {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintln(out, "err", err)
		return 1
	}
	if mode := os.Getenv(filterEnv); mode != "" {
		l, err := installCallFilter(mode == "ns")
		if err != nil {
			fmt.Fprintln(out, "err", err)
			return 1
		}
		if err := unix.Sendmsg(3, []byte("L"), unix.UnixRights(l), nil, 0); err != nil {
			fmt.Fprintln(out, "err", err)
			return 1
		}
		unix.Close(l)
	}
	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			fmt.Fprintln(out, "err EINVAL")
			continue
		}
		n := 1
		if len(f) > 2 {
			n, _ = strconv.Atoi(f[2])
		}
		switch f[0] {
		case "open":
			flags := map[string]int{
				"r": unix.O_RDONLY, "w": unix.O_WRONLY, "rw": unix.O_RDWR, "a": unix.O_WRONLY | unix.O_APPEND,
				"t": unix.O_RDONLY | unix.O_TRUNC, "c": unix.O_WRONLY | unix.O_CREAT,
			}[f[2]]
			fmt.Fprintln(out, reply(openClose(f[1], flags)))
		case "openn":
			var err error
			for i := 0; i < n && err == nil; i++ {
				err = openClose(f[1], unix.O_RDONLY)
			}
			fmt.Fprintln(out, reply(err))
		case "popen":
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { errs[i] = openClose(f[1], unix.O_RDONLY) })
			}
			wg.Wait()
			fmt.Fprintln(out, reply(errors.Join(errs...)))
		case "fsop":
			fmt.Fprintln(out, reply(fsop(f[1:])))
		case "cd":
			fmt.Fprintln(out, reply(unix.Chdir(f[1])))
		case "recd":
			wd, err := os.Getwd()
			if err == nil {
				err = unix.Chdir(wd)
			}
			fmt.Fprintln(out, reply(err))
		case "pdir":
			stop := make(chan struct{})
			var storm sync.WaitGroup
			if len(f) == 5 {
				m, _ := strconv.Atoi(f[4])
				for range m {
					storm.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
								openClose(f[3], unix.O_RDONLY)
							}
						}
					})
				}
			}
			err := openDir(f[1], n)
			close(stop)
			storm.Wait()
			fmt.Fprintln(out, reply(err))
		case "exec":
			err := exec.Command(f[1]).Run()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				err = nil // it ran
			}
			fmt.Fprintln(out, reply(err))
		case "nested":
			fmt.Fprintln(out, nested(f[1:]))
		case "ovl":
			fmt.Fprintln(out, overlayOpen(f[1:]))
		case "hidden":
			fmt.Fprintln(out, hiddenMount(f[1:]))
		case "nsexec":
			fmt.Fprintln(out, nsExec(f[1:]))
		case "unshare":
			flags, _ := strconv.ParseUint(f[1], 0, 64)
			fmt.Fprintln(out, onThread(func() string { return reply(unix.Unshare(int(flags))) }))
		case "renames":
			start := time.Now()
			var err error
			for i := 0; i < n && err == nil; i++ {
				if err = unix.Rename(f[1], f[1]+".2"); err == nil {
					err = unix.Rename(f[1]+".2", f[1])
				}
			}
			if err != nil {
				fmt.Fprintln(out, reply(err))
				continue
			}
			fmt.Fprintln(out, "ok", time.Since(start).Nanoseconds())
		case "bench":
			start := time.Now()
			for range n {
				fd, err := unix.Open(f[1], unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					fmt.Fprintln(out, reply(err))
					continue
				}
				unix.Close(fd)
			}
			fmt.Fprintln(out, "ok", time.Since(start).Nanoseconds())
		default:
			fmt.Fprintln(out, "err EINVAL")
		}
	}
	return 0
}

// onThread runs fn on a thread of its own, which it may leave in another
// namespace: the thread ends with it.
func onThread(fn func() string) string {
	ch := make(chan string)
	go func() {
		runtime.LockOSThread() // never unlocked
		ch <- fn()
	}()
	return <-ch
}

// nested is the helper's nested command, on a thread of its own: it
// makes a mount namespace (unshare), opens a file through a bind mount of
// its directory elsewhere and then by its own path, and writes a file in
// a tmpfs it mounts:
//
//	nested SECRET ALIASDIR TMPDIR → unshare bind alias direct tmpfs write (one word each: ok or the errno)
func nested(a []string) string {
	if len(a) != 3 {
		return "err EINVAL"
	}
	secret, alias, tmp := a[0], a[1], a[2]
	return onThread(func() string {
		var out []string
		step := func(err error) { out = append(out, reply(err)) }
		step(unix.Unshare(unix.CLONE_NEWNS))
		step(unix.Mount(filepath.Dir(secret), alias, "", unix.MS_BIND, ""))
		step(openClose(filepath.Join(alias, filepath.Base(secret)), unix.O_RDONLY))
		step(openClose(secret, unix.O_RDONLY))
		step(unix.Mount("none", tmp, "tmpfs", 0, ""))
		step(os.WriteFile(filepath.Join(tmp, "own"), []byte("mine\n"), 0o644))
		return strings.Join(out, " ")
	})
}

// overlayOpen makes a mount namespace, mounts an overlay of LOWER1 and
// LOWER2 at MNT and opens MNT/FILE:
//
//	ovl LOWER1 LOWER2 MNT FILE → ok | err ERRNO
func overlayOpen(a []string) string {
	if len(a) != 4 {
		return "err EINVAL"
	}
	return onThread(func() string {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return reply(err)
		}
		if err := unix.Mount("overlay", a[2], "overlay", 0, "lowerdir="+a[0]+":"+a[1]); err != nil {
			return reply(err)
		}
		return reply(openClose(a[2]+"/"+a[3], unix.O_RDONLY))
	})
}

// hiddenMount makes a mount namespace, holds DIR open, hides it under a
// tmpfs, and bind-mounts SRC at DIR/SUB through the descriptor (where no
// path from the root leads), then reads SRC's FILE through it:
//
//	hidden DIR SUB SRC FILE → ok | err ERRNO
func hiddenMount(a []string) string {
	if len(a) != 4 {
		return "err EINVAL"
	}
	return onThread(func() string {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return reply(err)
		}
		fd, err := unix.Open(a[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return reply(err)
		}
		if err := unix.Mount("none", a[0], "tmpfs", 0, ""); err != nil {
			return reply(err)
		}
		under := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + a[1]
		if err := unix.Mount(a[2], under, "", unix.MS_BIND, ""); err != nil {
			return reply(err)
		}
		return reply(openClose(under+"/"+a[3], unix.O_RDONLY))
	})
}

// nsExec runs PROG ARGS... in a mount namespace of its own, made by clone
// (CLONE_NEWNS), and replies with its exit status:
//
//	nsexec PROG ARGS... → ok STATUS | err ERRNO
func nsExec(a []string) string {
	cmd := exec.Command(a[0], a[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return "ok " + strconv.Itoa(exit.ExitCode())
	}
	if err != nil {
		return reply(err)
	}
	return "ok 0"
}

func openClose(path string, flags int) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// openDir opens every file of dir for reading, on n threads at once (each
// goroutine locked to its own thread while it opens).
func openDir(dir string, n int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	next := make(chan string, len(ents))
	for _, e := range ents {
		next <- dir + "/" + e.Name()
	}
	close(next)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for p := range next {
				if err := openClose(p, unix.O_RDONLY); err != nil && errs[i] == nil {
					errs[i] = err
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fsop does one file system operation of the helper's fsop command.
func fsop(a []string) error {
	if len(a) < 2 {
		return unix.EINVAL
	}
	two := func() string {
		if len(a) < 3 {
			return ""
		}
		return a[2]
	}
	switch a[0] {
	case "read":
		return openClose(a[1], unix.O_RDONLY)
	case "write":
		return openClose(a[1], unix.O_WRONLY)
	case "append":
		fd, err := unix.Open(a[1], unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte("forged\n"))
		return err
	case "trunc":
		return unix.Truncate(a[1], 0)
	case "rename":
		return unix.Rename(a[1], two())
	case "link":
		return unix.Link(a[1], two())
	case "symlink":
		return unix.Symlink(a[1], two())
	case "unlink":
		return unix.Unlink(a[1])
	case "rmdir":
		return unix.Rmdir(a[1])
	case "mkdir":
		return unix.Mkdir(a[1], 0o755)
	case "linkfollow":
		return unix.Linkat(unix.AT_FDCWD, a[1], unix.AT_FDCWD, two(), unix.AT_SYMLINK_FOLLOW)
	case "linkfd": // link the file held by an O_PATH descriptor, through /proc/self/fd
		fd, err := unix.Open(a[1], unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, two(), unix.AT_SYMLINK_FOLLOW)
	case "linkat": // relative to a directory descriptor of the first path's directory
		dir, err := unix.Open(filepath.Dir(a[1]), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		return unix.Linkat(dir, filepath.Base(a[1]), unix.AT_FDCWD, two(), 0)
	case "exchange":
		return unix.Renameat2(unix.AT_FDCWD, a[1], unix.AT_FDCWD, two(), unix.RENAME_EXCHANGE)
	case "uring":
		var params [120]byte
		fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
		if errno != 0 {
			return errno
		}
		return unix.Close(int(fd))
	}
	return unix.EINVAL
}

// installCallFilter installs, on every thread, a seccomp filter that hands
// the native calls Calls decides to a new listener, as the session's
// filter does; with ns, also the calls Nested answers (every clone among
// them), and the listener's calls wait for the answer whatever signal
// comes.
func installCallFilter(ns bool) (int, error) {
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = auditArchX86_64
	case "arm64":
		arch = auditArchAArch64
	default:
		return -1, fmt.Errorf("no test filter for %s", runtime.GOARCH)
	}
	var nrs []uint32
	for k := range callNumbers {
		if k.arch == arch {
			nrs = append(nrs, uint32(k.nr))
		}
	}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
	var withFlags []uint32 // unshare and clone: notified for a mount or cgroup namespace
	if ns {
		for k, c := range nsNumbers {
			switch {
			case k.arch != arch:
			case c == nsMount:
				nrs = append(nrs, uint32(k.nr))
			default:
				withFlags = append(withFlags, uint32(k.nr))
			}
		}
		flags |= unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
	}
	const ret = unix.BPF_RET | unix.BPF_K
	jeq := func(k uint32, jt uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt}
	}
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, // arch
		jeq(arch, 1),
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // nr
	}
	// Then: one jump per call to notify, one per call with flags, allow;
	// the flags (load, test, allow); notify.
	toNotify := len(nrs) + len(withFlags) + 4
	for i, nr := range nrs {
		prog = append(prog, jeq(nr, uint8(toNotify-1-i)))
	}
	for i, nr := range withFlags {
		prog = append(prog, jeq(nr, uint8(len(withFlags)-i)))
	}
	prog = append(prog,
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 16}, // args[0], low half
		unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: cloneNewNS | cloneNewCgroup, Jt: 1},
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_USER_NOTIF})
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, fmt.Errorf("seccomp: %w", errno)
	}
	return int(fd), nil
}

func reply(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "err " + unix.ErrnoName(errno)
	}
	return "err " + strings.ReplaceAll(err.Error(), " ", "_")
}

// child is a helper process in its own private mount namespace.
type child struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	mnt  string // its mount namespace, as /proc/<pid>/ns/mnt reads
	pid  int
	done chan struct{}
}

func startChild(tb testing.TB) *child {
	tb.Helper()
	c, _ := startChildFiltered(tb, false)
	return c
}

// startChildFiltered is startChild, with the child under the filter of
// installCallFilter when filtered, whose listener it returns.
func startChildFiltered(tb testing.TB, filtered bool) (*child, *os.File) {
	tb.Helper()
	mode := ""
	if filtered {
		mode = "1"
	}
	return startChildWith(tb, mode, "")
}

// startChildWith is startChildFiltered with filterEnv set to mode ("" for
// no filter), started in cgroup (a cgroup v2 directory; "" for the
// test's own).
func startChildWith(tb testing.TB, mode, cgroup string) (*child, *os.File) {
	tb.Helper()
	filtered := mode != ""
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var mine *os.File
	if filtered {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			tb.Fatal(err)
		}
		mine = os.NewFile(uintptr(fds[0]), "sock")
		theirs := os.NewFile(uintptr(fds[1]), "sock-helper")
		defer theirs.Close()
		defer mine.Close()
		cmd.ExtraFiles = []*os.File{theirs}
		cmd.Env = append(cmd.Env, filterEnv+"="+mode)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if cgroup != "" {
		cg, err := os.Open(cgroup)
		if err != nil {
			tb.Fatal(err)
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReader(outPipe), pid: cmd.Process.Pid, done: make(chan struct{})}
	tb.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	if line := c.line(tb); line != "ready" {
		tb.Fatalf("helper did not start: %q", line)
	}
	if c.mnt, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", c.pid)); err != nil {
		tb.Fatal(err)
	}
	if self, _ := os.Readlink("/proc/self/ns/mnt"); self == c.mnt {
		tb.Fatal("helper shares the test's mount namespace")
	}
	if !filtered {
		return c, nil
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(mine.Fd()), buf, oob, 0)
	if err != nil || n != 1 || buf[0] != 'L' {
		tb.Fatalf("helper sent no listener: %v", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		tb.Fatalf("helper sent no listener: %v", err)
	}
	lfds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(lfds) != 1 {
		tb.Fatalf("helper sent no listener: %v", err)
	}
	l := os.NewFile(uintptr(lfds[0]), "seccomp-listener")
	tb.Cleanup(func() { l.Close() })
	return c, l
}

// line reads the child's next line; a child that stays silent for a minute
// is stuck (an open that was never answered), which fails the test.
func (c *child) line(tb testing.TB) string {
	tb.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := c.out.ReadString('\n')
		ch <- strings.TrimSpace(s)
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(time.Minute):
		tb.Fatal("helper did not answer within a minute: an open was never answered")
		return ""
	}
}

// send writes a command without waiting for its answer.
func (c *child) send(tb testing.TB, cmd string) {
	tb.Helper()
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		tb.Fatal(err)
	}
}

func (c *child) do(tb testing.TB, cmd string) string {
	tb.Helper()
	c.send(tb, cmd)
	return c.line(tb)
}

// inNamespace says whether pid is in the mount namespace mnt: the tests'
// session is everything in the helper's namespace.
func inNamespace(mnt string) func(int) bool {
	return func(pid int) bool {
		s, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		return err == nil && s == mnt
	}
}

func processOf(pid int) (*event.Process, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, err
	}
	return &event.Process{PID: pid, Exe: exe}, nil
}

// recorder keeps what Decide was asked and what was published.
type recorder struct {
	mu        sync.Mutex
	decided   []event.File
	published []*event.Event
}

func (r *recorder) decideCalls() []event.File {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.File(nil), r.decided...)
}

func (r *recorder) events() []*event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*event.Event(nil), r.published...)
}

// watch starts WatchMounts on c's namespace with decide, skipping the test
// where fanotify permission events are not available.
func watch(tb testing.TB, c *child, decide func(context.Context, *event.Event) event.Verdict, edit ...func(*FileOptions)) (*Files, *recorder) {
	tb.Helper()
	r := &recorder{}
	o := FileOptions{
		Session:   "s1",
		InSession: inNamespace(c.mnt),
		Process:   processOf,
		Decider: event.DeciderFunc(func(ctx context.Context, e *event.Event) event.Verdict {
			r.mu.Lock()
			r.decided = append(r.decided, *e.File)
			r.mu.Unlock()
			return decide(ctx, e)
		}),
		Publish: func(e *event.Event) {
			r.mu.Lock()
			r.published = append(r.published, e)
			r.mu.Unlock()
		},
	}
	for _, fn := range edit {
		fn(&o)
	}
	f, err := WatchMounts(c.pid, o)
	if errors.Is(err, ErrUnavailable) {
		tb.Skipf("fanotify permission events unavailable: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f, r
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: fanotify permission events and mount namespaces")
	}
}

func allowAll(context.Context, *event.Event) event.Verdict {
	return event.Verdict{Action: event.Allow}
}

// denyPaths denies the opens of the given paths and allows the rest.
func denyPaths(paths ...string) func(context.Context, *event.Event) event.Verdict {
	return func(_ context.Context, e *event.Event) event.Verdict {
		for _, p := range paths {
			if e.File.Path == p {
				return event.Verdict{Action: event.Deny, Rule: "test-deny"}
			}
		}
		return event.Verdict{Action: event.Allow}
	}
}

// writeFile makes a file in a fresh directory and returns its path.
func writeFile(tb testing.TB, name string) string {
	tb.Helper()
	p := tb.TempDir() + "/" + name
	if err := os.WriteFile(p, []byte("data\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}
