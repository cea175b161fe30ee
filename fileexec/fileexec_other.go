//go:build !linux

package fileexec

import (
	"context"
	"fmt"
)

// Files is a stand-in: file mediation needs Linux.
type Files struct{}

// WatchMounts fails with an error wrapping ErrUnavailable.
func WatchMounts(pid int, o FileOptions) (*Files, error) {
	return nil, fmt.Errorf("fileexec: watch mounts: fanotify needs linux: %w", ErrUnavailable)
}

// WatchFiles fails with an error wrapping ErrUnavailable.
func WatchFiles(paths []string, o FileOptions) (*Files, error) {
	return nil, fmt.Errorf("fileexec: watch files: fanotify needs linux: %w", ErrUnavailable)
}

// AddPaths fails with an error wrapping ErrUnavailable.
func (*Files) AddPaths(paths []string) error {
	return fmt.Errorf("fileexec: add paths: fanotify needs linux: %w", ErrUnavailable)
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

// Calls is a stand-in: the session's seccomp filter needs Linux.
type Calls struct{}

// NewCalls fails with an error wrapping ErrUnavailable.
func NewCalls(o FileOptions, files *Files) (*Calls, error) {
	return nil, fmt.Errorf("fileexec: calls: needs linux: %w", ErrUnavailable)
}

// Handle lets c run.
func (*Calls) Handle(_ context.Context, _ Call, a CallAnswer) { a.Continue() }

// Nested is a stand-in: the session's seccomp filter needs Linux.
type Nested struct{}

// NewNested fails with an error wrapping ErrUnavailable.
func NewNested(o NestedOptions) (*Nested, error) {
	return nil, fmt.Errorf("fileexec: nested: needs linux: %w", ErrUnavailable)
}

// Handles reports false.
func (*Nested) Handles(Call) bool { return false }

// Handle lets c run.
func (*Nested) Handle(_ context.Context, _ Call, a CallAnswer) { a.Continue() }
