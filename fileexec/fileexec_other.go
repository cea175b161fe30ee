//go:build !linux

package fileexec

import "fmt"

// Files is a stand-in: file mediation needs Linux.
type Files struct{}

// WatchMounts fails with an error wrapping ErrUnavailable.
func WatchMounts(pid int, o FileOptions) (*Files, error) {
	return nil, fmt.Errorf("fileexec: watch mounts: fanotify needs linux: %w", ErrUnavailable)
}

// Stats returns zero counts.
func (*Files) Stats() FileStats { return FileStats{} }

// Forget does nothing.
func (*Files) Forget() error { return nil }

// Close does nothing.
func (*Files) Close() error { return nil }

// NewProtected fails with an error wrapping ErrUnavailable.
func NewProtected(list []Protect, aliases []string) (*Protected, error) {
	return nil, fmt.Errorf("fileexec: protect: needs linux: %w", ErrUnavailable)
}

// MountProtection fails with an error wrapping ErrUnavailable.
func MountProtection(pid int, p *Protected) error {
	return fmt.Errorf("fileexec: protect: needs linux: %w", ErrUnavailable)
}
