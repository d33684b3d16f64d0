package queue_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

func TestClaimedParsesTheSpecItCarriesOnce(t *testing.T) {
	c := &queue.Claimed{Job: &queue.Job{ID: uuid.New()}, SpecJSON: []byte(`{"command": ["/bin/echo", "hi"], "env": {"A": "1"}}`)}
	if err := c.ParseSpec(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Job.Spec.Command, " "); got != "/bin/echo hi" || c.Job.Spec.Env["A"] != "1" {
		t.Fatalf("parsed spec: command %q, env %v", got, c.Job.Spec.Env)
	}
	parsed := c.Job.Spec
	c.SpecJSON = []byte(`{"command": ["/bin/false"]}`)
	if err := c.ParseSpec(); err != nil || c.Job.Spec != parsed {
		t.Fatalf("a parsed spec was parsed again (err %v)", err)
	}

	for name, raw := range map[string]string{"missing": "", "not JSON": "{", "wrong shape": `[1, 2]`} {
		c := &queue.Claimed{Job: &queue.Job{ID: uuid.New()}, SpecJSON: []byte(raw)}
		if err := c.ParseSpec(); err == nil || !strings.Contains(err.Error(), c.Job.ID.String()) {
			t.Errorf("%s spec: error %v, want one naming the job", name, err)
		}
	}
}
