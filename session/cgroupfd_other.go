//go:build !linux

package session

import (
	"fmt"
	"os/exec"

	"github.com/chaperone-dev/chaperone/redirect"
)

func startInCgroup(*exec.Cmd, int) error {
	return fmt.Errorf("session: start in a cgroup: %w", redirect.ErrNotSupported)
}
