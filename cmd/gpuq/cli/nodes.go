package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newNodesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List worker nodes with their last canary, failure counts and quarantine",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			format, err := outputFormat(v)
			if err != nil {
				return err
			}
			svc, err := connectJobs(cmd, v)
			if err != nil {
				return err
			}
			defer svc.Close()
			nodes, err := svc.Nodes(cmd.Context(), v.GetString("pool"))
			if err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), nodes)
			}
			t := newTable(cmd.OutOrStdout(), "NODE", "POOL", "HOST", "LAST CANARY", "RESULT", "RUNS", "FAILURES", "RATE", "IN A ROW", "QUARANTINED")
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
		},
	}
	jobFlags(cmd)
	cmd.Flags().String("pool", "", "only nodes of this pool")
	return cmd
}
