//go:build !linux

package redirect

import "fmt"

// MarkOf is not available on this platform.
func (*Redirector) MarkOf(uint32) (uint32, error) {
	return 0, fmt.Errorf("redirect: mark of: %w", ErrNotSupported)
}
