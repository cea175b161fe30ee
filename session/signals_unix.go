//go:build unix

package session

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are caught while the command runs and passed on to it.
// SIGHUP is forwarded too unless it reloads the policy (a hang-up of the
// terminal reaches the command from the kernel all the same).
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// reloadSignal reloads the policy when a policy file is in use.
var reloadSignal os.Signal = syscall.SIGHUP

// shouldForward reports whether sig must be passed to the child. The child
// shares chaperone's process group so that it can own the terminal; a SIGINT
// or SIGQUIT typed at the terminal has already reached it, and forwarding
// would deliver it twice.
func shouldForward(sig os.Signal) bool {
	if sig == syscall.SIGINT || sig == syscall.SIGQUIT {
		return !isForegroundTTY()
	}
	return true
}

// isForegroundTTY reports whether standard input is a terminal whose
// foreground process group is ours.
func isForegroundTTY() bool {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
