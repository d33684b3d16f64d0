package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var timeZero = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// checkDevHTTP checks what `gpuq dev`, run in dir, says of its HTTP API:
// the token it printed is in .gpuq/token and .gpuq/config.yaml, both
// readable by the user only, and the API at url accepts it.
func checkDevHTTP(t *testing.T, dir, url, token string) {
	t.Helper()
	if url == "" || !strings.HasPrefix(token, "gpuq_") {
		t.Fatalf("gpuq dev must print its API's url and token, got %q %q", url, token)
	}
	for _, name := range []string{devTokenFile, devConfigFile} {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if info.Mode().Perm() != 0o600 || !strings.Contains(string(b), token) {
			t.Fatalf("%s: mode %v, want 0600 and the token", name, info.Mode().Perm())
		}
	}
	req, _ := http.NewRequest("GET", url+"/v1/jobs", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/v1/jobs with the dev token: %d", url, res.StatusCode)
	}
}

func TestTokenExpiryIsADurationOrATime(t *testing.T) {
	t.Parallel()
	if _, err := parseExpiry("-1h", timeZero); err == nil || !strings.Contains(err.Error(), "--expires") {
		t.Fatalf("a past duration must be refused naming --expires: %v", err)
	}
	if _, err := parseExpiry("tomorrow", timeZero); err == nil || !strings.Contains(err.Error(), "--expires") {
		t.Fatalf("garbage must be refused naming --expires: %v", err)
	}
	if got, err := parseExpiry("24h", timeZero); err != nil || !got.Equal(timeZero.Add(24*60*60*1e9)) {
		t.Fatalf("24h from now: %v %v", got, err)
	}
	if got, _ := parseExpiry("", timeZero); got != nil {
		t.Fatalf("no --expires: never, got %v", got)
	}
}
