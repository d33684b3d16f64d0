package workers

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// ArchiveStore keeps packed checkpoints and outputs in buckets, one per pool
// (queue.ArchiveBucket), in the pool's region; the embedded default is a
// JetStream object-store bucket, real deployments use S3-compatible storage
// in the same region.
type ArchiveStore interface {
	Put(ctx context.Context, bucket, name string, r io.Reader) (uri string, err error)
	Get(ctx context.Context, uri string, w io.Writer) error
	Delete(ctx context.Context, uri string) error
}

// ObjectStore keeps archives in JetStream object-store buckets, one per pool
// (gpuq-pool-<pool>). URIs look like nats-os://bucket/name.
type ObjectStore struct {
	JS jetstream.ObjectStoreManager
	// Replicas of each bucket; 3 on a production cluster. Default 1.
	Replicas int
	// MaxBytes caps each bucket (storage.bucket_max_bytes); 0 is no cap.
	// An upload into a full bucket fails, and so does the checkpoint
	// that needed it.
	MaxBytes int64
	// MaxAge keeps the objects of the buckets it names this long after
	// each was last written (the bucket's TTL); the objects of other
	// buckets stay until deleted.
	MaxAge map[string]time.Duration

	mu      sync.Mutex
	buckets map[string]jetstream.ObjectStore
}

func (s *ObjectStore) bucket(ctx context.Context, name string, create bool) (jetstream.ObjectStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.buckets[name]; ok {
		return b, nil
	}
	var b jetstream.ObjectStore
	var err error
	if create {
		replicas := s.Replicas
		if replicas == 0 {
			replicas = 1
		}
		cfg := jetstream.ObjectStoreConfig{Bucket: name, Storage: jetstream.FileStorage, Replicas: replicas, MaxBytes: s.MaxBytes,
			TTL: s.MaxAge[name]}
		// A bucket already configured so is used as it is: an update
		// rewrites the bucket's stream configuration while other
		// processes read it.
		b, err = s.JS.ObjectStore(ctx, name)
		if err != nil || !sameBucket(ctx, b, cfg) {
			b, err = s.JS.CreateOrUpdateObjectStore(ctx, cfg)
		}
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another process (a worker of the region uploading its first
			// archive) created the bucket between this one's look and its
			// create: the bucket is there now.
			b, err = s.JS.CreateOrUpdateObjectStore(ctx, cfg)
		}
	} else {
		b, err = s.JS.ObjectStore(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("object-store bucket %s: %w", name, err)
	}
	if s.buckets == nil {
		s.buckets = map[string]jetstream.ObjectStore{}
	}
	s.buckets[name] = b
	return b, nil
}

// sameBucket reports whether bucket b has cfg's replicas, storage, size cap
// (no cap: the server's -1) and TTL.
func sameBucket(ctx context.Context, b jetstream.ObjectStore, cfg jetstream.ObjectStoreConfig) bool {
	st, err := b.Status(ctx)
	if err != nil {
		return false
	}
	obs, ok := st.(*jetstream.ObjectBucketStatus)
	if !ok || obs.StreamInfo() == nil {
		return false
	}
	have, capBytes := obs.StreamInfo().Config, cfg.MaxBytes
	if capBytes == 0 {
		capBytes = -1
	}
	return have.Replicas == cfg.Replicas && have.Storage == cfg.Storage && have.MaxBytes == capBytes && have.MaxAge == cfg.TTL
}

// Put stores r under name in bucket, creating it when missing.
func (s *ObjectStore) Put(ctx context.Context, bucket, name string, r io.Reader) (string, error) {
	b, err := s.bucket(ctx, bucket, true)
	if err != nil {
		return "", err
	}
	if _, err := b.Put(ctx, jetstream.ObjectMeta{Name: name}, r); err != nil {
		return "", fmt.Errorf("uploading %s to %s: %w", name, bucket, err)
	}
	return queue.ArchiveScheme + bucket + "/" + name, nil
}

func parseObjectURI(uri string) (bucket, name string, err error) {
	rest, ok := strings.CutPrefix(uri, queue.ArchiveScheme)
	if !ok {
		return "", "", fmt.Errorf("archive %q: not a %s URI", uri, queue.ArchiveScheme)
	}
	bucket, name, ok = strings.Cut(rest, "/")
	if !ok || name == "" {
		return "", "", fmt.Errorf("archive %q: want %sbucket/name", uri, queue.ArchiveScheme)
	}
	return bucket, name, nil
}

// Get writes the archive at uri to w; an archive or bucket that is not
// there is queue.ErrArchiveLost.
func (s *ObjectStore) Get(ctx context.Context, uri string, w io.Writer) error {
	bucket, name, err := parseObjectURI(uri)
	if err != nil {
		return err
	}
	b, err := s.bucket(ctx, bucket, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("downloading %s: %w: its bucket is gone", uri, queue.ErrArchiveLost)
	}
	if err != nil {
		return err
	}
	r, err := b.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("downloading %s: %w: not in its bucket", uri, queue.ErrArchiveLost)
	}
	if err != nil {
		return fmt.Errorf("downloading %s: %w", uri, err)
	}
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("downloading %s: %w", uri, err)
	}
	return nil
}

// Stat says how large the archive at uri is, when it was written and its
// SHA-256; an archive or bucket that is not there is queue.ErrArchiveLost.
func (s *ObjectStore) Stat(ctx context.Context, uri string) (queue.ObjectStat, error) {
	bucket, name, err := parseObjectURI(uri)
	if err != nil {
		return queue.ObjectStat{}, err
	}
	b, err := s.bucket(ctx, bucket, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return queue.ObjectStat{}, fmt.Errorf("%s: %w: its bucket is gone", uri, queue.ErrArchiveLost)
	}
	if err != nil {
		return queue.ObjectStat{}, err
	}
	info, err := b.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return queue.ObjectStat{}, fmt.Errorf("%s: %w: not in its bucket", uri, queue.ErrArchiveLost)
	}
	if err != nil {
		return queue.ObjectStat{}, fmt.Errorf("%s: %w", uri, err)
	}
	st := queue.ObjectStat{Bytes: int64(info.Size), ModTime: info.ModTime}
	// The store's digest of the object: "SHA-256=" and base64url.
	if d, ok := strings.CutPrefix(info.Digest, "SHA-256="); ok {
		if sum, err := base64.URLEncoding.DecodeString(d); err == nil {
			st.SHA256 = hex.EncodeToString(sum)
		}
	}
	return st, nil
}

// Delete removes the archive at uri; a missing one is not an error.
func (s *ObjectStore) Delete(ctx context.Context, uri string) error {
	bucket, name, err := parseObjectURI(uri)
	if err != nil {
		return err
	}
	b, err := s.bucket(ctx, bucket, false)
	if err != nil {
		return err
	}
	if err := b.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	return nil
}

// Download writes the archive at uri into f, checks it against the recorded
// sha256, and rewinds f for reading. An archive not in its store or whose
// hash differs is queue.ErrArchiveLost.
func Download(ctx context.Context, store ArchiveStore, uri, sha string, f *os.File) error {
	h := sha256.New()
	if err := store.Get(ctx, uri, io.MultiWriter(f, h)); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		return fmt.Errorf("archive %s: %w: sha256 %s, recorded %s", uri, queue.ErrArchiveLost, got, sha)
	}
	_, err := f.Seek(0, io.SeekStart)
	return err
}
