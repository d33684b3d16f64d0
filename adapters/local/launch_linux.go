package local

import (
	"os/exec"
	"syscall"
)

// tieToParent has the kernel send the worker SIGINT when the process that
// started it dies, however it dies: the workers of a crashed `gpuq dev`
// shut down, handing their jobs back, instead of outliving it.
func tieToParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGINT}
}
