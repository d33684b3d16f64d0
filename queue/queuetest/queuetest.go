// Package queuetest starts the real infrastructure gpuq's tests run against:
// an embedded JetStream server per test and a private migrated PostgreSQL
// database per test (see sql/pgtest). Nothing here is a mock.
package queuetest

import (
	"context"
	neturl "net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/store"
	"github.com/gpuq/gpuq/sql/pgtest"
)

// NATS is an embedded JetStream server with gpuq's streams, and a client
// holding the control plane's credential. The server runs with gpuq's roles,
// as `gpuq dev` runs it: WorkerURL and SubmitterURL give narrower ones.
type NATS struct {
	// URL carries the control plane's credential.
	URL    string
	NC     *nats.Conn
	JS     jetstream.JetStream
	Server *queue.EmbeddedNATS
}

// WorkerURL is a client URL carrying a worker credential of pool in region.
func (n *NATS) WorkerURL(t testing.TB, pool, region string) string {
	t.Helper()
	cred, err := n.Server.Issuer.IssueWorker(pool, region, "")
	if err != nil {
		t.Fatal(err)
	}
	return n.Server.URLFor(cred)
}

// SubmitterURL is a client URL carrying a submitter credential of projects.
func (n *NATS) SubmitterURL(t testing.TB, projects ...string) string {
	t.Helper()
	cred, err := n.Server.Issuer.Issue(queue.RoleUser(queue.RoleSubmitter, projects...))
	if err != nil {
		t.Fatal(err)
	}
	return n.Server.URLFor(cred)
}

// Connect connects to url with the inbox prefix its role needs, closed at
// cleanup. Permission violations are reported on errs, when not nil.
func Connect(t testing.TB, url string, errs chan<- error) *nats.Conn {
	t.Helper()
	opts := []nats.Option{}
	if u, err := neturl.Parse(url); err == nil && u.User != nil {
		if p := queue.InboxFor(u.User.Username()); p != "" {
			opts = append(opts, nats.CustomInboxPrefix(p))
		}
	}
	if errs != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// StartNATS starts an embedded server for t, stopped at cleanup.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	srv, err := queue.StartEmbeddedNATS(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect(srv.ControlURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	ensureStreams(t, js)
	return &NATS{URL: srv.ControlURL(), NC: nc, JS: js, Server: srv}
}

// ensureStreams creates gpuq's streams, as every gpuq server does.
func ensureStreams(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, js, queue.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Store opens a store on a fresh migrated database; its events are
// announced on n's JetStream when n is not nil.
func Store(t testing.TB, n *NATS) (*store.Store, string) {
	t.Helper()
	url := pgtest.URL(t)
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if n != nil {
		s.Events = &queue.EventPublisher{NATS: n.NC}
	}
	return s, url
}

// Eventually calls cond until it returns true or timeout passes, failing t
// with what.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RunMessages returns how many messages GPUQ_RUN holds per subject.
func RunMessages(t testing.TB, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, queue.StreamRun)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("gpuq.run.>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// StreamMessages returns how many messages a stream holds.
func StreamMessages(t testing.TB, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// ServerCommand is `gpuq server` (bin) with extra arguments, started as
// deploy/systemd/gpuq-server.service starts it: the NATS URL, its control
// credential and the database URL come from the environment
// (/etc/gpuq/server.env), never from the command line, where any user of
// the machine could read them.
func (n *NATS) ServerCommand(t testing.TB, bin, dbURL string, args ...string) *exec.Cmd {
	t.Helper()
	return serverCommand(bin, n.Server.URL(), n.Server.Control(), dbURL, args)
}

// ServerCommand is `gpuq server` against p, as (*NATS).ServerCommand.
func (p *NATSProcess) ServerCommand(t testing.TB, bin, dbURL string, args ...string) *exec.Cmd {
	t.Helper()
	return serverCommand(bin, p.URL, p.Control, dbURL, args)
}

func serverCommand(bin, natsURL string, control queue.NATSCredential, dbURL string, args []string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"server"}, args...)...)
	cmd.Env = append(os.Environ(),
		"GPUQ_NATS_URL="+natsURL,
		"GPUQ_NATS_CREDENTIAL="+control.String(),
		"GPUQ_DATABASE_URL="+dbURL)
	return cmd
}
