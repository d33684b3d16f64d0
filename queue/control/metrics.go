package control

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/queue"
)

// MetricsStore is what the metrics read from the system of record.
type MetricsStore interface {
	UnfinishedJobs(ctx context.Context) ([]queue.JobCount, error)
	LiveInstances(ctx context.Context) ([]*queue.Instance, error)
}

// MetricsStreams reads the run stream's consumers, one per pool.
type MetricsStreams interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// LiveWorkers counts the workers of each pool the liveness monitor hears
// (Liveness.Workers), when asked: the monitor does no work for it between
// scrapes.
type LiveWorkers struct {
	mu    sync.Mutex
	count func() map[string]PoolWorkers
	list  func() []queue.LiveWorker
}

// PoolWorkers counts a pool's live workers, and those of them that take no
// work for a while after host errors in a row (their machine failed jobs
// around their runs).
type PoolWorkers struct {
	Live, Paused int
}

// serve makes count answer Pools and list List; nil while no monitor runs.
func (w *LiveWorkers) serve(count func() map[string]PoolWorkers, list func() []queue.LiveWorker) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.count, w.list = count, list
	w.mu.Unlock()
}

// List returns the live workers, of pool when it is not empty, by pool and
// worker; none while no liveness monitor runs (or w is nil).
func (w *LiveWorkers) List(pool string) []queue.LiveWorker {
	out := []queue.LiveWorker{}
	if w == nil {
		return out
	}
	w.mu.Lock()
	list := w.list
	w.mu.Unlock()
	if list == nil {
		return out
	}
	for _, lw := range list() {
		if pool == "" || lw.Pool == pool {
			out = append(out, lw)
		}
	}
	slices.SortFunc(out, func(a, b queue.LiveWorker) int {
		return cmp.Or(strings.Compare(a.Pool, b.Pool), strings.Compare(a.Worker, b.Worker))
	})
	return out
}

// Pools returns the live workers per pool; none while no liveness monitor
// runs (or w is nil).
func (w *LiveWorkers) Pools() map[string]PoolWorkers {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	count := w.count
	w.mu.Unlock()
	if count == nil {
		return nil
	}
	return count()
}

// metricsMaxAge is how long one reading of the store and the streams
// answers scrapes: scrapers asking more often cost PostgreSQL nothing more.
const metricsMaxAge = 5 * time.Second

// Metrics is the control plane's Prometheus collector. What it reads at
// scrape time (at most every metricsMaxAge) is the system's state, the same
// from every server: unfinished jobs per project and state, run orders per
// pool waiting and delivered, live instances per pool and state. What it
// counts is this server's own: workers its liveness monitor hears (every
// server hears every worker), and how long the jobs its worker service
// started waited from submission.
type Metrics struct {
	Store   MetricsStore
	JS      MetricsStreams
	Workers *LiveWorkers
	Logger  *slog.Logger

	startWait     *prometheus.HistogramVec
	notifications *prometheus.CounterVec

	mu   sync.Mutex
	at   time.Time
	last []prometheus.Metric
}

var (
	jobsDesc = prometheus.NewDesc("gpuq_jobs", "Jobs not yet finished, by project and state (pending, waiting, placed, running); every project has all four.",
		[]string{"project", "state"}, nil)
	runOrdersDesc = prometheus.NewDesc("gpuq_run_orders",
		"Run orders in each pool's consumer: waiting for a worker, or delivered to one and not yet acknowledged.",
		[]string{"pool", "status"}, nil)
	instancesDesc = prometheus.NewDesc("gpuq_instances", "Machines the autoscaler rented that are not terminated, by pool and state.",
		[]string{"pool", "state"}, nil)
	workersDesc = prometheus.NewDesc("gpuq_workers", "Workers this server's liveness monitor hears, by pool.",
		[]string{"pool"}, nil)
	pausedWorkersDesc = prometheus.NewDesc("gpuq_workers_paused",
		"Workers this server's liveness monitor hears that take no work for a while after host errors in a row (their machine failed jobs around their runs), by pool; gpuq_workers counts them too.",
		[]string{"pool"}, nil)
	readErrorsDesc = prometheus.NewDesc("gpuq_metrics_read_failed", "1 when the last reading of a source (jobs, instances, run_orders) failed and its series are missing, else 0.",
		[]string{"source"}, nil)
)

// NewMetrics returns the collector with its histogram; register it, and
// Histograms, with a prometheus.Registry.
func NewMetrics(s MetricsStore, js MetricsStreams, workers *LiveWorkers, logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.Default()
	}
	return &Metrics{Store: s, JS: js, Workers: workers, Logger: logger,
		startWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuq_job_start_wait_seconds",
			Help:    "From a job's submission to the claim of its first attempt, by pool (jobs this server's worker service started).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600},
		}, []string{"pool"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuq_notifications_total",
			Help: "Tries of posting a job's end to its webhook (spec.notify) made by this server, by outcome: delivered, retrying (failed, tried again later) or failed (given up on).",
		}, []string{"outcome"})}
}

// Observed are the metrics counted as things happen: jobs starting, ends
// posted to webhooks.
func (m *Metrics) Observed() []prometheus.Collector {
	return []prometheus.Collector{m.startWait, m.notifications}
}

// NotificationTried counts a try of posting a job's end to its webhook
// with its outcome (queue.NotifyDelivered, NotifyPending or NotifyFailed).
// A nil Metrics counts nothing.
func (m *Metrics) NotificationTried(outcome string) {
	if m == nil {
		return
	}
	if outcome == queue.NotifyPending {
		outcome = "retrying"
	}
	m.notifications.WithLabelValues(outcome).Inc()
}

// JobStarted observes a job's wait from its submission to the claim of its
// first attempt. A nil Metrics observes nothing.
func (m *Metrics) JobStarted(pool string, attempt int, submitted time.Time) {
	if m == nil || attempt != 1 || submitted.IsZero() {
		return
	}
	m.startWait.WithLabelValues(pool).Observe(time.Since(submitted).Seconds())
}

// Describe sends nothing: the pools, projects and states are known only
// when read, so the collector is unchecked.
func (m *Metrics) Describe(chan<- *prometheus.Desc) {}

// Collect sends the latest reading, taking a new one when it is older than
// metricsMaxAge.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	if m.last == nil || time.Since(m.at) >= metricsMaxAge {
		m.last, m.at = m.read(), time.Now()
	}
	last := m.last
	m.mu.Unlock()
	for _, metric := range last {
		ch <- metric
	}
	if m.Workers != nil {
		for pool, n := range m.Workers.Pools() {
			ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(n.Live), pool)
			ch <- prometheus.MustNewConstMetric(pausedWorkersDesc, prometheus.GaugeValue, float64(n.Paused), pool)
		}
	}
}

func (m *Metrics) read() []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []prometheus.Metric
	failures := map[string]float64{"jobs": 0, "instances": 0, "run_orders": 0}
	failed := func(source string, err error) {
		m.Logger.Warn("reading metrics", "source", source, "err", err)
		failures[source] = 1
	}
	if counts, err := m.Store.UnfinishedJobs(ctx); err != nil {
		failed("jobs", err)
	} else {
		for _, c := range counts {
			out = append(out, prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(c.Jobs), c.Project, string(c.State)))
		}
	}
	if instances, err := m.Store.LiveInstances(ctx); err != nil {
		failed("instances", err)
	} else {
		type key struct{ pool, state string }
		n := map[key]int{}
		for _, in := range instances {
			n[key{in.Pool, string(in.State)}]++
		}
		for k, c := range n {
			out = append(out, prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(c), k.pool, k.state))
		}
	}
	if err := m.readRunOrders(ctx, &out); err != nil {
		failed("run_orders", err)
	}
	for source, n := range failures {
		out = append(out, prometheus.MustNewConstMetric(readErrorsDesc, prometheus.GaugeValue, n, source))
	}
	return out
}

func (m *Metrics) readRunOrders(ctx context.Context, out *[]prometheus.Metric) error {
	stream, err := m.JS.Stream(ctx, queue.StreamRun)
	if err != nil {
		return err
	}
	consumers := stream.ListConsumers(ctx)
	for info := range consumers.Info() {
		pool, ok := strings.CutPrefix(info.Name, queue.PoolConsumer(""))
		if !ok {
			continue
		}
		*out = append(*out,
			prometheus.MustNewConstMetric(runOrdersDesc, prometheus.GaugeValue, float64(info.NumPending), pool, "waiting"),
			prometheus.MustNewConstMetric(runOrdersDesc, prometheus.GaugeValue, float64(info.NumAckPending), pool, "delivered"))
	}
	return consumers.Err()
}
