package adapters_test

import (
	"strings"
	"testing"

	"github.com/gpuq/gpuq/adapters"
)

func TestLaunchRequestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	if err := launchRequest().Validate(); err != nil {
		t.Fatal(err)
	}
	for want, change := range map[string]func(*adapters.LaunchRequest){
		"pool:":         func(r *adapters.LaunchRequest) { r.Pool = "a.b" },
		"client_token:": func(r *adapters.LaunchRequest) { r.ClientToken = strings.Repeat("t", 65) },
		"boot.pool:":    func(r *adapters.LaunchRequest) { r.Boot.Pool = "other" },
		"boot.nats_url:": func(r *adapters.LaunchRequest) {
			r.Boot.NATSURL = ""
		},
	} {
		r := launchRequest()
		change(&r)
		if err := r.Validate(); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Validate = %v, want prefix %q", err, want)
		}
	}
	tags := launchRequest().Tags()
	if tags[adapters.TagClientToken] != "tok-1" || tags[adapters.TagPool] != "h100-eu" || tags[adapters.TagManagedBy] != "gpuq" || tags[adapters.TagInstance] != "i-0123" {
		t.Errorf("Tags = %v", tags)
	}
}

func TestInstanceFilterHidesGoneInstancesUnlessAsked(t *testing.T) {
	t.Parallel()
	gone := adapters.Instance{Pool: "p", ClientToken: "t", State: adapters.StatePreempted}
	up := adapters.Instance{Pool: "p", ClientToken: "t", State: adapters.StateRunning}
	if (adapters.InstanceFilter{Pool: "p"}).Match(gone) || !(adapters.InstanceFilter{Pool: "p", IncludeGone: true}).Match(gone) {
		t.Errorf("IncludeGone not honoured")
	}
	if (adapters.InstanceFilter{ClientToken: "u"}).Match(up) || !(adapters.InstanceFilter{ClientToken: "t"}).Match(up) {
		t.Errorf("ClientToken not honoured")
	}
}
