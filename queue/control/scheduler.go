package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// SchedulerStore is what the scheduler needs from the system of record.
type SchedulerStore interface {
	RecordAndPlace(ctx context.Context, jobs []queue.NewJob, d queue.Decided) ([]*queue.Job, []queue.PlacedJob, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
	// MissingSecrets returns those of names that project does not hold.
	MissingSecrets(ctx context.Context, project string, names []string) ([]string, error)
	// Dependencies returns the jobs of ids that exist.
	Dependencies(ctx context.Context, ids []uuid.UUID) ([]queue.Dependency, error)
}

// SchedulerStreams is what the scheduler needs from JetStream: its
// submissions consumer and the run stream to publish to.
type SchedulerStreams interface {
	RunPublisher
	Consumer(ctx context.Context, stream, consumer string) (jetstream.Consumer, error)
}

// Scheduler consumes submissions, places them and records them, and
// publishes them to their pools. It decides each batch with the Placer
// outside any transaction, then records the jobs and commits the decisions
// in one transaction (budgets re-checked in SQL), publishes, and acks. Each
// step is idempotent, so a scheduler killed at any moment loses nothing and,
// restarted, publishes nothing twice: a redelivered submission finds its job
// already recorded, and a republished run message carries the same
// Nats-Msg-Id.
type Scheduler struct {
	JS     SchedulerStreams
	Store  SchedulerStore
	Placer Placer
	// Logger; default slog.Default().
	Logger *slog.Logger
	// BatchSize is the most submissions handled in one transaction. Default 256.
	BatchSize int
	// InFlight is how many batches are handled at once. Default 2: a
	// batch spends most of its time waiting for its commit to reach the
	// disk, and the next one is decided and recorded meanwhile, as a second
	// server's scheduler would.
	InFlight int
}

// WithDefaults returns s with every unset default filled in.
func (s Scheduler) WithDefaults() Scheduler {
	if s.BatchSize == 0 {
		s.BatchSize = 256
	}
	if s.InFlight == 0 {
		s.InFlight = 2
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	return s
}

func (s Scheduler) validate() error {
	switch {
	case s.JS == nil:
		return errors.New("scheduler.js: must be set")
	case s.Store == nil:
		return errors.New("scheduler.store: must be set")
	case s.Placer == nil:
		return errors.New("scheduler.placer: must be set")
	case s.BatchSize < 1 || s.BatchSize > 10000:
		return fmt.Errorf("scheduler.batch_size: must be 1–10000, got %d", s.BatchSize)
	case s.InFlight < 1 || s.InFlight > 16:
		return fmt.Errorf("scheduler.in_flight: must be 1–16, got %d", s.InFlight)
	}
	return nil
}

// Run consumes submissions until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	cfg := s.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	cons, err := cfg.JS.Consumer(ctx, queue.StreamSubmit, queue.SchedulerConsumer)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("scheduler: %w", err)
	}
	msgs := make(chan jetstream.Msg, cfg.BatchSize)
	// A consumer deleted under the scheduler is not re-created here: Run
	// ends with the error, so that its server exits and its supervisor
	// restarts it, which creates the consumer again.
	lost := make(chan error, 1)
	onErr := jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			select {
			case lost <- err:
			default:
			}
		}
	})
	cc, err := cons.Consume(func(m jetstream.Msg) { msgs <- m }, jetstream.PullMaxMessages(cfg.BatchSize), onErr)
	if err != nil {
		return fmt.Errorf("scheduler: consuming submissions: %w", err)
	}
	defer cc.Stop()
	loopCtx, stop := context.WithCancel(ctx)
	var loops sync.WaitGroup
	for range cfg.InFlight {
		loops.Go(func() { cfg.batches(loopCtx, msgs) })
	}
	defer func() {
		stop()
		loops.Wait()
	}()
	select {
	case <-ctx.Done():
		return nil
	case err := <-lost:
		return fmt.Errorf("scheduler: consuming submissions: %w", err)
	}
}

// batches handles batches of the submissions delivered on msgs until ctx
// ends; each batch holds those waiting when it starts.
func (s *Scheduler) batches(ctx context.Context, msgs <-chan jetstream.Msg) {
	for {
		var batch []jetstream.Msg
		select {
		case <-ctx.Done():
			return
		case m := <-msgs:
			batch = append(batch, m)
		}
	drain:
		for len(batch) < s.BatchSize {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		if err := s.handle(ctx, batch); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.Logger.Error("scheduling a batch of submissions; they will be redelivered", "count", len(batch), "err", err)
			for _, m := range batch {
				m.NakWithDelay(queue.RedeliveryDelay(m, 500*time.Millisecond, 30*time.Second)) //nolint:errcheck // redelivered after AckWait anyway
			}
		}
	}
}

// handle decides, records and publishes a batch, then acks it.
func (s *Scheduler) handle(ctx context.Context, batch []jetstream.Msg) error {
	var valid []jetstream.Msg
	var jobs []queue.NewJob
	var pending []*queue.Job
	refused := map[uuid.UUID]string{}
	waiting := map[uuid.UUID]string{}
	for _, m := range batch {
		spec, err := queue.ParseSpec(m.Data())
		var id uuid.UUID
		var foreign string
		if err == nil {
			id, err = queue.SubmissionID(m, spec)
		}
		if err == nil {
			// A submission naming another project than its subject's is
			// recorded, rejected, under the subject's project: the one
			// the publisher's credential allowed.
			if foreign = queue.ForeignProject(m.Subject(), spec); foreign != "" {
				spec.Project = queue.SubjectProject(m.Subject())
				spec.IdempotencyKey = ""
				err = spec.Validate()
			}
		}
		if err != nil {
			// Nothing is recorded for a malformed raw publish; the client
			// library validates before publishing, so only raw publishers
			// meet this, and they see it in the scheduler's log.
			s.Logger.Warn("refusing a malformed submission", "subject", m.Subject(), "err", err)
			if err := m.Term(); err != nil {
				return fmt.Errorf("terminating a malformed submission: %w", err)
			}
			continue
		}
		var after queue.Readiness
		var why string
		if spec.RunsAfter() && foreign == "" {
			var later bool
			if after, why, later, err = s.sequence(ctx, m, id, spec); err != nil {
				return err
			}
			if later {
				// A job it runs after, submitted just before it, is
				// not recorded yet (a batch handled beside this one).
				m.NakWithDelay(afterRecheck) //nolint:errcheck // redelivered after AckWait anyway
				continue
			}
		}
		valid = append(valid, m)
		jobs = append(jobs, queue.NewJob{ID: id, Spec: spec})
		if foreign != "" {
			s.Logger.Warn("rejecting a submission for another project", "subject", m.Subject(), "job", id, "reason", foreign)
			refused[id] = foreign
			continue
		}
		// A job naming a secret its project does not hold is rejected
		// here, before a pool (and a machine) is taken for it, whichever
		// way it was submitted.
		if names := spec.NamedSecrets(); len(names) > 0 {
			missing, err := s.Store.MissingSecrets(ctx, spec.Project, names)
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				refused[id] = queue.SecretRejection(spec.Project, missing)
				continue
			}
		}
		switch after {
		case queue.Never:
			refused[id] = why
			continue
		case queue.Waiting:
			waiting[id] = why
			continue
		}
		submitted := time.Now().UTC()
		if meta, err := m.Metadata(); err == nil {
			submitted = meta.Timestamp.UTC()
		}
		pending = append(pending, &queue.Job{ID: id, Project: spec.Project, Name: spec.Name, IdempotencyKey: spec.IdempotencyKey,
			Spec: spec, State: queue.StatePending, SubmittedAt: submitted})
	}
	if len(jobs) == 0 {
		return nil
	}
	// Placement is decided before the batch is recorded, on a snapshot of
	// spend, so that no transaction waits on providers or policy; a decision
	// for a job found already recorded takes effect only if it still waits.
	decided, err := decide(ctx, s.Placer, pending)
	if err != nil {
		return err
	}
	for id, reason := range refused {
		decided.Rejected[id] = reason
	}
	decided.Waiting = waiting
	recorded, placed, err := s.Store.RecordAndPlace(ctx, jobs, decided)
	if err != nil {
		return err
	}
	if err := publishPlaced(ctx, s.JS, s.Store, recorded, placed); err != nil {
		return err
	}
	for _, m := range valid {
		if err := m.Ack(); err != nil {
			s.Logger.Warn("acknowledging a submission; it will be redelivered and found recorded", "err", err)
		}
	}
	return nil
}

// afterRecheck is how long a submission naming a job not recorded yet in
// its after waits before it is handled again; afterTries is how often it
// is, before the job is rejected.
const (
	afterRecheck = time.Second
	afterTries   = 5
)

// sequence reads the jobs the submission m of job id runs after and says
// where it stands (queue.Sequence). later is true when one of them is not
// recorded and m should be handled again shortly: it may be in a batch
// handled beside this one.
func (s *Scheduler) sequence(ctx context.Context, m jetstream.Msg, id uuid.UUID, spec *queue.Spec) (r queue.Readiness, why string, later bool, err error) {
	ids := spec.AfterIDs()
	deps, err := s.Store.Dependencies(ctx, ids)
	if err != nil {
		return 0, "", false, err
	}
	r, why = queue.Sequence(id, spec.Project, spec, deps)
	if r == queue.Never && len(deps) < len(ids) && !slices.Contains(ids, id) {
		if meta, err := m.Metadata(); err == nil && meta.NumDelivered < afterTries {
			return r, why, true, nil
		}
	}
	return r, why, false, nil
}

// decide places the pending jobs of a batch and collects the rejections.
// The placements of a batch share one read of each project's spend.
func decide(ctx context.Context, placer Placer, jobs []*queue.Job) (queue.Decided, error) {
	ctx = withSpendCache(ctx)
	d := queue.Decided{Rejected: map[uuid.UUID]string{}}
	seen := make(map[uuid.UUID]bool, len(jobs))
	for _, j := range jobs {
		// A batch may carry one job twice (a resent submission); one
		// decision is enough.
		if j.State != queue.StatePending || seen[j.ID] {
			continue
		}
		seen[j.ID] = true
		p, err := placer.Place(ctx, j, nil)
		var rej *queue.RejectionError
		if errors.As(err, &rej) {
			d.Rejected[j.ID] = rej.Reason
			continue
		}
		if err != nil {
			return d, fmt.Errorf("placing job %s: %w", j.ID, err)
		}
		p.Version = j.PlacementVersion + 1
		d.Placed = append(d.Placed, queue.PlacedJob{JobID: j.ID, Placement: p})
	}
	return d, nil
}
