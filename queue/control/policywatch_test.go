package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// Two servers' watches over one database: a version set through one is in
// effect on the other at its next refresh, and a stored document that
// cannot be read leaves the policy in effect as it was.
func TestAPolicyVersionSetOnOneServerIsInEffectOnAnother(t *testing.T) {
	t.Parallel()
	s, _ := queuetest.Store(t, nil)
	ctx := context.Background()
	config := policy.Rules{Rules: []policy.Rule{{Name: "from-config", Residency: "EU"}}}
	a := &control.PolicyWatch{Store: s, Config: config}
	b := &control.PolicyWatch{Store: s, Config: config}
	for _, w := range []*control.PolicyWatch{a, b} {
		if err := w.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p := b.Current(); p.Source != control.PolicySourceConfig || p.Version != 0 || !strings.Contains(string(p.Document), "from-config") {
		t.Fatalf("before any version, the config file's policy: %+v", p)
	}
	if _, err := a.SetPolicy(ctx, []byte("rules:\n  - {name: swiss, residency: CH}\n"), "yaml", "test", "why", nil); err != nil {
		t.Fatal(err)
	}
	if got := a.Rules().Rules; len(got) != 1 || got[0].Name != "swiss" {
		t.Fatalf("the server that set it places with it at once: %+v", got)
	}
	if got := b.Rules().Rules; got[0].Name != "from-config" {
		t.Fatalf("the other server changes at its refresh, not before: %+v", got)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if p := b.Current(); p.Version != 1 || p.Rules.Rules[0].Residency != "CH" || p.SetBy != "test" || p.Comment != "why" {
		t.Fatalf("after its refresh: %+v", p)
	}

	_, err := a.SetPolicy(ctx, []byte("rules:\n  - {name: typo, residency: EUU}\n"), "yaml", "test", "", nil)
	var pe *control.PolicyError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "rules[0].residency") {
		t.Fatalf("a bad document must be refused naming the key: %v", err)
	}
	// A version this server cannot read (written by a newer one, say).
	if _, err := s.SetPolicy(ctx, json.RawMessage(`{"rules": [{"name": "x", "residency": "EUU"}]}`), "newer", "", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "policy version 2") {
		t.Fatalf("an unreadable version must be an error naming it: %v", err)
	}
	if p := b.Current(); p.Version != 1 || p.Rules.Rules[0].Name != "swiss" {
		t.Fatalf("the policy in effect must stay as it was: %+v", p)
	}
	if _, err := a.SetPolicy(ctx, []byte("{}"), "yaml", "test", "", new(int64)); !errors.Is(err, queue.ErrPolicyChanged) {
		t.Fatalf("a change on version 0 while 2 is in effect: %v, want queue.ErrPolicyChanged", err)
	}
}
