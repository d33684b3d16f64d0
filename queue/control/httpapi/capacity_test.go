package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/store"
)

// instanceLife records an instance of pool and moves it through states,
// as the autoscaler does.
func instanceLife(t *testing.T, s *store.Store, id, pool string, states ...queue.InstanceState) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.RecordInstance(ctx, queue.NewInstance{ID: id, Provider: "sim", Pool: pool, ClientToken: id, Slots: 1,
		PriceMicros: 360_000, Currency: "EUR", Billing: queue.BillPerSecond, Message: "1 job waiting"}); err != nil {
		t.Fatal(err)
	}
	from := queue.InstanceRequested
	launched := time.Now().Add(-time.Hour)
	for _, to := range states {
		c := queue.InstanceChange{ID: id, From: []queue.InstanceState{from}, To: to, Reason: "to " + string(to)}
		if to == queue.InstancePending {
			c.ProviderID, c.LaunchedAt = "p-"+id, &launched
		}
		if _, err := s.ChangeInstance(ctx, c); err != nil {
			t.Fatal(err)
		}
		from = to
	}
}

// eventsN reads n events of a stream that does not end by itself (or what
// came in 10 s).
func (e *env) eventsN(path, token string, header []string, n int) []sseEvent {
	e.t.Helper()
	seen := 0
	return e.events(path, token, header, 10*time.Second, func(sseEvent) bool { seen++; return seen >= n })
}

func TestInstanceEventsStreamFromJetStreamAndResumeAfterLastEventID(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	ctx := context.Background()
	announcer := &control.InstanceAnnouncer{Store: e.Store, JS: e.NATS.JS}
	announce := func() {
		t.Helper()
		if _, err := announcer.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	admin := e.token(queue.RoleAdmin, nil, "default")
	instanceLife(t, e.Store, "gq-a", "od", queue.InstancePending, queue.InstanceReady)
	instanceLife(t, e.Store, "gq-b", "spot", queue.InstanceFailed)
	announce()
	var recorded []string
	for _, id := range []string{"gq-a", "gq-b"} {
		evs, err := e.Store.InstanceEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			b, _ := json.Marshal(ev)
			recorded = append(recorded, string(b))
		}
	}

	// Last-Event-ID 0: every retained event, in order, each the recorded
	// document.
	all := e.eventsN("/v1/instances/events", admin, []string{"Last-Event-ID", "0"}, len(recorded))
	if len(all) != len(recorded) {
		t.Fatalf("%d events, want %d: %+v", len(all), len(recorded), all)
	}
	for i, ev := range all {
		if ev.Event != "state" || ev.Data != recorded[i] {
			t.Fatalf("event %d: %+v, want state %s", i, ev, recorded[i])
		}
	}
	resumed := e.eventsN("/v1/instances/events", admin, []string{"Last-Event-ID", all[1].ID}, len(all)-2)
	if len(resumed) != len(all)-2 || resumed[0].ID != all[2].ID || resumed[0].Data != all[2].Data {
		t.Fatalf("resumed after %s: %+v, want from %+v", all[1].ID, resumed, all[2])
	}
	spot := e.eventsN("/v1/instances/events?pool=spot", admin, []string{"Last-Event-ID", "0"}, 2)
	if len(spot) != 2 || !strings.Contains(spot[0].Data, `"gq-b"`) || !strings.Contains(spot[1].Data, `"failed"`) {
		t.Fatalf("pool spot: %+v", spot)
	}

	// Without Last-Event-ID: only what happens from now on.
	req, _ := http.NewRequestWithContext(ctx, "GET", e.URL+"/v1/instances/events", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("following: %v %v", res, err)
	}
	defer res.Body.Close()
	if _, err := e.Store.ChangeInstance(ctx, queue.InstanceChange{ID: "gq-a", From: []queue.InstanceState{queue.InstanceReady},
		To: queue.InstanceDraining, Reason: "idle for 1s"}); err != nil {
		t.Fatal(err)
	}
	announce()
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				got <- data
				return
			}
		}
		close(got)
	}()
	select {
	case data := <-got:
		if !strings.Contains(data, `"draining"`) || !strings.Contains(data, `"idle for 1s"`) {
			t.Fatalf("the first new event: %s, want gq-a draining", data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no new event on the stream")
	}

	// Admins only; bad input names its field.
	doc := loadOpenAPI(t)
	read := e.token(queue.RoleRead, nil, "default")
	r := e.do("GET", "/v1/instances/events", read, "", nil)
	if r.Status != http.StatusForbidden {
		t.Fatalf("a read token: %d %s", r.Status, r.Body)
	}
	doc.check(t, "GET", "/v1/instances/events", r)
	r = e.do("GET", "/v1/instances/events", admin, "", nil, "Last-Event-ID", "yesterday")
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "header.Last-Event-ID") {
		t.Fatalf("a bad Last-Event-ID: %d %s", r.Status, r.Body)
	}
	doc.check(t, "GET", "/v1/instances/events", r)
	r = e.do("GET", "/v1/instances/events?pool=a.b", admin, "", nil)
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "query.pool") {
		t.Fatalf("a bad pool: %d %s", r.Status, r.Body)
	}
	doc.check(t, "GET", "/v1/instances/events", r)
}

func TestSpendOfEveryPoolAndProjectIsAnAdminDocument(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	instanceLife(t, e.Store, "gq-c", "od", queue.InstancePending, queue.InstanceReady)
	doc := loadOpenAPI(t)
	admin := e.token(queue.RoleAdmin, nil, "default")
	since := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	r := e.do("GET", "/v1/spend?since="+since, admin, "", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("spend: %d %s", r.Status, r.Body)
	}
	doc.check(t, "GET", "/v1/spend", r)
	var rep control.SpendReport
	r.json(t, &rep)
	// An hour and a bit at 0.36 EUR/h, per second, no job: all idle.
	if len(rep.Instances) != 1 || len(rep.Totals) != 1 || rep.Totals[0].Micros < 360_000 || rep.Totals[0].IdleMicros != rep.Totals[0].Micros {
		t.Fatalf("spend: %+v", rep)
	}
	if r := e.do("GET", "/v1/spend?since=last-week", admin, "", nil); r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "query.since") {
		t.Fatalf("a bad since: %d %s", r.Status, r.Body)
	}
	r = e.do("GET", "/v1/spend", e.token(queue.RoleRead, nil, "default"), "", nil)
	if r.Status != http.StatusForbidden {
		t.Fatalf("a read token: %d", r.Status)
	}
	doc.check(t, "GET", "/v1/spend", r)
}

// On a deployment that has rented nothing and run no job, the spend
// documents list nothing as empty lists, never null: a client iterating or
// counting them needs no special case.
func TestSpendDocumentsWithNothingToListHoldEmptyLists(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	admin := e.token(queue.RoleAdmin, nil, "default")
	for path, keys := range map[string][]string{
		"/v1/spend":                  {"instances", "pools", "projects", "totals"},
		"/v1/projects/default/spend": {"amounts", "places", "jobs"},
	} {
		r := e.do("GET", path, admin, "", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, r.Status, r.Body)
		}
		var doc map[string]any
		r.json(t, &doc)
		for _, key := range keys {
			if list, ok := doc[key].([]any); !ok || len(list) != 0 {
				t.Errorf("%s: %s is %v, want []", path, key, doc[key])
			}
		}
	}
}

// lateStreams runs before(), once per consumer, just before the consumer's
// first fetch: what happens between a stream's response beginning and the
// API's first read of JetStream.
type lateStreams struct {
	httpapi.Streams
	before *func()
}

func (l lateStreams) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := l.Streams.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	return &lateConsumer{Consumer: c, before: *l.before}, nil
}

type lateConsumer struct {
	jetstream.Consumer
	once   sync.Once
	before func()
}

func (c *lateConsumer) Fetch(batch int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	if c.before != nil {
		c.once.Do(c.before)
	}
	return c.Consumer.Fetch(batch, opts...)
}

// A client following instance events from now on gets an event recorded
// right after its response began, before the API first read the stream:
// "now" is when the request was answered, not when JetStream was first
// asked (an ordered consumer is created again at its first fetch).
func TestInstanceEventsFromNowOnIncludeOnesAnnouncedBeforeTheFirstRead(t *testing.T) {
	t.Parallel()
	var before func()
	e := startEnv(t, func(c *httpapi.Config) { c.JS = lateStreams{Streams: c.JS, before: &before} })
	ctx := context.Background()
	announcer := &control.InstanceAnnouncer{Store: e.Store, JS: e.NATS.JS}
	instanceLife(t, e.Store, "gq-a", "od", queue.InstancePending, queue.InstanceReady)
	if _, err := announcer.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	before = func() {
		if _, err := e.Store.ChangeInstance(ctx, queue.InstanceChange{ID: "gq-a", From: []queue.InstanceState{queue.InstanceReady},
			To: queue.InstanceDraining, Reason: "idle for 1s"}); err != nil {
			t.Error(err)
		}
		if _, err := announcer.Pass(ctx); err != nil {
			t.Error(err)
		}
	}
	evs := e.eventsN("/v1/instances/events", e.token(queue.RoleAdmin, nil, "default"), nil, 1)
	if len(evs) != 1 || !strings.Contains(evs[0].Data, `"draining"`) {
		t.Fatalf("following from now on: %+v, want gq-a's draining announced before the first read", evs)
	}
}
