// Package notice watches for a provider's warning that the worker's machine
// is about to be taken away: the AWS instance metadata spot interruption
// notice, the GCP metadata preempted and maintenance-event keys, Azure
// Scheduled Events, or SIGTERM with a container cloud's grace period.
// A watcher returns one Notice carrying the provider's reason and deadline,
// which the worker turns into its "final checkpoint, record, hand back" path;
// early warnings (an AWS rebalance recommendation, a GCP live migration) are
// reported without handing work back.
package notice
