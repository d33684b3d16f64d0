package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

func TestBeatValidateAcceptsOnlyItsPoolsRunAcknowledgements(t *testing.T) {
	t.Parallel()
	held := func(reply string) queue.Beat {
		return queue.Beat{BeatSender: queue.BeatSender{Worker: "w", Pool: "gpu-a"}, Held: []queue.HeldAttempt{{JobID: uuid.New(), Attempt: 1, Reply: reply}}}
	}
	ok := []string{
		"$JS.ACK.GPUQ_RUN.pool-gpu-a.1.42.17.1700000000000000000.3",
		"$JS.ACK.hub.ACCHASH.GPUQ_RUN.pool-gpu-a.1.42.17.1700000000000000000.3.token",
	}
	for _, reply := range ok {
		b := held(reply)
		if err := b.Validate("gpu-a"); err != nil {
			t.Errorf("reply %q: %v", reply, err)
		}
	}
	bad := map[string]queue.Beat{
		"beat.pool":              {BeatSender: queue.BeatSender{Worker: "w", Pool: "gpu-b"}},
		"beat.worker":            {BeatSender: queue.BeatSender{Worker: "", Pool: "gpu-a"}},
		"beat.held[0].reply":     held("$JS.ACK.GPUQ_RUN.pool-gpu-b.1.42.17.1.3"),
		"beat.held[0].reply ":    held("$JS.ACK.GPUQ_SUBMIT.scheduler.1.42.17.1.3"),
		"beat.held[0].reply  ":   held("$JS.ACK.GPUQ_RUN.pool-gpu-a.>"),
		"beat.held[0].reply   ":  held("gpuq.submit.other"),
		"beat.held[0].reply    ": held("$JS.ACK.GPUQ_RUN.pool-gpu-a..1"),
		"beat.held[0].attempt":   {BeatSender: queue.BeatSender{Worker: "w", Pool: "gpu-a"}, Held: []queue.HeldAttempt{{JobID: uuid.New(), Attempt: 0, Reply: ok[0]}}},
		"beat.held[0].job_id":    {BeatSender: queue.BeatSender{Worker: "w", Pool: "gpu-a"}, Held: []queue.HeldAttempt{{Attempt: 1, Reply: ok[0]}}},
		"beat.held":              {BeatSender: queue.BeatSender{Worker: "w", Pool: "gpu-a"}, Held: make([]queue.HeldAttempt, queue.MaxBeatHeld+1)},
		"beat.pause_reason": {BeatSender: queue.BeatSender{Worker: "w", Pool: "gpu-a", PausedUntil: new(time.Now()),
			PauseReason: strings.Repeat("x", queue.MaxPauseReason+1)}},
		"beat.pause_reason ": {BeatSender: queue.BeatSender{Worker: "w", Pool: "gpu-a", PauseReason: "disk full"}},
	}
	for field, b := range bad {
		err := b.Validate("gpu-a")
		if err == nil || !strings.HasPrefix(err.Error(), strings.TrimSpace(field)+":") {
			t.Errorf("%+v: want an error naming %s, got %v", b, strings.TrimSpace(field), err)
		}
	}
}

func TestPoolOfAliveSubject(t *testing.T) {
	t.Parallel()
	if pool, err := queue.PoolOfAliveSubject(queue.AliveSubject("gpu-a")); err != nil || pool != "gpu-a" {
		t.Fatalf("got %q, %v", pool, err)
	}
	for _, s := range []string{"gpuq.svc.worker.gpu-a.claim", "gpuq.svc.worker.a.b.alive", "gpuq.run.gpu-a.alive"} {
		if _, err := queue.PoolOfAliveSubject(s); err == nil {
			t.Errorf("%q: want an error", s)
		}
	}
}

func TestDecodeBeatSenderReadsTheSenderWhereverItsFieldsAre(t *testing.T) {
	t.Parallel()
	want := queue.BeatSender{Worker: "w-1", Node: "node-a", Pool: "gpu-a"}
	held := strings.Repeat(`{"job_id":"`+uuid.NewString()+`","attempt":1,"reply":"$JS.ACK.GPUQ_RUN.pool-gpu-a.1.2.3.4.5"},`, 3)
	held = "[" + strings.TrimSuffix(held, ",") + "]"
	for name, body := range map[string]string{
		"sender first, as workers send it": `{"worker":"w-1","node":"node-a","pool":"gpu-a","held":` + held + `}`,
		"held first":                       `{"held":` + held + `,"pool":"gpu-a","worker":"w-1","node":"node-a"}`,
		"unknown fields":                   `{"version":{"a":[1,2]},"worker":"w-1","pool":"gpu-a","node":"node-a"}`,
		// What follows the sender's fields is not read: the full
		// decoding, where the attempts are needed, refuses it.
		"held left unread": `{"worker":"w-1","node":"node-a","pool":"gpu-a","held":[{"job_id":`,
	} {
		got, err := queue.DecodeBeatSender([]byte(body))
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", name, got, err, want)
		}
	}
	for name, body := range map[string]string{
		"not an object":             `["w-1"]`,
		"a field of the wrong type": `{"worker":7,"pool":"gpu-a"}`,
		"cut short":                 `{"worker":"w-1","pool":"gpu`,
		"empty":                     ``,
	} {
		if got, err := queue.DecodeBeatSender([]byte(body)); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, got)
		}
	}
}

// A paused worker's beat says until when and why, before the attempts it
// holds, so that a listener reading only the sender learns it.
func TestDecodeBeatSenderReadsAWorkersPause(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 12, 6, 17, 0, 30, 0, time.UTC)
	body := `{"worker":"w-1","node":"node-a","pool":"gpu-a","paused_until":"2026-12-06T17:00:30Z",` +
		`"pause_reason":"preparing directories: no space left on device","held":[{"job_id":`
	got, err := queue.DecodeBeatSender([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got.PausedUntil == nil || !got.PausedUntil.Equal(until) || got.PauseReason != "preparing directories: no space left on device" {
		t.Fatalf("got %+v", got)
	}
	if err := got.Validate("gpu-a"); err != nil {
		t.Fatal(err)
	}
}
