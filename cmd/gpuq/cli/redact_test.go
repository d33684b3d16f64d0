package cli

import (
	"strings"
	"testing"
)

// A password in a NATS or PostgreSQL URL never reaches an error message,
// even when the URL is malformed and a driver would echo it whole.
func TestCredentialsAreRedactedFromErrors(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"nats url":             {"nodes", "--nats-url", "nats://alice:s3cret-pw@127.0.0.1:1"},
		"nats url list":        {"nodes", "--nats-url", "nats://127.0.0.1:1,nats://alice:s3cret-pw@127.0.0.1:2"},
		"malformed postgres":   {"migrate", "--database-url", "postgres://alice:s3cret-pw@127.0.0.1:notaport/db"},
		"unreachable postgres": {"migrate", "--database-url", "postgres://alice:s3cret-pw@127.0.0.1:1/db?sslmode=disable"},
		"key=value postgres":   {"migrate", "--database-url", "host=127.0.0.1 port=1 user=alice password=s3cret-pw sslmode=disable"},
		"malformed credential": {"nodes", "--nats-url", "nats://127.0.0.1:1", "--config", writeFile(t, "c.yaml", "nats-credential: \"s3cret-pw\"\n")},
	} {
		out, errOut, err := runCLI(t, args...)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if all := out + errOut + err.Error(); strings.Contains(all, "s3cret-pw") {
			t.Errorf("%s: the password is shown: %s", name, all)
		}
	}
}
