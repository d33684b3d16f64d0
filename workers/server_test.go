package workers_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

func TestServerExitsNonZeroWhenItsSchedulerLoopDies(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	_, dbURL := queuetest.Store(t, n)
	var out bytes.Buffer
	cmd := n.ServerCommand(t, gpuqBin, dbURL)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() }) //nolint:errcheck // it may have exited
	ctx := context.Background()
	queuetest.Eventually(t, 30*time.Second, "the scheduler to pull submissions", func() bool {
		c, err := n.JS.Consumer(ctx, queue.StreamSubmit, queue.SchedulerConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})
	// The scheduler's consumer deleted under it (by an operator, or lost
	// with a stream): the server must not run on without a scheduler.
	if err := n.JS.DeleteConsumer(ctx, queue.StreamSubmit, queue.SchedulerConsumer); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(out.String(), "scheduler") {
			t.Fatalf("want a non-zero exit naming the scheduler, got %v:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill() //nolint:errcheck // it may have exited
		<-exited
		t.Fatalf("gpuq server still running 30s after its scheduler loop died:\n%s", out.String())
	}
}
