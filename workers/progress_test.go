package workers

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// slowStore serves one archive in pieces, pausing before each, as a large
// archive arrives over a slow link; with failAt it fails at that piece.
type slowStore struct {
	ArchiveStore
	data   []byte
	pieces int
	pause  time.Duration
	failAt int
}

// Put reads r a piece at a time, pausing before each.
func (s slowStore) Put(ctx context.Context, bucket, name string, r io.Reader) (string, error) {
	buf := make([]byte, 16<<10)
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(s.pause):
		}
		if _, err := r.Read(buf); err == io.EOF {
			return "mem://" + bucket + "/" + name, nil
		} else if err != nil {
			return "", err
		}
	}
}

func (s slowStore) Get(ctx context.Context, _ string, w io.Writer) error {
	size := (len(s.data) + s.pieces - 1) / s.pieces
	for i := 0; i*size < len(s.data); i++ {
		if s.failAt > 0 && i == s.failAt {
			return errors.New("connection reset by peer")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.pause):
		}
		if _, err := w.Write(s.data[i*size : min((i+1)*size, len(s.data))]); err != nil {
			return err
		}
	}
	return nil
}

// A step moving a job's archive that lasts (a large checkpoint restored,
// its outputs uploaded) says in the job's log, on stderr under the
// attempt, how far it has come and how it ended, apart from the command's
// own output; a short one says nothing.
func TestAnArchiveStepThatLastsSaysInTheJobsLogHowFarItHasCome(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	ctx := context.Background()
	src := t.TempDir()
	weights := make([]byte, 256<<10) // random: zstd leaves it as large
	rand.Read(weights)               //nolint:errcheck // never fails
	if err := os.WriteFile(filepath.Join(src, "model.bin"), weights, 0o600); err != nil {
		t.Fatal(err)
	}
	arch, err := Pack(src, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(arch.Path)
	if err != nil {
		t.Fatal(err)
	}
	job := &queue.Job{ID: uuid.New(), Attempt: 2}
	attemptOn := func(store ArchiveStore, every time.Duration) *attempt {
		w := &Worker{cfg: Config{Pool: "p", Progress: every}.WithDefaults(), js: n.JS, archives: store}
		return &attempt{w: w, job: job, io: ctx, base: t.TempDir(), log: w.cfg.Logger}
	}

	a := attemptOn(slowStore{data: data, pieces: 8, pause: 50 * time.Millisecond}, 40*time.Millisecond)
	dir := t.TempDir()
	if err := a.unpack("restoring checkpoint 3", int64(len(data)), "mem://ckpt", arch.SHA256, dir); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "model.bin")); err != nil || len(got) != len(weights) {
		t.Fatalf("the checkpoint must be restored whole: %d bytes, %v", len(got), err)
	}
	a.closePrep()
	// Short: under one Progress, nothing is said of it.
	a = attemptOn(slowStore{data: data, pieces: 1}, time.Minute)
	if err := a.unpack("fetching input prep", int64(len(data)), "mem://prep", arch.SHA256, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	a.closePrep()
	// Failing partway: said, with how far it came.
	b := attemptOn(slowStore{data: data, pieces: 8, pause: 50 * time.Millisecond, failAt: 5}, 40*time.Millisecond)
	if err := b.unpack("fetching input big", int64(len(data)), "mem://big", arch.SHA256, t.TempDir()); err == nil {
		t.Fatal("a download that fails must fail the step")
	}
	b.closePrep()
	// Its outputs uploaded after the command ended.
	up := attemptOn(slowStore{pause: 20 * time.Millisecond}, 40*time.Millisecond)
	if rec, err := up.pack("uploading its outputs", src, nil, "jobs/x/outputs-a2.tar.zst"); err != nil || rec.SHA256 != arch.SHA256 {
		t.Fatalf("packing and uploading the outputs: %+v, %v", rec, err)
	}
	up.closePrep()

	var lines []string
	err = queue.ReadLogChunks(ctx, n.JS, job.ID, false, nil, func(c queue.LogChunk) error {
		if c.Attempt != 2 || c.Stream != "stderr" {
			t.Errorf("a chunk of attempt %d on %s, want attempt 2 on stderr: %q", c.Attempt, c.Stream, c.Data)
		}
		lines = append(lines, strings.Split(strings.TrimSuffix(string(c.Data), "\n"), "\n")...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	progress := regexp.MustCompile(`^gpuq: restoring checkpoint 3: [0-9.]+ (B|KiB) of [0-9.]+ KiB \([0-9]+%\), [0-9]+s$`)
	var shown, done, failed, uploaded int
	for _, l := range lines {
		switch {
		case progress.MatchString(l):
			shown++
			if done > 0 {
				t.Errorf("a progress line after the step ended: %q", l)
			}
		case regexp.MustCompile(`^gpuq: restoring checkpoint 3: done, [0-9.]+ KiB in [0-9]+s$`).MatchString(l):
			done++
		case regexp.MustCompile(`^gpuq: uploading its outputs: ([0-9.]+ (B|KiB) of [0-9.]+ KiB \([0-9]+%\), [0-9]+s|done, [0-9.]+ KiB in [0-9]+s)$`).MatchString(l):
			uploaded++
		case regexp.MustCompile(`^gpuq: fetching input big: `).MatchString(l):
			if strings.Contains(l, "failed after") {
				failed++
			}
		default:
			t.Errorf("unexpected line in the job's log: %q", l)
		}
	}
	if shown == 0 || done != 1 || failed != 1 || uploaded < 2 {
		t.Fatalf("want progress lines, one done line, one failed line and the upload's; got %d, %d, %d, %d in\n%s", shown, done, failed, uploaded, strings.Join(lines, "\n"))
	}
}
