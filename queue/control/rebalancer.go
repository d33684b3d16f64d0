package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
)

// RebalancerStore is what the rebalancer reads.
type RebalancerStore interface {
	RunningWithDeadline(ctx context.Context) ([]queue.JobInPool, error)
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	Attempts(ctx context.Context, id uuid.UUID) ([]queue.Attempt, error)
}

// Rebalancer moves deadline jobs from on-demand back to spot when the spot
// strategy advises it. The strategy places a spot-then-on-demand job with a
// deadline on on-demand when spot has gone and its slack cannot wait; it
// also says when to leave on-demand for spot again (a pool up long enough
// to pay for the restart), and the simulated costs in the README count on
// it. Each pass asks the strategy about every such job running on an
// on-demand pool; when it advises spot, the job's worker is asked to hand
// the job back as on a preemption notice (SIGTERM, the grace to save a
// final checkpoint) with outcome moved, and the Replacer places it on spot,
// where it resumes from the checkpoint. Only a job whose attempt has
// recorded a checkpoint is moved: one that never saves could lose its work
// on-demand. Each attempt is asked once; if spot is gone again by the time
// the job is re-placed, it resumes on its on-demand pool.
type Rebalancer struct {
	Store  RebalancerStore
	Placer *PolicyPlacer
	// NATS carries the move requests to the workers.
	NATS queue.StopPublisher
	// Interval between passes. Default 30s.
	Interval time.Duration
	Logger   *slog.Logger

	asked map[uuid.UUID]int // the attempt each job was asked to move
}

// DefaultRebalanceInterval is the rebalancer's default Interval.
const DefaultRebalanceInterval = 30 * time.Second

// Run passes every Interval until ctx ends.
func (r *Rebalancer) Run(ctx context.Context) error {
	if r.Store == nil || r.Placer == nil || r.NATS == nil {
		return errors.New("rebalancer: store, placer and nats must be set")
	}
	every := r.Interval
	if every == 0 {
		every = DefaultRebalanceInterval
	}
	if every < 0 {
		return fmt.Errorf("rebalancer.interval: must not be negative, got %s", every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.logger().Warn("rebalancing", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (r *Rebalancer) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

// Pass asks once about every running deadline job on an on-demand pool and
// asks the worker of each one the strategy advises to leave it to hand it
// back.
func (r *Rebalancer) Pass(ctx context.Context) error {
	jobs, err := r.Store.RunningWithDeadline(ctx)
	if err != nil {
		return err
	}
	if r.asked == nil {
		r.asked = map[uuid.UUID]int{}
	}
	var onDemand map[string]bool
	if len(jobs) > 0 {
		cfg := r.Placer.WithDefaults()
		offers, err := r.Placer.currentOffers(ctx, cfg.OfferTTL, cfg.Now)
		if err != nil {
			return err
		}
		onDemand = onDemandPools(offers.List)
	}
	running := make(map[uuid.UUID]bool, len(jobs))
	var errs []error
	for _, j := range jobs {
		running[j.ID] = true
		if !onDemand[j.Pool] {
			continue
		}
		if err := r.consider(ctx, j.ID); err != nil {
			errs = append(errs, fmt.Errorf("job %s: %w", j.ID, err))
		}
	}
	for id := range r.asked {
		if !running[id] {
			delete(r.asked, id)
		}
	}
	return errors.Join(errs...)
}

func (r *Rebalancer) consider(ctx context.Context, id uuid.UUID) error {
	job, err := r.Store.Job(ctx, id)
	if err != nil || job.State != queue.StateRunning || r.asked[id] == job.Attempt {
		return err
	}
	placement, err := r.Store.LatestPlacement(ctx, id)
	if err != nil {
		return err
	}
	attempts, err := r.Store.Attempts(ctx, id)
	if err != nil {
		return err
	}
	var run *queue.Attempt
	var ended []queue.Attempt
	for i, a := range attempts {
		switch {
		case a.Attempt == job.Attempt && a.EndedAt == nil:
			run = &attempts[i]
		case a.EndedAt != nil:
			ended = append(ended, a)
		}
	}
	if run == nil {
		return nil
	}
	move, err := r.Placer.AdviseMove(ctx, job, *placement, ended, run)
	if err != nil || move == "" {
		return err
	}
	if err := queue.NotifyMove(r.NATS, id, move); err != nil {
		return fmt.Errorf("asking the worker to hand the job back: %w", err)
	}
	r.asked[id] = job.Attempt
	r.logger().Info("asked a job running on on-demand to move to spot", "job", id, "attempt", job.Attempt, "pool", placement.Pool, "reason", move)
	return nil
}

// onDemandPools is the set of the on-demand pools offered.
func onDemandPools(offers []policy.Offer) map[string]bool {
	out := map[string]bool{}
	for _, o := range offers {
		if o.Tier == policy.TierOnDemand {
			out[o.Pool] = true
		}
	}
	return out
}

// AdviseMove asks the spot strategy whether job, running under attempt run
// on the on-demand pool of placement, should leave it for spot now. It
// returns the strategy's reason when it should, and "" when the job is not
// on an on-demand pool offered now, has recorded no checkpoint under run
// (when the placer reads checkpoints), or should stay.
func (p *PolicyPlacer) AdviseMove(ctx context.Context, job *queue.Job, placement queue.Placement, ended []queue.Attempt, run *queue.Attempt) (string, error) {
	cfg := p.WithDefaults()
	if err := cfg.validate(); err != nil {
		return "", err
	}
	pj, err := PolicyJob(job.Spec)
	if err != nil {
		return "", err
	}
	offers, err := p.currentOffers(ctx, cfg.OfferTTL, cfg.Now)
	if err != nil {
		return "", err
	}
	if !onDemandPools(offers.List)[placement.Pool] {
		return "", nil
	}
	prior := &Prior{Placement: placement, Attempts: ended}
	if p.Checkpoints != nil {
		cps, err := p.Checkpoints(ctx, job.ID)
		if err != nil {
			return "", fmt.Errorf("reading the checkpoints of job %s: %w", job.ID, err)
		}
		if len(cps) == 0 || cps[len(cps)-1].Attempt != run.Attempt {
			return "", nil
		}
		prior.Checkpoint = &cps[len(cps)-1]
	}
	q := Question{Job: pj, SubmittedAt: job.SubmittedAt, Prior: prior, Running: run, Rules: cfg.Rules, Offers: offers,
		Strategy: cfg.Strategy, Tick: cfg.OfferTTL, Now: cfg.Now()}
	d, recipe, err := decideQuestion(q)
	var none *policy.NoPlacementError
	if errors.As(err, &none) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if recipe.Job.Tier != policy.TierSpot || d.Chosen == nil || d.Chosen.Offer.Tier != policy.TierSpot {
		return "", nil
	}
	if len(recipe.Notes) == 0 {
		return "", nil
	}
	return fmt.Sprintf("%s; moving to %s", recipe.Notes[0], d.Chosen.Offer.Pool), nil
}
