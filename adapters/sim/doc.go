// Package sim is a simulated cloud driven by real spot availability traces:
// pools with prices, boot delay and capacity, whose spot capacity follows a
// trace on a virtual clock that tests can speed up. Its instances run real
// `gpuq worker` processes on this machine, and a preemption sends the worker
// its provider's notice, then kills it after the pool's grace period.
package sim
