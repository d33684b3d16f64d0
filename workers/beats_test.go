package workers

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// heldMsg is a run message of which a beat reads only the reply subject.
type heldMsg struct {
	jetstream.Msg
	reply string
}

func (m heldMsg) Reply() string { return m.reply }

func TestABeatNamesItsSenderFirstAndEveryAttemptHeldUntilReleased(t *testing.T) {
	t.Parallel()
	w := &Worker{cfg: Config{WorkerID: "w-1", NodeID: "node-a", Pool: "gpu-a"}, health: newHostHealth()}
	b := newBeats()
	decode := func() queue.Beat {
		t.Helper()
		body, err := b.beat(w)
		if err != nil {
			t.Fatal(err)
		}
		var got queue.Beat
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("beat %s: %v", body, err)
		}
		if err := got.Validate("gpu-a"); err != nil {
			t.Fatalf("beat %s: %v", body, err)
		}
		sender, err := queue.DecodeBeatSender(body)
		if err != nil || !reflect.DeepEqual(sender, got.BeatSender) {
			t.Fatalf("beat %s: sender decoded alone %+v, %v; want %+v", body, sender, err, got.BeatSender)
		}
		if !strings.HasPrefix(string(body), `{"worker":"w-1","node":"node-a","pool":"gpu-a"`) {
			t.Fatalf("beat %s: want the sender's fields first", body)
		}
		return got
	}
	if got := decode(); len(got.Held) != 0 || got.Worker != "w-1" {
		t.Fatalf("beat with nothing held: %+v", got)
	}
	var want []queue.HeldAttempt
	var releases []func()
	for i := range 3 {
		h := queue.HeldAttempt{JobID: uuid.New(), Attempt: i + 1, Reply: "$JS.ACK.GPUQ_RUN.pool-gpu-a.1." + string(rune('1'+i)) + ".3.4.5"}
		a := &attempt{job: &queue.Job{ID: h.JobID, Attempt: h.Attempt}, msg: heldMsg{reply: h.Reply}}
		releases = append(releases, b.hold(a))
		want = append(want, h)
	}
	released := want[1]
	byJob := func(a, b queue.HeldAttempt) int { return strings.Compare(a.JobID.String(), b.JobID.String()) }
	got := decode().Held
	slices.SortFunc(got, byJob)
	slices.SortFunc(want, byJob)
	if !slices.Equal(got, want) {
		t.Fatalf("held %+v, want %+v", got, want)
	}
	releases[1]()
	if got := decode().Held; len(got) != 2 || slices.Contains(got, released) {
		t.Fatalf("after a release: held %+v", got)
	}
	// A worker paused after host errors says so among the sender's fields,
	// before the attempts it still holds.
	for range hostErrorsBeforePause {
		w.health.failed("preparing directories: no space left on device")
	}
	if got := decode(); got.PausedUntil == nil || got.PauseReason != "preparing directories: no space left on device" || len(got.Held) != 2 {
		t.Fatalf("a paused worker's beat: %+v", got)
	}
}
