package queue

import (
	"fmt"
	"time"
)

// ArchiveLimits bound what unpacking one archive may write: a checkpoint
// restored by a worker, or a job's outputs fetched by `gpuq results`. An
// archive comes from an object store a job could write to, so it is treated
// as hostile. It is part of the `storage` section of the configuration
// (unpack_max_bytes, unpack_max_file_bytes, unpack_max_files,
// unpack_max_ratio); a zero field takes its default.
type ArchiveLimits struct {
	// MaxBytes caps the bytes written in all. Default 100 GiB.
	MaxBytes int64
	// MaxFileBytes caps one file. Default: MaxBytes.
	MaxFileBytes int64
	// MaxFiles caps the entries (files, directories and links). Default
	// 1,000,000.
	MaxFiles int
	// MaxRatio caps how many times its compressed size an archive may
	// expand to, once past RatioFloor; it stops compression bombs whose
	// total stays under MaxBytes. Default 1000.
	MaxRatio int64
}

// RatioFloor is what an archive may expand to whatever its compressed
// size: small archives of zeros are common and harmless.
const RatioFloor = 16 << 20

// WithDefaults returns l with every unset field filled in.
func (l ArchiveLimits) WithDefaults() ArchiveLimits {
	if l.MaxBytes == 0 {
		l.MaxBytes = 100 << 30
	}
	if l.MaxFileBytes == 0 {
		l.MaxFileBytes = l.MaxBytes
	}
	if l.MaxFiles == 0 {
		l.MaxFiles = 1_000_000
	}
	if l.MaxRatio == 0 {
		l.MaxRatio = 1000
	}
	return l
}

// Validate refuses a negative limit, naming its configuration key.
func (l ArchiveLimits) Validate() error {
	switch {
	case l.MaxBytes < 0:
		return fmt.Errorf("storage.unpack_max_bytes: must not be negative, got %d", l.MaxBytes)
	case l.MaxFileBytes < 0:
		return fmt.Errorf("storage.unpack_max_file_bytes: must not be negative, got %d", l.MaxFileBytes)
	case l.MaxFiles < 0:
		return fmt.Errorf("storage.unpack_max_files: must not be negative, got %d", l.MaxFiles)
	case l.MaxRatio < 0:
		return fmt.Errorf("storage.unpack_max_ratio: must not be negative, got %d", l.MaxRatio)
	}
	return nil
}

// ObjectStat is what an archive store says of one object.
type ObjectStat struct {
	Bytes   int64
	ModTime time.Time
	// SHA256 is the object's digest as the store computed it, in hex;
	// empty when the store keeps none.
	SHA256 string
}
