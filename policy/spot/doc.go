// Package spot decides, tick by tick, whether a job with a deadline should run
// on a spot pool, on on-demand capacity, or wait, and replays real spot
// availability traces to measure how much each strategy costs.
// It holds the strategies (on-demand only, greedy, Uniform Progress from "Can't
// Be Late", NSDI 2024, spot-only and gpuq's own), a simulator, and the offline
// optimum computed by dynamic programming as the lower bound.
// It is pure: standard library only, no I/O and no clock, so the live scheduler
// can consult the same strategy through Advise.
package spot
