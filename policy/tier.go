package policy

import (
	"fmt"
	"time"

	"github.com/gpuq/gpuq/policy/spot"
)

// TierQuestion is what the deadline-aware spot strategy is asked about one
// job before it is placed.
type TierQuestion struct {
	// Strategy answers; nil means gpuq's look-ahead (spot.NewLookAhead).
	Strategy spot.Strategy
	// SubmittedAt and Now bound the time the job has waited.
	SubmittedAt, Now time.Time
	// Banked is the compute earlier attempts carried on in checkpoints.
	Banked time.Duration
	// Tick is how often the question is asked again (the offer refresh).
	Tick time.Duration
	// Offers are the offers the job will be placed among; Histories the
	// observed availability of each spot pool.
	Offers    []Offer
	Histories map[string]spot.PoolHistory
	// Checkpoint is a spot pool of the region whose store holds the job's
	// latest checkpoint, Move what resuming in another region costs (the
	// pools of one region share its store), and Prices what the
	// job pays: the strategy weighs a move against them. Zero when unknown.
	Checkpoint string
	Move       spot.Move
	Prices     spot.Prices
	// OnDemand is set when the job is running on on-demand now and the
	// question is whether to leave it for spot; Warmup is what its
	// instance has still to pay of the restart overhead.
	OnDemand bool
	Warmup   time.Duration
}

// AdviseTier narrows a spot-then-on-demand job with a deadline and an
// expected duration to the tier the spot strategy advises now, and returns a
// note for the decision; any other job is left as it is, with no note.
func AdviseTier(job *Requirements, rules Rules, q TierQuestion) string {
	if job.Tier != TierSpotThenOnDemand || job.Deadline.IsZero() || job.ExpectedDuration <= 0 {
		return ""
	}
	strategy := q.Strategy
	if strategy == nil {
		strategy = spot.NewLookAhead()
	}
	st := spot.State{
		Elapsed:  q.Now.Sub(q.SubmittedAt),
		Compute:  job.ExpectedDuration,
		Deadline: job.Deadline.Sub(q.SubmittedAt),
		Overhead: rules.WithDefaults().Spot.RestartOverhead,
		Tick:     q.Tick,
		Current:  spot.Placement{Kind: spot.Wait},
		Warmup:   q.Warmup,
		Done:     min(q.Banked, job.ExpectedDuration),
		Move:     q.Move,
		Prices:   q.Prices,
	}
	seen := map[string]bool{}
	for _, o := range q.Offers {
		if o.Tier != TierSpot || seen[o.Pool] {
			continue
		}
		seen[o.Pool] = true
		st.Pools = append(st.Pools, spot.Pool{ID: o.Pool, Region: o.Region, Available: o.Availability != Unavailable, History: q.Histories[o.Pool]})
	}
	if seen[q.Checkpoint] {
		st.Checkpoint = q.Checkpoint
	}
	if q.OnDemand {
		st.Current.Kind = spot.OnDemand
	}
	advice, err := spot.Advise(strategy, st)
	if err != nil {
		return fmt.Sprintf("spot strategy %s not consulted: %v", strategy.Name(), err)
	}
	switch {
	case advice.Kind == spot.OnDemand || (q.OnDemand && advice.Kind != spot.Spot):
		job.Tier = TierOnDemand
	default:
		// Spot now, or wait for spot: either way the job queues on spot.
		job.Tier = TierSpot
	}
	return fmt.Sprintf("spot strategy %s advises %s: %s", strategy.Name(), advice.Kind, advice.Reason)
}
