// Package queue is gpuq's shared vocabulary: the job and its states, the spec
// and its strict parser, submissions, subjects and streams, events, claims and
// records, and the typed errors every room of the system speaks. It holds no
// PostgreSQL and no control loops: queue/store records these values and
// queue/control acts on them, while workers and clients exchange them.
package queue
