//go:build linux

package session

import "golang.org/x/sys/unix"

// holdProcess holds on to process pid (a pidfd), so that kill later hits
// it and no process that reused its pid; release lets go.
func holdProcess(pid int) (kill func() error, release func(), err error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, func() {}, err
	}
	return func() error { return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) }, func() { unix.Close(fd) }, nil
}
