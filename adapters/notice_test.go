package adapters_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

func TestNoticeValidateNamesTheField(t *testing.T) {
	t.Parallel()
	ok := adapters.Notice{Kind: adapters.NoticePreempt, Source: adapters.NoticeAWS, Reason: "terminate", Deadline: time.Now()}
	if err := ok.Validate(); err != nil || !ok.Final() {
		t.Errorf("preempt notice: %v, final %v", err, ok.Final())
	}
	if (adapters.Notice{Kind: adapters.NoticeRebalance}).Final() {
		t.Errorf("a rebalance recommendation counts as final")
	}
	for want, n := range map[string]adapters.Notice{
		"kind:":   {Kind: "stop", Source: adapters.NoticeAWS},
		"source:": {Kind: adapters.NoticePreempt, Source: adapters.NoticeNone},
		"reason:": {Kind: adapters.NoticePreempt, Source: adapters.NoticeGCP, Reason: strings.Repeat("x", 2000)},
	} {
		if err := n.Validate(); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want prefix %q", n.Kind, err, want)
		}
	}
}

func TestNoticeSourcesStateTheirProvidersGrace(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]time.Duration{"aws": 2 * time.Minute, "gcp": 30 * time.Second, "azure": 30 * time.Second, "sigterm": 0, "none": 0} {
		src, err := adapters.ParseNoticeSource(s)
		if err != nil || src.DefaultGrace() != want {
			t.Errorf("%s: %v, grace %s, want %s", s, err, src.DefaultGrace(), want)
		}
	}
	if _, err := adapters.ParseNoticeSource("imds"); err == nil {
		t.Errorf("unknown source accepted")
	}
}
