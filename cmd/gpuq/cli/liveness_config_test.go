package cli

import (
	"strings"
	"testing"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/sql/pgtest"
)

// `gpuq server` refuses a liveness.lost_after that leaves room for fewer
// than three beats, or an unknown key under liveness, naming the key.
func TestServerRefusesABadLivenessConfigNamingTheKey(t *testing.T) {
	dbURL := pgtest.URL(t)
	ns, err := queue.StartEmbeddedNATS(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	t.Setenv(adapters.EnvNATSCredential, ns.Control().String())
	for config, want := range map[string]string{
		"liveness: {lost_after: 100ms}\n": "liveness.lost_after: must be 450ms (three beats) to 30s, got 100ms",
		"liveness: {lost_after: 1m}\n":    "liveness.lost_after: must be 450ms (three beats) to 30s, got 1m0s",
		"liveness: {lost: 1s}\n":          "lost",
	} {
		_, _, err := runCLI(t, "server", "--nats-url", ns.URL(), "--database-url", dbURL, "--config", writeFile(t, "server.yaml", config))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "liveness") {
			t.Errorf("config %q: got %v, want an error naming liveness and %q", config, err, want)
		}
	}
}
