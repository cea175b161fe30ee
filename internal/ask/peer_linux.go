package ask

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

const syscallECONNREFUSED = syscall.ECONNREFUSED

// PeerCred returns the pid and uid of the process at the other end of c,
// a unix socket.
func PeerCred(c net.Conn) (pid, uid int, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, -1, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, -1, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, -1, err
	}
	if serr != nil {
		return -1, -1, serr
	}
	return int(cred.Pid), int(cred.Uid), nil
}
