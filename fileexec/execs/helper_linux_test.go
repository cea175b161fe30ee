//go:build linux

package execs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tests run the test binary again as a helper child (helperEnv set):
// it installs an exec notification filter like the session's, hands the
// listener to the test over a SOCK_SEQPACKET socket (fd 3), then runs the
// commands the test sends there and answers each with a helperResult.
const helperEnv = "CHAPERONE_EXECS_TEST_HELPER"

// argvPrinterEnv makes the test binary print its argv, each argument
// followed by a NUL, and exit: the tests run it as a #! interpreter and
// under the dynamic loader to see what the kernel and the loader pass.
const argvPrinterEnv = "CHAPERONE_EXECS_TEST_ARGV"

func TestMain(m *testing.M) {
	if os.Getenv(argvPrinterEnv) != "" {
		for _, a := range os.Args {
			os.Stdout.WriteString(a + "\x00")
		}
		os.Exit(0)
	}
	if mode := os.Getenv(helperEnv); mode != "" {
		if err := runHelper(mode); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperCmd is one command to the helper.
type helperCmd struct {
	Op   string   // "exec", "execveat", "bench"
	Path string   // the program
	Argv []string // nil: an empty argv
	Dir  string   // working directory of the child; "" keeps the helper's
	N    int      // bench: how many times
	// Via, when set, runs Path through a descriptor: Path is opened (its
	// content copied into a memfd named "payload" when Memfd), and the
	// exec's path is Via with %d replaced by the descriptor
	// ("/proc/self/fd/%d"). execveat uses the descriptor itself.
	Via   string
	Memfd bool
}

// helperResult is the helper's answer.
type helperResult struct {
	Errno   string // the exec's error as its name ("EPERM"), "" when it ran
	Status  string // "exit 0", "signal killed"
	Stdout  string
	Elapsed time.Duration // bench
}

func runHelper(mode string) error {
	sock := os.NewFile(3, "sock")
	if mode == "filtered" {
		l, err := installTestFilter()
		if err != nil {
			return err
		}
		if err := unix.Sendmsg(3, []byte("L"), unix.UnixRights(l), nil, 0); err != nil {
			return err
		}
		unix.Close(l)
	} else if _, err := sock.Write([]byte("N")); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for {
		n, err := sock.Read(buf)
		if err == io.EOF || n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		var c helperCmd
		if err := json.Unmarshal(buf[:n], &c); err != nil {
			return err
		}
		var r helperResult
		switch c.Op {
		case "exec":
			r = spawn(c)
		case "execveat":
			r = execveatFromThread(c)
		case "bench":
			start := time.Now()
			for range c.N {
				if r = spawn(c); r.Status != "exit 0" {
					break
				}
			}
			r.Elapsed = time.Since(start)
		default:
			return fmt.Errorf("unknown op %q", c.Op)
		}
		out, _ := json.Marshal(r)
		if _, err := sock.Write(out); err != nil {
			return err
		}
	}
}

// openVia opens c.Path for an exec through a descriptor, inherited by
// children (no close-on-exec): the file itself, or a memfd with its
// content.
func openVia(c helperCmd) (int, error) {
	if !c.Memfd {
		return unix.Open(c.Path, unix.O_RDONLY, 0)
	}
	b, err := os.ReadFile(c.Path)
	if err != nil {
		return -1, err
	}
	fd, err := unix.MemfdCreate("payload", 0)
	if err != nil {
		return -1, err
	}
	if _, err := unix.Write(fd, b); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// spawn runs c.Path with c.Argv exactly (empty included) and waits.
func spawn(c helperCmd) helperResult {
	if c.Via != "" {
		fd, err := openVia(c)
		if err != nil {
			return helperResult{Errno: errnoName(err)}
		}
		defer unix.Close(fd)
		c.Path, c.Via = fmt.Sprintf(c.Via, fd), ""
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return helperResult{Errno: err.Error()}
	}
	defer rd.Close()
	argv := c.Argv
	if argv == nil {
		argv = []string{}
	}
	pid, err := syscall.ForkExec(c.Path, argv, &syscall.ProcAttr{Dir: c.Dir, Files: []uintptr{0, wr.Fd(), 2}})
	wr.Close()
	if err != nil {
		return helperResult{Errno: errnoName(err)}
	}
	out, _ := io.ReadAll(rd)
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return helperResult{Errno: errnoName(err)}
	}
	return helperResult{Status: status(ws), Stdout: string(out)}
}

func status(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}

func errnoName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

// execveatFromThread replaces the helper with c.Path through
// execveat(fd, "", AT_EMPTY_PATH), called from a thread that is not the
// process's leader, after printing "nonleader" when it is one. Only a
// failed exec comes back.
func execveatFromThread(c helperCmd) helperResult {
	fd, err := unix.Open(c.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if c.Memfd {
		fd, err = openVia(c)
	}
	if err != nil {
		return helperResult{Errno: errnoName(err)}
	}
	defer unix.Close(fd)
	argv, err := syscall.SlicePtrFromStrings(c.Argv)
	if err != nil {
		return helperResult{Errno: err.Error()}
	}
	envv, _ := syscall.SlicePtrFromStrings(os.Environ())
	empty, _ := syscall.BytePtrFromString("")
	res := make(chan helperResult)
	var run func()
	run = func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the exec, or with the goroutine
		if unix.Gettid() == unix.Getpid() {
			go run() // this goroutine keeps the leader's thread
			select {}
		}
		fmt.Println("nonleader")
		_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
			uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), unix.AT_EMPTY_PATH, 0)
		res <- helperResult{Errno: unix.ErrnoName(errno)}
	}
	go run()
	return <-res
}

// installTestFilter installs, on every thread, a seccomp filter that
// sends the native execve and execveat to a new listener, as the
// session's filter does.
func installTestFilter() (int, error) {
	var arch uint32
	var nrs [2]uint32
	switch runtime.GOARCH {
	case "amd64":
		arch, nrs = unix.AUDIT_ARCH_X86_64, [2]uint32{59, 322}
	case "arm64":
		arch, nrs = unix.AUDIT_ARCH_AARCH64, [2]uint32{221, 281}
	default:
		return -1, fmt.Errorf("no test filter for %s", runtime.GOARCH)
	}
	const (
		allow = unix.SECCOMP_RET_ALLOW
		notif = unix.SECCOMP_RET_USER_NOTIF
	)
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, // arch
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: arch, Jt: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: allow},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: nrs[0], Jt: 2},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: nrs[1], Jt: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: allow},
		{Code: unix.BPF_RET | unix.BPF_K, K: notif},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_TSYNC|unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, fmt.Errorf("seccomp: %w", errno)
	}
	return int(fd), nil
}

// helper is a running helper child.
type helper struct {
	cmd      *exec.Cmd
	sock     *os.File
	stdout   *syncBuffer
	listener *os.File // nil when unfiltered
}

// startHelper starts a helper child; filtered puts it under the filter.
func startHelper(t testing.TB, filtered bool) *helper {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds { // room for a command with a large argv
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20); err != nil {
			t.Fatal(err)
		}
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "sock"), os.NewFile(uintptr(fds[1]), "sock-helper")
	mode := "unfiltered"
	if filtered {
		mode = "filtered"
	}
	h := &helper{cmd: exec.Command(os.Args[0], "-test.run=^$"), sock: mine, stdout: &syncBuffer{}}
	h.cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	h.cmd.ExtraFiles = []*os.File{theirs}
	h.cmd.Stdout = h.stdout
	h.cmd.Stderr = os.Stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	t.Cleanup(func() {
		h.sock.Close()
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	})
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(fds[0], buf, oob, 0)
	if err != nil || n != 1 {
		t.Fatalf("helper did not start: %d bytes, %v", n, err)
	}
	if buf[0] == 'L' {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			t.Fatalf("helper sent no listener: %v", err)
		}
		lfds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(lfds) != 1 {
			t.Fatalf("helper sent no listener: %v", err)
		}
		h.listener = os.NewFile(uintptr(lfds[0]), "seccomp-listener")
	}
	return h
}

// send sends c without waiting for the answer.
func (h *helper) send(t testing.TB, c helperCmd) {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.sock.Write(b); err != nil {
		t.Fatal(err)
	}
}

// result waits for the answer to the last command.
func (h *helper) result(t testing.TB) helperResult {
	t.Helper()
	buf := make([]byte, 1<<20)
	n, err := h.sock.Read(buf)
	if err != nil {
		t.Fatalf("helper: %v (stdout %q)", err, h.stdout.String())
	}
	var r helperResult
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (h *helper) do(t testing.TB, c helperCmd) helperResult {
	t.Helper()
	h.send(t, c)
	return h.result(t)
}
