package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// results --by-name puts each job's outputs under its name, made a safe
// file name, and never two jobs in one directory.
func TestResultsByNameGivesEachJobADirectoryOfItsOwn(t *testing.T) {
	names := []string{"lr-0.1", "lr-0.01", "", "../etc", "sh lr=0.1/x", "dup", "dup", "Case", "case", "ünï", ".hidden", strings.Repeat("x", 150)}
	ids := make([]uuid.UUID, len(names))
	known := map[uuid.UUID]*queue.Job{}
	for i, n := range names {
		ids[i] = uuid.Must(uuid.NewV7())
		known[ids[i]] = &queue.Job{ID: ids[i], Name: n}
	}
	end := func(i int) string { return ids[i].String()[24:] }
	dirs := byName(context.Background(), nil, ids, known)
	want := []string{"lr-0.1", "lr-0.01", end(2), "etc", "sh_lr=0.1_x", "dup-" + end(5), "dup-" + end(6), "Case-" + end(7), "case-" + end(8), "n_", "hidden", strings.Repeat("x", 100)}
	seen := map[string]bool{}
	for i, id := range ids {
		if dirs[id] != want[i] {
			t.Errorf("job named %q: directory %q, want %q", names[i], dirs[id], want[i])
		}
		if seen[strings.ToLower(dirs[id])] || filepath.Base(dirs[id]) != dirs[id] || strings.HasPrefix(dirs[id], ".") {
			t.Errorf("job named %q: directory %q is taken or not one safe name", names[i], dirs[id])
		}
		seen[strings.ToLower(dirs[id])] = true
	}
}
