// Package spot decides, tick by tick, whether a job with a deadline should run
// on a spot pool, on on-demand capacity, or wait, and replays real spot
// availability traces to measure how much each strategy costs.
// It holds the strategies (on-demand only, greedy, Uniform Progress as "Can't
// Be Late", NSDI 2024, and its authors' code specify it, spot-only and gpuq's
// own), a simulator that also charges moves between the zones of several
// pools, and the offline optimum computed by dynamic programming as the lower
// bound, over one pool or several.
// It is pure: standard library only, no I/O and no clock, so the live scheduler
// can consult the same strategy through Advise.
package spot
