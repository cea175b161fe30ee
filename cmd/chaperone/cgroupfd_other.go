//go:build !linux

package main

import (
	"fmt"
	"os/exec"

	"github.com/chaperone-dev/chaperone/redirect"
)

func startInCgroup(*exec.Cmd, int) error {
	return fmt.Errorf("run: start in a cgroup: %w", redirect.ErrNotSupported)
}
