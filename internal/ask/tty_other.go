//go:build !linux

package ask

import (
	"errors"
	"os"
)

// IsTerminal reports whether f is a terminal: asking on the terminal is
// built for Linux only so far; `chaperone approve` works everywhere.
func IsTerminal(*os.File) bool { return false }

func reopenTerminal(*os.File) (*os.File, error) {
	return nil, errors.New("ask: asking on the terminal is built for Linux only; use chaperone approve|deny")
}
