//go:build !linux

package redirect

import (
	"context"
	"fmt"
	"os"
)

// The cgroup API is Linux's: every function here fails with an error
// wrapping ErrNotSupported. Sessions elsewhere are fenced by other means
// (see docs/).

// CgroupRoot fails outside Linux.
func CgroupRoot() (string, error) {
	return "", fmt.Errorf("redirect: find cgroup2 mount: %w", ErrNotSupported)
}

// CgroupParent is the cgroup under which every session's leaf is made.
type CgroupParent struct {
	// Path is the parent's directory.
	Path string
}

// OpenParent fails outside Linux.
func OpenParent(root, name string) (*CgroupParent, error) {
	return nil, fmt.Errorf("redirect: open cgroup parent: %w", ErrNotSupported)
}

// SessionCgroup is one session's cgroup v2 leaf.
type SessionCgroup struct {
	// Path is the leaf's directory.
	Path string
	// ID is the cgroup id.
	ID uint64
}

// NewSession fails outside Linux.
func (p *CgroupParent) NewSession(id string) (*SessionCgroup, error) {
	return nil, fmt.Errorf("redirect: new session cgroup: %w", ErrNotSupported)
}

// Open fails outside Linux.
func (s *SessionCgroup) Open() (*os.File, error) {
	return nil, fmt.Errorf("redirect: open session cgroup: %w", ErrNotSupported)
}

// PIDs fails outside Linux.
func (s *SessionCgroup) PIDs() ([]int, error) {
	return nil, fmt.Errorf("redirect: session cgroup pids: %w", ErrNotSupported)
}

// Kill fails outside Linux.
func (s *SessionCgroup) Kill() error {
	return fmt.Errorf("redirect: kill session cgroup: %w", ErrNotSupported)
}

// WaitEmpty fails outside Linux.
func (s *SessionCgroup) WaitEmpty(ctx context.Context) error {
	return fmt.Errorf("redirect: wait for session cgroup to empty: %w", ErrNotSupported)
}

// Remove fails outside Linux.
func (s *SessionCgroup) Remove() error {
	return fmt.Errorf("redirect: remove session cgroup: %w", ErrNotSupported)
}

// Contains fails outside Linux.
func Contains(cgroupPath string, pid int) (bool, error) {
	return false, fmt.Errorf("redirect: cgroup contains: %w", ErrNotSupported)
}
