package notice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// Kind is the signal a worker watches: the value of `gpuq worker --notice`.
type Kind = adapters.NoticeSource

// The signals a worker can watch.
const (
	// AWS: the EC2 instance metadata service (IMDSv2) spot interruption
	// notice, two minutes ahead, and the rebalance recommendation.
	AWS = adapters.NoticeAWS
	// GCP: the Compute Engine metadata server's instance/preempted key
	// (30 seconds ahead) and instance/maintenance-event.
	GCP = adapters.NoticeGCP
	// Azure: Scheduled Events' Preempt event (at least 30 seconds ahead),
	// acknowledged once the work is handed back.
	Azure = adapters.NoticeAzure
	// SIGTERM: the container runtime's SIGTERM, followed by SIGKILL after
	// the provider's grace period.
	SIGTERM = adapters.NoticeSIGTERM
	// None: no notice; SIGTERM still hands work back, as a shutdown.
	None = adapters.NoticeNone
)

// ParseKind checks a --notice value.
func ParseKind(s string) (Kind, error) {
	k, err := adapters.ParseNoticeSource(s)
	if err != nil {
		return "", fmt.Errorf("notice: %w", err)
	}
	return k, nil
}

// ForProvider is the signal the machines of a provider get and, for
// SIGTERM, the documented time between SIGTERM and SIGKILL. Providers
// without an in-machine notice (Verda and Hivenet: spot loss is seen by
// polling instance state) get None.
func ForProvider(provider string) (Kind, time.Duration, error) {
	switch provider {
	case "", "local", "sim":
		// Local workers and the simulated cloud are stopped with SIGTERM;
		// the worker's own --grace applies.
		return SIGTERM, 0, nil
	case "aws":
		return AWS, 0, nil
	case "gcp":
		return GCP, 0, nil
	case "azure":
		return Azure, 0, nil
	case "runpod":
		// RunPod stops a pod with SIGTERM and SIGKILLs it 5 seconds later.
		return SIGTERM, RunPodGrace, nil
	case "verda", "hivenet":
		return None, 0, nil
	}
	return "", 0, fmt.Errorf("provider: no known preemption signal for %q; pass --notice", provider)
}

// RunPodGrace is the time RunPod leaves between SIGTERM and SIGKILL.
const RunPodGrace = 5 * time.Second

// Notice is a provider's announcement that the machine goes away, as the
// worker acts on it.
type Notice struct {
	adapters.Notice
	// Received is when the watcher saw the notice.
	Received time.Time

	ack func(context.Context) error
}

// Ack tells the provider that the machine may go now; the worker calls it
// once every final checkpoint is recorded. Only Azure takes an
// acknowledgement (a StartRequests POST); elsewhere it does nothing.
func (n *Notice) Ack(ctx context.Context) error {
	if n == nil || n.ack == nil {
		return nil
	}
	return n.ack(ctx)
}

// Warning is an early sign that a preemption may come, which hands no work
// back: an AWS rebalance recommendation, a GCP live migration, an Azure
// reboot or freeze.
type Warning struct {
	Source Kind
	Reason string
	// At is when the provider says the event happens; zero when unknown.
	At time.Time
}

// Watcher waits for a provider's notice.
type Watcher interface {
	// Watch blocks until the provider announces that the machine goes
	// away and returns the notice, or returns ctx's error when ctx ends.
	// Failures to reach the provider are logged and retried, never
	// returned: a worker keeps working while its metadata service is
	// briefly unreachable.
	Watch(ctx context.Context) (*Notice, error)
}

// Config configures a watcher.
type Config struct {
	// Kind of signal to watch. Required.
	Kind Kind
	// Endpoint is the base URL of the provider's metadata service.
	// Defaults: http://169.254.169.254 (AWS, Azure),
	// http://metadata.google.internal (GCP). Tests point it at a fake.
	Endpoint string
	// Poll is the interval between reads of a polled notice (AWS, Azure).
	// Default 500ms, so that a notice reaches the job within a second.
	Poll time.Duration
	// Grace is, for SIGTERM, the provider's time between SIGTERM and
	// SIGKILL; it sets the notice's deadline. Zero: unknown.
	Grace time.Duration
	// Signals delivers the SIGTERMs a SIGTERM watcher waits for. Default:
	// the process's own SIGTERM.
	Signals <-chan os.Signal
	// OnWarning is called for each early warning. Default: log it.
	OnWarning func(Warning)
	// Client reaches the metadata service. Default: a client with a 10s
	// timeout (GCP's hanging reads set their own).
	Client *http.Client
	Logger *slog.Logger
}

// Default metadata endpoints, as the providers document them.
const (
	DefaultAWSEndpoint   = "http://169.254.169.254"
	DefaultGCPEndpoint   = "http://metadata.google.internal"
	DefaultAzureEndpoint = "http://169.254.169.254"
)

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Endpoint == "" {
		switch c.Kind {
		case AWS:
			c.Endpoint = DefaultAWSEndpoint
		case GCP:
			c.Endpoint = DefaultGCPEndpoint
		case Azure:
			c.Endpoint = DefaultAzureEndpoint
		}
	}
	if c.Poll == 0 {
		c.Poll = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.OnWarning == nil {
		log := c.Logger
		c.OnWarning = func(w Warning) {
			log.Warn("early preemption warning", "notice", w.Source, "reason", w.Reason, "at", w.At)
		}
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	return c
}

func (c Config) validate() error {
	if _, err := ParseKind(string(c.Kind)); err != nil || c.Kind == "" {
		if err == nil {
			err = fmt.Errorf("notice: must be set")
		}
		return err
	}
	if c.Poll < 10*time.Millisecond || c.Poll > time.Minute {
		return fmt.Errorf("notice.poll: must be 10ms–1m, got %s", c.Poll)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fmt.Errorf("notice.endpoint: must be an http(s) URL with a host, got %q", c.Endpoint)
		}
	}
	if c.Grace < 0 {
		return fmt.Errorf("notice.grace: must not be negative, got %s", c.Grace)
	}
	return nil
}

// New returns the watcher cfg.Kind names.
func New(cfg Config) (Watcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch cfg.Kind {
	case AWS:
		return &awsWatcher{cfg: cfg}, nil
	case GCP:
		return &gcpWatcher{cfg: cfg}, nil
	case Azure:
		return &azureWatcher{cfg: cfg}, nil
	case SIGTERM:
		return &signalWatcher{cfg: cfg}, nil
	default:
		return noneWatcher{}, nil
	}
}

// noneWatcher never announces anything.
type noneWatcher struct{}

func (noneWatcher) Watch(ctx context.Context) (*Notice, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// errNotYet: the provider has no notice out (yet).
var errNotYet = errors.New("no notice")

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxBody bounds what is read from a metadata service.
const maxBody = 1 << 20
