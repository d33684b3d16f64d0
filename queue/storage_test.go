package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStorageSettingsAreCheckedNamingTheKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    Storage
		want string
	}{
		{Storage{KeepCheckpoints: -1}, "storage.keep_checkpoints"},
		{Storage{CheckpointRetention: -time.Second}, "storage.checkpoint_retention"},
		{Storage{ProjectQuotas: map[string]int64{"vision": -1}}, "storage.project_quotas.vision"},
		{Storage{StreamMaxBytes: map[string]int64{"submissions": 1}}, "storage.stream_max_bytes.submissions"},
	} {
		if err := c.s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error naming %s", c.s, err, c.want)
		}
	}
	s := Storage{StreamMaxBytes: map[string]int64{"logs": 123}, ProjectQuotaBytes: 10, ProjectQuotas: map[string]int64{"vision": 20}}.WithDefaults()
	if s.KeepCheckpoints != 3 || s.QuotaOf("vision") != 20 || s.QuotaOf("audio") != 10 {
		t.Fatalf("defaults and quotas: %+v", s)
	}
	limits := s.StreamLimits()
	if limits[StreamLogs] != 123 || limits[StreamSubmit] != 1<<30 || len(limits) != 4 {
		t.Fatalf("stream limits: %v", limits)
	}
}

// Every stream is capped in bytes from the configuration. A full
// submission stream refuses a new submission with an error rather than
// dropping one it accepted.
func TestStreamsAreCappedInBytesAndAFullSubmissionStreamRefusesMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := controlJetStream(t)
	limits := Storage{StreamMaxBytes: map[string]int64{"submit": 4096}}.StreamLimits()
	if err := EnsureStreams(ctx, js, StreamOptions{MaxBytes: limits}); err != nil {
		t.Fatal(err)
	}
	for name, want := range limits {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxBytes; got != want {
			t.Errorf("stream %s MaxBytes = %d, want %d", name, got, want)
		}
	}
	var accepted int
	var refused error
	for i := range 100 {
		spec, err := ParseSpec([]byte(fmt.Sprintf("name: j%d\ncommand: [sh, -c, %q]\n", i, strings.Repeat("x", 300))))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Submit(ctx, js, spec); err != nil {
			refused = err
			break
		}
		accepted++
	}
	if refused == nil || accepted == 0 {
		t.Fatalf("a 4 KiB submission stream took %d submissions and refused none", accepted)
	}
	st, err := js.Stream(ctx, StreamSubmit)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(info.State.Msgs) != accepted {
		t.Fatalf("the full stream holds %d messages, want the %d it accepted (none dropped)", info.State.Msgs, accepted)
	}
}

// A refused checkpoint crosses the worker service as what it is, so that
// the job's `gpuq checkpoint save` prints the control plane's reason.
func TestAQuotaRefusalCrossesTheWorkerServiceWithItsMessage(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("%w: project vision stores 10 bytes (storage.project_quotas.vision)", ErrQuotaExceeded)
	got := EncodeError(err).Err()
	if !errors.Is(got, ErrQuotaExceeded) || got.Error() != err.Error() {
		t.Fatalf("got %v, want %v matching ErrQuotaExceeded", got, err)
	}
}

// updates counts the stream updates EnsureStreams asks for.
type updates struct {
	jetstream.JetStream
	n int
}

func (u *updates) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	u.n++
	return u.JetStream.CreateOrUpdateStream(ctx, cfg)
}

// A second process starting leaves gpuq's streams as they are when their
// configuration is the one it asks for, and updates them when it is not.
func TestEnsureStreamsUpdatesOnlyStreamsConfiguredOtherwise(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := controlJetStream(t)
	u := &updates{JetStream: js}
	if err := EnsureStreams(ctx, u, StreamOptions{}); err != nil || u.n != 5 {
		t.Fatalf("creating the streams: %d calls, %v; want 5", u.n, err)
	}
	u.n = 0
	if err := EnsureStreams(ctx, u, StreamOptions{}); err != nil || u.n != 0 {
		t.Fatalf("again with the same options: %d updates, %v; want none", u.n, err)
	}
	// Each stream the limits cap was uncapped: each one is updated.
	limits := Storage{StreamMaxBytes: map[string]int64{"logs": 1 << 20}}.StreamLimits()
	capped := 0
	for _, b := range limits {
		if b > 0 {
			capped++
		}
	}
	if err := EnsureStreams(ctx, u, StreamOptions{MaxBytes: limits}); err != nil || capped == 0 || u.n != capped {
		t.Fatalf("with the streams capped: %d updates, %v; want %d", u.n, err, capped)
	}
	u.n = 0
	if err := EnsureStreams(ctx, u, StreamOptions{MaxBytes: limits}); err != nil || u.n != 0 {
		t.Fatalf("again with the same caps: %d updates, %v; want none", u.n, err)
	}
	st, err := js.Stream(ctx, StreamLogs)
	if err != nil || st.CachedInfo().Config.MaxBytes != 1<<20 {
		t.Fatalf("the log stream after the update: %+v, %v; want MaxBytes 1 MiB", st, err)
	}
}

// controlJetStream is JetStream on a fresh embedded server, as the control
// plane sees it.
func controlJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := StartEmbeddedNATS(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect(srv.ControlURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// The events stream only announces what PostgreSQL holds, so a new one is
// written asynchronously; the submission and run streams, which hold what
// was acknowledged, are written as each message arrives. An events stream
// made before, in the default mode, is kept as it is: the server refuses to
// change a stream's persist mode, and refusing to start would be worse.
func TestOnlyTheEventsStreamIsWrittenAsynchronouslyAndAnOlderOneIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := controlJetStream(t)
	if err := EnsureStreams(ctx, js, StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	mode := func(name string) jetstream.PersistModeType {
		t.Helper()
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.PersistMode
	}
	for _, name := range []string{StreamSubmit, StreamRun, StreamLogs, StreamInstances} {
		if m := mode(name); m != jetstream.DefaultPersistMode {
			t.Errorf("stream %s: persist mode %s, want default", name, m)
		}
	}
	if m := mode(StreamEvents); m != jetstream.AsyncPersistMode {
		t.Errorf("events stream: persist mode %s, want async", m)
	}
	if got := announcementPersistMode(3); got != jetstream.DefaultPersistMode {
		t.Errorf("three replicas: persist mode %s, want default (the server refuses async there)", got)
	}

	old := controlJetStream(t)
	if _, err := old.CreateStream(ctx, jetstream.StreamConfig{Name: StreamEvents, Subjects: []string{EventSubject("*"), ReplaceSubject("*")},
		Storage: jetstream.FileStorage, MaxMsgsPerSubject: 10}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctx, old, StreamOptions{}); err != nil {
		t.Fatalf("with an events stream made before in the default mode: %v", err)
	}
	st, err := old.Stream(ctx, StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.PersistMode != jetstream.DefaultPersistMode || c.MaxMsgsPerSubject != 1000 {
		t.Fatalf("older events stream after EnsureStreams: persist mode %s, %d messages per subject; want it kept in the default mode and updated otherwise", c.PersistMode, c.MaxMsgsPerSubject)
	}
}
