package adapters

import (
	"fmt"
	"time"
)

// NoticeKind is what a provider's warning announces.
type NoticeKind string

const (
	// NoticePreempt: the provider reclaims the machine at Deadline.
	NoticePreempt NoticeKind = "preempt"
	// NoticeRebalance: the machine is at elevated risk of preemption (an
	// early warning; it may never come).
	NoticeRebalance NoticeKind = "rebalance"
	// NoticeMaintenance: the provider will stop or migrate the machine
	// for maintenance at Deadline.
	NoticeMaintenance NoticeKind = "maintenance"
)

// Notice is a provider's warning, as a notice watcher on the worker reads it.
type Notice struct {
	Kind NoticeKind `json:"kind"`
	// Deadline is when the machine goes away; zero when the provider does
	// not say (the worker then assumes its source's default grace).
	Deadline time.Time `json:"deadline,omitzero"`
	// Reason is the provider's own words: the IMDS action, the scheduled
	// event's type and description, "SIGTERM".
	Reason string `json:"reason,omitempty"`
	// Source is the watcher that read it.
	Source NoticeSource `json:"source"`
}

// Validate checks the notice's shape, naming the field at fault.
func (n Notice) Validate() error {
	switch n.Kind {
	case NoticePreempt, NoticeRebalance, NoticeMaintenance:
	default:
		return fmt.Errorf("kind: must be preempt, rebalance or maintenance, got %q", n.Kind)
	}
	if _, err := ParseNoticeSource(string(n.Source)); err != nil || n.Source == NoticeNone {
		return fmt.Errorf("source: must be aws, gcp, azure or sigterm, got %q", n.Source)
	}
	if len(n.Reason) > 1024 {
		return fmt.Errorf("reason: at most 1024 bytes, got %d", len(n.Reason))
	}
	return nil
}

// Final reports whether the notice means the machine goes away, so running
// jobs must checkpoint and be handed back; a rebalance recommendation is
// only an early warning.
func (n Notice) Final() bool { return n.Kind != NoticeRebalance }

// NoticeSource is how a worker hears of its machine's preemption: the
// worker's --notice flag, defaulted from its pool's provider.
type NoticeSource string

const (
	// NoticeAWS: EC2 instance metadata (IMDSv2) spot/instance-action and
	// the rebalance recommendation; two minutes' warning.
	NoticeAWS NoticeSource = "aws"
	// NoticeGCP: the metadata server's instance/preempted and maintenance
	// events; about 30 s.
	NoticeGCP NoticeSource = "gcp"
	// NoticeAzure: Scheduled Events (Preempt); at least 30 s.
	NoticeAzure NoticeSource = "azure"
	// NoticeSIGTERM: the provider stops the container with SIGTERM, then
	// SIGKILL after its grace period (RunPod: 5 s).
	NoticeSIGTERM NoticeSource = "sigterm"
	// NoticeNone: the provider gives no warning; loss is found by polling
	// the instance's state (Verda) and by AckWait.
	NoticeNone NoticeSource = "none"
)

// ParseNoticeSource reads a --notice value.
func ParseNoticeSource(s string) (NoticeSource, error) {
	switch n := NoticeSource(s); n {
	case NoticeAWS, NoticeGCP, NoticeAzure, NoticeSIGTERM, NoticeNone:
		return n, nil
	}
	return "", fmt.Errorf("want aws, gcp, azure, sigterm or none, got %q", s)
}

// DefaultGrace is the warning each source's provider documents between the
// notice and the machine's end; zero for NoticeNone, and for NoticeSIGTERM,
// whose grace each container provider sets (a pool states it).
func (s NoticeSource) DefaultGrace() time.Duration {
	switch s {
	case NoticeAWS:
		return 2 * time.Minute
	case NoticeGCP, NoticeAzure:
		return 30 * time.Second
	}
	return 0
}
