package control

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sync/singleflight"

	"github.com/gpuq/gpuq/queue"
)

// WorkdirStore reads, writes and describes archives (workers.ObjectStore).
type WorkdirStore interface {
	ArchiveCopier
	Stat(ctx context.Context, uri string) (queue.ObjectStat, error)
}

// Workdirs keeps the working directories users upload for their jobs
// (spec.workdir), one object per project and digest in queue.WorkdirBucket,
// which only the control plane reaches, and copies one into a pool's bucket
// when a worker of the pool runs a job that names it. The bucket's TTL
// (storage.workdir_retention, workers.ObjectStore.MaxAge) deletes a
// directory that long after its last upload; a pool's copy is kept while
// its upload is (WorkdirRecords).
type Workdirs struct {
	Store WorkdirStore
	// MaxBytes bounds one upload; default queue.DefaultWorkdirMaxBytes.
	MaxBytes int64
	// TempDir holds an upload while its digest is checked, so that nothing
	// unchecked is ever stored under a digest; default os.TempDir().
	TempDir string

	copies singleflight.Group
}

// WorkdirTooLargeError is an upload over Workdirs.MaxBytes.
type WorkdirTooLargeError struct{ Limit int64 }

func (e *WorkdirTooLargeError) Error() string {
	return fmt.Sprintf("body: a working directory's archive may be at most %d bytes (storage.workdir_max_bytes)", e.Limit)
}

// WorkdirRefusedError is an upload whose body is not what its request
// says: not a gzip-compressed archive, or not of the digest it is put under.
type WorkdirRefusedError struct{ Field, Message string }

func (e *WorkdirRefusedError) Error() string { return e.Field + ": " + e.Message }

func (w *Workdirs) maxBytes() int64 {
	if w.MaxBytes > 0 {
		return w.MaxBytes
	}
	return queue.DefaultWorkdirMaxBytes
}

// workdirURI is where project's directory of digest sum is kept.
func workdirURI(project, sum string) string {
	return queue.ArchiveScheme + queue.WorkdirBucket + "/" + queue.WorkdirObject(project, sum)
}

// Upload stores body, a gzip-compressed tar, as project's working directory
// of SHA-256 sum (hex), once it has checked both; it returns the body's
// size. Uploading a directory again writes it again, which restarts its
// retention.
func (w *Workdirs) Upload(ctx context.Context, project, sum string, body io.Reader) (int64, error) {
	if _, ok := queue.WorkdirDigest(queue.WorkdirPrefix + sum); !ok {
		return 0, &WorkdirRefusedError{Field: "sha256", Message: fmt.Sprintf("must be a SHA-256 as 64 lower-case hex digits, got %.80q", sum)}
	}
	f, err := os.CreateTemp(w.TempDir, "gpuq-workdir-*")
	if err != nil {
		return 0, fmt.Errorf("keeping an upload while it is checked: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	limit := w.maxBytes()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(body, limit+1))
	if err != nil {
		return 0, fmt.Errorf("reading the upload: %w", err)
	}
	if n > limit {
		// Read on, within a bound, so that the client hears the refusal:
		// one that sends its whole body before it reads an answer (as
		// Python's http.client does) would otherwise find the connection
		// reset under it.
		io.CopyN(io.Discard, body, max(limit, queue.DefaultWorkdirMaxBytes)+1<<20) //nolint:errcheck // only drained
		return 0, &WorkdirTooLargeError{Limit: limit}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return 0, &WorkdirRefusedError{Field: "sha256", Message: fmt.Sprintf("the body's SHA-256 is %s, not %s", got, sum)}
	}
	magic := make([]byte, 2)
	if _, err := f.ReadAt(magic, 0); err != nil || !bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return 0, &WorkdirRefusedError{Field: "body", Message: "not a gzip-compressed tar archive (tar -czf)"}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if _, err := w.Store.Put(ctx, queue.WorkdirBucket, queue.WorkdirObject(project, sum), f); err != nil {
		return 0, fmt.Errorf("storing the working directory: %w", err)
	}
	return n, nil
}

// Has reports whether project's working directory of digest sum is stored.
func (w *Workdirs) Has(ctx context.Context, project, sum string) (bool, error) {
	_, err := w.Store.Stat(ctx, workdirURI(project, sum))
	if errors.Is(err, queue.ErrArchiveLost) {
		return false, nil
	}
	return err == nil, err
}

// CopyToPool returns the copy of project's working directory of digest sum in pool's
// bucket, where the pool's workers may read it, copying it there first when
// no copy of that digest is. A directory that is not stored is
// queue.ErrWorkdirMissing; one whose bytes no longer match its digest,
// queue.ErrArchiveLost.
func (w *Workdirs) CopyToPool(ctx context.Context, pool, project, sum string) (*queue.WorkdirCopy, error) {
	bucket := queue.ArchiveBucket(pool)
	name := queue.WorkdirPoolObject(project, sum)
	dst := queue.ArchiveScheme + bucket + "/" + name
	if st, err := w.Store.Stat(ctx, dst); err == nil && st.SHA256 == sum {
		return &queue.WorkdirCopy{StoreURI: dst, SHA256: sum, Bytes: st.Bytes}, nil
	}
	// The jobs of a sweep starting at once on one pool make one copy.
	v, err, _ := w.copies.Do(dst, func() (any, error) {
		src := workdirURI(project, sum)
		st, err := w.Store.Stat(ctx, src)
		if errors.Is(err, queue.ErrArchiveLost) {
			return nil, fmt.Errorf("%w: %s%s was never uploaded for project %s, or was deleted storage.workdir_retention after its last upload",
				queue.ErrWorkdirMissing, queue.WorkdirPrefix, sum, project)
		}
		if err != nil {
			return nil, err
		}
		uri, got, err := copyArchive(ctx, w.Store, src, bucket, name)
		if err != nil {
			return nil, fmt.Errorf("copying %s%s into pool %s's bucket: %w", queue.WorkdirPrefix, sum, pool, err)
		}
		if got != sum {
			w.Store.Delete(ctx, uri) //nolint:errcheck // the sweep removes what is left
			return nil, fmt.Errorf("working directory %s%s of project %s: %w: its stored bytes have SHA-256 %s",
				queue.WorkdirPrefix, sum, project, queue.ErrArchiveLost, got)
		}
		return &queue.WorkdirCopy{StoreURI: uri, SHA256: sum, Bytes: st.Bytes}, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*queue.WorkdirCopy), nil
}

// WorkdirRecords reports which archive URIs a record names as recorded
// does, except for the copies of working directories in pools' buckets,
// which no record names: such a copy counts as recorded while its upload is
// kept, so that the sweep of unrecorded archives deletes it only once its
// upload's retention has ended.
func (w *Workdirs) WorkdirRecords(recorded ArchiveRecords) ArchiveRecords {
	return workdirRecords{w: w, recorded: recorded}
}

type workdirRecords struct {
	w        *Workdirs
	recorded ArchiveRecords
}

func (r workdirRecords) RecordedArchives(ctx context.Context, uris []string) (map[string]bool, error) {
	var others []string
	kept := map[[2]string]bool{}
	known := map[string]bool{}
	for _, uri := range uris {
		project, sum, ok := queue.WorkdirPoolCopy(uri)
		if !ok {
			others = append(others, uri)
			continue
		}
		key := [2]string{project, sum}
		has, asked := kept[key]
		if !asked {
			var err error
			if has, err = r.w.Has(ctx, project, sum); err != nil {
				return nil, err
			}
			kept[key] = has
		}
		if has {
			known[uri] = true
		}
	}
	if len(others) == 0 {
		return known, nil
	}
	rec, err := r.recorded.RecordedArchives(ctx, others)
	if err != nil {
		return nil, err
	}
	for uri, ok := range rec {
		if ok {
			known[uri] = true
		}
	}
	return known, nil
}
