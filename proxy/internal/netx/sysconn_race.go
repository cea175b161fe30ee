//go:build linux && race

package netx

import (
	"errors"
	"syscall"
)

// raceBuild: with the race detector, sysConn makes its calls through
// package syscall, whose annotations tell the detector that what one
// goroutine wrote to a socket another read after it (without them, a
// test's client and the proxy's handler sharing state would be reported
// as racing), and that the buffers were written and read. Those calls go
// through the runtime's system call entry, as net.TCPConn's do.
const raceBuild = true

func sysRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return max(n, 0), errno(err)
}

func sysWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return max(n, 0), errno(err)
}

func sysPeek(fd uintptr) syscall.Errno {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return errno(err)
}

func errno(err error) syscall.Errno {
	var e syscall.Errno
	if err != nil && !errors.As(err, &e) {
		return syscall.EIO
	}
	return e
}
