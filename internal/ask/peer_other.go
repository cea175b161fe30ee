//go:build !linux

package ask

import (
	"errors"
	"net"
	"syscall"
)

const syscallECONNREFUSED = syscall.ECONNREFUSED

// PeerCred is not built here: the socket's mode is the only guard.
func PeerCred(net.Conn) (pid, uid int, err error) { return -1, -1, errors.ErrUnsupported }
