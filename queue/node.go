package queue

import "time"

// Node is a machine workers run on, with its canary record.
type Node struct {
	ID                  string     `json:"id"`
	Pool                string     `json:"pool"`
	Host                string     `json:"host"`
	FirstSeenAt         time.Time  `json:"first_seen_at"`
	LastCanaryAt        *time.Time `json:"last_canary_at,omitempty"`
	LastCanaryOK        *bool      `json:"last_canary_ok,omitempty"`
	LastCanarySummary   string     `json:"last_canary_summary,omitempty"`
	CanaryRuns          int        `json:"canary_runs"`
	CanaryFailures      int        `json:"canary_failures"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	QuarantinedAt       *time.Time `json:"quarantined_at,omitempty"`
	QuarantineReason    string     `json:"quarantine_reason,omitempty"`
}

// FailureRate is the share of the node's canaries that failed.
func (n *Node) FailureRate() float64 {
	if n.CanaryRuns == 0 {
		return 0
	}
	return float64(n.CanaryFailures) / float64(n.CanaryRuns)
}

// CanaryRecord is one canary run to record.
type CanaryRecord struct {
	NodeID  string
	Pool    string
	Host    string
	OK      bool
	Summary string
	// Report is the canary's full JSON report.
	Report []byte
	// Quarantine marks the node quarantined with Reason.
	Quarantine bool
	Reason     string
}
