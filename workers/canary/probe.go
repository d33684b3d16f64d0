package canary

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// probeOutputTail is how much of the probe's output a report keeps.
const probeOutputTail = 512

// runProbe runs command with /bin/sh -c and passes when it exits 0 within
// timeout. The probe runs in its own process group so that a timeout kills
// whatever it started (a python interpreter, a CUDA program) too.
func runProbe(ctx context.Context, command string, timeout time.Duration) (expected, found string, st Status) {
	expected = "exit 0 within " + timeout.String()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out := &tail{max: probeOutputTail}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) && err != nil:
		return expected, fmt.Sprintf("timed out after %s%s", took, out.suffix()), Fail
	case ctx.Err() != nil && err != nil:
		return expected, fmt.Sprintf("stopped after %s: %v%s", took, context.Cause(ctx), out.suffix()), Fail
	case err != nil:
		return expected, fmt.Sprintf("%v after %s%s", err, took, out.suffix()), Fail
	}
	return expected, fmt.Sprintf("exit 0 in %s", took), Pass
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

// suffix is the output as ": last lines", or "" when there was none.
func (t *tail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, nil)))
	if s == "" {
		return ""
	}
	return ": " + strings.Join(strings.Fields(s), " ")
}
