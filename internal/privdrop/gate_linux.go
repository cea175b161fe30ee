//go:build linux

package privdrop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Gate holds a wrapped program at the door: the shim has made its mount
// namespace, dropped privileges and installed its filter, and waits for
// Open before it execs the program.
type Gate struct {
	sock *os.File // chaperone's end of the socket pair
	peer *os.File // the shim's end, closed in chaperone once started
}

// Messages on the gate socket.
const (
	gateReady = 'R' // shim → chaperone, with the listener fd when there is one
	gateGo    = 'G' // chaperone → shim
)

// WrapGated is Wrap for a program that must not run before chaperone has
// set up around it (o.MountNS, o.ExecNotify). After cmd.Start, call Ready,
// then Open (or Close to abort).
func WrapGated(cmd *exec.Cmd, o Options) (*Gate, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("privdrop: gate: %w", err)
	}
	g := &Gate{sock: os.NewFile(uintptr(fds[0]), "gate"), peer: os.NewFile(uintptr(fds[1]), "gate-shim")}
	gateFD := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, g.peer)
	if err := wrap(cmd, o, gateFD); err != nil {
		g.sock.Close()
		g.peer.Close()
		return nil, err
	}
	return g, nil
}

// Ready waits until the shim is ready to exec the program and returns the
// exec notification listener (nil without ExecNotify). Call it after
// cmd.Start.
func (g *Gate) Ready(ctx context.Context) (*os.File, error) {
	g.peer.Close() // the shim has its copy; this end would keep the socket open
	if dl, ok := ctx.Deadline(); ok {
		g.sock.SetReadDeadline(dl)
	} else {
		g.sock.SetReadDeadline(time.Now().Add(30 * time.Second))
	}
	raw, err := g.sock.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("privdrop: gate: %w", err)
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, fmt.Errorf("privdrop: gate: the program did not get ready: %w", err)
	}
	if rerr != nil {
		return nil, fmt.Errorf("privdrop: gate: %w", rerr)
	}
	if n == 0 {
		return nil, errors.New("privdrop: gate: the shim exited before it was ready")
	}
	if buf[0] != gateReady {
		return nil, fmt.Errorf("privdrop: gate: unexpected message %q", buf[0])
	}
	if oobn == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("privdrop: gate: bad control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("privdrop: gate: bad listener: %v", err)
	}
	return os.NewFile(uintptr(fds[0]), "seccomp-listener"), nil
}

// Open lets the shim exec the program.
func (g *Gate) Open() error {
	defer g.sock.Close()
	if _, err := g.sock.Write([]byte{gateGo}); err != nil {
		return fmt.Errorf("privdrop: gate: %w", err)
	}
	return nil
}

// Close aborts: a shim still waiting exits 126 without running the
// program.
func (g *Gate) Close() error {
	g.peer.Close()
	return g.sock.Close()
}

// waitAtGate is the shim's side: it says it is ready (passing listener,
// when not -1) and waits for the go.
func waitAtGate(fd, listener int) error {
	var oob []byte
	if listener >= 0 {
		oob = unix.UnixRights(listener)
	}
	if err := unix.Sendmsg(fd, []byte{gateReady}, oob, nil, 0); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	if listener >= 0 {
		unix.Close(listener) // chaperone has it now; the program must not
	}
	buf := make([]byte, 1)
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	if n != 1 || buf[0] != gateGo {
		return errors.New("gate: chaperone did not let the program start")
	}
	return nil
}

// makeMountsPrivate turns the new mount namespace into a private copy:
// mounts and unmounts on either side no longer propagate to the other.
func makeMountsPrivate() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	return nil
}

// installFilter installs the session's filter and returns its listener,
// or -1 when f does not notify. no_new_privs must be set. A listener's
// calls, once received, wait for the answer whatever signal comes
// (SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV): a call that mounts must not be
// cancelled and made again while the session is frozen around it. A kernel
// without that flag (before 5.19) gets f with new user and mount
// namespaces refused instead of tracked.
func installFilter(f filterSpec) (int, error) {
	var flags uintptr
	if f.notify {
		flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
	}
	fd, err := loadFilter(f, flags)
	if errors.Is(err, unix.EINVAL) && f.notify {
		f.ns = nsRefuse
		fd, err = loadFilter(f, flags&^unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV)
	}
	if err != nil {
		return -1, fmt.Errorf("install the session's filter: %w", err)
	}
	if !f.notify {
		return -1, nil
	}
	return fd, nil
}

// loadFilter builds f for this machine and loads it with flags.
func loadFilter(f filterSpec, flags uintptr) (int, error) {
	prog, err := sessionFilter(runtime.GOARCH, f)
	if err != nil {
		return -1, err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		flags, uintptr(unsafePointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}
