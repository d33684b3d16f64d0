package main

import (
	"slices"
	"testing"
)

func TestParseAttemptsReadsEachQueueLength(t *testing.T) {
	out := []byte("goos: linux\n" +
		"BenchmarkAttemptsWithJobsQueued/queued=3200-2         \t     100\t  14005034 ns/op\t      2285 jobs/s\n" +
		"BenchmarkAttemptsWithJobsQueued/queued=100000-2       \t     100\t  14411824 ns/op\t      2220 jobs/s\n" +
		"BenchmarkAttemptsWithJobsQueued/queued=3200-2         \t     100\t  15124969 ns/op\t      2116 jobs/s\n" +
		"BenchmarkAttemptsWithJobsQueued/queued=100000-2       \t     100\t  34100421 ns/op\t       938.4 jobs/s\n" +
		"PASS\n")
	got, err := parseAttempts(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[attemptsFew], []float64{2285, 2116}) || !slices.Equal(got[attemptsMany], []float64{2220, 938.4}) {
		t.Fatalf("parseAttempts = %v", got)
	}
	if _, err := parseAttempts(out[:150]); err == nil {
		t.Fatal("output without the 100,000-job runs must be an error, not a figure")
	}
}
