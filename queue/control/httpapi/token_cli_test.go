package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/cmd/gpuq/cli"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// TestTokenCommandsMakeTokensTheAPIHonours drives `gpuq token create`, `ls`
// and `revoke` against the API server's database.
func TestTokenCommandsMakeTokensTheAPIHonours(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	_, dbURL := queuetest.Store(t, n)
	e := startEnvOn(t, n, dbURL, nil)
	gpuq := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := cli.Main(append(args, "--database-url", dbURL), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	if _, errOut, code := gpuq("token", "create", "--project", "ml", "--role", "owner"); code == 0 || !strings.Contains(errOut, "role") {
		t.Fatalf("a bad role must be refused naming --role: %d %s", code, errOut)
	}
	out, errOut, code := gpuq("token", "create", "--project", "ml", "--role", "read", "--expires", "24h", "--name", "dashboard")
	secret := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(secret, "gpuq_") || strings.Contains(errOut, secret) {
		t.Fatalf("token create: %d %q %q", code, out, errOut)
	}
	if r := e.do("GET", "/v1/jobs", secret, "", nil); r.Status != http.StatusOK {
		t.Fatalf("the created token: %d %s", r.Status, r.Body)
	}
	if r := e.do("POST", "/v1/jobs", secret, "application/yaml", []byte("command: [/bin/true]\n")); r.Status != http.StatusForbidden {
		t.Fatalf("a read token submitting: %d", r.Status)
	}
	list, _, code := gpuq("token", "ls")
	if code != 0 || !strings.Contains(list, "dashboard") || strings.Contains(list, secret[len("gpuq_")+13:]) {
		t.Fatalf("token ls must list the token without its secret:\n%s", list)
	}
	id := strings.Fields(strings.Split(list, "\n")[1])[0]
	if _, errOut, code := gpuq("token", "revoke", id); code != 0 {
		t.Fatalf("token revoke: %s", errOut)
	}
	if r := e.do("GET", "/v1/jobs", secret, "", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("the revoked token: %d, want 401", r.Status)
	}
}
