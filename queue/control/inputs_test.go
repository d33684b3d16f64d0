package control_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/workers"
)

// A job that reads the outputs of another (an input's job) runs after it,
// is placed inside the residency that job's outputs are bound to (here EU,
// though a US pool is cheaper), and its worker reads those outputs where
// they are on the pool that made them, and from one copy in its own pool's
// bucket on another pool; a job of after_ended that failed is handed over
// as having left nothing. A worker of a pool outside
// that residency is refused the outputs, whatever placed its job there, and
// a worker of an attempt that does not run gets nothing.
func TestAJobReadsTheOutputsOfAnotherInsideTheirResidency(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	st, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	placer := threePools(t)
	placer.Outputs = st
	go (&control.Scheduler{JS: n.JS, Store: st, Placer: placer}).Run(ctx) //nolint:errcheck // ends with ctx
	seq := &control.Sequencer{JS: n.JS, Store: st, Placer: placer, Interval: 100 * time.Millisecond}
	go seq.Run(ctx) //nolint:errcheck // ends with ctx
	archives := &workers.ObjectStore{JS: n.JS}
	pools := staticPools{"spot-a": {Region: "eu-central-1", Country: "DE"}, "spot-b": {Region: "eu-west-3", Country: "FR"},
		"od": {Region: "eu-central-1", Country: "DE"}, "us-spot": {Region: "us-east-1", Country: "US"}}
	if _, err := (&control.WorkerService{NATS: n.NC, Store: st, Pools: pools, Archives: archives}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	submit := func(yaml string) uuid.UUID {
		t.Helper()
		sub, err := queue.Submit(ctx, n.JS, mustSpec(t, yaml))
		if err != nil {
			t.Fatal(err)
		}
		return sub.JobID
	}
	placed := func(id uuid.UUID) *queue.Job {
		t.Helper()
		var j *queue.Job
		queuetest.Eventually(t, 20*time.Second, fmt.Sprintf("job %s placed", id), func() bool {
			var err error
			j, err = st.Job(ctx, id)
			return err == nil && j.State == queue.StatePlaced
		})
		return j
	}
	claim := func(id uuid.UUID, pool string) {
		t.Helper()
		r := ask(t, n, queue.WorkerServiceSubject(pool, queue.WorkerOpClaim), queue.WorkerRequest{Pool: pool, Claims: []queue.ClaimRequest{claimOf(id, pool)}})
		if r.Error != nil || r.Claims[0].Claimed == nil {
			t.Fatalf("claim of %s on %s: %+v %+v", id, pool, r.Error, r.Claims)
		}
	}
	inputs := func(id uuid.UUID, pool string) *queue.WorkerReply {
		return ask(t, n, queue.WorkerServiceSubject(pool, queue.WorkerOpInputs), queue.WorkerRequest{Pool: pool, JobID: id, Attempt: 1})
	}

	// prep is bound to the EU and leaves its outputs in its pool's bucket.
	const cmd = "project: ml\ncommand: [/bin/true]\nplacement: {tier: spot}\n"
	prep := submit(cmd + "name: prep\nplacement: {tier: spot, residency: EU}\n")
	if j := placed(prep); j.Pool != "spot-a" {
		t.Fatalf("prep placed on %s, want spot-a", j.Pool)
	}
	claim(prep, "spot-a")
	outputs := bytes.Repeat([]byte("rows "), 50_000)
	sum := sha256.Sum256(outputs)
	uri, err := archives.Put(ctx, queue.ArchiveBucket("spot-a"), "jobs/"+prep.String()+"/outputs-a1.tar.zst", bytes.NewReader(outputs))
	if err != nil {
		t.Fatal(err)
	}
	rec := &queue.ArchiveRecord{Bytes: int64(len(outputs)), SHA256: hex.EncodeToString(sum[:]), Region: "eu-central-1", StoreURI: uri}
	if r := ask(t, n, queue.WorkerServiceSubject("spot-a", queue.WorkerOpComplete), queue.WorkerRequest{Pool: "spot-a",
		Completions: []queue.Completion{{JobID: prep, Attempt: 1, Outputs: rec}}}); r.Error != nil || !slices.Equal(r.Recorded, []bool{true}) {
		t.Fatalf("prep's completion: %+v %v", r.Error, r.Recorded)
	}
	// lost fails, leaving nothing.
	lost := submit(cmd + "name: lost\n")
	if j := placed(lost); j.Pool != "us-spot" {
		t.Fatalf("lost placed on %s, want the cheapest pool us-spot", j.Pool)
	}
	claim(lost, "us-spot")
	exit := 1
	if err := st.Fail(ctx, lost, 1, queue.OutcomeFailed, &exit, "exited with status 1"); err != nil {
		t.Fatal(err)
	}

	// train reads both: it is placed where prep's outputs may go, though
	// a job without inputs goes to the cheaper US pool.
	train := submit(fmt.Sprintf("%sname: train\ninputs: [{name: data, job: %s}, {job: %s}]\nafter_ended: [%[3]s]\n", cmd, prep, lost))
	free := submit(cmd + "name: free\n")
	if j := placed(free); j.Pool != "us-spot" {
		t.Fatalf("a job without inputs placed on %s, want us-spot", j.Pool)
	}
	j := placed(train)
	if j.Pool != "spot-a" {
		t.Fatalf("train placed on %s, want spot-a, inside prep's residency", j.Pool)
	}
	if !slices.Equal(j.Spec.After, []string{prep.String()}) {
		t.Fatalf("train's after: %v, want prep's id, added for its input", j.Spec.After)
	}
	p, err := st.LatestPlacement(ctx, train)
	if err != nil {
		t.Fatal(err)
	}
	if p.Residency != "EU" || slices.Contains(p.Countries, "US") || !slices.Contains(p.Countries, "DE") {
		t.Fatalf("train's placement: residency %q countries %v, want prep's EU", p.Residency, p.Countries)
	}
	if !strings.Contains(string(p.Decision), fmt.Sprintf("inputs[0] (job %s)", prep)) {
		t.Fatalf("train's decision does not say whose data bound it: %s", p.Decision)
	}
	if strings.Contains(string(p.Decision), "cannot be shown") {
		t.Fatalf("train's decision takes an input from a job for data of no region: %s", p.Decision)
	}

	// Before its claim, train's attempt 1 gets nothing.
	if r := inputs(train, "spot-a"); r.Error == nil || r.Error.Kind != queue.WireFenced {
		t.Fatalf("inputs for an attempt not running: %+v", r.Error)
	}
	claim(train, "spot-a")
	r := inputs(train, "spot-a")
	if r.Error != nil || len(r.Inputs) != 2 {
		t.Fatalf("train's inputs: %+v %+v", r.Error, r.Inputs)
	}
	// On prep's own pool, train reads prep's outputs where they are.
	data, left := r.Inputs[0], r.Inputs[1]
	if data != (queue.InputCopy{Name: "data", JobID: prep, State: queue.StateSucceeded, StoreURI: uri, SHA256: rec.SHA256, Bytes: rec.Bytes}) {
		t.Fatalf("train's input data: %+v, want prep's outputs as recorded", data)
	}
	if left != (queue.InputCopy{Name: lost.String(), JobID: lost, State: queue.StateFailed}) {
		t.Fatalf("the input of a failed job: %+v, want its state and nothing to read", left)
	}

	// placedOn records a job reading prep's outputs placed on pool by
	// whatever means, claimed there.
	placedOn := func(name, pool, region string) uuid.UUID {
		t.Helper()
		id := uuid.New()
		spec := mustSpec(t, fmt.Sprintf("%sname: %s\ninputs: [{job: %s}]\n", cmd, name, prep))
		if _, err := st.RecordJobs(ctx, []queue.NewJob{{ID: id, Spec: spec}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RecordPlacements(ctx, []queue.PlacedJob{{JobID: id, Placement: queue.Placement{Version: 1, Pool: pool, Region: region}}}); err != nil {
			t.Fatal(err)
		}
		claim(id, pool)
		return id
	}
	// On another pool inside the residency, the jobs reading them get one
	// copy in that pool's bucket.
	var copied time.Time
	for _, name := range []string{"fr-1", "fr-2"} {
		r := inputs(placedOn(name, "spot-b", "eu-west-3"), "spot-b")
		if r.Error != nil || len(r.Inputs) != 1 {
			t.Fatalf("inputs of %s on spot-b: %+v %+v", name, r.Error, r.Inputs)
		}
		c := r.Inputs[0]
		if c.SHA256 != rec.SHA256 || c.Bytes != rec.Bytes || !strings.HasPrefix(c.StoreURI, queue.JobArchivePrefix("spot-b", prep)) {
			t.Fatalf("inputs of %s on spot-b: %+v, want a copy in spot-b's bucket", name, c)
		}
		var got bytes.Buffer
		if err := archives.Get(ctx, c.StoreURI, &got); err != nil || !bytes.Equal(got.Bytes(), outputs) {
			t.Fatalf("the copy holds %d bytes (%v), want prep's %d", got.Len(), err, len(outputs))
		}
		stat, err := archives.Stat(ctx, c.StoreURI)
		if err != nil {
			t.Fatal(err)
		}
		if !copied.IsZero() && !stat.ModTime.Equal(copied) {
			t.Fatalf("the second job of spot-b copied prep's outputs again (written %v, then %v)", copied, stat.ModTime)
		}
		copied = stat.ModTime
	}

	// The sweep of unrecorded archives deletes the copy once it is old
	// enough, and keeps prep's outputs.
	res, err := archives.Sweep(ctx, time.Now().Add(time.Hour), st.RecordedArchives)
	if err != nil || res.Archives != 1 || res.Bytes != int64(len(outputs)) {
		t.Fatalf("the sweep: %+v, %v; want the copy alone deleted", res, err)
	}
	if _, err := archives.Stat(ctx, uri); err != nil {
		t.Fatalf("prep's outputs after the sweep: %v", err)
	}

	// A job placed on a US pool by whatever means is refused prep's
	// outputs there.
	astray := placedOn("astray", "us-spot", "us-east-1")
	if r := inputs(astray, "us-spot"); r.Error == nil || r.Error.Kind != queue.WireInputRefused ||
		!strings.Contains(r.Error.Message, fmt.Sprintf("the outputs of job %s are bound to residency EU, and pool us-spot lies in us-east-1 (US)", prep)) {
		t.Fatalf("inputs outside their residency: %+v", r.Error)
	}
	// A job that reads no job's outputs asks in vain.
	claim(free, "us-spot")
	if r := inputs(free, "us-spot"); r.Error == nil || r.Error.Kind != queue.WireBadRequest {
		t.Fatalf("inputs of a job without any: %+v", r.Error)
	}
}
