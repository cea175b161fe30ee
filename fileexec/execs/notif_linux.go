//go:build linux

package execs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompData, seccompNotif and seccompNotifResp are struct seccomp_data,
// seccomp_notif and seccomp_notif_resp of linux/seccomp.h.
type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  seccompData
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// notifSizes is struct seccomp_notif_sizes.
type notifSizes struct {
	Notif, Resp, Data uint16
}

// listener is the supervisor's side of a seccomp user notification
// filter. The kernel's structs may grow: buffers are sized by what it
// reports, and it wants them zeroed.
type listener struct {
	fd                  int
	notifSize, respSize int
}

func newListener(fd int) (*listener, error) {
	var s notifSizes
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_NOTIF_SIZES, 0, uintptr(unsafe.Pointer(&s))); errno != 0 {
		return nil, fmt.Errorf("execs: seccomp notification sizes: %w", errno)
	}
	return &listener{
		fd:        fd,
		notifSize: max(int(s.Notif), int(unsafe.Sizeof(seccompNotif{}))),
		respSize:  max(int(s.Resp), int(unsafe.Sizeof(seccompNotifResp{}))),
	}, nil
}

// alloc returns zeroed, 8-byte aligned memory of n bytes.
func alloc(n int) unsafe.Pointer {
	b := make([]uint64, (n+7)/8)
	return unsafe.Pointer(&b[0])
}

// pollable returns a second descriptor of the listener fd, non-blocking,
// as a file the runtime's poller waits on (the kernel reports a waiting
// notification as readable, and no process left under the filter as a
// hangup).
func pollable(fd int) (*os.File, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("execs: serve: dup the listener: %w", err)
	}
	if err := unix.SetNonblock(d, true); err != nil {
		unix.Close(d)
		return nil, fmt.Errorf("execs: serve: the listener: %w", err)
	}
	return os.NewFile(uintptr(d), "seccomp listener"), nil
}

// poll says, without waiting, whether a notification waits (POLLIN) or no
// process is left under the filter (POLLHUP).
func (l *listener) poll() (int16, error) {
	fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fds[0].Revents, err
	}
}

// recv takes the next notification. ENOENT means the process it came
// from went away in between.
func (l *listener) recv() (seccompNotif, error) {
	p := alloc(l.notifSize)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(p)); errno != 0 {
		return seccompNotif{}, errno
	}
	return *(*seccompNotif)(p), nil
}

// valid reports whether notification id still waits for an answer: its
// process has not died, so the pid read with it still names that process.
func (l *listener) valid(id uint64) bool {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return errno == 0
}

// continueCall lets the system call run as if no filter had been there.
func (l *listener) continueCall(id uint64) error {
	return l.send(seccompNotifResp{ID: id, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE})
}

// fail makes the system call return -1 with errno.
func (l *listener) fail(id uint64, errno unix.Errno) error {
	return l.send(seccompNotifResp{ID: id, Error: -int32(errno)})
}

func (l *listener) send(r seccompNotifResp) error {
	p := alloc(l.respSize)
	*(*seccompNotifResp)(p) = r
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(p)); errno != 0 {
		return errno
	}
	return nil
}

// Notification is a notified system call that is not an exec, handed to
// ExecOptions.Other with the means to answer it.
type Notification struct {
	TID  int    // the calling thread
	Arch uint32 // its ABI (AUDIT_ARCH_*)
	Nr   int32
	Args [6]uint64
	id   uint64
	l    *listener
}

// Valid reports whether the call still waits: its thread has not died, so
// what was read of it meanwhile was its own.
func (n Notification) Valid() bool { return n.l.valid(n.id) }

// Continue lets the call run as if no filter were there.
func (n Notification) Continue() error { return n.l.continueCall(n.id) }

// Fail makes the call return -1 with errno.
func (n Notification) Fail(errno syscall.Errno) error { return n.l.fail(n.id, errno) }

// execCall is what a notified system call is.
type execCall struct {
	execveat bool
	ptrSize  int // of the calling ABI
}

// classify names the exec system calls of the ABIs the session's filter
// notifies (internal/privdrop's filter): the native one and its 32-bit
// companion. ok is false for anything else.
func classify(d seccompData) (c execCall, ok bool) {
	type key struct {
		arch uint32
		nr   int32
	}
	switch (key{d.Arch, d.Nr}) {
	case key{unix.AUDIT_ARCH_X86_64, 59}, key{unix.AUDIT_ARCH_AARCH64, 221}:
		return execCall{ptrSize: 8}, true
	case key{unix.AUDIT_ARCH_X86_64, 322}, key{unix.AUDIT_ARCH_AARCH64, 281}:
		return execCall{execveat: true, ptrSize: 8}, true
	case key{unix.AUDIT_ARCH_I386, 11}, key{unix.AUDIT_ARCH_ARM, 11}:
		return execCall{ptrSize: 4}, true
	case key{unix.AUDIT_ARCH_I386, 358}, key{unix.AUDIT_ARCH_ARM, 387}:
		return execCall{execveat: true, ptrSize: 4}, true
	}
	return execCall{}, false
}

// execArgs are the arguments of an execve or execveat, from registers.
type execArgs struct {
	dirfd int32 // atFDCWD for execve
	path  uint64
	argv  uint64
	flags uint32
}

func (c execCall) args(d seccompData) execArgs {
	a := d.Args
	if c.ptrSize == 4 {
		for i := range a {
			a[i] = uint64(uint32(a[i]))
		}
	}
	if !c.execveat {
		return execArgs{dirfd: atFDCWD, path: a[0], argv: a[1]}
	}
	return execArgs{dirfd: int32(a[0]), path: a[1], argv: a[2], flags: uint32(a[4])}
}
