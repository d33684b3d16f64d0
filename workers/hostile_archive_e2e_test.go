package workers_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// testPoolConfig writes a configuration file whose pools key holds the
// test pool, as a deployment's /etc/gpuq/gpuq.yaml does.
func testPoolConfig(t *testing.T, extra ...string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "gpuq.yaml")
	pools := fmt.Sprintf("pools:\n  - {pool: %s, region: %s, country: %s, card: cpu, vcpu: 8, memory_gb: 32, tier: on-demand, price_per_hour: '0.10'}\n",
		testPool.Pool, testPool.Region, testPool.Country)
	pools += strings.Join(extra, "")
	if err := os.WriteFile(cfg, []byte(pools), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startServer runs `gpuq server` as deploy/systemd runs it (the NATS and
// database URLs and a config file); its output is shown if the test fails.
func startServer(t *testing.T, name string, n *queuetest.NATS, dbURL, config string) *exec.Cmd {
	t.Helper()
	return runServer(t, name, n.ServerCommand(t, gpuqBin, dbURL, "--config", config))
}

// runServer starts cmd, a `gpuq server`; its output is shown if the test
// fails.
func runServer(t *testing.T, name string, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	logFile, err := os.Create(filepath.Join(t.TempDir(), "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // it may have exited
		cmd.Wait()         //nolint:errcheck // killed
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("%s output:\n%s", name, out[max(0, len(out)-4000):])
		}
	})
	return cmd
}

// newServerCluster is a cluster whose control plane is a `gpuq server`
// process, configured with the test pool (and extra configuration) as
// deploy/systemd runs it.
func newServerCluster(t *testing.T, extra ...string) *cluster {
	t.Helper()
	n := queuetest.StartNATS(t)
	st, dbURL := queuetest.Store(t, n)
	if raceEnabled {
		// Under the race detector this test process's NATS server (shared by
		// the parallel tests) can deliver beats 700 ms late, the default
		// silence after which a worker is declared lost; the tests assert
		// the order of events, not the time a hand-back takes.
		extra = append(extra, "liveness: {lost_after: 3s}\n")
	}
	startServer(t, "gpuq server", n, dbURL, testPoolConfig(t, extra...))
	queuetest.Eventually(t, 30*time.Second, "gpuq server to serve the worker and client services", func() bool {
		for _, svc := range []string{queue.WorkerServiceName, queue.ClientServiceName} {
			if _, err := n.NC.Request("$SRV.PING."+svc, nil, time.Second); err != nil {
				return false
			}
		}
		return true
	})
	return &cluster{n: n, store: st, dbURL: dbURL}
}

// intruder holds what a compromised machine of the test pool holds: the
// pool's worker credential. With it an archive can be put into the
// pool's bucket and recorded through the worker service as an attempt's
// checkpoint or outputs; nothing else stands between it and the machine
// that unpacks the archive.
type intruder struct {
	store   *workers.ObjectStore
	records *workers.ServiceRecords
}

func newIntruder(t *testing.T, c *cluster) *intruder {
	t.Helper()
	nc := queuetest.Connect(t, c.n.WorkerURL(t, testPool.Pool, testPool.Region), nil)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &intruder{store: &workers.ObjectStore{JS: js}, records: workers.NewServiceRecords(nc, testPool.Pool, "intruder")}
}

// put uploads arch under name, as the worker names its archives, and
// returns its record.
func (in *intruder) put(t *testing.T, name string, arch []byte) queue.ArchiveRecord {
	t.Helper()
	uri, err := in.store.Put(context.Background(), queue.ArchiveBucket(testPool.Pool), name, bytes.NewReader(arch))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(arch)
	return queue.ArchiveRecord{Bytes: int64(len(arch)), SHA256: hex.EncodeToString(sum[:]), Region: testPool.Region, StoreURI: uri}
}

// tarEntry is one entry of a crafted archive: its header as written, and
// either a body or a count of zeros.
type tarEntry struct {
	hdr   tar.Header
	body  string
	zeros int64
}

// craftedArchive is a tar+zstd archive of entries, headers as given.
func craftedArchive(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body)) + e.zeros
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(tw, zeroReader{}, e.zeros); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// victimDir is a directory outside every target that the hostile archives
// aim at; it holds one file, "victim", reading "safe".
func victimDir(t *testing.T, base string) string {
	t.Helper()
	dir := filepath.Join(base, "victim")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "victim"), []byte("safe"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// assertVictimUntouched fails t when anything was written into the victim
// directory.
func assertVictimUntouched(t *testing.T, victim string) {
	t.Helper()
	entries, _ := os.ReadDir(victim)
	b, _ := os.ReadFile(filepath.Join(victim, "victim"))
	if len(entries) != 1 || string(b) != "safe" {
		t.Fatalf("something was written into %s outside the target: %v, victim reads %q", victim, entries, b)
	}
}

// assertOnly fails t when dir holds other entries than names.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Fatalf("%s holds %v, want only %v: an archive wrote outside its target", dir, got, names)
	}
}

// sleeperSpec is a job that says which attempt started it and sleeps,
// leaving its checkpoint directory empty (so a hand-back records no
// checkpoint of its own over the intruder's).
func sleeperSpec(name string) string {
	return "name: " + name + "\n" +
		`command: [/bin/sh, -c, 'echo "start attempt=$GPUQ_ATTEMPT resumed=$GPUQ_RESUMED"; exec sleep 300']` + "\n"
}

// waitStarted waits until the job's attempt 1 runs and has said so.
func waitStarted(t *testing.T, c *cluster, id uuid.UUID) {
	t.Helper()
	c.waitState(t, id, queue.StateRunning, 30*time.Second)
	queuetest.Eventually(t, 15*time.Second, fmt.Sprintf("job %s to start", id), func() bool {
		return strings.Contains(c.logs(t, id), "start attempt=1 ")
	})
}

// trail is the job's audit trail, one "attempt message" line per event.
func trail(t *testing.T, c *cluster, id uuid.UUID) string {
	t.Helper()
	rows, err := c.store.DB.Query(`SELECT attempt, message FROM job_events WHERE job_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var attempt int
		var m string
		if err := rows.Scan(&attempt, &m); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%d %s\n", attempt, m)
	}
	return b.String()
}

func TestAHostileCheckpointIsRefusedByTheRestoringWorkerWhichWritesNothingOutsideAndNeverRunsTheJob(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	base := jobsDir(t)
	victim := victimDir(t, base)
	dataA, dataB := filepath.Join(base, "data-a"), filepath.Join(base, "data-b")
	// The workers get --data-dir (gpuq dev passes none) so that the test
	// knows where an escape would land: the restoring worker unpacks into
	// <data-b>/<job>-a2/checkpoint, so "../../../escape" would land in base.
	cases := []struct {
		name  string
		arch  []byte
		wants []string
	}{
		{"link", craftedArchive(t,
			tarEntry{hdr: tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: victim}},
			tarEntry{hdr: tar.Header{Name: "evil/pwned", Mode: 0o644, Typeflag: tar.TypeReg}, body: "pwned"},
		), []string{`symlink "evil" points to "` + victim + `", outside the target directory`}},
		{"dotdot", craftedArchive(t,
			tarEntry{hdr: tar.Header{Name: "../../../escape", Mode: 0o644, Typeflag: tar.TypeReg}, body: "pwned"},
		), []string{`entry "../../../escape" leaves the target directory`}},
		// 64 MiB of zeros in a few KiB, against the worker's default limits.
		{"bomb", craftedArchive(t,
			tarEntry{hdr: tar.Header{Name: "zeros", Mode: 0o644, Typeflag: tar.TypeReg}, zeros: 64 << 20},
		), []string{`more than 1000 times its compressed size (at "zeros")`, "storage.unpack_max_ratio raises the limit"}},
	}
	if n := len(cases[2].arch); n > 64<<10 {
		t.Fatalf("the bomb is %d bytes compressed, want a few KiB", n)
	}
	first := c.startWorker(t, 3*time.Second, time.Second, "--slots", "3", "--data-dir", dataA)
	ids := make([]uuid.UUID, len(cases))
	for i, cs := range cases {
		ids[i] = c.submit(t, sleeperSpec("hostile-checkpoint-"+cs.name))
	}
	in := newIntruder(t, c)
	ctx := context.Background()
	for i, cs := range cases {
		waitStarted(t, c, ids[i])
		rec := in.put(t, fmt.Sprintf("jobs/%s/checkpoint-a1-1.tar.zst", ids[i]), cs.arch)
		if seq, err := in.records.RecordCheckpoint(ctx, ids[i], 1, rec); err != nil || seq != 1 {
			t.Fatalf("%s: recording the crafted checkpoint: seq %d, %v", cs.name, seq, err)
		}
	}
	// The machine is reclaimed: its worker hands the jobs back, and the
	// next worker of the pool resumes them from their latest checkpoint,
	// the crafted one.
	if err := first.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("the reclaimed worker must exit cleanly: %v", err)
	}
	c.startWorker(t, 3*time.Second, time.Second, "--slots", "3", "--data-dir", dataB)
	for i, cs := range cases {
		id := ids[i]
		// Every worker would refuse the checkpoint again: the job fails at
		// once, its reason naming the problem, rather than go round the
		// pool.
		job := c.waitState(t, id, queue.StateFailed, 30*time.Second)
		for _, want := range append([]string{"restoring checkpoint 1: unpacking", "the job was not run"}, cs.wants...) {
			if !strings.Contains(job.Reason, want) {
				t.Errorf("%s: the job's reason must name the refused checkpoint with %q; got %q", cs.name, want, job.Reason)
			}
		}
		if events := trail(t, c, id); !strings.Contains(events, "2 restoring checkpoint 1: unpacking") {
			t.Errorf("%s: the trail must show the refusal under attempt 2; got:\n%s", cs.name, events)
		}
		attempts := c.attempts(t, id)
		if len(attempts) != 2 || attempts[1].Outcome != queue.OutcomeFailed || attempts[1].EndedAt == nil {
			t.Errorf("%s: want attempt 2 ended failed and no attempt 3, got %+v", cs.name, attempts)
		}
		// The job never ran on the poisoned directory.
		if logs := c.logs(t, id); strings.Count(logs, "start attempt=") != 1 {
			t.Errorf("%s: only attempt 1 may have started the job; logs:\n%s", cs.name, logs)
		}
		t.Logf("%s: %s (%s)", cs.name, job.State, job.Reason)
	}
	assertVictimUntouched(t, victim)
	assertOnly(t, base, "victim", "data-a", "data-b")
	// The attempts' directories are removed with what they held, once each
	// attempt has ended.
	var left []string
	queuetest.Eventually(t, 10*time.Second, "the attempts' directories to be removed", func() bool {
		left = nil
		for _, dir := range []string{dataA, dataB} {
			filepath.WalkDir(dir, func(p string, d os.DirEntry, _ error) error {
				if d == nil {
					return nil
				}
				found := d.Name() == "escape" || d.Name() == "pwned" || d.Name() == "zeros"
				for _, id := range ids {
					found = found || strings.HasPrefix(d.Name(), id.String())
				}
				if found {
					left = append(left, p)
				}
				return nil
			})
		}
		return len(left) == 0
	})
}

func TestGpuqResultsOfAHostileArchiveWritesNothingOutsideItsDirectoryAndExitsNamingTheProblem(t *testing.T) {
	t.Parallel()
	c := newServerCluster(t)
	base := jobsDir(t)
	victim := victimDir(t, base)
	c.startWorker(t, 3*time.Second, time.Second, "--slots", "3", "--data-dir", filepath.Join(base, "data"))
	// Outputs crafted by a machine holding the pool's credential, recorded
	// as the succeeded attempt's...
	crafted := []struct {
		name string
		arch []byte
		want string
	}{
		{"link", craftedArchive(t,
			tarEntry{hdr: tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: "../../victim"}},
			tarEntry{hdr: tar.Header{Name: "evil/pwned", Mode: 0o644, Typeflag: tar.TypeReg}, body: "pwned"},
		), `symlink "evil" points to "../../victim", outside the target directory`},
		{"dotdot", craftedArchive(t,
			tarEntry{hdr: tar.Header{Name: "../../escape", Mode: 0o644, Typeflag: tar.TypeReg}, body: "pwned"},
		), `entry "../../escape" leaves the target directory`},
	}
	ids := map[string]uuid.UUID{}
	for _, cr := range crafted {
		ids[cr.name] = c.submit(t, sleeperSpec("hostile-results-"+cr.name))
	}
	// ...and a job that needs no credential at all: it writes 4 MiB of
	// zeros as its outputs, which its worker packs into a few KiB.
	ids["bomb"] = c.submit(t, "name: hostile-results-bomb\n"+
		`command: [/bin/sh, -c, 'for i in 1 2 3 4; do head -c 1048576 /dev/zero > "$GPUQ_OUTPUT_DIR/zeros$i"; done']`+"\n")
	in := newIntruder(t, c)
	ctx := context.Background()
	for _, cr := range crafted {
		id := ids[cr.name]
		waitStarted(t, c, id)
		rec := in.put(t, fmt.Sprintf("jobs/%s/outputs-a1.tar.zst", id), cr.arch)
		if err := in.records.Succeed(ctx, id, 1, &rec); err != nil {
			t.Fatalf("%s: recording the crafted outputs: %v", cr.name, err)
		}
	}
	for _, id := range ids {
		c.waitState(t, id, queue.StateSucceeded, 30*time.Second)
	}
	if rec, err := c.store.Result(ctx, ids["bomb"]); err != nil || rec.Bytes > 64<<10 {
		t.Fatalf("the bomb's outputs: %+v, %v; want a few KiB", rec, err)
	}

	// A user with a submitter credential and the limit in their config
	// file fetches each job's outputs, as the README shows.
	userCfg := filepath.Join(t.TempDir(), "gpuq.yaml")
	if err := os.WriteFile(userCfg, []byte("storage:\n  unpack_max_bytes: 3MiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	userURL := c.n.SubmitterURL(t, "default")
	fetch := filepath.Join(base, "fetch")
	wants := map[string]string{"bomb": `more than 3145728 bytes in all (at "zeros4"); storage.unpack_max_bytes raises the limit`}
	for _, cr := range crafted {
		wants[cr.name] = cr.want
	}
	for name, want := range wants {
		dir := filepath.Join(fetch, name)
		cmd := exec.Command(gpuqBin, "results", ids[name].String(), "--dir", dir, "--nats-url", userURL, "--config", userCfg)
		cmd.Env = userEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("gpuq results of %s: want exit status 1 naming %q, got %v\nstdout: %s\nstderr: %s", name, want, err, stdout.String(), stderr.String())
		}
		if name == "bomb" {
			var written int64
			filepath.WalkDir(dir, func(_ string, d os.DirEntry, _ error) error {
				if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
					written += fi.Size()
				}
				return nil
			})
			if written > 3<<20 {
				t.Errorf("gpuq results of bomb wrote %d bytes, past storage.unpack_max_bytes 3MiB", written)
			}
		}
	}
	assertVictimUntouched(t, victim)
	assertOnly(t, base, "victim", "data", "fetch")
	assertOnly(t, fetch, "bomb", "dotdot", "link")
	// The link was never made: what the archive put beneath its name is an
	// ordinary directory inside the target.
	if fi, err := os.Lstat(filepath.Join(fetch, "link", "evil")); err != nil || !fi.IsDir() {
		t.Errorf("link/evil: %v, %v; want a plain directory", fi, err)
	}
}

// userEnv is the test's environment without GPUQ_* settings, as a user's
// shell that has only the flags given.
func userEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUQ_") {
			env = append(env, kv)
		}
	}
	return env
}
