//go:build unix

package netx

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open: nothing to read
// and no end of stream. One non-blocking peek, no deadline changes.
func Alive(c net.Conn) bool {
	if p, ok := c.(interface{ idle() bool }); ok { // sysConn: a raw peek
		return p.idle()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	ok = false
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && ok
}
