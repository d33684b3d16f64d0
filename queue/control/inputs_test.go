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
// though a US pool is cheaper), and its worker gets those outputs copied
// into its own pool's bucket for its attempt; a job of after_ended that
// failed is handed over as having left nothing. A worker of a pool outside
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
	data, left := r.Inputs[0], r.Inputs[1]
	if data.Name != "data" || data.JobID != prep || data.State != queue.StateSucceeded || data.SHA256 != rec.SHA256 || data.Bytes != rec.Bytes ||
		!strings.HasPrefix(data.StoreURI, queue.JobArchivePrefix("spot-a", train)) {
		t.Fatalf("train's input data: %+v", data)
	}
	var got bytes.Buffer
	if err := archives.Get(ctx, data.StoreURI, &got); err != nil || !bytes.Equal(got.Bytes(), outputs) {
		t.Fatalf("the copy holds %d bytes (%v), want prep's %d", got.Len(), err, len(outputs))
	}
	if left != (queue.InputCopy{Name: lost.String(), JobID: lost, State: queue.StateFailed}) {
		t.Fatalf("the input of a failed job: %+v, want its state and nothing to read", left)
	}

	// A job placed on a US pool by whatever means is refused prep's
	// outputs there.
	astray := uuid.New()
	astraySpec := mustSpec(t, fmt.Sprintf("%sname: astray\ninputs: [{job: %s}]\n", cmd, prep))
	if _, err := st.RecordJobs(ctx, []queue.NewJob{{ID: astray, Spec: astraySpec}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordPlacements(ctx, []queue.PlacedJob{{JobID: astray, Placement: queue.Placement{Version: 1, Pool: "us-spot", Region: "us-east-1"}}}); err != nil {
		t.Fatal(err)
	}
	claim(astray, "us-spot")
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
