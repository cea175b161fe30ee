package ask

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// reopenTerminal opens the terminal f refers to anew, non-blocking, so
// that reads can time out without changing the agent's own file.
func reopenTerminal(f *os.File) (*os.File, error) {
	if !IsTerminal(f) {
		return nil, fmt.Errorf("ask: %s is not a terminal", f.Name())
	}
	in, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("ask: open terminal: %w", err)
	}
	return in, nil
}
