package local

import (
	"os/exec"
	"syscall"
)

// tieToParent has the kernel send the worker SIGTERM when the process that
// started it dies, however it dies: the workers of a crashed `gpuq dev`
// hand their jobs back and stop instead of outliving it.
func tieToParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
