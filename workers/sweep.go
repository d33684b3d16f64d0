package workers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// Sweep removes from every pool's archive bucket what no one will read and
// no one is still writing, as long as it was last written before before:
//
//   - an archive under jobs/<job>/ that recorded does not report as recorded:
//     an upload whose worker died before recording it, a record that failed
//     after the upload, the outputs of an attempt that a later attempt replaced;
//   - the chunks of an upload that never finished (its worker killed while
//     uploading), or of a deletion that stopped half-way: chunks no object
//     names.
//
// recorded reports which of a list of archive URIs a record names. A bucket
// that fails is left for the next sweep and named in the error; the others
// are swept.
func (s *ObjectStore) Sweep(ctx context.Context, before time.Time, recorded func(context.Context, []string) (map[string]bool, error)) (queue.SweepResult, error) {
	var res queue.SweepResult
	js, ok := s.JS.(jetstream.JetStream)
	if !ok {
		return res, errors.New("sweeping archive buckets: the object store has no JetStream stream access")
	}
	names := js.ObjectStoreNames(ctx)
	var buckets []string
	for name := range names.Name() {
		if strings.HasPrefix(name, queue.ArchiveBucketPrefix) {
			buckets = append(buckets, name)
		}
	}
	if err := names.Error(); err != nil {
		return res, fmt.Errorf("listing archive buckets: %w", err)
	}
	var errs []error
	for _, bucket := range buckets {
		r, err := s.sweepBucket(ctx, js, bucket, before, recorded)
		res.Add(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("sweeping bucket %s: %w", bucket, err))
		}
	}
	return res, errors.Join(errs...)
}

func (s *ObjectStore) sweepBucket(ctx context.Context, js jetstream.JetStream, bucket string, before time.Time,
	recorded func(context.Context, []string) (map[string]bool, error)) (queue.SweepResult, error) {
	var res queue.SweepResult
	stream, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return res, err
	}
	// The chunks are listed before the objects: an upload that finishes in
	// between has its object listed, so its chunks are never taken for an
	// unfinished upload's.
	chunkPrefix := "$O." + bucket + ".C."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(chunkPrefix+">"))
	if err != nil {
		return res, err
	}
	b, err := s.bucket(ctx, bucket, false)
	if err != nil {
		return res, err
	}
	objects, err := b.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return res, err
	}
	live := make(map[string]bool, len(objects))
	var old []*jetstream.ObjectInfo
	for _, o := range objects {
		live[o.NUID] = true
		if o.ModTime.Before(before) {
			old = append(old, o)
		}
	}
	var errs []error
	for subject := range info.State.Subjects {
		if live[strings.TrimPrefix(subject, chunkPrefix)] {
			continue
		}
		last, err := stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !last.Time.Before(before) {
			continue // an upload still under way
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Partial++
	}
	const batch = 1000
	for lo := 0; lo < len(old); lo += batch {
		part := old[lo:min(lo+batch, len(old))]
		uris := make([]string, len(part))
		for i, o := range part {
			uris[i] = queue.ArchiveScheme + bucket + "/" + o.Name
		}
		known, err := recorded(ctx, uris)
		if err != nil {
			return res, errors.Join(append(errs, err)...)
		}
		for i, o := range part {
			if known[uris[i]] {
				continue
			}
			if err := b.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				errs = append(errs, err)
				continue
			}
			res.Archives++
			res.Bytes += int64(o.Size)
		}
	}
	return res, errors.Join(errs...)
}
