package adapters

import (
	"fmt"
	"time"

	"github.com/gpuq/gpuq/policy"
)

// Tags gpuq puts on every instance it rents (as provider tags, labels, or
// the instance name where the provider has nothing else), so that the
// reaper can tell its machines from others and find a launch by its token.
const (
	// TagManagedBy is "gpuq" on every instance gpuq rented.
	TagManagedBy = "gpuq-managed-by"
	// TagPool is the pool the instance serves.
	TagPool = "gpuq-pool"
	// TagInstance is gpuq's id of the instance (BootSpec.InstanceID).
	TagInstance = "gpuq-instance"
	// TagClientToken is the launch's client token.
	TagClientToken = "gpuq-client-token"
)

// ManagedBy is the value of TagManagedBy.
const ManagedBy = "gpuq"

// LaunchRequest asks for one instance in a pool.
type LaunchRequest struct {
	// Pool is one of the adapter's pools, as in its offers.
	Pool string
	// ClientToken makes the launch idempotent: gpuq records it before it
	// asks, and a retried launch with the same token never rents a second
	// machine. 1–64 characters of [A-Za-z0-9-].
	ClientToken string
	// Boot is what the machine runs once up.
	Boot BootSpec
}

// Validate checks the request's shape, naming the field at fault.
func (r LaunchRequest) Validate() error {
	if !policy.ValidPool(r.Pool) {
		return fmt.Errorf("pool: %q must match ^[A-Za-z0-9_-]+$", r.Pool)
	}
	if !validToken(r.ClientToken) {
		return fmt.Errorf("client_token: want 1–64 characters of [A-Za-z0-9-], got %q", r.ClientToken)
	}
	if r.Boot.Pool != r.Pool {
		return fmt.Errorf("boot.pool: %q differs from the launch's pool %q", r.Boot.Pool, r.Pool)
	}
	if err := r.Boot.Validate(); err != nil {
		return fmt.Errorf("boot.%w", err)
	}
	return nil
}

// Tags returns the tags an adapter puts on the instance it launches for r.
func (r LaunchRequest) Tags() map[string]string {
	return map[string]string{
		TagManagedBy:   ManagedBy,
		TagPool:        r.Pool,
		TagInstance:    r.Boot.InstanceID,
		TagClientToken: r.ClientToken,
	}
}

func validToken(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// InstanceState is where an instance is in its life.
type InstanceState string

const (
	// StatePending: requested, not yet running (provisioning, booting).
	StatePending InstanceState = "pending"
	// StateRunning: up and billed.
	StateRunning InstanceState = "running"
	// StateStopping: being released or reclaimed.
	StateStopping InstanceState = "stopping"
	// StateTerminated: released at gpuq's request; no longer billed.
	StateTerminated InstanceState = "terminated"
	// StatePreempted: reclaimed by the provider (spot loss); no longer
	// billed. Providers without an in-machine notice are watched for this.
	StatePreempted InstanceState = "preempted"
	// StateFailed: the provider could not bring it up.
	StateFailed InstanceState = "failed"
)

// Gone reports whether the instance no longer exists or bills.
func (s InstanceState) Gone() bool {
	return s == StateTerminated || s == StatePreempted || s == StateFailed
}

// Instance is one machine as the provider describes it.
type Instance struct {
	Provider string `json:"provider"`
	// ProviderID is the provider's id, the one Describe and Terminate take.
	ProviderID string `json:"provider_id"`
	// Pool is the pool it serves, from its tags; empty for a machine gpuq
	// did not launch.
	Pool  string        `json:"pool,omitempty"`
	State InstanceState `json:"state"`
	// Reason is the provider's word for the state, when it gives one
	// ("Spot instance reclaimed", "no_capacity").
	Reason     string    `json:"reason,omitempty"`
	LaunchedAt time.Time `json:"launched_at"`
	// PricePerHour is what the provider charges for it (the spot price at
	// launch, where the provider bills that), in the provider's currency.
	PricePerHour policy.Money `json:"price_per_hour"`
	// ClientToken is the launch's client token, from its tags.
	ClientToken string `json:"client_token,omitempty"`
	// Tags are the gpuq tags found on the instance (see TagPool …).
	Tags map[string]string `json:"tags,omitempty"`
}

// Managed reports whether gpuq launched the instance.
func (i Instance) Managed() bool { return i.Tags[TagManagedBy] == ManagedBy }

// InstanceFilter selects instances; zero fields match everything.
type InstanceFilter struct {
	Pool        string
	ClientToken string
	// IncludeGone also returns terminated and preempted instances the
	// provider still lists.
	IncludeGone bool
}

// Match reports whether i passes the filter. Adapters whose provider
// cannot filter server-side call it on each listed instance.
func (f InstanceFilter) Match(i Instance) bool {
	return (f.Pool == "" || i.Pool == f.Pool) &&
		(f.ClientToken == "" || i.ClientToken == f.ClientToken) &&
		(f.IncludeGone || !i.State.Gone())
}
