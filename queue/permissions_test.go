package queue_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// refused publishes subject from nc and asserts that the server answered
// with a permissions violation naming it.
func refused(t *testing.T, nc *nats.Conn, errs chan error, subject string) {
	t.Helper()
	if err := nc.Publish(subject, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	nc.Flush() //nolint:errcheck // the violation arrives asynchronously
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
			t.Fatalf("publishing %s: got %v, want a permissions violation for it", subject, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("publishing %s: the server did not refuse it", subject)
	}
}

func setup(t *testing.T) *queuetest.NATS {
	t.Helper()
	n := queuetest.StartNATS(t)
	ctx := context.Background()
	for _, pool := range []string{"pool-a", "pool-b"} {
		if _, err := queue.EnsurePoolConsumer(ctx, n.JS, pool, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func TestWorkerCredentialCannotSubmitPublishOrdersOrCancel(t *testing.T) {
	t.Parallel()
	n := setup(t)
	errs := make(chan error, 4)
	w := queuetest.Connect(t, n.WorkerURL(t, "pool-a", "eu-1"), errs)
	job := uuid.NewString()
	for _, subject := range []string{
		queue.SubmitSubject("default"),
		queue.RunSubject("pool-a", job), // not even for its own pool
		queue.RunSubject("pool-b", job),
		queue.CancelSubject(job),
		queue.EventSubject(job),
		"$JS.API.STREAM.DELETE." + queue.StreamSubmit,
		"$JS.API.STREAM.PURGE." + queue.StreamRun,
		"gpuq.svc.worker.pool-b.claim", // another pool's worker service
	} {
		refused(t, w, errs, subject)
	}
	if got := queuetest.StreamMessages(t, n.JS, queue.StreamSubmit); got != 0 {
		t.Fatalf("GPUQ_SUBMIT holds %d messages after a worker's publish", got)
	}
	if got := queuetest.RunMessages(t, n.JS); len(got) != 0 {
		t.Fatalf("GPUQ_RUN holds %v after a worker's publish", got)
	}
}

func TestWorkerCredentialWritesOnlyTheLogsOfItsOwnPool(t *testing.T) {
	t.Parallel()
	n := setup(t)
	errs := make(chan error, 4)
	w := queuetest.Connect(t, n.WorkerURL(t, "pool-a", "eu-1"), errs)
	job := uuid.New()
	msg := queue.NewLogMsg("pool-a", job, queue.LogChunk{Attempt: 1, Stream: "stdout", Data: []byte("epoch 1\n")})
	if err := w.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	// Another pool's run of the job, and the job's logs under no pool.
	for _, subject := range []string{queue.LogSubject("pool-b", job.String()), "gpuq.logs." + job.String()} {
		refused(t, w, errs, subject)
	}
	queuetest.Eventually(t, 5*time.Second, "the worker's own log chunk to be stored", func() bool {
		return queuetest.StreamMessages(t, n.JS, queue.StreamLogs) == 1
	})
	var out bytes.Buffer
	if err := queue.ReadLogs(context.Background(), n.JS, job, &out, false, nil); err != nil || out.String() != "epoch 1\n" {
		t.Fatalf("reading the job's logs: %q (%v)", out.String(), err)
	}
}

func TestWorkerCredentialReadsOnlyItsOwnPool(t *testing.T) {
	t.Parallel()
	n := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, pool := range []string{"pool-a", "pool-b"} {
		if _, err := n.JS.Publish(ctx, queue.RunSubject(pool, uuid.NewString()), []byte(pool)); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(queuetest.Connect(t, n.WorkerURL(t, "pool-a", "eu-1"), nil))
	if err != nil {
		t.Fatal(err)
	}

	// Its own pool: the consumer is found (and may be re-created with its
	// own filter), pulled from and acknowledged.
	cons, err := queue.EnsurePoolConsumer(ctx, js, "pool-a", 30*time.Second)
	if err != nil {
		t.Fatalf("a worker of pool-a ensuring its consumer: %v", err)
	}
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range msgs.Messages() {
		if string(m.Data()) != "pool-a" {
			t.Fatalf("worker of pool-a got %q", m.Data())
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("acknowledging its own pool's message: %v", err)
		}
		got++
	}
	if got != 1 {
		t.Fatalf("worker of pool-a pulled %d messages from its pool, want 1 (%v)", got, msgs.Error())
	}

	// Another pool's consumer: neither looked up, created nor pulled.
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if _, err := js.Consumer(short, queue.StreamRun, queue.PoolConsumer("pool-b")); err == nil {
		t.Fatal("a worker of pool-a looked up pool-b's consumer")
	}
	if _, err := queue.EnsurePoolConsumer(short, js, "pool-b", 30*time.Second); err == nil {
		t.Fatal("a worker of pool-a created pool-b's consumer")
	}
	// Nor a consumer of its own name that reads every pool.
	if _, err := js.CreateOrUpdateConsumer(short, queue.StreamRun, jetstream.ConsumerConfig{
		Durable: queue.PoolConsumer("pool-a"), FilterSubject: "gpuq.run.>", AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
		t.Fatal("a worker of pool-a widened its consumer to every pool")
	}
	nc := queuetest.Connect(t, n.WorkerURL(t, "pool-a", "eu-1"), nil)
	reply, err := nc.Request("$JS.API.CONSUMER.MSG.NEXT."+queue.StreamRun+"."+queue.PoolConsumer("pool-b"), []byte(`{"batch":1,"expires":500000000}`), time.Second)
	if err == nil {
		t.Fatalf("a worker of pool-a pulled from pool-b: %q", reply.Data)
	}
	var left uint64
	for subject, count := range queuetest.RunMessages(t, n.JS) {
		if !strings.HasPrefix(subject, "gpuq.run.pool-b.") {
			t.Fatalf("GPUQ_RUN still holds %s", subject)
		}
		left += count
	}
	if left != 1 {
		t.Fatalf("pool-b's run order was consumed: %d left", left)
	}
}

// A worker's credential reads and writes its own pool's archive bucket and
// no other, not even the bucket of another pool of its own region: the
// objects' chunk subjects are random, so scoping reads to a bucket is what
// keeps one pool's workers out of another's checkpoints.
func TestWorkerCredentialUsesOnlyItsPoolsArchiveBucket(t *testing.T) {
	t.Parallel()
	n := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(queuetest.Connect(t, n.WorkerURL(t, "pool-a", "eu-1"), nil))
	if err != nil {
		t.Fatal(err)
	}
	own, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: queue.ArchiveBucket("pool-a")})
	if err != nil {
		t.Fatalf("creating its pool's bucket: %v", err)
	}
	body := bytes.Repeat([]byte("checkpoint "), 100_000) // several chunks
	for range 2 {                                        // the second put replaces the first and purges its chunks
		if _, err := own.Put(ctx, jetstream.ObjectMeta{Name: "job/1.tar.zst"}, bytes.NewReader(body)); err != nil {
			t.Fatalf("putting into its pool's bucket: %v", err)
		}
	}
	got, err := own.GetBytes(ctx, "job/1.tar.zst")
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("reading back from its pool's bucket: %d bytes, %v", len(got), err)
	}
	if err := own.Delete(ctx, "job/1.tar.zst"); err != nil {
		t.Fatalf("deleting from its pool's bucket: %v", err)
	}

	// pool-b lies in the same region; pool-c in another.
	for _, pool := range []string{"pool-b", "pool-c"} {
		bucket := queue.ArchiveBucket(pool)
		other, err := n.JS.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		info, err := other.PutBytes(ctx, "jobs/2/checkpoint-a1-1.tar.zst", []byte("another pool's checkpoint"))
		if err != nil {
			t.Fatal(err)
		}
		short, stop := context.WithTimeout(ctx, 2*time.Second)
		if _, err := js.ObjectStore(short, bucket); err == nil {
			t.Fatalf("a worker of pool-a opened %s", bucket)
		}
		if _, err := js.CreateOrUpdateObjectStore(short, jetstream.ObjectStoreConfig{Bucket: bucket}); err == nil {
			t.Fatalf("a worker of pool-a reconfigured %s", bucket)
		}
		stop()
		// Nor around the bucket's API: the object's metadata, its chunks
		// (by a consumer on their subject or by sequence), a purge.
		nc := queuetest.Connect(t, n.WorkerURL(t, "pool-a", "eu-1"), nil)
		stream := "OBJ_" + bucket
		for subject, body := range map[string]string{
			"$JS.API.DIRECT.GET." + stream:                                                 `{"seq":1}`,
			"$JS.API.STREAM.MSG.GET." + stream:                                             `{"seq":1}`,
			"$JS.API.CONSUMER.CREATE." + stream:                                            `{"config":{"deliver_policy":"all","ack_policy":"none","filter_subject":"$O.` + bucket + `.C.` + info.NUID + `"}}`,
			"$JS.API.CONSUMER.CREATE." + stream + ".peek.$O." + bucket + ".C." + info.NUID: `{"config":{"name":"peek","deliver_policy":"all","ack_policy":"none","filter_subject":"$O.` + bucket + `.C.` + info.NUID + `"}}`,
			"$JS.API.STREAM.PURGE." + stream:                                               `{}`,
		} {
			if reply, err := nc.Request(subject, []byte(body), time.Second); err == nil {
				t.Fatalf("a worker of pool-a was answered on %s: %s", subject, reply.Data)
			}
		}
		if got, err := other.GetBytes(ctx, "jobs/2/checkpoint-a1-1.tar.zst"); err != nil || string(got) != "another pool's checkpoint" {
			t.Fatalf("%s's object must be untouched: %q, %v", bucket, got, err)
		}
	}
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if err := js.DeleteObjectStore(short, queue.ArchiveBucket("pool-a")); err == nil {
		t.Fatal("a worker deleted its pool's bucket")
	}
}

func TestSubmitterCredentialSubmitsOnlyToItsProjects(t *testing.T) {
	t.Parallel()
	n := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 4)
	nc := queuetest.Connect(t, n.SubmitterURL(t, "teama"), errs)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := queue.ParseSpec([]byte("project: teama\nname: ok\ncommand: [\"true\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Submit(ctx, js, spec); err != nil {
		t.Fatalf("a submitter of teama submitting to teama: %v", err)
	}
	job := uuid.NewString()
	for _, subject := range []string{
		queue.SubmitSubject("teamb"),
		queue.RunSubject("pool-a", job),
		queue.CancelSubject(job),
		queue.EventSubject(job),
		"gpuq.svc.worker.pool-a.complete",
		"gpuq.svc.client.teamb.cancel",
		"$JS.API.STREAM.PURGE." + queue.StreamSubmit,
	} {
		refused(t, nc, errs, subject)
	}
	if _, err := nc.Subscribe("gpuq.events.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	nc.Flush() //nolint:errcheck // the violation arrives asynchronously
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("subscribing to every job's events: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a submitter subscribed to every job's events")
	}
	if got := queuetest.StreamMessages(t, n.JS, queue.StreamSubmit); got != 1 {
		t.Fatalf("GPUQ_SUBMIT holds %d messages, want the one allowed submission", got)
	}
	if got := queuetest.RunMessages(t, n.JS); len(got) != 0 {
		t.Fatalf("GPUQ_RUN holds %v after a submitter's publish", got)
	}
}

func TestIssuedCredentialsAreCheckedByTheServer(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	for name, url := range map[string]string{
		"no credential":       n.Server.URL(),
		"forged password":     strings.Replace(n.WorkerURL(t, "pool-a", "eu-1"), "@", "x@", 1),
		"renamed role":        strings.Replace(n.WorkerURL(t, "pool-a", "eu-1"), "worker.pool-a", "worker.pool-b", 1),
		"control from worker": strings.Replace(n.WorkerURL(t, "pool-a", "eu-1"), "worker.pool-a.eu-1", "control", 1),
	} {
		if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
}

func TestOnlyTheControlPlaneMayAnnounceInstanceEvents(t *testing.T) {
	t.Parallel()
	n := setup(t)
	subject := queue.InstanceSubject("pool-a", "gq-1")
	for name, url := range map[string]string{
		"worker of the pool": n.WorkerURL(t, "pool-a", "eu-1"),
		"submitter":          n.SubmitterURL(t, "default"),
	} {
		errs := make(chan error, 4)
		nc := queuetest.Connect(t, url, errs)
		refused(t, nc, errs, subject)
		// Nor through JetStream's API with an expected stream.
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = js.Publish(ctx, subject, []byte("{}"))
		cancel()
		if err == nil {
			t.Fatalf("%s: a JetStream publish of an instance event succeeded", name)
		}
	}
	if got := queuetest.StreamMessages(t, n.JS, queue.StreamInstances); got != 0 {
		t.Fatalf("GPUQ_INSTANCES holds %d messages after others' publishes", got)
	}
	// The control plane's credential may.
	if _, err := n.JS.Publish(context.Background(), subject, []byte("{}")); err != nil {
		t.Fatalf("the control plane announcing: %v", err)
	}
	if got := queuetest.StreamMessages(t, n.JS, queue.StreamInstances); got != 1 {
		t.Fatalf("GPUQ_INSTANCES holds %d messages, want the control plane's one", got)
	}
}

// A server started again with its issuer's key admits the credentials
// issued before, and no other; a short key is refused.
func TestAServerRestartedWithItsKeyAdmitsTheCredentialsIssuedBefore(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, 32)
	first, err := queue.NewCredentialIssuerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := first.IssueWorker("eu-cpu", "eu-1", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, k := range [][]byte{key, bytes.Repeat([]byte{8}, 32)} {
		issuer, err := queue.NewCredentialIssuerFromKey(k)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := queue.StartEmbeddedNATSWith(dir, 0, issuer)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(srv.URLFor(cred))
		if admitted := err == nil; admitted != (i == 0) {
			t.Errorf("server %d: credential admitted %v, want %v (%v)", i, admitted, i == 0, err)
		}
		if nc != nil {
			nc.Close()
		}
		srv.Stop()
	}
	if _, err := queue.NewCredentialIssuerFromKey(key[:16]); err == nil {
		t.Error("a 16-byte key was accepted")
	}
}

func TestArchiveJobReadsTheJobOfItsOwnArchivesOnly(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	if got, ok := queue.ArchiveJob(queue.JobArchivePrefix("eu-cpu", id) + "checkpoint-a1-1.tar.zst"); !ok || got != id {
		t.Errorf("a checkpoint's URI: got %s, %v", got, ok)
	}
	for _, uri := range []string{
		"nats-os://gpuq-pool-eu-cpu/notes/kept.txt",
		"nats-os://gpuq-pool-eu-cpu/jobs/" + id.String() + "/",
		"nats-os://gpuq-pool-eu-cpu/jobs/" + id.String() + "/a/b",
		"nats-os://gpuq-pool-eu-cpu/jobs/" + strings.ToUpper(id.String()) + "/x",
		"nats-os://other/jobs/" + id.String() + "/x",
		"s3://gpuq-pool-eu-cpu/jobs/" + id.String() + "/x",
	} {
		if got, ok := queue.ArchiveJob(uri); ok {
			t.Errorf("%s: want no job, got %s", uri, got)
		}
	}
}
