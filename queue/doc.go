// Package queue is gpuq's control plane: the job model, the JetStream streams
// and consumers, submission, the scheduler that validates and places jobs, the
// reconciler, and the PostgreSQL store that is the system of record. Every
// state change is written to PostgreSQL first and announced on JetStream after.
package queue
