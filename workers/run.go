package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// handle claims the job a run message names and runs one attempt of it.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	io := context.WithoutCancel(ctx) // writes that must outlive a notice
	var order queue.RunOrder
	if err := json.Unmarshal(msg.Data(), &order); err != nil {
		w.cfg.Logger.Error("dropping an unreadable run message", "subject", msg.Subject(), "err", err)
		msg.Term() //nolint:errcheck // nothing else can be done with it
		return
	}
	log := w.cfg.Logger.With("job", order.JobID, "pool", w.cfg.Pool)
	if len(order.Countries) > 0 && !slices.Contains(order.Countries, w.cfg.Country) {
		// Defence in depth: the control plane checks the pool's country
		// at claim from its own registry; a worker configured elsewhere
		// leaves the job to the pool's other workers and never ends it.
		log.Error("residency: refusing a job outside this worker's country; leaving it to other workers",
			"worker", w.cfg.WorkerID, "region", w.cfg.Region, "country", w.cfg.Country, "residency", order.Residency)
		msg.NakWithDelay(handBackDelay(w.cfg.AckWait)) //nolint:errcheck // redelivered after AckWait otherwise
		return
	}
	res, err := w.claims.Call(io, queue.ClaimRequest{
		JobID: order.JobID, PlacementVersion: order.PlacementVersion, Lease: w.cfg.AckWait,
		WorkerID: w.cfg.WorkerID, Host: w.host, PID: w.pid, Pool: w.cfg.Pool,
		NodeID: w.cfg.NodeID, CanaryRunID: w.canaryRunID(), ClaimID: uuid.New(), Reply: msg.Reply(),
	})
	claimed := res.Claimed
	if err == nil {
		err = res.Err
	}
	if err == nil {
		// The claim carries the spec as recorded; it is parsed here, once.
		err = claimed.ParseSpec()
	}
	var nc *queue.NotClaimableError
	var refused *queue.ClaimRefusedError
	switch {
	case errors.As(err, &refused):
		// The control plane handed the job back for re-placement.
		log.Warn("dropping run message", "reason", refused.Error())
		ackDone(io, msg, log)
		return
	case errors.As(err, &nc) && nc.LeaseLeft > 0:
		// Another attempt holds a live lease: look again when it ends.
		msg.NakWithDelay(nc.LeaseLeft + 250*time.Millisecond) //nolint:errcheck // redelivered after AckWait otherwise
		return
	case errors.As(err, &nc):
		log.Info("dropping run message", "reason", nc.Error())
		ackDone(io, msg, log)
		return
	case errors.Is(err, queue.ErrNotFound):
		log.Error("dropping run message of an unknown job")
		msg.Term() //nolint:errcheck // nothing else can be done with it
		return
	case err != nil:
		log.Error("claiming job", "err", err)
		msg.NakWithDelay(queue.RedeliveryDelay(msg, 500*time.Millisecond, 30*time.Second)) //nolint:errcheck // redelivered after AckWait otherwise
		return
	}
	job := claimed.Job
	log = log.With("attempt", job.Attempt)
	if job.Preemptions > job.Spec.MaxPreemptions() {
		reason := fmt.Sprintf("preempted, lost or handed back after a host error %d times, over retries.max_preemptions %d", job.Preemptions, job.Spec.MaxPreemptions())
		if err := w.store.MarkDead(io, job.ID, job.Attempt, reason); err != nil {
			log.Error("declaring job dead", "err", err)
			return
		}
		ackDone(io, msg, log)
		return
	}
	a := &attempt{w: w, msg: msg, job: job, log: log, io: io, recheck: make(chan struct{}, 1)}
	defer w.beats.hold(a)()
	if job.Spec.IsNoop() {
		// Nothing to start, restore or upload; the success is still recorded
		// under the attempt before the message is acknowledged.
		a.complete(nil)
		return
	}
	a.run(ctx, claimed.Checkpoint)
}

// checkpointRestorer is the worker service's restore (ServiceRecords): a
// checkpoint of another pool's bucket, copied into the worker's pool's.
type checkpointRestorer interface {
	RestoreCheckpoint(ctx context.Context, id uuid.UUID, attempt, seq int) (*queue.Checkpoint, error)
}

// workdirFetcher is the worker service's workdir (ServiceRecords): the
// job's working directory in the worker's pool's bucket.
type workdirFetcher interface {
	Workdir(ctx context.Context, id uuid.UUID, attempt int) (*queue.WorkdirCopy, error)
}

// inputsFetcher is the worker service's inputs (ServiceRecords): the
// outputs of the jobs the job reads, in the worker's pool's bucket.
type inputsFetcher interface {
	Inputs(ctx context.Context, id uuid.UUID, attempt int) ([]queue.InputCopy, error)
}

// secretsFetcher is the worker service's secrets (ServiceRecords): the
// values of the secrets the job names.
type secretsFetcher interface {
	Secrets(ctx context.Context, id uuid.UUID, attempt int) (map[string]string, error)
}

// ackDone acknowledges a message whose job needs nothing more, and waits
// for the server to confirm it.
func ackDone(ctx context.Context, msg jetstream.Msg, log *slog.Logger) {
	if err := msg.DoubleAck(ctx); err != nil {
		log.Warn("acknowledging; the message will be redelivered and found finished", "err", err)
	}
}

// attempt is one run of one job under one attempt number.
type attempt struct {
	w   *Worker
	msg jetstream.Msg
	job *queue.Job
	log *slog.Logger
	io  context.Context

	base, ckptDir, outDir string
	// workDir is where the command runs: the unpacked spec.workdir, else
	// base.
	workDir string
	// user is who the job runs as; nil: the worker's own user.
	user *JobUser
	// secrets are the values of the secrets the job names, by name: in
	// its environment, and masked in its output.
	secrets map[string]string

	saveMu sync.Mutex
	saves  int
	upload int
	// notes are written to the job's stderr log before its command
	// starts: what it should know of how it was set up.
	notes []string
	// stderr is the job's stderr log while it runs (under saveMu): what a
	// checkpoint left out is said there, where the job's author reads it.
	stderr io.Writer
	cancel context.CancelCauseFunc
	// recheck asks the heartbeat to check the lease now.
	recheck chan struct{}
	// prepLogs ships what the job's log says of the steps before and
	// after its command (see stepProgress); prepOut is its stderr.
	prepMu   sync.Mutex
	prepLogs *logShipper
	prepOut  io.Writer
}

func (a *attempt) run(ctx context.Context, from *queue.Checkpoint) {
	w, job := a.w, a.job
	a.base = filepath.Join(w.cfg.DataDir, fmt.Sprintf("%s-a%d", job.ID, job.Attempt))
	a.ckptDir = filepath.Join(a.base, "checkpoint")
	a.outDir = filepath.Join(a.base, "output")
	a.workDir = a.base
	defer os.RemoveAll(a.base)
	defer a.closePrep()
	for _, d := range []string{a.ckptDir, a.outDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			a.hostError("preparing directories: " + err.Error())
			return
		}
	}
	user := w.cfg.JobUser
	if w.uids != nil {
		// Its own uid: no other job of the machine reads its files or
		// signals its processes. Given back (after killing whatever the
		// job left running) before its directory is removed.
		u, giveBack, err := w.uids.take(ctx)
		if err != nil {
			a.hostError("choosing the job's uid: " + err.Error())
			return
		}
		defer giveBack()
		user = u
		a.log = a.log.With("uid", u.UID)
	}
	a.user = user
	if user != nil {
		// The attempt's directory is the job's own: no other job enters.
		err := os.Chmod(a.base, 0o700)
		if err == nil {
			err = user.chown(a.base, a.ckptDir, a.outDir)
		}
		if err != nil {
			a.hostError("preparing directories: " + err.Error())
			return
		}
	}
	if from != nil && !strings.HasPrefix(from.StoreURI, queue.JobArchivePrefix(w.cfg.Pool, job.ID)) {
		// Stored by another pool (the job was re-placed), where this
		// worker may not read: the control plane copies it into this
		// pool's bucket.
		if r, ok := w.store.(checkpointRestorer); ok {
			cp, err := r.RestoreCheckpoint(a.io, job.ID, job.Attempt, from.Seq)
			if err != nil {
				a.log.Error("copying the checkpoint of another pool into this pool's bucket", "seq", from.Seq, "err", err)
				reason := fmt.Sprintf("copying checkpoint %d into pool %s's bucket: %v", from.Seq, w.cfg.Pool, err)
				if errors.Is(err, queue.ErrArchiveLost) || errors.Is(err, queue.ErrNotFound) {
					a.fail(nil, reason+"; the job was not run")
					return
				}
				// The control plane's copy failed, not this machine: the
				// job goes back as after a host error, which does not
				// count towards pausing this worker.
				a.release(queue.OutcomeHostError, nil, reason, 5*time.Second)
				return
			}
			from = cp
		}
	}
	if from != nil {
		if err := a.restore(from); err != nil {
			a.log.Error("restoring checkpoint", "seq", from.Seq, "err", err)
			reason := fmt.Sprintf("restoring checkpoint %d: %v", from.Seq, err)
			if errors.Is(err, ErrArchiveRefused) || errors.Is(err, queue.ErrArchiveLost) {
				// Every worker would refuse it, or miss it, again: the
				// job fails, saying why, rather than run from a poisoned
				// or empty directory or go round the pool until dead.
				a.fail(nil, reason+"; the job was not run")
				return
			}
			a.hostError(reason)
			return
		}
		if user != nil {
			if err := user.chownTree(a.ckptDir); err != nil {
				a.hostError("restoring: " + err.Error())
				return
			}
		}
	}
	if job.Spec.Workdir != "" && !a.unpackWorkdir() {
		return
	}
	if len(job.Spec.InputJobs()) > 0 && !a.unpackInputs() {
		return
	}
	if len(job.Spec.Secrets) > 0 && !a.fetchSecrets() {
		return
	}
	jobCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a.cancel = cancel
	if t := time.Duration(job.Spec.Timeout); t > 0 {
		timer := time.AfterFunc(t, func() { cancel(ErrTimeout) })
		defer timer.Stop()
	}
	if w.nc != nil {
		sub, err := w.nc.Subscribe(queue.CancelSubject(job.ID.String()), func(m *nats.Msg) {
			if reason := m.Header.Get(queue.HeaderStop); reason != "" {
				cancel(&StopError{Reason: reason})
				return
			}
			cancel(ErrCancelled)
		})
		if err == nil {
			defer sub.Unsubscribe() //nolint:errcheck // the connection may be closing
		}
		moveSub, err := w.nc.Subscribe(queue.MoveSubject(job.ID.String()), func(m *nats.Msg) {
			reason := m.Header.Get(queue.HeaderMove)
			if reason == "" {
				reason = "the control plane asked"
			}
			cancel(&MoveError{Reason: reason})
		})
		if err == nil {
			defer moveSub.Unsubscribe() //nolint:errcheck // the connection may be closing
		}
	}
	ctl, err := listenControl(a.base, a.save)
	if err != nil {
		a.hostError("opening the job's control socket: " + err.Error())
		return
	}
	defer ctl.Close()
	if user != nil {
		if err := user.chown(ctl.path); err != nil {
			a.hostError("opening the job's control socket: " + err.Error())
			return
		}
	}

	path, err := commandPath(job.Spec.Command[0], user)
	if err != nil {
		code := 127
		a.finishError(&code, fmt.Sprintf("starting %q: %v", job.Spec.Command[0], err), queue.OutcomeRetry)
		return
	}
	a.closePrep()
	logs := newLogShipper(w.js, w.cfg.Pool, job.ID, job.Attempt)
	logs.mask(slices.Collect(maps.Values(a.secrets)))
	cmd := exec.Command(path, job.Spec.Command[1:]...)
	cmd.Args[0] = job.Spec.Command[0] // the program sees the name it was given
	cmd.Dir = a.workDir
	cmd.Env = a.env(from != nil, ctl.path)
	cmd.Stdout = logs.writer("stdout")
	cmd.Stderr = logs.writer("stderr")
	for _, note := range a.notes {
		fmt.Fprintf(cmd.Stderr, "gpuq: %s\n", note)
	}
	a.saveMu.Lock()
	a.stderr = cmd.Stderr
	a.saveMu.Unlock()
	// Its own process group, so signals reach the job's children too; and
	// killed with the worker, so a SIGKILLed worker leaves no orphan.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if user != nil {
		cmd.SysProcAttr.Credential = user.credential()
	}
	if err := cmd.Start(); err != nil {
		logs.close()
		code := 127
		a.finishError(&code, fmt.Sprintf("starting %q: %v", job.Spec.Command[0], err), queue.OutcomeRetry)
		return
	}
	a.log.Info("job started", "pid", cmd.Process.Pid, "resumed", from != nil)
	w.health.started()
	w.track(a, true)
	defer w.track(a, false)
	hbDone := make(chan struct{})
	go a.heartbeat(jobCtx, hbDone)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var waitErr error
	var stop *StopError // the control plane's stop request, when one ended the job
	var move *MoveError // the control plane's move request, when one ended the job
	exitedInGrace := true
	noticed := make(chan struct{})
	close(noticed)
	select {
	case waitErr = <-exited:
	case <-jobCtx.Done():
		pgid := -cmd.Process.Pid
		cause := context.Cause(jobCtx)
		if errors.Is(cause, ErrPreempted) || errors.As(cause, &stop) || errors.As(cause, &move) {
			syscall.Kill(pgid, syscall.SIGTERM) //nolint:errcheck // it may have exited already
			grace := w.cfg.Grace
			if stop == nil && move == nil {
				p := preemptionOf(cause)
				grace = w.graceFor(p)
				message := "preemption notice: " + p.Reason
				if errors.Is(cause, ErrShutdown) {
					message = shutdownReason(w.cfg.WorkerID) + "; handing the job back"
				}
				noticed = make(chan struct{})
				go func() {
					// The control plane learns of the notice now, not
					// when the job has exited.
					defer close(noticed)
					if err := w.store.RecordNotice(a.io, job.ID, job.Attempt, message, w.cfg.AckWait); err != nil {
						a.log.Warn("recording the preemption notice", "err", err)
					}
				}()
			}
			select {
			case waitErr = <-exited:
			case <-time.After(grace):
				exitedInGrace = false
				syscall.Kill(pgid, syscall.SIGKILL) //nolint:errcheck // it may have exited already
				waitErr = <-exited
			}
		} else {
			syscall.Kill(pgid, syscall.SIGKILL) //nolint:errcheck // it may have exited already
			waitErr = <-exited
		}
	}
	cause := context.Cause(jobCtx)
	cancel(nil)
	<-hbDone
	a.saveMu.Lock()
	a.stderr = nil
	a.saveMu.Unlock()
	logs.close()
	code := exitCode(waitErr)

	<-noticed
	switch {
	case cause == queue.ErrFenced:
		a.log.Warn("fenced out: a newer attempt owns the job; not acknowledging")
		a.w.store.EndAttempt(a.io, job.ID, job.Attempt, queue.OutcomeFenced, code) //nolint:errcheck // informational only
	case cause == ErrCancelled:
		a.w.store.EndAttempt(a.io, job.ID, job.Attempt, queue.OutcomeCancelled, code) //nolint:errcheck // informational only
		ackDone(a.io, a.msg, a.log)
	case errors.Is(cause, ErrShutdown):
		a.shutdown(exitedInGrace)
	case errors.Is(cause, ErrPreempted):
		a.preempted(exitedInGrace, preemptionOf(cause).Reason)
	case errors.As(cause, &stop):
		a.stopped(exitedInGrace, code, stop.Reason)
	case errors.As(cause, &move):
		a.moved(exitedInGrace, move.Reason)
	case cause == ErrTimeout:
		a.finishError(code, fmt.Sprintf("timed out after %s", time.Duration(job.Spec.Timeout)), queue.OutcomeTimeout)
	default:
		if code != nil && *code == 0 {
			a.succeed()
			return
		}
		a.finishError(code, fmt.Sprintf("exited with status %s", codeText(code)), queue.OutcomeRetry)
	}
}

// systemPath is the PATH a job gets, after the gpuq binary's directory,
// unless the worker passes its own PATH on through Config.PassEnv.
const systemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// env is the job's whole environment: a minimal PATH, HOME and LANG, the
// variables the operator passes on by name, the spec's env and the GPUQ_*
// job variables. Nothing else of the worker's environment reaches the job:
// the worker's may hold credentials (a database or NATS URL, a token) that a
// job must never see.
func (a *attempt) env(resumed bool, socket string) []string {
	job, cfg := a.job, a.w.cfg
	vars := map[string]string{"PATH": systemPath, "HOME": a.base, "LANG": "C.UTF-8"}
	if lang, ok := os.LookupEnv("LANG"); ok && lang != "" {
		vars["LANG"] = lang
	}
	for _, name := range cfg.PassEnv {
		if v, ok := os.LookupEnv(name); ok {
			vars[name] = v
		}
	}
	if a.user != nil {
		// Some programs ask who they are (Python's getpass.getuser, and
		// with it torch's caches); a job uid has no passwd entry.
		vars["USER"], vars["LOGNAME"] = a.user.Name, a.user.Name
	}
	if cfg.Executable != "" {
		vars["PATH"] = filepath.Dir(cfg.Executable) + string(os.PathListSeparator) + vars["PATH"]
	}
	for k, v := range job.Spec.Env {
		vars[k] = v
	}
	for k, v := range a.secrets {
		vars[k] = v
	}
	r := "0"
	if resumed {
		r = "1"
	}
	vars["GPUQ_JOB_ID"] = job.ID.String()
	vars["GPUQ_ATTEMPT"] = strconv.Itoa(job.Attempt)
	vars["GPUQ_CHECKPOINT_DIR"] = a.ckptDir
	vars["GPUQ_OUTPUT_DIR"] = a.outDir
	vars["GPUQ_RESUMED"] = r
	if a.workDir != a.base {
		vars["GPUQ_WORKDIR"] = a.workDir
	}
	if len(job.Spec.InputJobs()) > 0 {
		vars["GPUQ_INPUT_DIR"] = filepath.Join(a.base, inputDir)
	}
	vars["GPUQ_POOL"] = cfg.Pool
	vars["GPUQ_REGION"] = cfg.Region
	vars[EnvControlSocket] = socket
	if iv := time.Duration(job.Spec.Checkpoint.Interval); iv > 0 {
		vars["GPUQ_CHECKPOINT_INTERVAL"] = strconv.Itoa(int(iv.Seconds()))
	}
	env := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// heartbeat keeps the message and the lease alive until ctx ends; losing the
// lease cancels the job with ErrFenced (or ErrCancelled when a user
// cancelled it).
func (a *attempt) heartbeat(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(a.w.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.recheck:
		}
		if err := a.msg.InProgress(); err != nil {
			a.log.Warn("extending AckWait", "err", err)
		}
		err := a.w.store.Heartbeat(a.io, a.job.ID, a.job.Attempt, a.w.cfg.AckWait)
		if errors.Is(err, queue.ErrFenced) {
			if j, jerr := a.w.store.Job(a.io, a.job.ID); jerr == nil && j.State == queue.StateCancelled {
				a.cancel(ErrCancelled)
			} else {
				a.cancel(queue.ErrFenced)
			}
			return
		}
		if err != nil {
			a.log.Warn("refreshing lease", "err", err)
		}
	}
}

// save commits the checkpoint directory: pack, upload to the region's store,
// record under the attempt. An upload the record refused is deleted (and a
// fenced-out attempt's job stopped); one whose record failed otherwise stays.
func (a *attempt) save(context.Context) (int, error) {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.upload++
	name := fmt.Sprintf("jobs/%s/checkpoint-a%d-%d.tar.zst", a.job.ID, a.job.Attempt, a.upload)
	rec, err := a.pack("uploading a checkpoint", a.ckptDir, a.job.Spec.Checkpoint.Paths, name)
	if err != nil {
		return 0, err
	}
	seq, err := a.w.store.RecordCheckpoint(a.io, a.job.ID, a.job.Attempt, *rec)
	if err != nil {
		if queue.RecordRefused(err) {
			a.w.archives.Delete(a.io, rec.StoreURI) //nolint:errcheck // an orphan costs storage, not correctness
		}
		// Otherwise the record may have been written after all (its reply
		// lost, or too late): the archive stays, or the next attempt would
		// find its checkpoint gone.
		if errors.Is(err, queue.ErrFenced) && a.cancel != nil {
			a.cancel(queue.ErrFenced)
		}
		return 0, err
	}
	a.saves++
	a.log.Info("checkpoint committed", "seq", seq, "bytes", rec.Bytes)
	return seq, nil
}

// pack packs dir and uploads it as name to the worker's pool's bucket, in
// its region; an upload that lasts says how far it has come, as what, in
// the job's log.
func (a *attempt) pack(what, dir string, paths []string, name string) (_ *queue.ArchiveRecord, err error) {
	arch, err := Pack(dir, paths, a.base)
	if err != nil {
		return nil, err
	}
	defer arch.Remove() //nolint:errcheck // a temporary file
	if arch.LeftOutCount > 0 {
		a.log.Warn("left out of the archive", "archive", name, "entries", arch.LeftOutCount, "first", arch.LeftOut)
		if a.stderr != nil {
			fmt.Fprintf(a.stderr, "gpuq: %s does not hold %s (%d in all): links to outside %s/, sockets, FIFOs and devices are not archived\n",
				path.Base(name), strings.Join(arch.LeftOut, ", "), arch.LeftOutCount, filepath.Base(dir))
		}
	}
	f, err := os.Open(arch.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := a.progress(what, arch.Bytes, a.stderr)
	defer func() { p.end(err) }()
	uri, err := a.w.archives.Put(a.io, queue.ArchiveBucket(a.w.cfg.Pool), name, progressReader{r: f, n: &p.done})
	if err != nil {
		return nil, err
	}
	return &queue.ArchiveRecord{Bytes: arch.Bytes, SHA256: arch.SHA256, Region: a.w.cfg.Region, StoreURI: uri}, nil
}

// unpackWorkdir fetches the job's working directory (spec.workdir) and
// unpacks it into the attempt's directory, where the command then runs. It
// reports false when it could not, having ended the attempt: the job fails
// when no worker could do better (the directory is not stored, or refused
// when unpacked), and is handed back otherwise.
func (a *attempt) unpackWorkdir() bool {
	job := a.job
	reason := "fetching its working directory " + job.Spec.Workdir
	fetcher, ok := a.w.store.(workdirFetcher)
	if !ok {
		a.hostError(reason + ": this worker reaches no control plane that keeps working directories")
		return false
	}
	c, err := fetcher.Workdir(a.io, job.ID, job.Attempt)
	if err != nil {
		a.log.Error("fetching the job's working directory", "workdir", job.Spec.Workdir, "err", err)
		if errors.Is(err, queue.ErrWorkdirMissing) || errors.Is(err, queue.ErrArchiveLost) {
			a.fail(nil, fmt.Sprintf("%s: %v; the job was not run", reason, err))
			return false
		}
		// The control plane's copy failed, not this machine: handed back
		// as after a host error, which does not pause this worker.
		a.release(queue.OutcomeHostError, nil, fmt.Sprintf("%s: %v", reason, err), 5*time.Second)
		return false
	}
	dir := filepath.Join(a.base, "workdir")
	if err := a.unpack("fetching its working directory", c.Bytes, c.StoreURI, c.SHA256, dir); err != nil {
		a.log.Error("unpacking the job's working directory", "workdir", job.Spec.Workdir, "err", err)
		if errors.Is(err, ErrArchiveRefused) || errors.Is(err, queue.ErrArchiveLost) {
			a.fail(nil, fmt.Sprintf("%s: %v; the job was not run", reason, err))
			return false
		}
		a.hostError(fmt.Sprintf("%s: %v", reason, err))
		return false
	}
	if a.user != nil {
		if err := a.user.chownTree(dir); err != nil {
			a.hostError(reason + ": " + err.Error())
			return false
		}
	}
	a.workDir = dir
	return true
}

// inputDir, in the attempt's directory, holds the outputs of the jobs the
// job reads, a directory each ($GPUQ_INPUT_DIR/<name>).
const inputDir = "inputs"

// unpackInputs fetches the outputs of the jobs the job reads (spec.inputs'
// job entries) and unpacks each in its own directory of inputDir; a job
// that left none (one of spec.after_ended that did not succeed, or one
// that succeeded leaving no outputs) gets no directory. It reports false
// when it could not, having ended the attempt as unpackWorkdir does.
func (a *attempt) unpackInputs() bool {
	job := a.job
	reason := "fetching its inputs"
	fetcher, ok := a.w.store.(inputsFetcher)
	if !ok {
		a.hostError(reason + ": this worker reaches no control plane that hands out jobs' outputs")
		return false
	}
	ins, err := fetcher.Inputs(a.io, job.ID, job.Attempt)
	if err != nil {
		a.log.Error("fetching the job's inputs", "err", err)
		if errors.Is(err, queue.ErrInputRefused) || errors.Is(err, queue.ErrArchiveLost) || errors.Is(err, queue.ErrNotFound) {
			a.fail(nil, fmt.Sprintf("%s: %v; the job was not run", reason, err))
			return false
		}
		a.release(queue.OutcomeHostError, nil, fmt.Sprintf("%s: %v", reason, err), 5*time.Second)
		return false
	}
	root := filepath.Join(a.base, inputDir)
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		a.hostError(fmt.Sprintf("%s: %v", reason, err))
		return false
	}
	for _, in := range ins {
		what := fmt.Sprintf("input %s, the outputs of job %s", in.Name, in.JobID)
		if in.StoreURI == "" {
			why := "left no outputs"
			if in.State != queue.StateSucceeded {
				why = fmt.Sprintf("%s, leaving no outputs", in.State)
			}
			a.notes = append(a.notes, fmt.Sprintf("input %s: job %s %s; $GPUQ_INPUT_DIR/%s is not there", in.Name, in.JobID, why, in.Name))
			continue
		}
		if !validInputName(in.Name) {
			a.hostError(fmt.Sprintf("%s: the control plane named an input %q", reason, in.Name))
			return false
		}
		if err := a.unpack("fetching input "+in.Name, in.Bytes, in.StoreURI, in.SHA256, filepath.Join(root, in.Name)); err != nil {
			a.log.Error("unpacking an input", "input", in.Name, "from", in.JobID, "err", err)
			if errors.Is(err, ErrArchiveRefused) || errors.Is(err, queue.ErrArchiveLost) {
				a.fail(nil, fmt.Sprintf("%s: %s: %v; the job was not run", reason, what, err))
				return false
			}
			a.hostError(fmt.Sprintf("%s: %s: %v", reason, what, err))
			return false
		}
	}
	if a.user != nil {
		if err := a.user.chownTree(root); err != nil {
			a.hostError(reason + ": " + err.Error())
			return false
		}
	}
	return true
}

// validInputName reports whether name may be a directory of inputDir: a
// spec's input names are checked when it is submitted, and this worker
// checks again what the control plane hands it.
func validInputName(name string) bool {
	return name != "" && name != "." && name != ".." && filepath.IsLocal(name) && !strings.ContainsAny(name, `/\`)
}

// fetchSecrets asks the control plane for the values of the secrets the job
// names. It reports false when it could not, having ended the attempt: the
// job fails when a secret is not set (no worker could do better), and is
// handed back otherwise. Neither the values nor the reply are logged.
func (a *attempt) fetchSecrets() bool {
	job := a.job
	reason := "fetching its secrets " + strings.Join(job.Spec.Secrets, ", ")
	fetcher, ok := a.w.store.(secretsFetcher)
	if !ok {
		a.hostError(reason + ": this worker reaches no control plane that keeps secrets")
		return false
	}
	v, err := fetcher.Secrets(a.io, job.ID, job.Attempt)
	if err == nil && len(v) != len(job.Spec.Secrets) {
		err = fmt.Errorf("the reply holds %d of the %d secrets", len(v), len(job.Spec.Secrets))
	}
	if err != nil {
		a.log.Error("fetching the job's secrets", "secrets", job.Spec.Secrets, "err", err)
		if errors.Is(err, queue.ErrSecretMissing) {
			a.fail(nil, fmt.Sprintf("%s: %v; the job was not run", reason, err))
			return false
		}
		a.release(queue.OutcomeHostError, nil, fmt.Sprintf("%s: %v", reason, err), 5*time.Second)
		return false
	}
	a.secrets = v
	return true
}

// unpack downloads the archive at uri, checks it against sha and unpacks
// it into dir.
func (a *attempt) unpack(what string, size int64, uri, sha, dir string) (err error) {
	p := a.progress(what, size, nil)
	defer func() { p.end(err) }()
	f, err := os.CreateTemp(a.base, "unpack-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := Download(a.io, counted{ArchiveStore: a.w.archives, p: p}, uri, sha, f); err != nil {
		return err
	}
	return Unpack(f, dir, a.w.cfg.Unpack)
}

// restore unpacks a recorded checkpoint into the checkpoint directory after
// checking its hash.
func (a *attempt) restore(cp *queue.Checkpoint) error {
	if err := a.unpack(fmt.Sprintf("restoring checkpoint %d", cp.Seq), cp.Bytes, cp.StoreURI, cp.SHA256, a.ckptDir); err != nil {
		return err
	}
	a.log.Info("resuming from checkpoint", "seq", cp.Seq)
	return nil
}

func (a *attempt) succeed() {
	var rec *queue.ArchiveRecord
	if entries, _ := os.ReadDir(a.outDir); len(entries) > 0 {
		var err error
		rec, err = a.pack("uploading its outputs", a.outDir, nil, fmt.Sprintf("jobs/%s/outputs-a%d.tar.zst", a.job.ID, a.job.Attempt))
		if err != nil {
			a.log.Error("uploading outputs", "err", err)
			a.hostError("uploading outputs: " + err.Error())
			return
		}
	}
	a.complete(rec)
}

// complete records the attempt's success (and outputs, if any) and only then
// acknowledges the message.
func (a *attempt) complete(rec *queue.ArchiveRecord) {
	err := a.settle("recording success", func() error {
		if rec != nil {
			return a.w.store.Succeed(a.io, a.job.ID, a.job.Attempt, rec)
		}
		recorded, err := a.w.successes.Call(a.io, queue.AttemptRef{JobID: a.job.ID, Attempt: a.job.Attempt})
		if err == nil && !recorded {
			err = queue.ErrFenced
		}
		return err
	})
	if errors.Is(err, queue.ErrFenced) {
		a.log.Warn("fenced out at completion: a newer attempt owns the job; not acknowledging")
		if rec != nil {
			a.w.archives.Delete(a.io, rec.StoreURI) //nolint:errcheck // an orphan costs storage, not correctness
		}
		return
	}
	if err != nil {
		// Not recorded, so not acknowledged: the message is redelivered
		// and the job runs again from its latest checkpoint. Its uploaded
		// outputs stay in the store.
		a.log.Error("recording success", "err", err)
		return
	}
	a.log.Info("job succeeded")
	ackDone(a.io, a.msg, a.log)
}

// settle records how an attempt ended. The control plane may be briefly
// unable to record it (PostgreSQL restarting, a server failing over): then
// the record is asked for again, after waits that double with jitter, for
// up to one lease (AckWait) after the job ended, the message kept in
// progress meanwhile, so that a finished job is not run again for a
// blip. Fencing makes a repeat harmless: the attempt is recorded once, or
// not at all when a newer one owns the job.
func (a *attempt) settle(what string, record func() error) error {
	a.closePrep() // what the log says of the preparation precedes the end
	retry := queue.NewBackoff(settleRetryFirst, settleRetryMax)
	until := time.Now().Add(a.w.cfg.AckWait)
	for {
		err := record()
		if err == nil || !retryable(err) || a.io.Err() != nil {
			return err
		}
		wait := retry.NextBackOff()
		if time.Now().Add(wait).After(until) {
			return err
		}
		a.log.Warn(what+"; asking again", "err", err, "retry_in", wait.Round(time.Millisecond))
		if err := a.msg.InProgress(); err != nil {
			a.log.Warn("extending AckWait", "err", err)
		}
		select {
		case <-time.After(wait):
		case <-a.io.Done():
			return err
		}
	}
}

// settleRetryFirst and settleRetryMax bound the waits between records of an
// attempt's end.
const (
	settleRetryFirst = 200 * time.Millisecond
	settleRetryMax   = 5 * time.Second
)

// retryable tells a record that may succeed when asked again (no control
// plane answered, or it could not reach PostgreSQL) from a decisive answer
// (fenced, not found, refused).
func retryable(err error) bool {
	return errors.Is(err, ErrNoControlPlane) || errors.Is(err, queue.ErrInternal)
}

// finishError retries a failed run while retries.max_errors allows, else
// records the failure.
func (a *attempt) finishError(code *int, reason, outcome string) {
	spec := a.job.Spec
	if a.job.Errors < spec.MaxErrors() {
		a.log.Info("job failed; retrying", "reason", reason, "errors", a.job.Errors+1, "max_errors", spec.MaxErrors())
		// The trail says when the job runs again, so that the wait
		// between the error and the retry does not look like a hang.
		reason = fmt.Sprintf("%s; retry %d of %d in %s", reason, a.job.Errors+1, spec.MaxErrors(), spec.RetryDelay())
		if err := a.settle("requeueing", func() error {
			return a.w.store.Requeue(a.io, a.job.ID, a.job.Attempt, outcome, code, reason)
		}); err != nil {
			a.log.Error("requeueing", "err", err)
			return
		}
		if err := a.msg.NakWithDelay(spec.RetryDelay()); err != nil {
			a.log.Warn("naking; the job is redelivered after AckWait", "err", err)
		}
		return
	}
	if outcome == queue.OutcomeRetry {
		outcome = queue.OutcomeFailed
	}
	a.failAs(outcome, code, reason)
}

// fail ends the job failed, without a retry.
func (a *attempt) fail(code *int, reason string) { a.failAs(queue.OutcomeFailed, code, reason) }

func (a *attempt) failAs(outcome string, code *int, reason string) {
	a.log.Info("job failed", "reason", reason)
	if err := a.settle("recording failure", func() error {
		return a.w.store.Fail(a.io, a.job.ID, a.job.Attempt, outcome, code, reason)
	}); err != nil {
		a.log.Error("recording failure", "err", err)
		return
	}
	ackDone(a.io, a.msg, a.log)
}

// hostError hands the job back after something on this machine failed
// around the run: the job resumes on a worker of its pool after 5 s, and
// host errors in a row pause this worker (hostHealth).
func (a *attempt) hostError(reason string) {
	if !a.release(queue.OutcomeHostError, nil, fmt.Sprintf("host error on %s: %s", a.w.cfg.WorkerID, reason), 5*time.Second) {
		// The control plane is out of reach too: not this machine's
		// fault alone, and no reason to pause once it is back.
		return
	}
	if d := a.w.health.failed(reason); d > 0 {
		a.log.Error("host errors in a row: this worker takes no work for a while", "in_a_row", hostErrorsBeforePause,
			"pause", d, "last", reason)
	}
}

// preempted hands the job back after a notice: the final checkpoint the job
// saved (or, when it exited within the grace period without saving, the
// directory as it left it) is recorded, then the message is naked so that
// another worker resumes it at once.
func (a *attempt) preempted(exitedInGrace bool, reason string) {
	a.finalCheckpoint(exitedInGrace)
	a.release(queue.OutcomePreempted, nil, "preempted: "+reason, 0)
}

// shutdown hands the job back because the worker was told to stop: the
// final checkpoint is recorded as on a notice, and the job goes back to its
// pool at once with outcome shutdown (neither an error nor a preemption).
func (a *attempt) shutdown(exitedInGrace bool) {
	a.finalCheckpoint(exitedInGrace)
	a.release(queue.OutcomeShutdown, nil, shutdownReason(a.w.cfg.WorkerID), 0)
}

// shutdownReason says on a job's trail why its attempt ended.
func shutdownReason(worker string) string { return "shutdown: worker " + worker + " was told to stop" }

// movedRedelivery is how long a job handed back to move waits before its
// pool may run it again: the control plane re-places it meanwhile, which
// turns this pool's message stale; if it cannot, the job resumes here.
const movedRedelivery = 30 * time.Second

// moved hands the job back after the control plane asked it to move: the
// final checkpoint is recorded as on a notice, and the job goes back to
// placed with outcome moved (neither an error nor a preemption).
func (a *attempt) moved(exitedInGrace bool, reason string) {
	a.finalCheckpoint(exitedInGrace)
	a.release(queue.OutcomeMoved, nil, "moved: "+reason, movedRedelivery)
}

// stopped ends a job the control plane stopped for its budget, after its
// grace: the final checkpoint is recorded as on a notice, and the job ends
// failed with outcome over_budget and the control plane's reason.
func (a *attempt) stopped(exitedInGrace bool, code *int, reason string) {
	a.finalCheckpoint(exitedInGrace)
	a.failAs(queue.OutcomeOverBudget, code, reason)
}

// finalCheckpoint records, for a job that exited within its grace without
// saving, the checkpoint directory as it left it.
func (a *attempt) finalCheckpoint(exitedInGrace bool) {
	a.saveMu.Lock()
	saved := a.saves
	a.saveMu.Unlock()
	if exitedInGrace && saved == 0 {
		if entries, _ := os.ReadDir(a.ckptDir); len(entries) > 0 {
			if _, err := a.save(a.io); err != nil {
				a.log.Error("recording the final checkpoint", "err", err)
			}
		}
	}
}

// handBackDelay is how long a message this worker hands back, because of
// something about this worker, waits before it is offered again: d,
// jittered over one pull cycle. The worker pulls again right after the
// nak, every pullExpiry, and JetStream offers a message to the oldest
// waiting pull: a delay of exactly d would meet this worker's pull at the
// same point of its cycle each time, and it would be handed the job again
// and again while the pool's other workers wait.
func handBackDelay(d time.Duration) time.Duration {
	return d + rand.N(pullExpiry)
}

// release hands the job back to its pool for another attempt; it reports
// whether the control plane recorded the hand-back.
func (a *attempt) release(outcome string, code *int, reason string, delay time.Duration) bool {
	a.closePrep()
	if err := a.w.store.Requeue(a.io, a.job.ID, a.job.Attempt, outcome, code, reason); err != nil {
		a.log.Error("handing the job back", "err", err)
		return false
	}
	var err error
	if delay > 0 {
		err = a.msg.NakWithDelay(handBackDelay(delay))
	} else {
		err = a.msg.Nak()
	}
	if err != nil {
		a.log.Warn("naking; the job is redelivered after AckWait", "err", err)
	}
	return true
}

func exitCode(err error) *int {
	if err == nil {
		zero := 0
		return &zero
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		c := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			c = 128 + int(ws.Signal())
		}
		return &c
	}
	return nil
}

func codeText(code *int) string {
	if code == nil {
		return "unknown"
	}
	return strconv.Itoa(*code)
}
