package control_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// A worker gets the values of the secrets its job names only while it runs
// the job's latest attempt on the job's pool, read from the job's project
// by the names of the job's spec as PostgreSQL holds it; a secret not set
// (or deleted since) is a secret_missing naming it and no value. A project
// keeps at most queue.MaxProjectSecrets, and listing them shows no value.
func TestAWorkerGetsTheSecretsItsRunningJobNamesAndNoOthers(t *testing.T) {
	t.Parallel()
	n := queuetest.StartNATS(t)
	s, _ := queuetest.Store(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pools := staticPools{"p": {Region: "r", Country: "DE"}, "q": {Region: "r", Country: "DE"}}
	if _, err := (&control.WorkerService{NATS: n.NC, Store: s, Pools: pools}).Start(ctx); err != nil {
		t.Fatal(err)
	}
	held := map[string]string{"HF_TOKEN": "hf_0123456789", "WANDB_API_KEY": "wandb-abcdef"}
	for name, v := range held {
		if _, err := s.SetSecret(ctx, "ml", name, v, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// Another project's secret of the same name is not the job's.
	if _, err := s.SetSecret(ctx, "other", "AWS_SECRET", "aws-of-other", "test"); err != nil {
		t.Fatal(err)
	}
	secrets := func(pool string, req queue.WorkerRequest) *queue.WorkerReply {
		req.Pool = pool
		return ask(t, n, queue.WorkerServiceSubject(pool, queue.WorkerOpSecrets), req)
	}
	job := placedJobOf(t, s, "project: ml\ncommand: [python3, train.py]\nsecrets: [WANDB_API_KEY, HF_TOKEN]\n")
	if r := secrets("p", queue.WorkerRequest{JobID: job, Attempt: 1}); r.Error == nil || r.Error.Kind != queue.WireFenced || r.Secrets != nil {
		t.Fatalf("secrets of an attempt not running: %+v %v", r.Error, r.Secrets)
	}
	if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(job, "p")}}); r.Claims[0].Claimed == nil {
		t.Fatalf("claim: %+v", r.Claims[0].Error)
	}
	if r := secrets("q", queue.WorkerRequest{JobID: job, Attempt: 1}); r.Error == nil || r.Error.Kind != queue.WireBadRequest || r.Secrets != nil {
		t.Fatalf("secrets asked by another pool's worker: %+v %v", r.Error, r.Secrets)
	}
	if r := secrets("p", queue.WorkerRequest{JobID: job, Attempt: 2}); r.Error == nil || r.Error.Kind != queue.WireFenced || r.Secrets != nil {
		t.Fatalf("secrets of an attempt the job has not had: %+v %v", r.Error, r.Secrets)
	}
	if r := secrets("p", queue.WorkerRequest{JobID: job, Attempt: 1}); r.Error != nil || !maps.Equal(r.Secrets, held) {
		t.Fatalf("secrets of the running attempt: %v %+v, want %v", r.Secrets, r.Error, held)
	}

	// Deleted while the job waits: it cannot run anywhere, and the
	// refusal names the secret without holding any value.
	if err := s.DeleteSecret(ctx, "ml", "HF_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSecret(ctx, "ml", "HF_TOKEN"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("deleting a secret not set: %v", err)
	}
	r := secrets("p", queue.WorkerRequest{JobID: job, Attempt: 1})
	if r.Error == nil || r.Error.Kind != queue.WireSecretMissing || r.Secrets != nil ||
		r.Error.Message != "secret HF_TOKEN is not set for project ml (never set, or deleted since the job was submitted): gpuq secret set --project ml HF_TOKEN" {
		t.Fatalf("a secret deleted since: %+v %v", r.Error, r.Secrets)
	}
	if !errors.Is(r.Error.Err(), queue.ErrSecretMissing) {
		t.Fatalf("the worker reads %v, want ErrSecretMissing", r.Error.Err())
	}

	for _, tc := range []struct{ spec, kind string }{
		{"project: ml\ncommand: [python3, train.py]\n", queue.WireBadRequest},
		{"project: ml\ncommand: [python3, train.py]\nsecrets: [AWS_SECRET]\n", queue.WireSecretMissing},
	} {
		id := placedJobOf(t, s, tc.spec)
		if r := ask(t, n, queue.WorkerServiceSubject("p", queue.WorkerOpClaim), queue.WorkerRequest{Pool: "p", Claims: []queue.ClaimRequest{claimOf(id, "p")}}); r.Claims[0].Claimed == nil {
			t.Fatalf("claim: %+v", r.Claims[0].Error)
		}
		if r := secrets("p", queue.WorkerRequest{JobID: id, Attempt: 1}); r.Error == nil || r.Error.Kind != tc.kind || r.Secrets != nil {
			t.Fatalf("%q: %+v %v, want %s", tc.spec, r.Error, r.Secrets, tc.kind)
		}
	}

	// Listing shows names only; a project holds a bounded number, and a
	// set value is replaced at any count.
	for i := len(held) - 1; i < queue.MaxProjectSecrets; i++ {
		if _, err := s.SetSecret(ctx, "ml", fmt.Sprintf("S%03d", i), "v", "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SetSecret(ctx, "ml", "ONE_MORE", "v", "test"); !errors.Is(err, queue.ErrTooManySecrets) {
		t.Fatalf("secret %d of a project: %v, want ErrTooManySecrets", queue.MaxProjectSecrets+1, err)
	}
	if _, err := s.SetSecret(ctx, "ml", "WANDB_API_KEY", "wandb-rotated", "test"); err != nil {
		t.Fatalf("replacing a value at the bound: %v", err)
	}
	list, err := s.Secrets(ctx, "ml")
	if err != nil || len(list) != queue.MaxProjectSecrets || list[0].Name != "S001" || list[len(list)-1].Name != "WANDB_API_KEY" {
		t.Fatalf("secrets of ml: %d, %v", len(list), err)
	}
	if got := fmt.Sprintf("%+v", list); strings.Contains(got, "wandb-") {
		t.Fatalf("a listing holds a value: %s", got)
	}
}
