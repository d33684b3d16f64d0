//go:build !linux

package local

import "os/exec"

// tieToParent does nothing where the kernel cannot signal a child on its
// parent's death.
func tieToParent(*exec.Cmd) {}
