package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/queue/store"
)

// webhook records what it is posted and answers by its path's first word.
type webhook struct {
	mu    sync.Mutex
	posts []post
	tries map[string]int
}

type post struct {
	path, delivery, contentType string
	body                        queue.NotificationBody
	raw                         string
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body queue.NotificationBody
	if err := json.Unmarshal(b, &body); err != nil {
		http.Error(w, "not json", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.posts = append(h.posts, post{r.URL.Path, r.Header.Get("X-Gpuq-Delivery"), r.Header.Get("Content-Type"), body, string(b)})
	h.tries[r.URL.Path]++
	n := h.tries[r.URL.Path]
	h.mu.Unlock()
	switch strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0] {
	case "ok":
		_, _ = w.Write([]byte("ok"))
	case "busy": // busy once, then takes it
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy\nnow", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	case "down":
		http.Error(w, "down", http.StatusInternalServerError)
	case "moved":
		http.Redirect(w, r, "/ok/elsewhere", http.StatusFound)
	default:
		http.Error(w, "no_service", http.StatusNotFound)
	}
}

// startWebhook starts JetStream, a store and a webhook answering by its
// paths' first words (see webhook).
func startWebhook(t *testing.T) (*queuetest.NATS, *store.Store, *webhook, *httptest.Server) {
	t.Helper()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	hook := &webhook{tries: map[string]int{}}
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	return n, s, hook, srv
}

func (h *webhook) postsTo(prefix string) []post {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []post
	for _, p := range h.posts {
		if strings.HasPrefix(p.path, prefix) {
			out = append(out, p)
		}
	}
	return out
}

// failOnce is a store whose first record of a delivered end fails, as a
// server dying between the webhook's answer and its record would.
type failOnce struct {
	*store.Store
	job  uuid.UUID
	once sync.Once
}

func (f *failOnce) NotificationTried(ctx context.Context, job uuid.UUID, endedAt time.Time, outcome string, next *time.Time, status int, why string) error {
	failed := false
	if outcome == queue.NotifyDelivered && job == f.job {
		f.once.Do(func() { failed = true })
	}
	if failed {
		return errors.New("the server died")
	}
	return f.Store.NotificationTried(ctx, job, endedAt, outcome, next, status, why)
}

// A job's end is posted to the webhook its spec names through a project
// secret, once per end (a retried job's new end again), with the same
// delivery id when a lost record makes it post again; a webhook that is
// busy is tried again, one that answers what trying again cannot change is
// given up on at once, one that keeps failing after Tries; an end the spec
// does not ask for is not posted. What is recorded says why, never holding
// the URL, and an internal address is refused unless allowed.
func TestTheEndOfAJobIsPostedToItsWebhookOnceAndAFailureSaysWhy(t *testing.T) {
	t.Parallel()
	n, s, hook, srv := startWebhook(t)
	ctx := context.Background()
	const token = "T0AB12/B0CD34/XyZsecretPart"
	for name, path := range map[string]string{"OK": "/ok/", "BUSY": "/busy/", "DOWN": "/down/", "GONE": "/gone/", "MOVED": "/moved/", "RETRIED": "/ok/retried/"} {
		if _, err := s.SetSecret(ctx, "ml", name, srv.URL+path+token, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SetSecret(ctx, "ml", "NOT_A_URL", "hooks.example.com/"+token, "test"); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(b)
	}), nil))
	records := &failOnce{Store: s}
	metrics := control.NewMetrics(nil, nil, nil, logger)
	notifier := &control.Notifier{Store: records, Logger: logger, AllowPrivateAddresses: true, Tries: 3,
		Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Metrics: metrics}

	ended := func(spec string) *queue.Job {
		t.Helper()
		id := placedJobOf(t, s, spec)
		if err := s.Cancel(ctx, id, "cancelled by the test"); err != nil {
			t.Fatal(err)
		}
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	spec := func(webhook string, on ...string) string {
		s := "project: ml\nname: train\ncommand: [python3, train.py]\nlabels: {sweep: lr}\nnotify: {webhook: " + webhook
		if len(on) > 0 {
			s += ", when: [" + strings.Join(on, ", ") + "]"
		}
		return s + "}\n"
	}
	ok := ended(spec("OK"))
	records.job = ok.ID
	busy := ended(spec("BUSY"))
	down := ended(spec("DOWN"))
	gone := ended(spec("GONE"))
	moved := ended(spec("MOVED"))
	notURL := ended(spec("NOT_A_URL"))
	quiet := ended(spec("OK", "failed", "dead"))
	retried := ended(spec("RETRIED", "cancelled"))
	plain := ended("project: ml\ncommand: [python3, train.py]\n")

	// Passes until nothing is due: each failed try is due again within
	// MaxBackoff.
	settle := func() {
		t.Helper()
		for range 50 {
			if _, err := notifier.Pass(ctx); err != nil && err.Error() != "the server died" {
				t.Fatal(err)
			}
			due, err := s.NotificationsDue(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			pending := 0
			for _, id := range []uuid.UUID{ok.ID, busy.ID, down.ID, gone.ID, moved.ID, notURL.ID, quiet.ID, retried.ID, plain.ID} {
				if l, _ := s.LatestNotification(ctx, id); l != nil && l.Outcome == queue.NotifyPending {
					pending++
				}
			}
			if len(due) == 0 && pending == 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("notifications still due after 50 passes")
	}
	settle()

	latest := func(j *queue.Job) *queue.Notification {
		t.Helper()
		l, err := s.LatestNotification(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Delivered, posted twice because its first record was lost, with one
	// delivery id; the body says what happened for people and programs.
	posts := hook.postsTo("/ok/" + token)
	if len(posts) != 2 || posts[0].delivery != posts[1].delivery || posts[0].delivery != control.DeliveryID(ok.ID, *ok.FinalizedAt) ||
		posts[0].contentType != "application/json" {
		t.Fatalf("posts of the end of %s: %+v", ok.ID, posts)
	}
	body := posts[0].body
	if body.Job.ID != ok.ID || body.Job.State != queue.StateCancelled || body.Job.Project != "ml" || body.Job.Name != "train" ||
		body.Job.Reason != "cancelled by the test" || body.Job.Labels["sweep"] != "lr" || !body.Job.EndedAt.Equal(*ok.FinalizedAt) ||
		!strings.HasPrefix(body.Text, "gpuq: job train ("+ok.ID.String()+") of project ml cancelled: cancelled by the test after 0 attempt(s)") {
		t.Fatalf("the body posted: %+v", body)
	}
	if l := latest(ok); l == nil || l.Outcome != queue.NotifyDelivered || l.HTTPStatus != 200 || l.Tries != 1 || l.Error != "" || l.State != queue.StateCancelled {
		t.Fatalf("the record of a delivered end: %+v", l)
	}
	// Busy, then delivered on the next try.
	if l := latest(busy); len(hook.postsTo("/busy/")) != 2 || l.Outcome != queue.NotifyDelivered || l.Tries != 2 {
		t.Fatalf("a busy webhook: %d posts, %+v", len(hook.postsTo("/busy/")), l)
	}
	// Failing every time: given up after Tries, saying so.
	if l := latest(down); len(hook.postsTo("/down/")) != 3 || l.Outcome != queue.NotifyFailed || l.HTTPStatus != 500 ||
		l.Error != "posting to 127.0.0.1: HTTP 500: down (gave up after 3 tries)" {
		t.Fatalf("a webhook that is down: %d posts, %+v", len(hook.postsTo("/down/")), l)
	}
	// Answers that trying again cannot change: once.
	for _, c := range []struct {
		job    *queue.Job
		prefix string
		posts  int
		status int
		why    string
	}{
		{gone, "/gone/", 1, 404, "posting to 127.0.0.1: HTTP 404: no_service"},
		{moved, "/moved/", 1, 302, "posting to 127.0.0.1: HTTP 302: the webhook redirects, and gpuq follows no redirect: set the URL it redirects to in secret MOVED"},
		{notURL, "hooks.example.com", 0, 0, "secret NOT_A_URL of project ml does not hold an http:// or https:// URL with a host; set the webhook's URL in it"},
	} {
		if l := latest(c.job); len(hook.postsTo(c.prefix)) != c.posts || l.Outcome != queue.NotifyFailed || l.Tries != 1 || l.HTTPStatus != c.status || l.Error != c.why {
			t.Fatalf("%s: %d posts, %+v; want %d posts, status %d, %q", c.prefix, len(hook.postsTo(c.prefix)), l, c.posts, c.status, c.why)
		}
	}
	if len(hook.postsTo("/ok/elsewhere")) != 0 {
		t.Fatal("a redirect was followed")
	}
	// Not asked for, or no notify at all: nothing posted, nothing due.
	if l := latest(quiet); l != nil {
		t.Fatalf("an end notify.when does not name: %+v", l)
	}
	if l := latest(plain); l != nil {
		t.Fatalf("a job without notify: %+v", l)
	}

	// Retried and ended again: the new end is posted, under its own id.
	if err := s.Retry(ctx, retried, queue.Placement{Pool: "p", Region: "r"}, "retried by the test", false); err != nil {
		t.Fatal(err)
	}
	settle()
	if len(hook.postsTo("/ok/retried/")) != 1 {
		t.Fatalf("a running job's webhook was posted %d times", len(hook.postsTo("/ok/retried/")))
	}
	if err := s.Cancel(ctx, retried.ID, "cancelled again"); err != nil {
		t.Fatal(err)
	}
	settle()
	again, err := s.Job(ctx, retried.ID)
	if err != nil {
		t.Fatal(err)
	}
	posts = hook.postsTo("/ok/retried/")
	if len(posts) != 2 || posts[1].delivery != control.DeliveryID(retried.ID, *again.FinalizedAt) || posts[0].delivery == posts[1].delivery ||
		posts[1].body.Job.Reason != "cancelled again" {
		t.Fatalf("the posts of a job ended twice: %+v", posts)
	}
	if l := latest(again); !l.EndedAt.Equal(*again.FinalizedAt) || l.Outcome != queue.NotifyDelivered {
		t.Fatalf("the latest end's record: %+v", l)
	}

	// A secret deleted since the job was submitted: tried again, saying
	// how to set it.
	if err := s.DeleteSecret(ctx, "ml", "GONE"); err != nil {
		t.Fatal(err)
	}
	deleted := ended(spec("GONE"))
	if _, err := notifier.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if l := latest(deleted); l == nil || l.Outcome != queue.NotifyPending || l.NextAt == nil ||
		l.Error != "secret GONE, which spec.notify.webhook names, is not set for project ml (deleted since the job was submitted): gpuq secret set --project ml GONE" {
		t.Fatalf("a webhook secret deleted since: %+v", l)
	}

	// Every try counted by outcome: ok's twice (its first record lost),
	// busy's and the retried job's two ends, as delivered; busy's first,
	// down's first two and the deleted secret's as retrying; down's last
	// and the three refused at once as failed.
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.Observed()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := map[string]float64{}
	for _, f := range families {
		if f.GetName() == "gpuq_notifications_total" {
			for _, m := range f.GetMetric() {
				counted[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if want := map[string]float64{"delivered": 5, "retrying": 4, "failed": 4}; !maps.Equal(counted, want) {
		t.Fatalf("gpuq_notifications_total: %v, want %v", counted, want)
	}

	// With log_lines, the post carries the job's last lines of output,
	// each cut to MaxNotifyLogLine, in a block chats show as it is.
	if _, err := s.SetSecret(ctx, "ml", "TALK", srv.URL+"/ok/talk/"+token, "test"); err != nil {
		t.Fatal(err)
	}
	talk := placedJobOf(t, s, "project: ml\nname: talk\ncommand: [x]\nnotify: {webhook: TALK, log_lines: 3}\n")
	var out strings.Builder
	for i := range 30 {
		fmt.Fprintf(&out, "line %d\n", i)
	}
	out.WriteString("a fence ``` inside\n" + strings.Repeat("é", 400) + "\nlast, without a newline")
	if _, err := n.JS.PublishMsg(ctx, queue.NewLogMsg("p", talk, queue.LogChunk{Attempt: 1, Stream: "stdout", Data: []byte(out.String())})); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx, talk, "cancelled by the test"); err != nil {
		t.Fatal(err)
	}
	talker := &control.Notifier{Store: s, Logger: logger, AllowPrivateAddresses: true, JS: n.JS}
	if _, err := talker.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	posts = hook.postsTo("/ok/talk/")
	long := strings.Repeat("é", (queue.MaxNotifyLogLine-len("…"))/2) + "…"
	if len(posts) != 1 || !slices.Equal(posts[0].body.Job.LastLogLines, []string{"a fence ``` inside", long, "last, without a newline"}) ||
		!strings.HasSuffix(posts[0].body.Text, "\n```\na fence ''' inside\n"+long+"\nlast, without a newline\n```") {
		t.Fatalf("a post with the job's last lines: %+v", posts)
	}
	if len(posts[0].body.Job.LastLogLines[1]) > queue.MaxNotifyLogLine {
		t.Fatalf("a line of %d bytes", len(posts[0].body.Job.LastLogLines[1]))
	}

	// A job placed under a residency (an organisation's rule put it in
	// the EU) keeps its output there: the post says how it ended, and
	// that its lines are not posted.
	kept := uuid.New()
	if _, err := s.RecordJobs(ctx, []queue.NewJob{{ID: kept, Spec: mustSpec(t, "project: ml\nname: kept\ncommand: [x]\nlabels: {data: personal}\nnotify: {webhook: TALK, log_lines: 3}\n")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPlacements(ctx, []queue.PlacedJob{{JobID: kept, Placement: queue.Placement{Version: 1, Pool: "p", Region: "r",
		Residency: "EU", Countries: []string{"DE", "FR"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.JS.PublishMsg(ctx, queue.NewLogMsg("p", kept, queue.LogChunk{Attempt: 1, Stream: "stdout", Data: []byte("patient 4711: positive\n")})); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx, kept, "cancelled by the test"); err != nil {
		t.Fatal(err)
	}
	if _, err := talker.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	posts = hook.postsTo("/ok/talk/")
	const withheld = "its last 3 lines of output are not posted: the job is kept in residency EU"
	if len(posts) != 2 || posts[1].body.Job.ID != kept || len(posts[1].body.Job.LastLogLines) != 0 ||
		posts[1].body.Job.OutputWithheld != withheld || !strings.HasSuffix(posts[1].body.Text, "\n("+withheld+")") ||
		strings.Contains(posts[1].raw, "patient") {
		t.Fatalf("the post of a job kept in a residency: %+v", posts)
	}

	// An internal address, not allowed: refused when dialled, nothing
	// posted, given up on at once.
	strict := &control.Notifier{Store: s, Logger: logger}
	before := len(hook.postsTo("/ok/"))
	internal := ended(spec("OK"))
	for range 3 {
		if _, err := strict.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if l := latest(internal); l != nil && l.Outcome != queue.NotifyPending {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := latest(internal); len(hook.postsTo("/ok/")) != before || l == nil || l.Outcome != queue.NotifyFailed ||
		!strings.Contains(l.Error, "address 127.0.0.1 is not a public one, and notifications.allow_private_addresses is off") {
		t.Fatalf("a webhook on an internal address: %d posts, %+v", len(hook.postsTo("/ok/"))-before, l)
	}

	// The URL's path is the credential: in no record and no log line.
	for _, j := range []*queue.Job{ok, busy, down, gone, moved, notURL, again, deleted, internal} {
		if l := latest(j); l != nil && strings.Contains(l.Error, "secretPart") {
			t.Fatalf("a record holds the URL: %+v", l)
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "secretPart") || !strings.Contains(logs.String(), "gave up posting a job's end to its webhook") {
		t.Fatalf("the notifier's log:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// A webhook's address must be a public one unless allowed: loopback,
// private, link-local (the cloud metadata servers), shared, multicast and
// unspecified addresses are not.
func TestOnlyPublicAddressesArePublic(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"1.1.1.1": true, "34.117.59.81": true, "2606:4700:4700::1111": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00::1": false, "100.64.0.1": false, "0.0.0.0": false,
		"0.1.2.3": false, "::": false, "224.0.0.1": false, "255.255.255.255": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false,
	} {
		if got := control.PublicAddress(net.ParseIP(addr)); got != want {
			t.Errorf("PublicAddress(%s) = %v, want %v", addr, got, want)
		}
	}
}

// A test post reaches the webhook a project's secret holds as a job's end
// would, marked as a test, and says how the webhook answered; a secret that
// is not set is an error, one that is no URL or a webhook that refuses is
// a failed post saying why, never holding the URL.
func TestATestPostSaysHowTheWebhookAnswered(t *testing.T) {
	t.Parallel()
	_, s, hook, srv := startWebhook(t)
	ctx := context.Background()
	const token = "T0AB12/B0CD34/XyZsecretPart"
	for name, value := range map[string]string{"OK": srv.URL + "/ok/" + token, "GONE": srv.URL + "/gone/" + token, "NOT_A_URL": "hooks.example.com/" + token} {
		if _, err := s.SetSecret(ctx, "ml", name, value, "test"); err != nil {
			t.Fatal(err)
		}
	}
	notifier := &control.Notifier{Store: s, AllowPrivateAddresses: true}
	res, err := notifier.TestPost(ctx, "ml", "OK", "alice")
	host := strings.TrimPrefix(srv.URL, "http://")
	host = host[:strings.LastIndex(host, ":")]
	if err != nil || !res.Delivered || res.HTTPStatus != 200 || res.Host != host || res.Project != "ml" || res.Secret != "OK" || res.Error != "" {
		t.Fatalf("a test post to a webhook that takes it: %+v, %v", res, err)
	}
	posts := hook.postsTo("/ok/")
	if len(posts) != 1 || !strings.HasPrefix(posts[0].delivery, "test/") || posts[0].contentType != "application/json" ||
		!strings.Contains(posts[0].raw, `"test":true`) ||
		posts[0].body.Text != "gpuq: a test post to webhook OK of project ml, asked for by alice: the ends of jobs naming it in notify.webhook are posted here" {
		t.Fatalf("what the webhook was posted: %+v", posts)
	}
	for name, want := range map[string]string{
		"GONE":      "posting to " + host + ": HTTP 404: no_service",
		"NOT_A_URL": "secret NOT_A_URL of project ml does not hold an http:// or https:// URL with a host",
	} {
		res, err := notifier.TestPost(ctx, "ml", name, "alice")
		if err != nil || res.Delivered || !strings.Contains(res.Error, want) || strings.Contains(res.Error, "secretPart") {
			t.Errorf("a test post to %s: %+v, %v; want it failed with %q", name, res, err, want)
		}
	}
	if _, err := notifier.TestPost(ctx, "ml", "NOT_SET", "alice"); !errors.Is(err, queue.ErrSecretMissing) {
		t.Fatalf("a test post to a secret not set: %v", err)
	}
	// The rules of the server's posts hold: an internal address is refused
	// unless allowed.
	strict := &control.Notifier{Store: s}
	res, err = strict.TestPost(ctx, "ml", "OK", "alice")
	if err != nil || res.Delivered || !strings.Contains(res.Error, "is not a public one, and notifications.allow_private_addresses is off") ||
		len(hook.postsTo("/ok/")) != 1 {
		t.Fatalf("a test post to an internal address, not allowed: %+v, %v", res, err)
	}
}
