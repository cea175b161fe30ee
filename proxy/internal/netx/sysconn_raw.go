//go:build linux && !race

package netx

import (
	"syscall"
	"unsafe"
)

// raceBuild: sysConn's calls are raw (see sysconn_race.go).
const raceBuild = false

func sysRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func sysWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// sysPeek is a non-blocking one-byte peek: EAGAIN when nothing is there
// to read, no error when a byte is or at the end of stream.
func sysPeek(fd uintptr) syscall.Errno {
	var b [1]byte
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return e
}
