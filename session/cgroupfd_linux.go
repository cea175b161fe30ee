package session

import (
	"os/exec"
	"syscall"
)

// startInCgroup makes cmd start directly inside the cgroup open as fd, so
// that it and every process it starts belong to the session from their
// first instruction.
func startInCgroup(cmd *exec.Cmd, fd int) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	return nil
}
