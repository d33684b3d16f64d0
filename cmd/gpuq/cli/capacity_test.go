package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
)

// proc is a gpuq process the test started, with its output.
type proc struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// startProc starts bin with args and env added to the test's environment;
// the process is stopped (SIGTERM, then SIGKILL) when the test ends.
func startProc(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, bin, append(os.Environ(), env...), args...)
}

// startProcEnv is startProc with env as the process's whole environment.
func startProcEnv(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }() //nolint:errcheck // its end is what the test watches
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill() //nolint:errcheck // stuck
			<-p.done
		}
		if t.Failed() || os.Getenv("DUMP") != "" {
			t.Logf("gpuq %s output:\n%s", args[0], p.logs.String())
		}
	})
	return p
}

// kill SIGKILLs the process and waits for its end.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// waitFor polls cond every 100 ms until it holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after %s: %s", limit, what)
		}
	}
}

// cloudInstances lists every instance of the sim-cloud at url, gone ones
// included, through its provider API.
func cloudInstances(t *testing.T, url string) []adapters.Instance {
	t.Helper()
	resp, err := http.Get(url + "/v1/instances")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Instances []adapters.Instance `json:"instances"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	return page.Instances
}

// printedURL is the URL in sim-cloud's -o json output.
var printedURL = regexp.MustCompile(`"url": "(http://[^"]+)"`)

const simCloudConfig = `sim:
  pools:
    - {pool: sim-de-a100, region: eu-central-1, country: DE, card: A100, gpu_count: 1, gpu_memory_gb: 80, vcpu: 8,
       memory_gb: 64, price_per_hour: "2.00", currency: EUR, boot_delay: 1s, grace: 2s}
`

// TestServersLeadOneAtATimeAndAServerKilledMidLaunchLeaksNoMachine runs the
// simulated cloud in a process of its own (gpuq sim-cloud) and two `gpuq
// server` replicas against it, started as deploy/systemd starts them plus a
// config file naming the cloud and the autoscaler's bounds. The cloud holds
// the answer to the first launch (--hold-launches 1), so the leading server
// is SIGKILLed after the machine is rented and before the launch is
// recorded. The other server takes the lead, finds the machine by the
// recorded client token, and the job runs on it: one machine, rented once,
// released when idle.
func TestServersLeadOneAtATimeAndAServerKilledMidLaunchLeaksNoMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a simulated cloud, two servers and a worker process for about half a minute")
	}
	t.Parallel()
	bin := buildGpuq(t)
	dbURL := pgtest.URL(t)
	ns, err := queue.StartEmbeddedNATS(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	ctx := context.Background()

	// The simulated machine image carries a worker credential of the pool:
	// the servers here have no issuer of per-machine credentials.
	workerCred, err := ns.Issuer.IssueWorker("sim-de-a100", "eu-central-1", "")
	if err != nil {
		t.Fatal(err)
	}
	cloud := startProc(t, bin, []string{adapters.EnvNATSCredential + "=" + workerCred.String()}, "sim-cloud", "--listen", "127.0.0.1:0", "--hold-launches", "1",
		"--config", writeFile(t, "cloud.yaml", simCloudConfig), "-o", "json")
	var url string
	waitFor(t, 30*time.Second, "sim-cloud printed no URL", func() bool {
		if m := printedURL.FindStringSubmatch(cloud.logs.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})

	config := writeFile(t, "server.yaml", `providers:
  sim: {url: `+url+`}
autoscaler:
  interval: 200ms
  defaults: {max: 2, idle_timeout: 3s}
`)
	server := func() *proc {
		return startProc(t, bin, []string{adapters.EnvNATSCredential + "=" + ns.Control().String()}, "server", "--nats-url", ns.URL(), "--database-url", dbURL, "--config", config)
	}
	// The capacity lead (launches and releases) is the one at stake; the
	// budget lead is another lease, which may change hands on its own.
	leading := func(p *proc) bool { return strings.Contains(p.logs.String(), "msg=leading role=capacity") }
	standing := func(p *proc) bool {
		return strings.Contains(p.logs.String(), `msg="another server leads; standing by" role=capacity`)
	}
	a := server()
	waitFor(t, 60*time.Second, "the first server took no lead", func() bool { return leading(a) })
	b := server()
	waitFor(t, 60*time.Second, "the second server did not stand by", func() bool { return standing(b) })

	submitted, errOut, err := runCLI(t, "submit", "--nats-url", ns.ControlURL(), "-f",
		writeFile(t, "job.yaml", "name: on-a100\nresources: {gpu: {count: 1, cards: [A100]}}\ncommand: [echo, rented]\n"))
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, errOut)
	}
	id := strings.TrimSpace(submitted)

	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	records := func() []*queue.Instance {
		list, err := st.Instances(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	// The leader asked for a machine, the cloud rented it, and the answer
	// is not recorded yet.
	waitFor(t, 60*time.Second, "no launch held between the call and its record", func() bool {
		recs := records()
		return len(cloudInstances(t, url)) == 1 && len(recs) == 1 && recs[0].State == queue.InstanceRequested
	})
	if leading(b) {
		t.Fatal("both servers lead")
	}
	a.kill(t)
	waitFor(t, 30*time.Second, "the standing-by server did not take the lead", func() bool { return leading(b) })

	status := func() JobStatus {
		out, errOut, err := runCLI(t, "status", id, "-o", "json", "--nats-url", ns.ControlURL())
		if err != nil {
			t.Fatalf("status: %v\n%s", err, errOut)
		}
		var s JobStatus
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		return s
	}
	waitFor(t, 90*time.Second, "the job did not finish", func() bool {
		s := status()
		return s.Job != nil && s.Job.State.Terminal()
	})
	if s := status(); s.Job.State != queue.StateSucceeded {
		t.Fatalf("job ended %s: %+v", s.Job.State, s.Attempts)
	}

	// The killed server comes back and stands by.
	a = server()
	waitFor(t, 60*time.Second, "the restarted server did not stand by", func() bool { return standing(a) })

	// Idle, the machine is released: nothing billed, nothing live.
	waitFor(t, 60*time.Second, "the machine was not released after the idle timeout", func() bool {
		for _, in := range cloudInstances(t, url) {
			if !in.State.Gone() {
				return false
			}
		}
		for _, in := range records() {
			if in.State.Live() {
				return false
			}
		}
		return true
	})
	got, recs := cloudInstances(t, url), records()
	if len(got) != 1 || len(recs) != 1 {
		t.Fatalf("the cloud rented %d machines and gpuq recorded %d for one request, want 1 and 1: %+v", len(got), len(recs), got)
	}
	if got[0].ClientToken != recs[0].ClientToken || got[0].ProviderID != recs[0].ProviderID || recs[0].State != queue.InstanceTerminated {
		t.Fatalf("the machine %+v and its record %+v disagree", got[0], recs[0])
	}
	if leading(a) {
		t.Fatal("the restarted server leads beside the other")
	}
}
