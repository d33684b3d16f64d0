package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue/queuetest"
)

// scrape reads the metrics at url as Prometheus does: each sample by its
// name and labels as printed (name{label="value",…}).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %s\n%s", url, res.Status, b)
	}
	out := map[string]float64{}
	lines := bufio.NewScanner(res.Body)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("not a sample: %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// gpuq dev --metrics-addr serves Prometheus metrics as an operator scrapes
// them: unfinished jobs per project and state, each pool's run orders
// waiting and delivered, the workers heard per pool, how long jobs waited
// to start, and the process's own.
func TestDevServesMetricsOfJobsRunOrdersWorkersAndStartWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	bin := buildGpuq(t)
	dir := t.TempDir()
	d := startDev(t, bin, dir, "--http-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	if d.conn.MetricsURL == "" {
		t.Fatal("gpuq dev -o json did not report its metrics_url")
	}
	config := filepath.Join(dir, devConfigFile)
	out, errOut, err := runCLI(t, "submit", "--config", config, "-o", "json", "--name", "long", "--", "sleep", "120")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, errOut)
	}
	var job struct {
		ID   string `json:"id"`
		Pool string `json:"pool"`
	}
	if err := json.Unmarshal([]byte(out), &job); err != nil || job.Pool == "" {
		t.Fatalf("submit -o json: %v\n%s", err, out)
	}
	want := map[string]float64{
		`gpuq_jobs{project="default",state="running"}`:                          1,
		`gpuq_jobs{project="default",state="placed"}`:                           0,
		`gpuq_jobs{project="default",state="pending"}`:                          0,
		`gpuq_jobs{project="default",state="waiting"}`:                          0,
		`gpuq_run_orders{pool="` + job.Pool + `",status="delivered"}`:           1,
		`gpuq_run_orders{pool="` + job.Pool + `",status="waiting"}`:             0,
		`gpuq_workers{pool="local-cpu"}`:                                        1,
		`gpuq_workers{pool="local-cpu-spot"}`:                                   1,
		`gpuq_workers_paused{pool="local-cpu"}`:                                 0,
		`gpuq_job_start_wait_seconds_count{pool="` + job.Pool + `"}`:            1,
		`gpuq_job_start_wait_seconds_bucket{pool="` + job.Pool + `",le="+Inf"}`: 1,
		`gpuq_metrics_read_failed{source="jobs"}`:                               0,
		`gpuq_metrics_read_failed{source="run_orders"}`:                         0,
	}
	var got map[string]float64
	matches := func() bool {
		got = scrape(t, d.conn.MetricsURL)
		for k, v := range want {
			if have, ok := got[k]; !ok || have != v {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for !matches() {
		if time.Now().After(deadline) {
			t.Fatalf("metrics while the job runs: want %v, got %v", want, got)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got["process_cpu_seconds_total"] <= 0 || got["go_goroutines"] <= 0 {
		t.Errorf("want the process's and the Go runtime's metrics, got process_cpu_seconds_total %v, go_goroutines %v",
			got["process_cpu_seconds_total"], got["go_goroutines"])
	}

	if _, errOut, err := runCLI(t, "cancel", "--config", config, job.ID); err != nil {
		t.Fatalf("cancel: %v\n%s", err, errOut)
	}
	want[`gpuq_jobs{project="default",state="running"}`] = 0
	want[`gpuq_run_orders{pool="`+job.Pool+`",status="delivered"}`] = 0
	queuetest.Eventually(t, 30*time.Second, "the cancelled job to leave the metrics", matches)
}
