package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Liveness: every worker publishes a Beat on its pool's alive subject every
// BeatInterval, naming the attempts it holds. The control plane declares a
// worker lost when its beats stop for longer than its detection time, fences
// the attempts the worker held (a store write after which any write of those
// attempts fails) and naks their run messages through their reply subjects,
// so that another worker of the pool takes each job over at once instead of
// after AckWait.

// BeatInterval is how often a worker announces that it is alive.
const BeatInterval = 150 * time.Millisecond

// Bounds of a beat, which the control plane checks before it believes one.
const (
	MaxBeatBytes     = 256 << 10
	MaxBeatHeld      = 1024
	maxBeatWorkerLen = 200
	maxAckReplyLen   = 512
	// MaxPauseReason bounds the host error a paused worker names.
	MaxPauseReason = 1024
)

// AliveSubject is where pool's workers publish their beats.
func AliveSubject(pool string) string { return "gpuq.svc.worker." + pool + ".alive" }

// AliveSubjectAll matches the beats of every pool.
const AliveSubjectAll = "gpuq.svc.worker.*.alive"

// PoolOfAliveSubject returns the pool token of an alive subject.
func PoolOfAliveSubject(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, "gpuq.svc.worker.")
	pool, ok2 := strings.CutSuffix(rest, ".alive")
	if !ok || !ok2 {
		return "", fmt.Errorf("subject %q: not a worker alive subject", subject)
	}
	return pool, ValidatePool(pool)
}

// Beat is one liveness announcement of a worker: who sends it and the
// attempts it holds.
type Beat struct {
	BeatSender
	// Held are the attempts the worker has claimed and not yet settled.
	Held []HeldAttempt `json:"held,omitempty"`
}

// HeldAttempt is an attempt a worker runs and the reply subject of the run
// message it holds for it, through which the control plane naks the message
// when the worker is lost.
type HeldAttempt struct {
	JobID   uuid.UUID `json:"job_id"`
	Attempt int       `json:"attempt"`
	Reply   string    `json:"reply"`
}

// BeatSender is who sent a beat: the beat without its held attempts, which
// is all a listener that only needs to know who is alive decodes.
type BeatSender struct {
	// Worker is the worker id its attempts are recorded under.
	Worker string `json:"worker"`
	// Node is the machine the worker runs on.
	Node string `json:"node,omitempty"`
	// Pool is the pool the worker pulls from; it must equal the subject's.
	Pool string `json:"pool"`
	// PausedUntil is set while the worker takes no work after host errors
	// in a row (its machine failed jobs around their runs), with the last
	// of them in PauseReason. It is the worker's clock: a listener takes a
	// worker whose latest beat carries it to be paused, and one whose
	// latest beat does not to take work.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	PauseReason string     `json:"pause_reason,omitempty"`
}

// LiveWorker is a worker the control plane's liveness monitor hears: who it
// is, when it last beat, how many attempts that beat held, and whether it
// takes no work for a while after host errors in a row.
type LiveWorker struct {
	Worker      string     `json:"worker"`
	Node        string     `json:"node,omitempty"`
	Pool        string     `json:"pool"`
	LastBeatAt  time.Time  `json:"last_beat_at"`
	Held        int        `json:"held"`
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	PauseReason string     `json:"pause_reason,omitempty"`
}

// DecodeBeatSender decodes who sent a beat without decoding, or even
// scanning, the attempts it holds when they come after the sender's fields,
// as a worker sends them: a listener that only needs to know who is alive
// reads a few dozen bytes of a beat that may hold a thousand attempts. It
// reads fields until "held" comes after the worker and the pool, and checks
// only what it reads; Beat's full decoding checks the rest where the
// attempts are needed.
func DecodeBeatSender(data []byte) (BeatSender, error) {
	var s BeatSender
	d := json.NewDecoder(bytes.NewReader(data))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return s, errors.New("not a JSON object")
	}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return s, err
		}
		key, _ := t.(string)
		var dst any
		switch key {
		case "worker":
			dst = &s.Worker
		case "node":
			dst = &s.Node
		case "pool":
			dst = &s.Pool
		case "paused_until":
			dst = &s.PausedUntil
		case "pause_reason":
			dst = &s.PauseReason
		case "held":
			if s.Worker != "" && s.Pool != "" {
				return s, nil
			}
			dst = &json.RawMessage{}
		default:
			dst = &json.RawMessage{}
		}
		if err := d.Decode(dst); err != nil {
			return s, fmt.Errorf("%s: %w", key, err)
		}
	}
	if _, err := d.Token(); err != nil {
		return s, err
	}
	return s, nil
}

// Validate checks a sender heard on pool's alive subject.
func (s *BeatSender) Validate(pool string) error {
	switch {
	case s.Pool != pool:
		return fmt.Errorf("beat.pool: %q does not match the subject's pool %q", s.Pool, pool)
	case s.Worker == "" || len(s.Worker) > maxBeatWorkerLen:
		return fmt.Errorf("beat.worker: must be 1–%d bytes, got %d", maxBeatWorkerLen, len(s.Worker))
	case len(s.Node) > maxBeatWorkerLen:
		return fmt.Errorf("beat.node: must be at most %d bytes, got %d", maxBeatWorkerLen, len(s.Node))
	case len(s.PauseReason) > MaxPauseReason:
		return fmt.Errorf("beat.pause_reason: must be at most %d bytes, got %d", MaxPauseReason, len(s.PauseReason))
	case s.PauseReason != "" && s.PausedUntil == nil:
		return errors.New("beat.pause_reason: given without paused_until")
	}
	return nil
}

// Validate checks a beat received on pool's alive subject: every field
// bounded, the pool the subject's, and each reply subject an acknowledgement
// subject of pool's consumer on the run stream, so that naking it can touch
// nothing else.
func (b *Beat) Validate(pool string) error {
	if err := b.BeatSender.Validate(pool); err != nil {
		return err
	}
	if len(b.Held) > MaxBeatHeld {
		return fmt.Errorf("beat.held: at most %d attempts, got %d", MaxBeatHeld, len(b.Held))
	}
	for i, h := range b.Held {
		if h.JobID == uuid.Nil {
			return fmt.Errorf("beat.held[%d].job_id: must be set", i)
		}
		if h.Attempt < 1 {
			return fmt.Errorf("beat.held[%d].attempt: must be at least 1, got %d", i, h.Attempt)
		}
		if err := validAckReply(h.Reply, pool); err != nil {
			return fmt.Errorf("beat.held[%d].reply: %w", i, err)
		}
	}
	return nil
}

// validAckReply accepts JetStream acknowledgement subjects of pool's
// consumer on the run stream, with or without domain and account tokens:
// $JS.ACK.[<domain>.<account hash>.]GPUQ_RUN.pool-<pool>.<numbers…>.
func validAckReply(reply, pool string) error {
	if len(reply) > maxAckReplyLen || strings.ContainsAny(reply, " \t\r\n*>") {
		return errors.New("not an acknowledgement subject")
	}
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return errors.New("not an acknowledgement subject")
	}
	tokens := strings.Split(rest, ".")
	for start := 0; start <= 2 && start+2 < len(tokens); start += 2 {
		if tokens[start] == StreamRun && tokens[start+1] == PoolConsumer(pool) {
			for _, t := range tokens[start+2:] {
				if t == "" {
					return errors.New("not an acknowledgement subject")
				}
			}
			return nil
		}
	}
	return fmt.Errorf("not an acknowledgement subject of stream %s consumer %s", StreamRun, PoolConsumer(pool))
}
