package main

import "testing"

func TestParseRiverBenchReadsTheSummaryLine(t *testing.T) {
	out := []byte("bench: jobs worked [      43211 ], inserted [          0 ], job/sec [    21605.5 ] [2s]\n" +
		"bench: jobs worked [       6789 ], inserted [          0 ], job/sec [     3394.5 ] [2s]\n" +
		"bench: total jobs worked [      50000 ], total jobs inserted [      50000 ], overall job/sec [    21630.4 ], running 2.311s\n")
	got, err := parseRiverBench(out)
	if err != nil || got != 21630.4 {
		t.Fatalf("parseRiverBench = %v, %v; want 21630.4", got, err)
	}
	if _, err := parseRiverBench([]byte("bench: jobs worked [ 10 ], inserted [ 0 ], job/sec [ 5.0 ] [2s]\n")); err == nil {
		t.Fatal("a run cut short before its summary line must be an error, not a figure")
	}
}
