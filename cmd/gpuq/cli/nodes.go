package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/queue"
)

// poolListCmd is a command listing what list returns for --pool (every
// pool when it is not given), as a table print writes, or -o json.
func poolListCmd[T any](cmd *cobra.Command, what string, list func(svc jobService, ctx context.Context, pool string) ([]T, error),
	print func(w io.Writer, items []T) error) *cobra.Command {
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		v, format, err := loadConfigFormat(cmd)
		if err != nil {
			return err
		}
		svc, err := connectJobs(cmd, v)
		if err != nil {
			return err
		}
		defer svc.Close()
		items, err := list(svc, cmd.Context(), v.GetString("pool"))
		if err != nil {
			return err
		}
		if format == "json" {
			return writeJSON(cmd.OutOrStdout(), items)
		}
		return print(cmd.OutOrStdout(), items)
	}
	jobFlags(cmd)
	cmd.Flags().String("pool", "", "only "+what+" of this pool")
	return cmd
}

func newNodesCmd() *cobra.Command {
	return poolListCmd(&cobra.Command{
		Use:   "nodes",
		Short: "List worker nodes with their last canary, failure counts and quarantine",
	}, "nodes", jobService.Nodes, printNodes)
}

func printNodes(w io.Writer, nodes []*queue.Node) error {
	t := newTable(w, "NODE", "POOL", "HOST", "LAST CANARY", "RESULT", "RUNS", "FAILURES", "RATE", "IN A ROW", "QUARANTINED")
	for _, n := range nodes {
		last, result := "-", "-"
		if n.LastCanaryAt != nil {
			last = n.LastCanaryAt.Format(time.DateTime)
		}
		if n.LastCanaryOK != nil {
			result = "pass"
			if !*n.LastCanaryOK {
				result = "FAIL: " + truncate(n.LastCanarySummary, 50)
			}
		}
		quarantined := "-"
		if n.QuarantinedAt != nil {
			quarantined = n.QuarantinedAt.Format(time.DateTime)
		}
		t.row(n.ID, n.Pool, n.Host, last, result, n.CanaryRuns, n.CanaryFailures,
			fmt.Sprintf("%.0f%%", 100*n.FailureRate()), n.ConsecutiveFailures, quarantined)
	}
	return t.flush()
}

func newWorkersCmd() *cobra.Command {
	return poolListCmd(&cobra.Command{
		Use:   "workers",
		Short: "List the live workers: when each last beat, the attempts it holds, and whether it takes no work after host errors",
		Long: `List the live workers the control plane's liveness monitor hears: each
worker's pool and node, when it last beat, how many attempts it holds, and,
for a worker that takes no work for a while after host errors in a row (its
machine failed jobs around their runs), until when and the last of those
errors.`,
	}, "workers", jobService.Workers, func(w io.Writer, workers []queue.LiveWorker) error {
		return printWorkers(w, workers, time.Now())
	})
}

func printWorkers(w io.Writer, workers []queue.LiveWorker, now time.Time) error {
	t := newTable(w, "WORKER", "POOL", "NODE", "LAST BEAT", "HELD", "PAUSED")
	for _, lw := range workers {
		paused := "-"
		if lw.PausedUntil != nil {
			paused = fmt.Sprintf("until %s: %s", lw.PausedUntil.Format(time.DateTime), truncate(lw.PauseReason, 60))
		}
		node := lw.Node
		if node == "" {
			node = "-"
		}
		t.row(lw.Worker, lw.Pool, node, now.Sub(lw.LastBeatAt).Round(time.Millisecond).String()+" ago", lw.Held, paused)
	}
	return t.flush()
}
