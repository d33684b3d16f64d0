package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
)

func TestStorageConfigReadsSizesAndNamesTheKeyOfABadValue(t *testing.T) {
	t.Parallel()
	read := func(yaml string) (*viper.Viper, error) {
		v := viper.New()
		v.SetConfigType("yaml")
		return v, v.ReadConfig(strings.NewReader(yaml))
	}
	v, err := read(`
storage:
  keep_checkpoints: 5
  checkpoint_retention: 24h
  project_quota: 10GiB
  project_quotas: {vision: 500MB}
  stream_max_bytes: {logs: 2GiB}
  bucket_max_bytes: "1048576"
  orphan_age: 3h
  workdir_max_bytes: 20MiB
  workdir_retention: 48h
`)
	if err != nil {
		t.Fatal(err)
	}
	s, err := storageConfig(v)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeepCheckpoints != 5 || s.CheckpointRetention != 24*time.Hour || s.ProjectQuotaBytes != 10<<30 ||
		s.QuotaOf("vision") != 500_000_000 || s.StreamLimits()["GPUQ_LOGS"] != 2<<30 || s.BucketMaxBytes != 1<<20 || s.OrphanAge != 3*time.Hour ||
		s.WorkdirMaxBytes != 20<<20 || s.WorkdirRetention != 48*time.Hour {
		t.Fatalf("storage config: %+v", s)
	}
	for yaml, key := range map[string]string{
		"storage: {project_quota: lots}":            "storage.project_quota",
		"storage: {project_quotas: {vision: -1GB}}": "storage.project_quotas.vision",
		"storage: {stream_max_bytes: {jobs: 1GB}}":  "storage.stream_max_bytes.jobs",
		"storage: {keep_checkpoints: -2}":           "storage.keep_checkpoints",
		"storage: {keep_checkpoint: 2}":             "keep_checkpoint",
		"storage: {checkpoint_retention: a-week}":   "checkpoint_retention",
		"storage: {orphan_age: 10s}":                "storage.orphan_age: must be at least 1m",
		"storage: {workdir_max_bytes: lots}":        "storage.workdir_max_bytes: want a size",
		"storage: {workdir_retention: 10m}":         "storage.workdir_retention: must be at least 1h",
	} {
		v, err := read(yaml)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := storageConfig(v); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: got %v, want an error naming %s", yaml, err, key)
		}
	}
}
