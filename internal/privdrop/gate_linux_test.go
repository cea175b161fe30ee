//go:build linux

package privdrop

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// startGated starts sh -c script wrapped with o and waits until it is
// ready, returning the command, its output and the listener.
func startGated(t *testing.T, o Options, script string) (*exec.Cmd, *Gate, *bytes.Buffer, *os.File) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	g, err := WrapGated(cmd, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := g.Ready(ctx)
	if err != nil {
		t.Fatalf("Ready: %v (output %q)", err, out.String())
	}
	return cmd, g, &out, l
}

func TestGateMountNamespace(t *testing.T) {
	needRoot(t)
	o := Keep()
	o.MountNS = true
	cmd, g, out, l := startGated(t, o, "readlink /proc/self/ns/mnt; grep -c ' / / .*shared:' /proc/self/mountinfo")
	if l != nil {
		t.Error("a listener without ExecNotify")
	}
	mine, _ := os.Readlink("/proc/self/ns/mnt")
	theirs, err := os.Readlink("/proc/" + itoa(cmd.Process.Pid) + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if theirs == mine {
		t.Errorf("the shim is still in chaperone's mount namespace %s", mine)
	}
	if err := g.Open(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	lines := strings.Fields(out.String())
	if len(lines) < 2 || lines[0] != theirs || lines[1] != "0" {
		t.Errorf("program printed %q (exit %v); want its namespace %s and no shared root mount", out.String(), err, theirs)
	}
}

func TestGateClosedAborts(t *testing.T) {
	needRoot(t)
	o := Keep()
	o.MountNS = true
	cmd, g, out, _ := startGated(t, o, "echo ran")
	g.Close()
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 126 || strings.Contains(out.String(), "ran") {
		t.Errorf("exit %d (%v), output %q; want 126 without running", code, err, out.String())
	}
}

// seccompNotif and seccompResp are struct seccomp_notif and
// seccomp_notif_resp.
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Data  struct {
		NR   int32
		Arch uint32
		IP   uint64
		Args [6]uint64
	}
}

type seccompResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// TestGateExecNotify: every exec, the program's own first, reaches the
// listener; one answered with EPERM fails in the program.
func TestGateExecNotify(t *testing.T) {
	needRoot(t)
	o := Keep()
	o.ExecNotify = true
	cmd, g, out, l := startGated(t, o, "/bin/true && echo true-ran; /bin/false; echo false-status=$?")
	if l == nil {
		t.Fatal("no listener")
	}
	defer l.Close()
	if err := g.Open(); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := 0; len(paths) < 3; i++ {
		var n seccompNotif
		_, _, e := unix.Syscall(unix.SYS_IOCTL, l.Fd(), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n)))
		if (e == unix.EINTR || e == unix.ENOENT) && i < 50 {
			continue // a signal to this thread (the runtime's preemption), or the caller gone
		}
		if e != 0 {
			t.Fatalf("recv %d: %v", i, e)
		}
		path := readString(t, int(n.PID), n.Data.Args[0])
		resp := seccompResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		if path == "/bin/false" {
			resp = seccompResp{ID: n.ID, Error: -int32(unix.EPERM)}
		}
		_, _, e = unix.Syscall(unix.SYS_IOCTL, l.Fd(), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
		if e == unix.ENOENT && i < 50 {
			// A signal (the Go runtime's preemption, in the shim)
			// interrupted the call before the answer: it is made again
			// and notified again.
			continue
		}
		if e != 0 {
			t.Fatalf("send %d: %v", i, e)
		}
		paths = append(paths, path)
	}
	cmd.Wait()
	if paths[0] != "/bin/sh" || paths[1] != "/bin/true" || paths[2] != "/bin/false" {
		t.Errorf("notified execs %q", paths)
	}
	if got := out.String(); !strings.Contains(got, "true-ran") || !strings.Contains(got, "false-status=126") {
		t.Errorf("program printed %q; want /bin/true run and /bin/false refused (126)", got)
	}
}

// readString reads a NUL-terminated string at addr in pid's memory.
func readString(t *testing.T, pid int, addr uint64) string {
	t.Helper()
	f, err := os.Open("/proc/" + itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := f.ReadAt(buf, int64(addr))
	if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
		return string(buf[:i])
	}
	return string(buf[:n])
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestExecFilterShape(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		p, err := sessionFilter(arch, filterSpec{notify: true, guard: 4242, pgid: 4240})
		if err != nil {
			t.Fatal(err)
		}
		if p[len(p)-1].Code != unix.BPF_RET|unix.BPF_K || p[len(p)-1].K != retErrnoEPERM {
			t.Errorf("%s: the filter does not end refusing unknown ABIs", arch)
		}
		for i, ins := range p {
			if ins.Code&0x07 == unix.BPF_JMP && i+1+int(ins.Jf) >= len(p) {
				t.Errorf("%s: instruction %d jumps past the end", arch, i)
			}
		}
	}
	if _, err := sessionFilter("mips", filterSpec{}); err == nil {
		t.Error("a filter for an unknown architecture")
	}
}

// Under the filter the program cannot make a mount namespace of its own,
// alone or inside a user namespace, nor enter another: its opens would go
// through mounts no mark watches.
func TestFilterRefusesNamespaces(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare is not installed")
	}
	o := Keep()
	o.ExecNotify = true
	cmd, g, out, l := startGated(t, o, `unshare -Urm true; echo "userns=$?"; unshare -m true; echo "mountns=$?"; unshare -n true; echo "netns=$?"`)
	defer l.Close()
	fd := l.Fd()
	g.Open()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			// A receive blocks even once no process is left under the
			// filter: poll, which says so (POLLHUP).
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
				return
			}
			if fds[0].Revents&unix.POLLIN == 0 {
				if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
					return // no process is left under the filter
				}
				continue
			}
			var n seccompNotif
			_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n)))
			if e == unix.EINTR || e == unix.ENOENT {
				continue // a signal to this thread (the runtime's preemption), or the caller gone
			}
			if e != 0 {
				return
			}
			resp := seccompResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
			unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
		}
	}()
	cmd.Wait()
	<-done
	got := out.String()
	for _, want := range []string{"userns=1", "mountns=1"} {
		if !strings.Contains(got, want) {
			t.Errorf("program printed %q; want %s", got, want)
		}
	}
	// Other namespaces are not the filter's business (root without
	// capabilities is refused them by the kernel anyway).
	if !strings.Contains(got, "netns=") {
		t.Errorf("program printed %q", got)
	}
}
