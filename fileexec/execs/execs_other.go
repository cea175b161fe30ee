//go:build !linux

package execs

import (
	"fmt"
	"os"
	"syscall"
)

// Execs answers the exec notifications of one seccomp listener (Linux
// only).
type Execs struct{}

// Serve returns an error wrapping ErrNotSupported: seccomp user
// notification is Linux's.
func Serve(listener *os.File, o ExecOptions) (*Execs, error) {
	return nil, fmt.Errorf("execs: serve: %w", ErrNotSupported)
}

// Verifier reports that nothing is verified.
func (x *Execs) Verifier() error { return fmt.Errorf("execs: verifier: %w", ErrNotSupported) }

// Stats returns zero counts.
func (x *Execs) Stats() Stats { return Stats{} }

// Close does nothing.
func (x *Execs) Close() error { return nil }

// Notification is a notified system call that is not an exec (Linux only).
type Notification struct {
	TID  int
	Arch uint32
	Nr   int32
	Args [6]uint64
}

// Valid reports false.
func (Notification) Valid() bool { return false }

// Continue fails with ErrNotSupported.
func (Notification) Continue() error { return fmt.Errorf("execs: %w", ErrNotSupported) }

// Fail fails with ErrNotSupported.
func (Notification) Fail(syscall.Errno) error { return fmt.Errorf("execs: %w", ErrNotSupported) }
