package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// retryStates are the states a job may be retried from.
var retryStates = []queue.JobState{queue.StateFailed, queue.StateDead, queue.StateCancelled, queue.StateRejected}

func newRetryCmd() *cobra.Command {
	cmd := jobsCommand(&cobra.Command{
		Use:   "retry JOB_ID… | --label KEY=VALUE [--downstream]",
		Short: "Run jobs that failed, died, were cancelled or were rejected again, from their latest checkpoint",
		Long: `Run jobs that failed, died, were cancelled or were rejected again.

A retried job keeps its id, its trail and its checkpoints: it is placed afresh
under the policy, offers and budgets in effect now, its counts of errors and
preemptions start again from zero (so it has its spec's retries again), and its
next attempt resumes from its latest checkpoint (with --fresh, its checkpoints
are dropped and it starts from nothing). A job that succeeded is not run again
(a job succeeds once): submit it again instead. When no placement takes a job
now (its budget is spent, no offer fits), it is left as it was and the reason
is printed.

Give one or more job ids, or --label KEY=VALUE for every job whose labels hold
that entry and that failed, died, was cancelled or was rejected. Each retried
job is printed with the pool it is placed on; a job that cannot be retried is
named on stderr and the others are retried all the same. With --wait, gpuq then
waits for the retried jobs as gpuq wait does.

With --downstream, the jobs that run after them (their spec.after or
after_ended names one) and failed, died, were cancelled or were rejected are
retried too, and in turn those after them: a pipeline whose first step failed
runs again whole. Every job is retried after the jobs it runs after (in the
order they were submitted), so the later steps wait for the earlier ones again.
A job given that succeeded is not run again, but the jobs after it are: the
failed runs of a sweep after a data step, and the summary after them.`,
		Example: `  gpuq retry 01a2490c-414b-74a6-950b-948f7b68feb6
  gpuq retry --fresh 01a2490c-414b-74a6-950b-948f7b68feb6
  gpuq retry --label sweep=lr --wait
  gpuq retry --downstream 01a2490c-414b-74a6-950b-948f7b68feb6`,
	}, func(cmd *cobra.Command, v *viper.Viper, svc jobService, ids []uuid.UUID, label, format string) error {
		ctx := cmd.Context()
		retry := func(ctx context.Context, id uuid.UUID) (*queue.Job, error) {
			job, err := svc.Retry(ctx, id, v.GetBool("fresh"))
			return job, rejectedError(err)
		}
		wait, downstream := v.GetBool("wait"), v.GetBool("downstream")
		if len(ids) == 1 && !wait && !downstream {
			job, err := retry(ctx, ids[0])
			if err != nil {
				return notFoundError(ids[0], err)
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), job)
			}
			printRetried(cmd.OutOrStdout(), job)
			return nil
		}
		if label != "" {
			var err error
			if ids, err = labelledIDs(ctx, svc, v, label, true, retryStates...); err != nil {
				return err
			}
			if len(ids) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: no job with the label %s failed, died, was cancelled or was rejected\n", label)
				return nil
			}
		}
		var after map[uuid.UUID]bool
		if downstream {
			var err error
			succeeded := func(j *queue.Job) string {
				if j.State != queue.StateSucceeded {
					return ""
				}
				return "succeeded: it is not run again, the jobs after it that did not succeed are"
			}
			if ids, after, err = withDownstream(ctx, cmd.ErrOrStderr(), svc, ids, retryStates, succeeded); err != nil {
				return err
			}
		}
		shown := format
		if wait && format == "json" {
			shown = "" // the waits print their page
		}
		// A job found by its label or as a job after another that changed
		// state meanwhile is passed over.
		skip := func(id uuid.UUID, err error) bool { return (label != "" || after[id]) && isConflict(err) }
		retried, err := actOnEach(cmd, ids, "retrying", "retried", retry, skip, shown, printRetried)
		if !wait || len(retried) == 0 {
			return err
		}
		retriedIDs := make([]uuid.UUID, len(retried))
		for i, job := range retried {
			retriedIDs[i] = job.ID
		}
		if werr := waitEach(cmd, svc, retriedIDs, nil, format, v.GetDuration("timeout")); werr != nil {
			return werr
		}
		return err
	})
	cmd.Flags().String("label", "", "retry every job that failed, died, was cancelled or was rejected whose spec.labels has this `entry`, key=value")
	cmd.Flags().Bool("downstream", false, "also retry the jobs that run after them and failed, died, were cancelled or were rejected, and in turn those after them")
	cmd.Flags().Bool("fresh", false, "drop the jobs' checkpoints, so that each starts from nothing instead of resuming (a checkpoint that breaks the job, a format the job no longer reads)")
	cmd.Flags().Bool("wait", false, "then wait for the retried jobs to finish, as gpuq wait does")
	cmd.Flags().Duration("timeout", 0, "with --wait, give up waiting after this long (exit 7); 0 waits for ever")
	return cmd
}

// withDownstream returns ids and the jobs that run after them (their
// spec.after or spec.after_ended names one) in one of states, and in turn
// those after them, all in the order they were submitted (so that a retry
// reaches each job after the jobs it runs after); and the jobs it found
// after them. An id of no job comes first, for the command to name it. A
// job of ids in a state past acting on (passed: one that succeeded, for a
// retry) is left out, said so on w, and the jobs after it are looked for
// all the same.
func withDownstream(ctx context.Context, w io.Writer, svc jobService, ids []uuid.UUID, states []queue.JobState, passed func(*queue.Job) string) ([]uuid.UUID, map[uuid.UUID]bool, error) {
	type found struct {
		id uuid.UUID
		at time.Time
	}
	var all []found
	var next []uuid.UUID
	seen := map[uuid.UUID]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		f := found{id: id}
		j, err := svc.Job(ctx, id)
		if err != nil && !errors.Is(err, queue.ErrNotFound) {
			return nil, nil, err
		}
		if err == nil {
			f.at = j.SubmittedAt
			if why := passed(j); why != "" {
				fmt.Fprintf(w, "gpuq: %s%s %s\n", id, queue.NameSuffix(j.Name), why)
				next = append(next, id)
				continue
			}
		}
		all, next = append(all, f), append(next, id)
	}
	after := map[uuid.UUID]bool{}
	for len(next) > 0 {
		page, err := svc.List(ctx, listFilter{RunsAfter: next[0], Limit: maxListed})
		if err != nil {
			return nil, nil, err
		}
		next = next[1:]
		for _, j := range page.Jobs {
			if !seen[j.ID] && slices.Contains(states, j.State) {
				seen[j.ID], after[j.ID] = true, true
				all, next = append(all, found{id: j.ID, at: j.SubmittedAt}), append(next, j.ID)
			}
		}
	}
	slices.SortStableFunc(all, func(a, b found) int { return a.at.Compare(b.at) })
	out := make([]uuid.UUID, len(all))
	for i, f := range all {
		out[i] = f.id
	}
	return out, after, nil
}

// printRetried prints a retried job's line: its id, state and pool.
func printRetried(w io.Writer, job *queue.Job) {
	if job.Pool != "" {
		fmt.Fprintf(w, "%s %s on pool %s\n", job.ID, job.State, job.Pool)
		return
	}
	fmt.Fprintf(w, "%s %s\n", job.ID, job.State)
}

// rejectedError gives a retry that no placement takes now the exit status
// of a rejection.
func rejectedError(err error) error {
	var api *APIError
	var nats *control.ClientError
	if errors.As(err, &api) && api.Status == http.StatusUnprocessableEntity || errors.As(err, &nats) && nats.Code == "422" {
		return &ExitError{Code: ExitRejected, Err: err}
	}
	return err
}
