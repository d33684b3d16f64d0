package queue

import (
	"slices"
	"strings"
	"testing"
)

func TestSimilarNamesAnotherToolsWordBeforeATypo(t *testing.T) {
	t.Parallel()
	flags := []string{"cpu", "gpu-count", "memory-gb", "max-errors", "max-price", "label", "state", "follow", "timeout", "output"}
	fields := []string{"name", "command", "resources", "placement", "retries", "idempotency_key", "expected_duration", "after", "after_ended"}
	for _, c := range []struct {
		name  string
		among []string
		want  []string
	}{
		{"gpus", flags, []string{"gpu-count"}},
		{"gpu", flags, []string{"gpu-count", "cpu"}},
		{"cpus", flags, []string{"cpu"}},
		{"mem", flags, []string{"memory-gb"}},
		{"max-retries", flags, []string{"max-errors", "max-price"}},
		{"lable", flags, []string{"label"}},
		{"labels", flags, []string{"label"}},
		{"stat", flags, []string{"state"}},
		{"folow", flags, []string{"follow"}},
		{"epochs", flags, nil},
		{"x", flags, nil},
		{"comand", fields, []string{"command"}},
		{"resource", fields, []string{"resources"}},
		{"idempotency", fields, []string{"idempotency_key"}},
		{"expected-duration", fields, []string{"expected_duration"}},
		{"after-ended", fields, []string{"after", "after_ended"}},
		{"retry", fields, []string{"retries"}},
		{"image", fields, nil},
		{strings.Repeat("x", 1<<20), fields, nil},
		{"command" + strings.Repeat("x", 1<<20), fields, nil},
	} {
		if got := Similar(c.name, c.among); !slices.Equal(got, c.want) {
			t.Errorf("Similar(%.40q) = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"", "abc", 3}, {"follow", "folow", 1}, {"timeout", "timout", 1}, {"label", "lable", 2}, {"kitten", "sitting", 3}} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
