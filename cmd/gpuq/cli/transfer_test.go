package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/google/uuid"
)

// A download shows nothing while it is short; past that, one plain line
// every few seconds (a terminal: one line redrawn), and its end.
func TestTransferShowsALongDownloadOnly(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	run := func(w io.Writer, tty bool, steps int, step time.Duration) {
		tr := newTransfer(w, "downloading the outputs of j")
		if tr.tty != tty {
			t.Fatalf("tty: got %v, want %v", tr.tty, tty)
		}
		tr.now = func() time.Time { return clock }
		out := tr.writer(int64(steps) << 20)
		for range steps {
			clock = clock.Add(step)
			out.Write(make([]byte, 1<<20)) //nolint:errcheck // counts only
		}
		tr.close()
	}
	var short bytes.Buffer
	run(&short, false, 9, 100*time.Millisecond)
	if short.Len() != 0 {
		t.Errorf("a download of 0.9 s: want nothing shown, got %q", short.String())
	}
	var long bytes.Buffer
	run(&long, false, 12, time.Second)
	want := "downloading the outputs of j: 1.0 MiB of 12 MiB (8%), 1s\n" +
		"downloading the outputs of j: 6.0 MiB of 12 MiB (50%), 6s\n" +
		"downloading the outputs of j: 11 MiB of 12 MiB (91%), 11s\n" +
		"downloading the outputs of j: 12 MiB of 12 MiB (100%), 12s\n"
	if long.String() != want {
		t.Errorf("a download of 12 s, not on a terminal:\n%s\nwant:\n%s", long.String(), want)
	}
	var term fakeTerminal
	run(&term, true, 3, 500*time.Millisecond)
	if got := term.String(); got != "\r\033[Kdownloading the outputs of j: 2.0 MiB of 3.0 MiB (66%), 1s"+
		"\r\033[Kdownloading the outputs of j: 3.0 MiB of 3.0 MiB (100%), 2s"+
		"\r\033[Kdownloading the outputs of j: 3.0 MiB of 3.0 MiB (100%), 2s\n" {
		t.Errorf("on a terminal: %q", got)
	}
	var none *transfer
	if none.writer(5) == nil {
		t.Error("a nil transfer's writer is nil")
	}
	none.close()
}

// gpuq results counts what it downloads, over the HTTP API and over NATS
// alike, and shows nothing for a download as short as this one.
func TestResultsCountWhatTheyDownloadOverHTTPAndNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	dir, config := startDevHere(t)
	out, errOut, err := runCLI(t, "submit", "--config", config, "--wait", "--",
		"sh", "-c", "head -c 3000000 /dev/urandom > $GPUQ_OUTPUT_DIR/noise.bin")
	if err != nil {
		t.Fatalf("submit --wait: %v\n%s", err, errOut)
	}
	id := uuid.MustParse(strings.Fields(out)[0])
	_, errOut, err = runCLI(t, "results", "--config", config, "--dir", filepath.Join(dir, "cli"), id.String())
	if err != nil || errOut != "" {
		t.Errorf("results of a short download: want nothing on stderr, got %v %q", err, errOut)
	}
	cmd, _, err := New().Find([]string{"results"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags([]string{"--config", config}); err != nil {
		t.Fatal(err)
	}
	v, err := loadConfig(cmd)
	if err != nil {
		t.Fatal(err)
	}
	storage, err := storageConfig(v)
	if err != nil {
		t.Fatal(err)
	}
	api, err := newAPIJobs(v)
	if err != nil {
		t.Fatal(err)
	}
	nats, err := newNATSJobs(v)
	if err != nil {
		t.Fatal(err)
	}
	defer nats.Close()
	for name, svc := range map[string]jobService{"HTTP": api, "NATS": nats} {
		var shown bytes.Buffer
		tr := newTransfer(&shown, "got")
		tr.quiet, tr.every = 0, 0
		res, err := svc.Results(context.Background(), id, filepath.Join(dir, name), storage.Unpack, tr)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Bytes < 3000000 || !strings.Contains(shown.String(), fmt.Sprintf("got: %[1]s of %[1]s (100%%)", humanize.IBytes(uint64(res.Bytes)))) {
			t.Errorf("%s: want the %d bytes downloaded counted to the end, got:\n%s", name, res.Bytes, shown.String())
		}
	}
}

// Counting jobs (gpuq submit --batch), the line counts them, not bytes.
func TestTransferCountsJobsAsJobs(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	tr := newTransfer(&out, "submitting")
	tr.unit = "jobs"
	tr.now = func() time.Time { return clock }
	done := tr.count(1000)
	for range 10 {
		clock = clock.Add(300 * time.Millisecond)
		done(30)
	}
	tr.close()
	if got := out.String(); !strings.Contains(got, "submitting: 120 of 1000 jobs (12%), 1s\n") || !strings.HasSuffix(got, "submitting: 300 of 1000 jobs (30%), 3s\n") {
		t.Fatalf("got %q", got)
	}
}

// Lines of their own printed while a count shows on a terminal clear the
// count's line and have it drawn again below them; elsewhere they are
// plain lines between the count's.
func TestLinesPrintedDuringACountDoNotRunIntoItsLine(t *testing.T) {
	t.Parallel()
	for _, tty := range []bool{true, false} {
		clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
		var out bytes.Buffer
		tr := newTransfer(&out, "retrying")
		tr.unit, tr.tty, tr.every = "jobs", tty, 0
		tr.now = func() time.Time { return clock }
		done := tr.count(3)
		tr.interject(func() { out.WriteString("before the count shows\n") })
		clock = clock.Add(2 * time.Second)
		done(1)
		tr.interject(func() { out.WriteString("gpuq: job 2 not found\n") })
		done(2)
		tr.close()
		want := "before the count shows\nretrying: 1 of 3 jobs (33%), 2s\ngpuq: job 2 not found\nretrying: 3 of 3 jobs (100%), 2s\nretrying: 3 of 3 jobs (100%), 2s\n"
		if tty {
			want = "before the count shows\n\r\033[Kretrying: 1 of 3 jobs (33%), 2s\r\033[Kgpuq: job 2 not found\n\r\033[Kretrying: 1 of 3 jobs (33%), 2s" +
				"\r\033[Kretrying: 3 of 3 jobs (100%), 2s\r\033[Kretrying: 3 of 3 jobs (100%), 2s\n"
		}
		if got := out.String(); got != want {
			t.Errorf("tty %v:\ngot  %q\nwant %q", tty, got, want)
		}
	}
}
