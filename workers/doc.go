// Package workers is the agent that runs on rented capacity: it pulls jobs from
// its pool's consumer, claims them fenced by attempt number, runs them as
// processes, commits their checkpoints to the region's store, and acknowledges
// a job only after its completion is durably recorded.
package workers
