package notice_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/workers/notice"
	"github.com/gpuq/gpuq/workers/notice/noticetest"
)

// warnings collects the early warnings a watcher reports.
type warnings struct {
	mu  sync.Mutex
	got []notice.Warning
}

func (w *warnings) add(x notice.Warning) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, x)
}

func (w *warnings) list() []notice.Warning {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]notice.Warning(nil), w.got...)
}

// watch runs a watcher in the background.
func watch(t *testing.T, cfg notice.Config) (<-chan *notice.Notice, *warnings) {
	t.Helper()
	warns := &warnings{}
	cfg.OnWarning = warns.add
	w, err := notice.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *notice.Notice, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := w.Watch(ctx)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Watch: %v", err)
		}
		got <- n
	}()
	t.Cleanup(func() { cancel(); <-done })
	return got, warns
}

// noNotice fails if a notice arrives within d.
func noNotice(t *testing.T, got <-chan *notice.Notice, d time.Duration) {
	t.Helper()
	select {
	case n := <-got:
		t.Fatalf("no notice was announced, got %+v", n)
	case <-time.After(d):
	}
}

// within waits for the notice for at most d after announced.
func within(t *testing.T, got <-chan *notice.Notice, announced time.Time, d time.Duration) *notice.Notice {
	t.Helper()
	select {
	case n := <-got:
		if took := time.Since(announced); took > d {
			t.Fatalf("the notice took %s to arrive, want under %s", took, d)
		}
		return n
	case <-time.After(d):
		t.Fatalf("no notice within %s of the announcement", d)
		return nil
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestAWSSpotInterruptionArrivesWithinASecondWithItsDeadline(t *testing.T) {
	t.Parallel()
	imds := noticetest.NewAWS(t)
	got, warns := watch(t, notice.Config{Kind: notice.AWS, Endpoint: imds.URL})
	noNotice(t, got, 700*time.Millisecond)
	imds.Rebalance(time.Now())
	eventually(t, "the rebalance warning", func() bool { return len(warns.list()) == 1 })
	noNotice(t, got, 700*time.Millisecond) // a recommendation hands nothing back
	if w := warns.list()[0]; w.Source != notice.AWS || !strings.Contains(w.Reason, "rebalance") {
		t.Fatalf("want a rebalance warning, got %+v", w)
	}
	// The session token expires meanwhile: the watcher must renew it.
	imds.ExpireTokens()
	at := time.Now().Add(2 * time.Minute).Truncate(time.Second)
	imds.Interrupt("terminate", at)
	n := within(t, got, time.Now(), time.Second)
	if n.Source != notice.AWS || !n.Deadline.Equal(at) || !strings.Contains(n.Reason, "terminate") {
		t.Fatalf("want a terminate notice with deadline %s, got %+v", at, n)
	}
	if len(warns.list()) != 1 {
		t.Fatalf("the rebalance warning must be reported once, got %d", len(warns.list()))
	}
}

func TestGCPPreemptionArrivesAtOnceThroughWaitForChange(t *testing.T) {
	t.Parallel()
	md := noticetest.NewGCP(t)
	got, warns := watch(t, notice.Config{Kind: notice.GCP, Endpoint: md.URL, Poll: time.Minute})
	noNotice(t, got, 500*time.Millisecond)
	md.Set("maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
	eventually(t, "the live-migration warning", func() bool { return len(warns.list()) == 1 })
	noNotice(t, got, 300*time.Millisecond)
	announced := time.Now()
	md.Set("preempted", "TRUE")
	// Poll is a minute: only a hanging read delivers this in time.
	n := within(t, got, announced, time.Second)
	if n.Source != notice.GCP || !strings.Contains(n.Reason, "preempted") {
		t.Fatalf("want a preemption notice, got %+v", n)
	}
	if left := time.Until(n.Deadline); left < 28*time.Second || left > 30*time.Second {
		t.Fatalf("a GCP preemption leaves 30 s, deadline in %s", left)
	}
}

func TestGCPTerminatingMaintenanceIsANotice(t *testing.T) {
	t.Parallel()
	md := noticetest.NewGCP(t)
	got, _ := watch(t, notice.Config{Kind: notice.GCP, Endpoint: md.URL})
	noNotice(t, got, 300*time.Millisecond)
	md.Set("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
	n := within(t, got, time.Now(), time.Second)
	if !strings.Contains(n.Reason, "TERMINATE_ON_HOST_MAINTENANCE") {
		t.Fatalf("want a maintenance notice, got %+v", n)
	}
}

func TestGCPWatcherRefusesAnswersWithoutTheMetadataFlavor(t *testing.T) {
	t.Parallel()
	// A server that says TRUE to everything but is not the metadata server.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("ETag", "1")
		w.Write([]byte("TRUE")) //nolint:errcheck // the client may be gone
	}))
	defer other.Close()
	got, _ := watch(t, notice.Config{Kind: notice.GCP, Endpoint: other.URL, Poll: 50 * time.Millisecond})
	noNotice(t, got, 500*time.Millisecond)
}

func TestAzurePreemptIsANoticeForThisVMAndIsAcknowledged(t *testing.T) {
	t.Parallel()
	imds := noticetest.NewAzure(t, "worker-vm-1")
	got, warns := watch(t, notice.Config{Kind: notice.Azure, Endpoint: imds.URL})
	imds.Schedule(noticetest.AzureEvent{EventId: "other-vm", EventStatus: "Scheduled", EventType: "Preempt",
		ResourceType: "VirtualMachine", Resources: []string{"worker-vm-2"}, EventSource: "Platform"})
	imds.Schedule(noticetest.AzureEvent{EventId: "reboot", EventStatus: "Scheduled", EventType: "Reboot",
		ResourceType: "VirtualMachine", Resources: []string{"worker-vm-1"}, EventSource: "Platform",
		NotBefore: time.Now().Add(15 * time.Minute).UTC().Format(time.RFC1123)})
	eventually(t, "the reboot warning", func() bool { return len(warns.list()) == 1 })
	noNotice(t, got, 700*time.Millisecond) // another VM's preemption is not ours
	deadline := imds.Preempt("evict-1")
	n := within(t, got, time.Now(), time.Second)
	if n.Source != notice.Azure || !n.Deadline.Equal(deadline) || !strings.Contains(n.Reason, "Preempt") {
		t.Fatalf("want a Preempt notice with deadline %s, got %+v", deadline, n)
	}
	if len(imds.Started()) != 0 {
		t.Fatal("the event must not be acknowledged before the work is handed back")
	}
	if err := n.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := imds.Started(); len(s) != 1 || s[0] != "evict-1" {
		t.Fatalf("want evict-1 acknowledged, got %v", s)
	}
}

func TestSIGTERMNoticeCarriesTheProvidersGracePeriod(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 1)
	got, _ := watch(t, notice.Config{Kind: notice.SIGTERM, Grace: notice.RunPodGrace, Signals: sigs})
	noNotice(t, got, 100*time.Millisecond)
	sigs <- syscall.SIGTERM
	n := within(t, got, time.Now(), time.Second)
	if left := time.Until(n.Deadline); left < 4*time.Second || left > 5*time.Second {
		t.Fatalf("want the deadline 5 s after SIGTERM, got %s", left)
	}
	if err := n.Ack(context.Background()); err != nil {
		t.Fatalf("acknowledging a SIGTERM does nothing: %v", err)
	}
}

func TestKindsAndProviderDefaults(t *testing.T) {
	t.Parallel()
	for provider, want := range map[string]notice.Kind{"local": notice.SIGTERM, "aws": notice.AWS, "gcp": notice.GCP,
		"azure": notice.Azure, "runpod": notice.SIGTERM, "verda": notice.None} {
		got, grace, err := notice.ForProvider(provider)
		if err != nil || got != want {
			t.Fatalf("provider %s: want %s, got %s (%v)", provider, want, got, err)
		}
		if provider == "runpod" && grace != 5*time.Second {
			t.Fatalf("RunPod SIGKILLs 5 s after SIGTERM, got %s", grace)
		}
	}
	if _, _, err := notice.ForProvider("acme"); err == nil || !strings.Contains(err.Error(), "acme") {
		t.Fatalf("an unknown provider must be named in the error, got %v", err)
	}
	if _, err := notice.ParseKind("ibm"); err == nil || !strings.Contains(err.Error(), `"ibm"`) {
		t.Fatalf("want an error naming the bad kind, got %v", err)
	}
	if _, err := notice.New(notice.Config{Kind: notice.AWS, Poll: time.Millisecond}); err == nil || !strings.Contains(err.Error(), "notice.poll") {
		t.Fatalf("want an error naming notice.poll, got %v", err)
	}
}
