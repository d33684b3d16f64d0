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
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkPlace$", "-benchmem", "-count", strconv.Itoa(count), "./policy/")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("running the policy benchmark: %w\n%s", err, out)
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
