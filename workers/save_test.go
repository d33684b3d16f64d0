package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// memArchives is an ArchiveStore in memory.
type memArchives struct{ objects map[string][]byte }

func (m *memArchives) Put(_ context.Context, bucket, name string, r io.Reader) (string, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	uri := queue.ArchiveScheme + bucket + "/" + name
	m.objects[uri] = b
	return uri, nil
}

func (m *memArchives) Get(_ context.Context, uri string, w io.Writer) error {
	b, ok := m.objects[uri]
	if !ok {
		return fmt.Errorf("%s: %w", uri, queue.ErrArchiveLost)
	}
	_, err := io.Copy(w, bytes.NewReader(b))
	return err
}

func (m *memArchives) Delete(_ context.Context, uri string) error {
	delete(m.objects, uri)
	return nil
}

// checkpointAnswer is the control plane answering every checkpoint record
// with err.
type checkpointAnswer struct {
	Records
	err error
}

func (r checkpointAnswer) RecordCheckpoint(context.Context, uuid.UUID, int, queue.ArchiveRecord) (int, error) {
	return 0, r.err
}

// A checkpoint whose record failed is deleted from the store only when the
// control plane refused it. Any other failure (no answer in time, a
// database that failed mid-commit) may hide a record written after all: a
// later attempt restores from it, so its archive must stay.
func TestACheckpointUploadIsDeletedOnlyWhenItsRecordWasRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		answer error
		kept   bool
	}{
		{queue.ErrFenced, false},
		{queue.EncodeError(queue.ErrFenced).Err(), false},
		{queue.EncodeError(fmt.Errorf("project default: %w", queue.ErrQuotaExceeded)).Err(), false},
		{fmt.Errorf("checkpoint gpuq.svc.worker.p.checkpoint: %w", ErrNoControlPlane), true},
		{queue.EncodeError(errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")).Err(), true},
		{context.DeadlineExceeded, true},
	} {
		t.Run(c.answer.Error(), func(t *testing.T) {
			t.Parallel()
			archives := &memArchives{objects: map[string][]byte{}}
			w := &Worker{cfg: Config{Pool: "p", Region: "r"}, store: checkpointAnswer{err: c.answer}, archives: archives}
			base := t.TempDir()
			a := &attempt{w: w, job: &queue.Job{ID: uuid.New(), Attempt: 1, Spec: &queue.Spec{}}, log: slog.New(slog.DiscardHandler), io: context.Background(),
				base: base, ckptDir: filepath.Join(base, "checkpoint")}
			if err := os.MkdirAll(a.ckptDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(a.ckptDir, "step"), []byte("7"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := a.save(context.Background()); err == nil {
				t.Fatal("save succeeded though its record failed")
			}
			if kept := len(archives.objects) == 1; kept != c.kept {
				var uris []string
				for u := range archives.objects {
					uris = append(uris, u)
				}
				t.Errorf("after the answer %q the store holds [%s]; want the upload kept: %v", c.answer, strings.Join(uris, " "), c.kept)
			}
		})
	}
}
