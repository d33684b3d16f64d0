package local_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/adaptertest"
	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/policy"
)

var _ adapters.Provider = (*local.Provider)(nil)

// processes is the local provider's side of the conformance suite: its
// "cloud" is this machine, which documents no failures, has no pages and
// knows every pool's country from configuration.
type processes struct{ p *local.Provider }

func (f processes) Fail(adaptertest.Op, error, int) bool { return false }
func (f processes) DropLaunchResponse() bool             { return false }
func (f processes) Boot()                                {}
func (f processes) Calls(adaptertest.Op) []time.Time     { return nil }
func (f processes) SetPageSize(int) bool                 { return false }
func (f processes) AddUnknownLocation() bool             { return false }
func (f processes) Rented() int {
	all, _ := f.p.Instances(context.Background(), adapters.InstanceFilter{IncludeGone: true})
	return len(all)
}

func TestProviderPassesTheConformanceSuite(t *testing.T) {
	t.Parallel()
	// Each instance is a process that waits to be stopped, standing in for
	// `gpuq worker`: the suite proves the provider's bookkeeping, and the
	// end-to-end tests prove the worker.
	exe := filepath.Join(t.TempDir(), "worker")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	adaptertest.Run(t, func(t *testing.T) adaptertest.Target {
		p, err := local.New([]local.PoolConfig{pool()})
		if err != nil {
			t.Fatal(err)
		}
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		p.Workers = &local.Launcher{Executable: exe, Output: devnull, StopTimeout: time.Second}
		t.Cleanup(func() {
			all, _ := p.Instances(context.Background(), adapters.InstanceFilter{})
			for _, i := range all {
				p.Terminate(context.Background(), i.ProviderID) //nolint:errcheck // cleaning up
			}
		})
		want, err := pool().Offer("pools[0]")
		if err != nil {
			t.Fatal(err)
		}
		return adaptertest.Target{Provider: p, Fake: processes{p}, WantOffers: []policy.Offer{want},
			Pool: "dev-gpu", Region: "home", Country: "DE"}
	})
}
