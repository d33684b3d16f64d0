package cli

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue"
)

// storageFile is the `storage` section of the configuration as written:
// sizes are strings such as "10GiB" or "500 MB" (or plain byte counts).
type storageFile struct {
	KeepCheckpoints     int               `mapstructure:"keep_checkpoints"`
	CheckpointRetention time.Duration     `mapstructure:"checkpoint_retention"`
	PruneInterval       time.Duration     `mapstructure:"prune_interval"`
	OrphanAge           time.Duration     `mapstructure:"orphan_age"`
	ProjectQuota        string            `mapstructure:"project_quota"`
	ProjectQuotas       map[string]string `mapstructure:"project_quotas"`
	StreamMaxBytes      map[string]string `mapstructure:"stream_max_bytes"`
	BucketMaxBytes      string            `mapstructure:"bucket_max_bytes"`
	UnpackMaxBytes      string            `mapstructure:"unpack_max_bytes"`
	UnpackMaxFileBytes  string            `mapstructure:"unpack_max_file_bytes"`
	UnpackMaxFiles      int               `mapstructure:"unpack_max_files"`
	UnpackMaxRatio      int64             `mapstructure:"unpack_max_ratio"`
	WorkdirMaxBytes     string            `mapstructure:"workdir_max_bytes"`
	WorkdirRetention    time.Duration     `mapstructure:"workdir_retention"`
}

// storageConfig reads the config key `storage` and refuses a bad value,
// naming the key.
func storageConfig(v *viper.Viper) (queue.Storage, error) {
	var f storageFile
	if err := v.UnmarshalKey("storage", &f, configDecodeHook()); err != nil {
		return queue.Storage{}, fmt.Errorf("config key storage: %w", err)
	}
	s := queue.Storage{KeepCheckpoints: f.KeepCheckpoints, CheckpointRetention: f.CheckpointRetention, PruneInterval: f.PruneInterval,
		OrphanAge: f.OrphanAge, WorkdirRetention: f.WorkdirRetention,
		Unpack: queue.ArchiveLimits{MaxFiles: f.UnpackMaxFiles, MaxRatio: f.UnpackMaxRatio}}
	var err error
	if s.Unpack.MaxBytes, err = parseSize("storage.unpack_max_bytes", f.UnpackMaxBytes); err != nil {
		return s, err
	}
	if s.Unpack.MaxFileBytes, err = parseSize("storage.unpack_max_file_bytes", f.UnpackMaxFileBytes); err != nil {
		return s, err
	}
	if s.ProjectQuotaBytes, err = parseSize("storage.project_quota", f.ProjectQuota); err != nil {
		return s, err
	}
	if s.BucketMaxBytes, err = parseSize("storage.bucket_max_bytes", f.BucketMaxBytes); err != nil {
		return s, err
	}
	if s.WorkdirMaxBytes, err = parseSize("storage.workdir_max_bytes", f.WorkdirMaxBytes); err != nil {
		return s, err
	}
	for _, m := range []struct {
		key  string
		from map[string]string
		to   *map[string]int64
	}{{"storage.project_quotas", f.ProjectQuotas, &s.ProjectQuotas}, {"storage.stream_max_bytes", f.StreamMaxBytes, &s.StreamMaxBytes}} {
		names := make([]string, 0, len(m.from))
		for name := range m.from {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			b, err := parseSize(m.key+"."+name, m.from[name])
			if err != nil {
				return s, err
			}
			if *m.to == nil {
				*m.to = map[string]int64{}
			}
			(*m.to)[name] = b
		}
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s.WithDefaults(), nil
}

// parseSize reads a byte size ("10GiB", "500 MB", "1048576"); empty is 0.
func parseSize(key, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("%s: want a size such as 10GiB or 500MB, got %q", key, s)
	}
	return int64(n), nil
}
