package execs

import (
	"errors"
	"fmt"
)

// ErrNotSupported is wrapped by Serve's error where exec mediation cannot
// work: not Linux. It also matches errors.ErrUnsupported.
var ErrNotSupported = fmt.Errorf("not supported: %w", errors.ErrUnsupported)
