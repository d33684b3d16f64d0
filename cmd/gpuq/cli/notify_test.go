package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// The README's lines for being told when a job ends, run as written on
// gpuq dev: the webhook's URL set in a secret from the environment, a job
// that fails posted to it once, with its end in the body; one whose end
// notify.when leaves out not posted, and status saying so; a webhook secret
// that is not set refused at submission. The URL's path, the credential, is
// in no output of gpuq dev's.
func TestTheReadmesNotifyRecipeRunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpuq dev with worker processes")
	}
	t.Parallel()
	type post struct {
		path, delivery, raw string
		body                queue.NotificationBody
	}
	var (
		mu    sync.Mutex
		posts []post
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p := post{path: r.URL.Path, delivery: r.Header.Get("X-Gpuq-Delivery"), raw: string(b)}
		if err := json.Unmarshal(b, &p.body); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "not json", http.StatusBadRequest)
			return
		}
		mu.Lock()
		posts = append(posts, p)
		mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	postsOf := func(id string) []post {
		mu.Lock()
		defer mu.Unlock()
		var out []post
		for _, p := range posts {
			if p.body.Job.ID.String() == id {
				out = append(out, p)
			}
		}
		return out
	}

	bin := buildGpuq(t)
	dir := t.TempDir()
	dev, natsEnv, httpEnv := startDevClients(t, bin, dir)
	gpuq := func(wantCode int, args ...string) string {
		t.Helper()
		return string(runBinary(t, bin, dir, httpEnv, wantCode, args...))
	}
	const path = "/services/T0AB12/B0CD34/XyZsecretPart"
	block := readme(t)
	block = block[strings.Index(block, "### Being told when a job ends"):]
	var lines []string
	for _, re := range []string{`(?m)^printenv SLACK_WEBHOOK_URL \| .*$`, `(?m)^\./bin/gpuq secret test-webhook .*$`, `(?m)^\./bin/gpuq submit --notify .*$`} {
		l := regexp.MustCompile(re).FindString(block)
		if l == "" {
			t.Fatalf("README.md's Being told when a job ends has no line %s", re)
		}
		lines = append(lines, strings.Replace(l, "./bin/gpuq", bin, 1))
	}
	run := func(line string) string {
		t.Helper()
		sh := exec.Command("sh", "-c", line)
		sh.Dir, sh.Env = dir, append(httpEnv, "SLACK_WEBHOOK_URL="+srv.URL+path)
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		return string(out)
	}
	if out := run(lines[0]); !strings.Contains(out, "secret SLACK_HOOK of project default set") {
		t.Fatalf("%s: %s", lines[0], out)
	}
	// The test post: one, marked as a test, as the server posts.
	if out := run(lines[1]); out != "posted a test message to 127.0.0.1, the webhook in secret SLACK_HOOK of project default: HTTP 200\n" {
		t.Fatalf("%s: %s", lines[1], out)
	}
	mu.Lock()
	tests := slices.Clone(posts)
	mu.Unlock()
	if len(tests) != 1 || tests[0].path != path || !strings.HasPrefix(tests[0].delivery, "test/") || !strings.Contains(tests[0].raw, `"test":true`) ||
		!strings.HasPrefix(tests[0].body.Text, "gpuq: a test post to webhook SLACK_HOOK of project default, asked for by ") {
		t.Fatalf("the test post: %+v", tests)
	}
	if out := gpuq(ExitNotFound, "secret", "test-webhook", "NOT_SET"); !strings.Contains(out, "secret NOT_SET is not set for project default") {
		t.Fatalf("a test post to a secret not set: %s", out)
	}
	// python3 train.py finds no train.py where the job runs: it fails,
	// exit status 2, on each of its three attempts.
	failed := lastLine(strings.TrimSpace(run(lines[2])))
	var status string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if status = gpuq(0, "status", failed); strings.Contains(status, "delivered at") {
			break
		}
	}
	if !regexp.MustCompile(`\nnotify     webhook SLACK_HOOK when failed or dead, with its last 20 lines of output: delivered at \d\d:\d\d:\d\d \(HTTP 200\)\n`).MatchString(status) {
		t.Fatalf("status of a job whose end was posted:\n%s", status)
	}
	got := postsOf(failed)
	if len(got) != 1 || got[0].path != path || !strings.HasPrefix(got[0].delivery, failed+"/") {
		t.Fatalf("posts of the failed job's end: %+v", got)
	}
	// Its three attempts ran on local-cpu-spot at 0.03 EUR/h: what they
	// cost, in status and in the post.
	if !regexp.MustCompile(`\nspent      \d+\.\d{2,6} EUR\n`).MatchString(status) {
		t.Fatalf("status of a job that ran: no spent line\n%s", status)
	}
	if j := got[0].body.Job; len(j.Spent) != 1 || !regexp.MustCompile(`^\d+\.\d{2,6} EUR$`).MatchString(j.Spent[0]) ||
		!strings.Contains(got[0].body.Text, " attempt(s), ") || !strings.Contains(got[0].body.Text, ", "+j.Spent[0]) {
		t.Fatalf("what the job cost in the post: %q\n%s", j.Spent, got[0].body.Text)
	}
	if j := got[0].body.Job; j.State != queue.StateFailed || j.ExitCode == nil || *j.ExitCode != 2 || j.Attempts != 3 || j.Project != "default" ||
		!strings.HasPrefix(got[0].body.Text, "gpuq: job train.py ("+failed+") of project default failed: exited with status 2 after 3 attempt(s)") {
		t.Fatalf("the body posted: %+v", got[0].body)
	}
	// Its last lines of output say why: each of the three attempts'
	// python3 found no train.py.
	tail := got[0].body.Job.LastLogLines
	if len(tail) == 0 || len(tail) > 20 || !strings.Contains(tail[len(tail)-1], "train.py") ||
		!strings.Contains(got[0].body.Text, "\n```\n"+strings.Join(tail, "\n")+"\n```") {
		t.Fatalf("the job's last lines of output in the post: %q\n%s", tail, got[0].body.Text)
	}

	// An end the job does not ask for: not posted.
	ok := strings.TrimSpace(gpuq(0, "submit", "--notify", "SLACK_HOOK", "--notify-when", "failed,dead", "--wait", "--", "true"))
	ok = strings.Fields(ok)[0]
	time.Sleep(2 * time.Second) // the notifier looks every second
	if st := gpuq(0, "status", ok); !strings.Contains(st, "\nnotify     webhook SLACK_HOOK when failed or dead: this end (succeeded) is not posted\n") || len(postsOf(ok)) != 0 {
		t.Fatalf("a job that succeeded, notified of failures only: %d posts\n%s", len(postsOf(ok)), st)
	}
	if out := gpuq(1, "submit", "--notify", "NOT_SET", "--", "true"); !strings.Contains(out,
		"spec.notify.webhook: secret NOT_SET is not set for project default: gpuq secret set --project default NOT_SET first") {
		t.Fatalf("a webhook secret not set: %s", out)
	}
	// Over NATS, the scheduler rejects it before a pool is taken; a retry
	// of a job whose webhook secret is gone is refused until it is set.
	if out := string(runBinary(t, bin, t.TempDir(), natsEnv, ExitRejected, "submit", "--notify", "NOT_SET", "--", "true")); !strings.Contains(out,
		"rejected: secret NOT_SET is not set for project default: set it (gpuq secret set --project default NOT_SET) and retry the job") {
		t.Fatalf("a webhook secret not set, over NATS: %s", out)
	}
	gpuq(0, "secret", "rm", "SLACK_HOOK")
	if out := gpuq(ExitRejected, "retry", failed); !strings.Contains(out, "secret SLACK_HOOK is not set for project default") {
		t.Fatalf("retry of a job whose webhook secret is gone: %s", out)
	}
	if strings.Contains(dev.logs.String(), "secretPart") {
		t.Fatal("gpuq dev's output holds the webhook's URL")
	}
}

// The servers' config key notifications is read whole, naming a bad entry;
// gpuq dev allows webhooks internal addresses unless its file says
// otherwise, and keeps the file's other settings.
func TestTheNotificationsConfigIsCheckedAndGpuqDevAllowsLocalWebhooks(t *testing.T) {
	t.Parallel()
	read := func(yaml string, dev bool) (*control.Notifier, error) {
		v := viper.New()
		v.SetConfigType("yaml")
		if err := v.ReadConfig(strings.NewReader(yaml)); err != nil {
			t.Fatal(err)
		}
		if dev {
			v.Set(devWebhooksKey, true)
		}
		return notifierConfig(v)
	}
	for _, c := range []struct {
		yaml    string
		dev     bool
		allow   bool
		tries   int
		timeout time.Duration
	}{
		{"", false, false, 0, 0},
		{"", true, true, 0, 0},
		{"notifications: {tries: 5, timeout: 3s}\n", true, true, 5, 3 * time.Second},
		{"notifications: {allow_private_addresses: false}\n", true, false, 0, 0},
		{"notifications: {allow_private_addresses: true}\n", false, true, 0, 0},
	} {
		n, err := read(c.yaml, c.dev)
		if err != nil || n.AllowPrivateAddresses != c.allow || n.Tries != c.tries || n.Timeout != c.timeout {
			t.Errorf("%q (dev %v): %+v, %v", c.yaml, c.dev, n, err)
		}
	}
	for yaml, want := range map[string]string{
		"notifications: {url: x}\n":      "config key notifications: ",
		"notifications: {tries: 1000}\n": "notifications.tries: must be 1–100, got 1000",
		"notifications: {timeout: 1h}\n": "notifications.timeout: must be at most 5m, got 1h0m0s",
	} {
		if _, err := read(yaml, false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", yaml, err, want)
		}
	}
}

// On the control-plane host, without an API URL, gpuq secret test-webhook
// posts from the database's secret as the servers do, by the config file's
// notifications settings: a loopback webhook refused by default, taken
// once the file allows internal addresses.
func TestATestPostFromTheControlPlaneHostFollowsTheServersConfig(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, url := queuetest.Store(t, n)
	var (
		mu    sync.Mutex
		posts int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	if _, err := s.SetSecret(context.Background(), "ml", "HOOK", srv.URL+"/services/XyZsecretPart", "test"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	strict, open := filepath.Join(dir, "strict.yaml"), filepath.Join(dir, "open.yaml")
	for file, body := range map[string]string{strict: "notifications: {timeout: 5s}\n", open: "notifications: {allow_private_addresses: true}\n"} {
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"secret", "test-webhook", "HOOK", "--project", "ml", "--database-url", url, "--config"}
	out, errOut, err := runCLI(t, append(args, strict)...)
	if exitCode(err) != ExitGeneral || !strings.Contains(err.Error(), "the test post to the webhook in secret HOOK of project ml failed: posting to 127.0.0.1: address 127.0.0.1 is not a public one") ||
		strings.Contains(out+errOut+err.Error(), "secretPart") {
		t.Fatalf("a test post to a loopback webhook, not allowed: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = runCLI(t, append(args, open)...)
	if err != nil || out != "posted a test message to 127.0.0.1, the webhook in secret HOOK of project ml: HTTP 200\n" {
		t.Fatalf("a test post, allowed: %v\n%s%s", err, out, errOut)
	}
	if _, _, err := runCLI(t, "secret", "test-webhook", "NOT_SET", "--project", "ml", "--database-url", url, "--config", open); exitCode(err) != ExitNotFound ||
		!strings.Contains(err.Error(), "secret NOT_SET is not set for project ml") {
		t.Fatalf("a test post to a secret not set: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 1 {
		t.Fatalf("the webhook was posted %d times, want once", posts)
	}
}
