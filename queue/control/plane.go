package control

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PlaneStore is everything the control plane's loops need from the system
// of record together.
type PlaneStore interface {
	SchedulerStore
	ReconcilerStore
	ReplacerStore
	SequencerStore
	LivenessStore
	Spend(ctx context.Context, project string, since time.Time) (map[string]int64, error)
}

// PlaneStreams is everything the control plane's loops need from JetStream
// together.
type PlaneStreams interface {
	RunPublisher
	Consumer(ctx context.Context, stream, consumer string) (jetstream.Consumer, error)
	Stream(ctx context.Context, stream string) (jetstream.Stream, error)
	CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error)
}

// PlaneLoops is how many loops a Plane runs: each one's end is reported on
// the channel Start returns.
const PlaneLoops = 5

// Plane is the control plane of one server: the scheduler, the reconciler,
// the replacer and the sequencer sharing one placer, and the liveness
// monitor.
type Plane struct {
	JS     PlaneStreams
	Store  PlaneStore
	Placer Placer
	// NATS carries the workers' liveness beats. When nil, no liveness
	// monitor runs and a lost worker's job comes back only once its lease
	// and AckWait lapse.
	NATS LivenessConn
	// LostAfter is the liveness monitor's Liveness.LostAfter (default
	// 700ms).
	LostAfter time.Duration
	// Claims is the liveness monitor's Liveness.Claims: the same as the
	// worker service's of this server.
	Claims *RecentClaims
	// Workers is the liveness monitor's Liveness.Workers.
	Workers *LiveWorkers
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Start runs the scheduler, the reconciler, the replacer, the sequencer
// and the liveness monitor until ctx ends; each one's end is reported on
// the returned channel, PlaneLoops in all (the liveness monitor's at once
// when NATS is nil).
func (p *Plane) Start(ctx context.Context) <-chan error {
	errc := make(chan error, PlaneLoops)
	if p.JS == nil || p.Store == nil || p.Placer == nil {
		err := errors.New("control plane: js, store and placer must be set")
		for range PlaneLoops {
			errc <- err
		}
		return errc
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.Default()
	}
	sched := &Scheduler{JS: p.JS, Store: p.Store, Placer: p.Placer, Logger: logger}
	rec := &Reconciler{JS: p.JS, Store: p.Store, Placer: p.Placer, Logger: logger}
	rep := &Replacer{JS: p.JS, Store: p.Store, Placer: p.Placer, Logger: logger}
	seq := &Sequencer{JS: p.JS, Store: p.Store, Placer: p.Placer, Logger: logger}
	go func() { errc <- sched.Run(ctx) }()
	go func() { errc <- rec.Run(ctx) }()
	go func() { errc <- rep.Run(ctx) }()
	go func() { errc <- seq.Run(ctx) }()
	if p.NATS == nil {
		errc <- nil
	} else {
		live := &Liveness{NATS: p.NATS, Store: p.Store, LostAfter: p.LostAfter, Logger: logger, Claims: p.Claims, Workers: p.Workers}
		go func() { errc <- live.Run(ctx) }()
	}
	return errc
}
