//go:build !linux

package ask

import (
	"errors"
	"net"
	"syscall"
)

const syscallECONNREFUSED = syscall.ECONNREFUSED

// peerCred is not built here: the socket's mode is the only guard.
func peerCred(net.Conn) (pid, uid int, err error) { return -1, -1, errors.ErrUnsupported }
