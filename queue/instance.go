package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrInstanceMoved is returned when an instance change finds the instance in
// none of the states it expected: another change came first.
var ErrInstanceMoved = errors.New("instance is no longer in the expected state")

// InstanceState is where a rented machine is in its life; it mirrors the
// PostgreSQL enum instance_state.
type InstanceState string

const (
	// InstanceRequested: recorded with its client token; the provider was
	// (or is being) asked.
	InstanceRequested InstanceState = "requested"
	// InstancePending: the provider rented it; its worker is not up yet.
	InstancePending InstanceState = "pending"
	// InstanceReady: its worker is up and pulling.
	InstanceReady InstanceState = "ready"
	// InstanceDraining: being released; its worker finishes or hands back.
	InstanceDraining InstanceState = "draining"
	// InstanceTerminated: released by gpuq; no longer billed.
	InstanceTerminated InstanceState = "terminated"
	// InstancePreempted: reclaimed by the provider, or gone without gpuq
	// asking; no longer billed.
	InstancePreempted InstanceState = "preempted"
	// InstanceFailed: never came up (no capacity, refused, boot timeout).
	InstanceFailed InstanceState = "failed"
)

// InstanceStates lists every instance state, live ones first.
var InstanceStates = []InstanceState{InstanceRequested, InstancePending, InstanceReady, InstanceDraining,
	InstanceTerminated, InstancePreempted, InstanceFailed}

// Live reports whether an instance in state s may be billed or come up.
func (s InstanceState) Live() bool {
	return s == InstanceRequested || s == InstancePending || s == InstanceReady || s == InstanceDraining
}

// Billing is the unit a provider rounds an instance's billed time up to.
type Billing string

const (
	BillPerSecond Billing = "second"
	BillPerHour   Billing = "hour"
)

// Instance is one machine gpuq rents, as recorded.
type Instance struct {
	// ID is gpuq's id: the boot spec's instance id and the worker's node id.
	ID       string `json:"id"`
	Provider string `json:"provider"`
	Pool     string `json:"pool"`
	// Project is the project whose waiting jobs the launch was for.
	Project     string        `json:"project,omitempty"`
	State       InstanceState `json:"state"`
	ClientToken string        `json:"client_token"`
	ProviderID  string        `json:"provider_id,omitempty"`
	Slots       int           `json:"slots"`
	// PriceMicros per hour in Currency, billed per Billing unit.
	PriceMicros int64     `json:"price_micros"`
	Currency    string    `json:"currency"`
	Billing     Billing   `json:"billing"`
	RequestedAt time.Time `json:"requested_at"`
	// LaunchedAt starts the bill and EndedAt stops it.
	LaunchedAt   *time.Time `json:"launched_at,omitempty"`
	ReadyAt      *time.Time `json:"ready_at,omitempty"`
	WorkerSeenAt *time.Time `json:"worker_seen_at,omitempty"`
	DrainAt      *time.Time `json:"drain_at,omitempty"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	// Reason is why it was last moved: why it ended, for an ended one.
	Reason string `json:"reason,omitempty"`
}

// NewInstance is a launch to record before the provider is asked.
type NewInstance struct {
	ID, Provider, Pool, Project, ClientToken string
	Slots                                    int
	PriceMicros                              int64
	Currency                                 string
	Billing                                  Billing
	Message                                  string
}

// InstanceChange moves a recorded instance from one of From to To.
type InstanceChange struct {
	ID   string
	From []InstanceState
	To   InstanceState
	// ProviderID and LaunchedAt are recorded when set (a launch's answer).
	ProviderID string
	LaunchedAt *time.Time
	// EndedAt is when the bill stopped, for an ending; default now.
	EndedAt *time.Time
	Reason  string
}

// InstanceEvent is one state change of an instance: a row of
// instance_events, and the payload of its announcement on
// InstanceSubject(pool, instance) once it committed.
type InstanceEvent struct {
	// ID is the event's id in the system of record; an instance's events
	// have growing ids in the order they were recorded.
	ID         int64  `json:"id"`
	InstanceID string `json:"instance_id"`
	Pool       string `json:"pool"`
	Provider   string `json:"provider"`
	// Project is the project whose waiting jobs the launch was for.
	Project string        `json:"project,omitempty"`
	At      time.Time     `json:"at"`
	State   InstanceState `json:"state"`
	Message string        `json:"message,omitempty"`
}

// InstanceEventMsgID is the Nats-Msg-Id of an instance event's
// announcement: JetStream drops a repeat inside its duplicate window.
func InstanceEventMsgID(id int64) string { return "instance-event:" + strconv.FormatInt(id, 10) }

// AnnounceInstanceEvent publishes ev on its instance's subject and waits for
// JetStream to store it.
func AnnounceInstanceEvent(ctx context.Context, js Publisher, ev InstanceEvent) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(InstanceSubject(ev.Pool, ev.InstanceID))
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, InstanceEventMsgID(ev.ID))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("announcing event %d of instance %s: %w", ev.ID, ev.InstanceID, err)
	}
	return nil
}

// WorkerActivity is what the control plane knows of an instance's worker:
// the jobs it runs now, when it was last active, and its canary record.
type WorkerActivity struct {
	Busy       int
	LastActive time.Time
	// CanaryAt is its latest canary run, nil before the first.
	CanaryAt *time.Time
	// QuarantinedAt is set once the canary quarantined its node.
	QuarantinedAt    *time.Time
	QuarantineReason string
}

// PoolDemand is the work one pool has: jobs waiting to be claimed (and
// since when the oldest waits) and jobs running.
type PoolDemand struct {
	Pool          string
	Waiting       int
	OldestWaiting time.Time
	Running       int
	// WaitingByProject counts the waiting jobs of each project.
	WaitingByProject map[string]int
}

// InstanceAttempt is one attempt that ran on an instance, for attributing
// the instance's bill.
type InstanceAttempt struct {
	InstanceID string
	JobID      string
	Attempt    int
	Project    string
	From, To   time.Time
}

// PoolExhaustion is a pool the autoscaler leaves alone until Until, and why.
type PoolExhaustion struct {
	Pool   string    `json:"pool"`
	At     time.Time `json:"at"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// FollowInstanceEvents calls fn with each instance event announced for pool
// ("" for every pool) and its stream sequence, from the one after sequence
// after (0: only events announced from now on), until fn returns false or
// ctx ends. raw is the event as announced.
func FollowInstanceEvents(ctx context.Context, js OrderedConsumers, pool string, after uint64, fn func(seq uint64, raw []byte, ev InstanceEvent) bool) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{PoolInstancesSubject(pool)}, DeliverPolicy: jetstream.DeliverNewPolicy}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	return followStream(ctx, js, StreamInstances, cfg, "instance events", func(msg jetstream.Msg) bool {
		var ev InstanceEvent
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return true
		}
		var seq uint64
		if meta, err := msg.Metadata(); err == nil {
			seq = meta.Sequence.Stream
		}
		return fn(seq, msg.Data(), ev)
	})
}
