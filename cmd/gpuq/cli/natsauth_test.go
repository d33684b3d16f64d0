package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

func TestDeployNATSAuthIsGeneratedFromTheRoles(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"nats", "compose"} {
		want, err := natsAuthConfig(filepath.Join(deployDir, dir, "roles.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(deployDir, dir, "auth.conf"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("deploy/%s/auth.conf is stale: run `make generate`", dir)
		}
	}
}

func TestNATSAuthRefusesBadRoles(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"bad pool":      "workers: [{pool: 'a b', region: r}]\n",
		"unknown field": "workers: [{pool: a, region: r, zone: z}]\n",
		"no projects":   "submitters: [{projects: []}]\n",
		"bad project":   "submitters: [{projects: [Team.A]}]\n",
		"listed twice":  "workers: [{pool: a, region: r}, {pool: a, region: r}]\n",
		"read regions":  "workers: [{pool: a, region: r, read_regions: [b]}]\n", // a worker reads its pool's bucket only
	} {
		if _, err := natsAuthConfig(writeFile(t, "roles.yaml", body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The deployment's own configuration, loaded by a NATS server as a cluster
// node loads it, grants each role what permissions.go says and no more.
func TestDeployNATSConfigEnforcesTheRoles(t *testing.T) {
	env := map[string]string{}
	for _, user := range clusterConfUsers {
		env[queue.PasswordVariable(user)] = "pw-" + user
	}
	// One node on its own, on this machine.
	srv := startDeployNATS(t, filepath.Join(deployDir, "nats", "cluster.conf"), env, func(opts *server.Options) {
		if len(opts.Users) != len(clusterConfUsers) {
			t.Fatalf("cluster.conf grants %d users, want %v", len(opts.Users), clusterConfUsers)
		}
	})
	connect := func(user string) (*nats.Conn, chan error) {
		errs := make(chan error, 4)
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, "pw-"+user),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc, errs
	}
	publish := func(nc *nats.Conn, errs chan error, subject string) error {
		if err := nc.Publish(subject, []byte("{}")); err != nil {
			return err
		}
		nc.Flush() //nolint:errcheck // violations arrive asynchronously
		select {
		case err := <-errs:
			return err
		case <-time.After(500 * time.Millisecond):
			return nil
		}
	}
	if _, err := nats.Connect(srv.ClientURL(), nats.UserInfo("control", "wrong")); err == nil {
		t.Fatal("a wrong password was admitted")
	}
	w, werrs := connect("worker.aws-fra-l4-spot.eu-central-1")
	for subject, allowed := range map[string]bool{
		"gpuq.svc.worker.aws-fra-l4-spot.claim":              true,
		"gpuq.svc.worker.aws-dub-l4.claim":                   false,
		"gpuq.submit.default":                                false,
		"gpuq.run.aws-fra-l4-spot.j1":                        false,
		"gpuq.cancel.j1":                                     false,
		"$JS.API.CONSUMER.MSG.NEXT.GPUQ_RUN.pool-aws-dub-l4": false,
	} {
		err := publish(w, werrs, subject)
		if allowed != (err == nil) || (err != nil && !errors.Is(err, nats.ErrPermissionViolation)) {
			t.Errorf("worker publishing %s: %v, allowed %v", subject, err, allowed)
		}
	}
	s, serrs := connect("submitter.default")
	for subject, allowed := range map[string]bool{
		"gpuq.submit.default":  true,
		"gpuq.submit.research": false,
		"gpuq.run.any.j1":      false,
		"gpuq.cancel.j1":       false,
	} {
		err := publish(s, serrs, subject)
		if allowed != (err == nil) || (err != nil && !strings.Contains(err.Error(), subject)) {
			t.Errorf("submitter publishing %s: %v, allowed %v", subject, err, allowed)
		}
	}
	c, cerrs := connect("control")
	if err := publish(c, cerrs, "gpuq.run.any.j1"); err != nil {
		t.Errorf("control publishing a run order: %v", err)
	}
	// A machine the autoscaler of such a deployment launches gets its pool's
	// user, with the password from gpuq server's environment, and gets in.
	creds := control.PoolPasswords{Lookup: os.LookupEnv}
	secret, err := creds.WorkerCredential("aws-dub-l4", "eu-west-1", "i-0abc")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := queue.ParseNATSCredential(secret.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(cred.User, cred.Password))
	if err != nil {
		t.Fatalf("a launched machine's credential %s must get in: %v", cred.User, err)
	}
	nc.Close()
	// A pool whose password is not set gets none: its image carries one.
	if s, err := creds.WorkerCredential("gcp-ams-a100", "europe-west4", "i-1"); err != nil || !s.IsZero() {
		t.Errorf("a pool without a password in the environment gets no credential, got %v", err)
	}
}
