package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/queue"
)

// ReaperProvider is what the reaper needs from a provider adapter: the
// instances carrying gpuq's tags, and releasing them.
type ReaperProvider interface {
	Name() string
	adapters.InstanceLister
	adapters.Terminator
}

// ReaperStore is what the reaper reads and changes in the instance table.
type ReaperStore interface {
	LiveInstances(ctx context.Context) ([]*queue.Instance, error)
	Instance(ctx context.Context, id string) (*queue.Instance, error)
	ChangeInstance(ctx context.Context, c queue.InstanceChange) (*queue.Instance, error)
}

// Reaper makes the providers' instance lists and the instance table agree:
// a machine a provider bills that gpuq does not know, or that gpuq recorded
// as ended, is terminated and reported; a recorded live instance the
// provider no longer lists is closed with the reason. It runs once when it
// starts and then every Interval.
type Reaper struct {
	Providers []ReaperProvider
	Store     ReaperStore
	// Interval between passes. Default 1m.
	Interval time.Duration
	// Grace is how long a launch may go unlisted by its provider before it
	// is closed as gone; providers list new machines late. Default 1m.
	Grace time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Reaped is one thing a reaper pass did.
type Reaped struct {
	Provider   string `json:"provider"`
	ProviderID string `json:"provider_id"`
	// InstanceID is gpuq's id, from the instance's tags or record.
	InstanceID string `json:"instance_id,omitempty"`
	// Action is "terminated" (billed but unknown or recorded as ended) or
	// "closed" (recorded live, gone at the provider).
	Action string `json:"action"`
	Reason string `json:"reason"`
}

// WithDefaults returns r with every unset default filled in.
func (r Reaper) WithDefaults() Reaper {
	if r.Interval == 0 {
		r.Interval = time.Minute
	}
	if r.Grace == 0 {
		r.Grace = time.Minute
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return r
}

func (r Reaper) validate() error {
	switch {
	case r.Store == nil:
		return errors.New("reaper.store: must be set")
	case r.Interval < 10*time.Millisecond:
		return fmt.Errorf("reaper.interval: must be at least 10ms, got %s", r.Interval)
	case r.Grace < 0:
		return fmt.Errorf("reaper.grace: must not be negative, got %s", r.Grace)
	}
	return nil
}

// Run reaps at once and then every Interval until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	cfg := r.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if _, err := cfg.Pass(ctx); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("reaping", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass compares every provider's list with the table once and returns what
// it terminated and closed.
func (r *Reaper) Pass(ctx context.Context) ([]Reaped, error) {
	cfg := r.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	live, err := cfg.Store.LiveInstances(ctx)
	if err != nil {
		return nil, err
	}
	recorded := map[string]*queue.Instance{}
	for _, in := range live {
		recorded[in.ID] = in
	}
	var out []Reaped
	var errs []error
	for _, p := range cfg.Providers {
		listed, err := p.Instances(ctx, adapters.InstanceFilter{})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the instances of %s: %w", p.Name(), err))
			continue
		}
		seen := map[string]bool{}
		for _, got := range listed {
			id := got.Tags[adapters.TagInstance]
			seen[got.ProviderID] = true
			if rec, ok := recorded[id]; ok && rec.Provider == p.Name() {
				continue
			}
			reason := "billed by " + p.Name() + " but unknown to gpuq"
			if id != "" {
				rec, err := cfg.Store.Instance(ctx, id)
				switch {
				case errors.Is(err, queue.ErrNotFound):
				case err != nil:
					errs = append(errs, err)
					continue
				case rec.State.Live() && rec.Provider == p.Name():
					// Recorded after the table was read: a launch under
					// way, the autoscaler's to finish.
					continue
				default:
					reason = fmt.Sprintf("billed by %s but recorded as %s", p.Name(), rec.State)
				}
			}
			if err := p.Terminate(ctx, got.ProviderID); err != nil {
				errs = append(errs, fmt.Errorf("terminating %s instance %s: %w", p.Name(), got.ProviderID, err))
				continue
			}
			cfg.Logger.Warn("reaper terminated an instance", "provider", p.Name(), "provider_id", got.ProviderID, "instance", id, "reason", reason)
			out = append(out, Reaped{Provider: p.Name(), ProviderID: got.ProviderID, InstanceID: id, Action: "terminated", Reason: reason})
		}
		for _, in := range live {
			if in.Provider != p.Name() || in.State == queue.InstanceRequested || seen[in.ProviderID] {
				continue
			}
			if cfg.Now().Sub(deref(in.LaunchedAt, in.RequestedAt)) < cfg.Grace {
				continue
			}
			end, reason, why := queue.InstancePreempted, p.Name()+" no longer lists the instance", ""
			if in.State == queue.InstanceDraining {
				// gpuq released it: its record keeps why.
				end, why = queue.InstanceTerminated, ""
			} else {
				why = reason
			}
			_, err := cfg.Store.ChangeInstance(ctx, queue.InstanceChange{ID: in.ID, From: []queue.InstanceState{in.State}, To: end, Reason: why})
			if errors.Is(err, queue.ErrInstanceMoved) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			cfg.Logger.Warn("reaper closed an instance", "instance", in.ID, "provider_id", in.ProviderID, "reason", reason)
			out = append(out, Reaped{Provider: p.Name(), ProviderID: in.ProviderID, InstanceID: in.ID, Action: "closed", Reason: reason})
		}
	}
	return out, errors.Join(errs...)
}
