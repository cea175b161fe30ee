//go:build !linux

package netns

import (
	"errors"
	"fmt"
	"runtime"
)

// NS is a network namespace; there are none on this system.
type NS struct{}

// New returns an error wrapping errors.ErrUnsupported: network namespaces
// are Linux's.
func New() (*NS, error) {
	return nil, fmt.Errorf("netns: new on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// Do returns an error wrapping errors.ErrUnsupported.
func (n *NS) Do(f func() error) error {
	return fmt.Errorf("netns: enter on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// Close does nothing.
func (n *NS) Close() error { return nil }
