//go:build !linux

package redirect

import (
	"context"
	"fmt"
	"io"
)

// AttachMachine fails with an error wrapping ErrNotSupported.
func (*Redirector) AttachMachine(string) (io.Closer, error) {
	return nil, fmt.Errorf("redirect: attach machine: %w", ErrNotSupported)
}

// RemoveMachine fails with an error wrapping ErrNotSupported.
func (*Redirector) RemoveMachine(string) error {
	return fmt.Errorf("redirect: remove machine: %w", ErrNotSupported)
}

// RemoveMachine fails with an error wrapping ErrNotSupported.
func RemoveMachine(string) error {
	return fmt.Errorf("redirect: remove machine: %w", ErrNotSupported)
}

// SetCandidates fails with an error wrapping ErrNotSupported.
func (*Redirector) SetCandidates([]string) error {
	return fmt.Errorf("redirect: set candidates: %w", ErrNotSupported)
}

// Mark fails with an error wrapping ErrNotSupported.
func (*Redirector) Mark(pid, mark uint32) error {
	return fmt.Errorf("redirect: mark %d: %w", pid, ErrNotSupported)
}

// Unmark fails with an error wrapping ErrNotSupported.
func (*Redirector) Unmark(pid uint32) error {
	return fmt.Errorf("redirect: unmark %d: %w", pid, ErrNotSupported)
}

// Marks fails with an error wrapping ErrNotSupported.
func (*Redirector) Marks() (map[uint32]uint32, error) {
	return nil, fmt.Errorf("redirect: marks: %w", ErrNotSupported)
}

// MarksFailed fails with an error wrapping ErrNotSupported.
func (*Redirector) MarksFailed() (uint64, error) {
	return 0, fmt.Errorf("redirect: marks failed: %w", ErrNotSupported)
}

// MarkEvents fails with an error wrapping ErrNotSupported.
func (*Redirector) MarkEvents(context.Context) (<-chan MarkEvent, error) {
	return nil, fmt.Errorf("redirect: mark events: %w", ErrNotSupported)
}

// MarkEventsDropped fails with an error wrapping ErrNotSupported.
func (*Redirector) MarkEventsDropped() (uint64, error) {
	return 0, fmt.Errorf("redirect: dropped mark events: %w", ErrNotSupported)
}
