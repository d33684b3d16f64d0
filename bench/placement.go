package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
)

var nsPerOp = regexp.MustCompile(`(?m)^BenchmarkPlace\S*\s+\d+\s+([0-9.]+) ns/op`)

// measurePlacement runs the policy package's BenchmarkPlace (one job against
// 10,000 offers and 50 rules) count times and returns each run's time per
// decision in milliseconds.
func measurePlacement(ctx context.Context, repoRoot string, count int) ([]float64, error) {
	out, err := goBench(ctx, repoRoot, "./policy/", "^BenchmarkPlace$", count, "-benchmem")
	if err != nil {
		return nil, err
	}
	var ms []float64
	for _, m := range nsPerOp.FindAllSubmatch(out, -1) {
		ns, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			return nil, err
		}
		ms = append(ms, ns/1e6)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no BenchmarkPlace result in the output:\n%s", out)
	}
	return ms, nil
}

var attemptsPerSec = regexp.MustCompile(`(?m)^BenchmarkAttemptsWithJobsQueued/queued=(\d+)\S*\s+\d+\s+[0-9.]+ ns/op\s+([0-9.]+) jobs/s`)

// measureAttempts runs the store's BenchmarkAttemptsWithJobsQueued (claims,
// heartbeats and successes in batches of 32, with 3,200 and with 100,000
// jobs queued under stale statistics) count times and returns each run's
// jobs per second by the number of jobs queued.
func measureAttempts(ctx context.Context, repoRoot string, count int) (map[int][]float64, error) {
	out, err := goBench(ctx, repoRoot, "./queue/store/", "^BenchmarkAttemptsWithJobsQueued$", count, "-benchtime", "100x")
	if err != nil {
		return nil, err
	}
	return parseAttempts(out)
}

// goBench runs the Go benchmarks of pkg matching pattern, count times, in
// the gpuq repository, and returns their output.
func goBench(ctx context.Context, repoRoot, pkg, pattern string, count int, flags ...string) ([]byte, error) {
	args := append([]string{"test", "-run", "^$", "-bench", pattern, "-count", strconv.Itoa(count)}, flags...)
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("running %s in %s: %w\n%s", pattern, pkg, err, out)
	}
	return out, nil
}

func parseAttempts(out []byte) (map[int][]float64, error) {
	rates := map[int][]float64{}
	for _, m := range attemptsPerSec.FindAllSubmatch(out, -1) {
		queued, err := strconv.Atoi(string(m[1]))
		if err != nil {
			return nil, err
		}
		rate, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			return nil, err
		}
		rates[queued] = append(rates[queued], rate)
	}
	if len(rates[attemptsFew]) == 0 || len(rates[attemptsMany]) == 0 {
		return nil, fmt.Errorf("no BenchmarkAttemptsWithJobsQueued result for %d and %d jobs queued in the output:\n%s", attemptsFew, attemptsMany, out)
	}
	return rates, nil
}

// The store benchmark's two queue lengths.
const attemptsFew, attemptsMany = 3_200, 100_000
