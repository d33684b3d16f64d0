package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/yaml"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
)

// Bounds of a batch file: gpuq submit --batch sends it to the HTTP API in
// requests of at most httpapi.MaxBatchJobs jobs and batchRequestBytes.
const (
	maxBatchFileBytes = 64 << 20
	maxBatchFileJobs  = 10000
	batchRequestBytes = httpapi.MaxBatchBytes - 64<<10
)

// batchFromFile reads the batch file --batch names ("-": standard input),
// {"jobs": [spec, …]} in JSON or YAML as POST /v1/jobs/batch takes it, and
// completes each spec with the spec flags given, as -f's spec is completed.
// A job's after and after_ended may name jobs earlier in the file by their
// name (batchRefs). Every spec is checked before anything is submitted; an
// error names the job (jobs[7]) and its field.
func batchFromFile(cmd *cobra.Command, v *viper.Viper, args []string, wd *workdirs) ([]*queue.Spec, *batchRefs, error) {
	switch {
	case v.GetString("file") != "":
		return nil, nil, errors.New("--batch and -f: give one; each job of a batch is a spec of the batch file")
	case len(args) > 0:
		return nil, nil, errors.New("--batch: each job of a batch names its own command in the batch file; give no command")
	case cmd.Flags().Changed("sweep"):
		return nil, nil, errors.New("--sweep and --batch: give one; a batch file lists its jobs itself")
	case cmd.Flags().Changed("idempotency-key"):
		return nil, nil, errors.New("--idempotency-key: each job of a batch has its own, as idempotency_key in its spec")
	case v.GetBool("follow"):
		return nil, nil, errors.New("--follow prints one job's output: a batch takes --wait (then gpuq logs ID, or gpuq results --label)")
	}
	data, err := readInput(cmd, v.GetString("batch"), maxBatchFileBytes+1)
	if err != nil {
		return nil, nil, err
	}
	if len(data) > maxBatchFileBytes {
		return nil, nil, fmt.Errorf("--batch: the file is over %d MiB", maxBatchFileBytes>>20)
	}
	// Aliases are refused before anything expands them, as in every
	// other YAML gpuq reads.
	if err := queue.CheckYAML(data, "batch"); err != nil {
		return nil, nil, fmt.Errorf("--batch: %w", err)
	}
	if data, err = yaml.YAMLToJSON(data); err != nil {
		return nil, nil, fmt.Errorf("--batch: the file is neither JSON nor YAML: %w", err)
	}
	var doc struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf(`--batch: the file must be an object holding jobs, a list of job specs ({"jobs": [spec, …]}): %w`, err)
	}
	if len(doc.Jobs) == 0 || len(doc.Jobs) > maxBatchFileJobs {
		return nil, nil, fmt.Errorf("--batch: jobs must hold 1–%d job specs, got %d", maxBatchFileJobs, len(doc.Jobs))
	}
	// A workdir in the file is relative to the file.
	base := ""
	if path := v.GetString("batch"); path != "-" {
		base = filepath.Dir(path)
	}
	specs := make([]*queue.Spec, len(doc.Jobs))
	refs := &batchRefs{named: make([][]int, len(doc.Jobs)), byName: map[string][]int{}, placeholders: map[int]string{}, standsFor: map[string]int{}}
	for i, raw := range doc.Jobs {
		if raw, err = refs.resolve(i, raw); err == nil {
			specs[i], err = batchSpec(cmd, v, raw, base, wd)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("jobs[%d]: %w; nothing was submitted", i, err)
		}
	}
	return specs, refs, nil
}

// batchRefs are the jobs of a batch file that others name by their name
// in after or after_ended: a name that is not a job id stands for every job
// of that name earlier in the file (a sweep's runs may share one). Until
// that job is submitted, a placeholder id stands for it in the specs;
// submitInWaves puts its id in its place.
type batchRefs struct {
	// named[i] holds the jobs job i names by name.
	named [][]int
	// byName holds the jobs read so far under each name.
	byName map[string][]int
	// placeholders holds the placeholder of each job named, standsFor
	// the job each placeholder stands for.
	placeholders map[int]string
	standsFor    map[string]int
}

// resolve records job i's name and replaces the names of earlier jobs in
// its after and after_ended by placeholders. A spec that does not parse is
// returned as it is, for ParseSpec to name its fault.
func (r *batchRefs) resolve(i int, raw json.RawMessage) (json.RawMessage, error) {
	doc, err := queue.SpecDocument(raw)
	if err != nil {
		return raw, nil
	}
	changed, seen := false, map[int]bool{}
	for _, key := range []string{"after", "after_ended"} {
		list, ok := doc[key].([]any)
		if !ok {
			continue
		}
		out := make([]any, 0, len(list))
		for k, el := range list {
			name, ok := el.(string)
			if !ok || queue.ValidJobID(name) {
				out = append(out, el)
				continue
			}
			jobs := r.byName[name]
			if len(jobs) == 0 {
				return nil, fmt.Errorf("invalid job spec: spec.%s[%d]: no job named %q before it in the file: a job names the jobs it runs after by their id, or jobs earlier in the batch file by their name", key, k, name)
			}
			for _, j := range jobs {
				if seen[j] {
					return nil, fmt.Errorf("invalid job spec: spec.%s[%d]: %q names jobs[%d], which the job names already", key, k, name, j)
				}
				seen[j] = true
				out = append(out, r.placeholderFor(j))
				r.named[i] = append(r.named[i], j)
			}
			changed = true
		}
		doc[key] = out
	}
	inputsChanged, err := r.resolveInputs(i, doc)
	if err != nil {
		return nil, err
	}
	changed = changed || inputsChanged
	if name, ok := doc["name"].(string); ok && name != "" {
		r.byName[name] = append(r.byName[name], i)
	}
	if !changed {
		return raw, nil
	}
	return json.Marshal(doc)
}

// resolveInputs replaces, in doc's inputs, each job named by the name of
// earlier jobs by their placeholders: an input of a name of one job reads
// that job's outputs, its name by default the job's; one of a name of
// several jobs becomes one input per job, named <name>-1, <name>-2, … in
// the file's order.
func (r *batchRefs) resolveInputs(i int, doc map[string]any) (bool, error) {
	list, ok := doc["inputs"].([]any)
	if !ok {
		return false, nil
	}
	changed, seen := false, map[int]bool{}
	out := make([]any, 0, len(list))
	for k, el := range list {
		in, ok := el.(map[string]any)
		ref, named := in["job"].(string)
		if !ok || !named || queue.ValidJobID(ref) {
			out = append(out, el)
			continue
		}
		jobs := r.byName[ref]
		if len(jobs) == 0 {
			return false, fmt.Errorf("invalid job spec: spec.inputs[%d].job: no job named %q before it in the file: an input names the job whose outputs it reads by its id, or a job earlier in the batch file by its name", k, ref)
		}
		base, _ := in["name"].(string)
		if base == "" {
			base = ref
		}
		for n, j := range jobs {
			if seen[j] {
				return false, fmt.Errorf("invalid job spec: spec.inputs[%d].job: %q names jobs[%d], whose outputs an input reads already", k, ref, j)
			}
			seen[j] = true
			entry := maps.Clone(in)
			entry["job"], entry["name"] = r.placeholderFor(j), base
			if len(jobs) > 1 {
				entry["name"] = fmt.Sprintf("%s-%d", base, n+1)
			}
			out = append(out, entry)
			r.named[i] = append(r.named[i], j)
		}
		changed = true
	}
	doc["inputs"] = out
	return changed, nil
}

// placeholderFor returns the id that stands for job j until it is
// submitted.
func (r *batchRefs) placeholderFor(j int) string {
	if p, ok := r.placeholders[j]; ok {
		return p
	}
	p := uuid.NewString()
	r.placeholders[j], r.standsFor[p] = p, j
	return p
}

// waveEnd is where the run of jobs from start that can be submitted
// together ends: before the first one that names a job of the run.
func (r *batchRefs) waveEnd(start int) int {
	for i := start + 1; i < len(r.named); i++ {
		for _, j := range r.named[i] {
			if j >= start {
				return i
			}
		}
	}
	return len(r.named)
}

// fill puts the ids of jobs, the jobs submitted so far in the file's order,
// in place of the placeholders in spec.
func (r *batchRefs) fill(spec *queue.Spec, jobs []*queue.Job) {
	for _, list := range [][]string{spec.After, spec.AfterEnded} {
		for k, a := range list {
			if j, ok := r.standsFor[a]; ok {
				list[k] = jobs[j].ID.String()
			}
		}
	}
	for k, in := range spec.Inputs {
		if j, ok := r.standsFor[in.Job]; ok {
			spec.Inputs[k].Job = jobs[j].ID.String()
		}
	}
}

// batchSpec completes one spec of a batch with the spec flags given.
func batchSpec(cmd *cobra.Command, v *viper.Viper, raw json.RawMessage, base string, wd *workdirs) (*queue.Spec, error) {
	doc, err := queue.SpecDocument(raw)
	if _, local := localWorkdir(doc); err != nil || !anyFlagChanged(cmd) && !local {
		return queue.ParseSpec(raw)
	}
	return completeSpec(cmd, v, doc, nil, base, wd)
}

// submitBatch submits specs, waits for the scheduler's answer for each
// unless --no-wait-accept, and with --wait for every job's outcome, as
// gpuq wait of their ids does. Without --wait it prints each job's id, in
// the batch's order (-o json: {"jobs": […]}), names each rejected job on
// stderr with its reasons and exits 2 when any was.
func submitBatch(cmd *cobra.Command, v *viper.Viper, specs []*queue.Spec, refs *batchRefs, format string) error {
	ctx := cmd.Context()
	svc, err := connectJobs(cmd, v)
	if err != nil {
		return err
	}
	defer svc.Close()
	shown := newTransfer(cmd.ErrOrStderr(), "submitting")
	shown.unit = "jobs"
	jobs, err := submitInWaves(ctx, svc, specs, refs, shown.count(int64(len(specs))), v.GetDuration("accept-timeout"))
	shown.close()
	if err != nil {
		if len(jobs) > 0 {
			// Those are submitted and go on: say which, so that the rest
			// can be submitted on their own.
			for _, job := range jobs {
				fmt.Fprintln(cmd.OutOrStdout(), job.ID)
			}
			return fmt.Errorf("jobs[%d] onwards: %w; jobs[0] to jobs[%d] were submitted (their ids above) and go on", len(jobs), err, len(jobs)-1)
		}
		return err
	}
	if !v.GetBool("no-wait-accept") {
		if err := waitAllAccepted(cmd, svc, jobs, v.GetDuration("accept-timeout")); err != nil {
			return err
		}
	}
	finished := map[uuid.UUID]*queue.Job{}
	ids := make([]uuid.UUID, len(jobs))
	for i, job := range jobs {
		ids[i] = job.ID
		if job.State == queue.StateRejected {
			finished[job.ID] = job
		}
	}
	if v.GetBool("wait") {
		return waitEach(cmd, svc, ids, finished, format, v.GetDuration("wait-timeout"))
	}
	out := cmd.OutOrStdout()
	if format == "json" {
		if err := writeJSON(out, &JobPage{Jobs: jobs}); err != nil {
			return err
		}
	} else {
		for _, job := range jobs {
			fmt.Fprintln(out, job.ID)
		}
	}
	var rejected int
	for i, job := range jobs {
		if job.State == queue.StateRejected {
			rejected++
			fmt.Fprintf(cmd.ErrOrStderr(), "gpuq: jobs[%d] (%s) rejected: %s\n", i, job.ID, printable(job.Reason))
		}
	}
	if rejected > 0 {
		return &ExitError{Code: ExitRejected, Err: fmt.Errorf("%d of %d jobs rejected", rejected, len(jobs))}
	}
	return nil
}

// submitInWaves submits specs in the file's order, in runs none of whose
// jobs names another of the same run by name (refs): before each run, the
// jobs it names are waited for until the scheduler has recorded them
// (within timeout each, acceptAll), and their ids put in its specs. On an error it
// returns the jobs submitted before it, the file's first ones.
func submitInWaves(ctx context.Context, svc jobService, specs []*queue.Spec, refs *batchRefs, done func(int), timeout time.Duration) ([]*queue.Job, error) {
	jobs := make([]*queue.Job, 0, len(specs))
	for start := 0; start < len(specs); {
		end := refs.waveEnd(start)
		var named []int
		seen := map[int]bool{}
		for i := start; i < end; i++ {
			for _, j := range refs.named[i] {
				if !seen[j] {
					seen[j] = true
					named = append(named, j)
				}
			}
		}
		waited := make([]*queue.Job, len(named))
		for k, j := range named {
			waited[k] = jobs[j]
		}
		if err := acceptAll(ctx, svc, waited, timeout, func(int) {}); err != nil {
			return jobs, err
		}
		for k, j := range named {
			jobs[j] = waited[k]
		}
		for i := start; i < end; i++ {
			refs.fill(specs[i], jobs)
		}
		got, err := svc.SubmitMany(ctx, specs[start:end], done)
		jobs = append(jobs, got...)
		if err != nil {
			return jobs, err
		}
		start = end
	}
	return jobs, nil
}

// acceptWaiters bounds the jobs of a batch whose acceptance is waited for
// at once: over NATS each wait is a request of its own.
const acceptWaiters = 16

// waitAllAccepted waits until the scheduler has placed or rejected each
// job (acceptAll), showing how many are, and puts each one's latest record
// in its place in jobs.
func waitAllAccepted(cmd *cobra.Command, svc jobService, jobs []*queue.Job, timeout time.Duration) error {
	shown := newTransfer(cmd.ErrOrStderr(), "accepted by the scheduler")
	shown.unit = "jobs"
	err := acceptAll(cmd.Context(), svc, jobs, timeout, shown.count(int64(len(jobs))))
	shown.close()
	return err
}

// acceptAll waits until the scheduler has placed or rejected each job
// (waitAccepted), acceptWaiters at a time, puts each one's latest record in
// its place in jobs and counts it done.
func acceptAll(ctx context.Context, svc jobService, jobs []*queue.Job, timeout time.Duration, done func(int)) error {
	var mu sync.Mutex
	g := errgroup.Group{}
	g.SetLimit(acceptWaiters)
	for i, job := range jobs {
		g.Go(func() error {
			got, err := waitAccepted(ctx, svc, job, timeout)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			jobs[i] = got
			done(1)
			return nil
		})
	}
	return g.Wait()
}

// SubmitMany submits each spec in turn; on an error it returns the jobs
// submitted before it.
func (n *natsJobs) SubmitMany(ctx context.Context, specs []*queue.Spec, done func(int)) ([]*queue.Job, error) {
	jobs := make([]*queue.Job, 0, len(specs))
	for _, spec := range specs {
		job, err := n.Submit(ctx, spec)
		if err != nil {
			return jobs, err
		}
		jobs = append(jobs, job)
		done(1)
	}
	return jobs, nil
}

// SubmitMany posts the specs to POST /v1/jobs/batch in requests of at most
// httpapi.MaxBatchJobs jobs and batchRequestBytes; on an error it returns
// the jobs of the requests answered before it. Each request is checked as
// a whole by the server, so a refused one submitted none of its jobs.
func (a *apiJobs) SubmitMany(ctx context.Context, specs []*queue.Spec, done func(int)) ([]*queue.Job, error) {
	jobs := make([]*queue.Job, 0, len(specs))
	for start := 0; start < len(specs); {
		var body bytes.Buffer
		body.WriteString(`{"jobs":[`)
		end, keyed := start, true
		for end < len(specs) && end-start < httpapi.MaxBatchJobs {
			b, err := json.Marshal(specs[end])
			if err != nil {
				return jobs, err
			}
			if end > start && body.Len()+len(b)+3 > batchRequestBytes {
				break
			}
			if end > start {
				body.WriteByte(',')
			}
			body.Write(b)
			keyed = keyed && specs[end].IdempotencyKey != ""
			end++
		}
		body.WriteString("]}")
		rctx := ctx
		if keyed {
			// Asking again submits nothing twice: every job has a key.
			rctx = context.WithValue(ctx, idempotent{}, true)
		}
		var batch httpapi.Batch
		if err := a.call(rctx, http.MethodPost, "/v1/jobs/batch", nil, bytes.NewReader(body.Bytes()), "application/json", &batch); err != nil {
			return jobs, err
		}
		if len(batch.Jobs) != end-start {
			return jobs, fmt.Errorf("POST /v1/jobs/batch: %d jobs answered for %d submitted", len(batch.Jobs), end-start)
		}
		for i, item := range batch.Jobs {
			if item.Job == nil {
				return jobs, fmt.Errorf("POST /v1/jobs/batch: no job answered for jobs[%d]", start+i)
			}
			jobs = append(jobs, item.Job)
		}
		done(end - start)
		start = end
	}
	return jobs, nil
}
