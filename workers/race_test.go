//go:build race

package workers_test

// raceEnabled builds the worker binary with the race detector too when the
// tests run under it.
const raceEnabled = true
