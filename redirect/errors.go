package redirect

import (
	"errors"
	"fmt"
)

var (
	// ErrNotSupported is wrapped by every error that means this platform or
	// kernel cannot redirect: not Linux, or a kernel without the cgroup BPF
	// hooks or socket storage. It also matches errors.ErrUnsupported.
	ErrNotSupported = fmt.Errorf("not supported: %w", errors.ErrUnsupported)
	// ErrNotPermitted is wrapped when the kernel refuses to load or attach
	// the programs: Chaperone needs root, or CAP_BPF with CAP_NET_ADMIN.
	// Such errors also match os.ErrPermission.
	ErrNotPermitted = errors.New("not permitted (needs root, or CAP_BPF and CAP_NET_ADMIN)")
	// ErrNotFound is wrapped by Lookup when no redirected connection is
	// recorded for the client address.
	ErrNotFound = errors.New("no origin recorded")
)
