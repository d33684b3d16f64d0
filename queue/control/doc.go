// Package control is gpuq's control plane: the scheduler that records,
// places and dispatches submissions, the reconciler and replacer that repair
// and re-place jobs, the client operations, and the supervisor of local
// workers. Each component declares the narrow store and JetStream interfaces
// it uses, so its dependencies are visible at the consumer.
package control
