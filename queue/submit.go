package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jobNamespace derives job ids from idempotency keys and message ids, so that
// the same submission always names the same job.
var jobNamespace = uuid.MustParse("6f1c1c52-6a8e-4d2e-9a43-2f0d7b9a1e10")

// JobIDFor returns the id a submission gets: derived from the project and
// idempotency key when there is one (a re-run notebook cell names the same
// job), else a fresh time-ordered id.
func JobIDFor(spec *Spec) uuid.UUID {
	if spec.IdempotencyKey != "" {
		return uuid.NewSHA1(jobNamespace, []byte(spec.Project+"\x00"+spec.IdempotencyKey))
	}
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.New()
	}
	return id
}

// Publisher is the part of JetStream a submitter needs.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// SubjectProject is the project of a submission subject, gpuq.submit.<project>.
func SubjectProject(subject string) string {
	p, _ := strings.CutPrefix(subject, "gpuq.submit.")
	return p
}

// ForeignProject returns why a submission published on subject is refused
// when its spec names another project ("" when it does not): a submitter's
// credential is scoped to the projects it may publish for, so the subject,
// not the spec, says whose the job is.
func ForeignProject(subject string, spec *Spec) string {
	p := SubjectProject(subject)
	if p == spec.Project {
		return ""
	}
	return fmt.Sprintf("spec.project %q differs from the project %q of the subject it was published on (%s); a submission is recorded under its subject's project and may name only that one",
		spec.Project, p, subject)
}

// Submitted is the answer to a submission.
type Submitted struct {
	JobID uuid.UUID `json:"job_id"`
	// Duplicate is true when JetStream had already accepted this submission.
	Duplicate bool `json:"duplicate"`
}

// Submit publishes a validated spec to its project's submission subject and
// returns once JetStream has stored it durably. The job id doubles as the
// Nats-Msg-Id, so a retried publish is deduplicated by the server.
func Submit(ctx context.Context, js Publisher, spec *Spec) (Submitted, error) {
	if err := spec.Validate(); err != nil {
		return Submitted{}, err
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return Submitted{}, err
	}
	if len(body) > MaxSpecBytes {
		return Submitted{}, specErr("spec", "%d bytes is over the %d-byte limit", len(body), MaxSpecBytes)
	}
	id := JobIDFor(spec)
	msg := nats.NewMsg(SubmitSubject(spec.Project))
	msg.Data = body
	msg.Header.Set(HeaderJobID, id.String())
	msg.Header.Set(nats.MsgIdHdr, id.String())
	// The Nats-Msg-Id makes a repeated publish harmless, so a publish whose
	// acknowledgement did not arrive in time is simply sent again.
	var lastErr error
	for try := range submitTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return Submitted{}, fmt.Errorf("submitting job %s: %w (last error: %v)", id, ctx.Err(), lastErr)
			case <-time.After(RetryDelay(try, 200*time.Millisecond, 5*time.Second)):
			}
		}
		ack, err := js.PublishMsg(ctx, msg)
		if err == nil {
			return Submitted{JobID: id, Duplicate: ack.Duplicate}, nil
		}
		lastErr = err
		if !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return Submitted{}, fmt.Errorf("submitting job %s: %w", id, lastErr)
}

// submitTries bounds how often Submit sends a submission whose
// acknowledgement was lost.
const submitTries = 5

// retryable reports whether a publish error may go away on its own.
func retryable(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// SubmissionID names the job a submission message creates: the header set by
// Submit, else one derived from the idempotency key, the Nats-Msg-Id or the
// stream sequence, so that a redelivered raw publish names the same job.
func SubmissionID(msg jetstream.Msg, spec *Spec) (uuid.UUID, error) {
	if SubjectProject(msg.Subject()) != spec.Project {
		// Refused (see the scheduler): no key or header it carries may
		// name a job of the project it claims.
		meta, err := msg.Metadata()
		if err != nil {
			return uuid.Nil, err
		}
		return uuid.NewSHA1(jobNamespace, []byte(fmt.Sprintf("foreign:%d", meta.Sequence.Stream))), nil
	}
	if spec.IdempotencyKey != "" {
		return JobIDFor(spec), nil
	}
	h := msg.Headers()
	if v := h.Get(HeaderJobID); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return uuid.Nil, fmt.Errorf("header %s: %q is not a UUID", HeaderJobID, v)
		}
		return id, nil
	}
	if v := h.Get(nats.MsgIdHdr); v != "" {
		return uuid.NewSHA1(jobNamespace, []byte("msg:"+v)), nil
	}
	meta, err := msg.Metadata()
	if err != nil {
		return uuid.Nil, err
	}
	return uuid.NewSHA1(jobNamespace, []byte(fmt.Sprintf("seq:%d", meta.Sequence.Stream))), nil
}
