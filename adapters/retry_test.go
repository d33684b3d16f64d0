package adapters_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

func launchRequest() adapters.LaunchRequest {
	return adapters.LaunchRequest{Pool: "h100-eu", ClientToken: "tok-1", Boot: bootSpec()}
}

var fastRetry = adapters.RetryConfig{Attempts: 4, Backoff: time.Millisecond, MaxWait: time.Second, AttemptTimeout: time.Second}

func TestLaunchIdempotentFindsTheMachineOfADroppedResponse(t *testing.T) {
	t.Parallel()
	created := 0
	create := func(context.Context) (adapters.Instance, error) {
		created++
		// The provider rents the machine, then the response is lost.
		return adapters.Instance{}, &adapters.ProviderError{Provider: "p", Op: "launch", Kind: adapters.ErrProviderDown}
	}
	find := func(_ context.Context, token string) (adapters.Instance, bool, error) {
		if created == 0 || token != "tok-1" {
			return adapters.Instance{}, false, nil
		}
		return adapters.Instance{ProviderID: "m-1", ClientToken: token}, true, nil
	}
	inst, err := adapters.LaunchIdempotent(context.Background(), fastRetry, launchRequest(), create, find)
	if err != nil || inst.ProviderID != "m-1" || created != 1 {
		t.Errorf("LaunchIdempotent = %+v, %v after %d creates; want m-1 after 1", inst, err, created)
	}
}

func TestLaunchIdempotentRetriesWhenNothingWasRented(t *testing.T) {
	t.Parallel()
	created, looked := 0, 0
	create := func(context.Context) (adapters.Instance, error) {
		created++
		if created == 1 {
			return adapters.Instance{}, &adapters.ProviderError{Kind: adapters.ErrProviderDown}
		}
		return adapters.Instance{ProviderID: "m-2"}, nil
	}
	find := func(context.Context, string) (adapters.Instance, bool, error) {
		looked++
		return adapters.Instance{}, false, nil
	}
	inst, err := adapters.LaunchIdempotent(context.Background(), fastRetry, launchRequest(), create, find)
	if err != nil || inst.ProviderID != "m-2" || created != 2 || looked != 1 {
		t.Errorf("got %+v, %v; creates %d, lookups %d; want m-2, 2, 1", inst, err, created, looked)
	}
}

func TestLaunchIdempotentGivesUpWhenTheLookupFails(t *testing.T) {
	t.Parallel()
	created := 0
	create := func(context.Context) (adapters.Instance, error) {
		created++
		return adapters.Instance{}, &adapters.ProviderError{Kind: adapters.ErrProviderDown}
	}
	find := func(context.Context, string) (adapters.Instance, bool, error) {
		return adapters.Instance{}, false, &adapters.ProviderError{Kind: adapters.ErrAuth}
	}
	_, err := adapters.LaunchIdempotent(context.Background(), fastRetry, launchRequest(), create, find)
	if err == nil || created != 1 || !errors.Is(err, adapters.ErrProviderDown) {
		t.Errorf("err = %v after %d creates; want the launch error after 1", err, created)
	}
}

func TestLaunchIdempotentDoesNotRetryWhatRetryingCannotCure(t *testing.T) {
	t.Parallel()
	for _, kind := range []error{adapters.ErrCapacityUnavailable, adapters.ErrQuotaExceeded, adapters.ErrAuth, adapters.ErrInvalidRequest} {
		created := 0
		create := func(context.Context) (adapters.Instance, error) {
			created++
			return adapters.Instance{}, &adapters.ProviderError{Kind: kind, Pool: "h100-eu"}
		}
		find := func(context.Context, string) (adapters.Instance, bool, error) {
			t.Errorf("%v: looked up the token after a refused launch", kind)
			return adapters.Instance{}, false, nil
		}
		_, err := adapters.LaunchIdempotent(context.Background(), fastRetry, launchRequest(), create, find)
		if !errors.Is(err, kind) || created != 1 {
			t.Errorf("%v: err = %v after %d creates", kind, err, created)
		}
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	var calls []time.Time
	err := adapters.Retry(context.Background(), fastRetry, func(context.Context) error {
		calls = append(calls, time.Now())
		if len(calls) == 1 {
			return &adapters.ProviderError{Kind: adapters.ErrRateLimited, RetryAfter: 150 * time.Millisecond}
		}
		return nil
	})
	if err != nil || len(calls) != 2 {
		t.Fatalf("Retry = %v after %d calls", err, len(calls))
	}
	if gap := calls[1].Sub(calls[0]); gap < 150*time.Millisecond {
		t.Errorf("retried after %s, before the provider's Retry-After of 150ms", gap)
	}
}

func TestRetryRefusesAWaitLongerThanAllowed(t *testing.T) {
	t.Parallel()
	calls := 0
	err := adapters.Retry(context.Background(), fastRetry, func(context.Context) error {
		calls++
		return &adapters.ProviderError{Kind: adapters.ErrRateLimited, RetryAfter: time.Hour}
	})
	if !errors.Is(err, adapters.ErrRateLimited) || calls != 1 {
		t.Errorf("Retry = %v after %d calls", err, calls)
	}
}

func TestTransientKindsMatchErrTransient(t *testing.T) {
	t.Parallel()
	for _, k := range []error{adapters.ErrRateLimited, adapters.ErrProviderDown} {
		err := error(&adapters.ProviderError{Provider: "p", Op: "launch", Kind: k})
		if !errors.Is(err, adapters.ErrTransient) || !errors.Is(err, k) {
			t.Errorf("%v does not match itself and ErrTransient", k)
		}
	}
	if errors.Is(adapters.ErrQuotaExceeded, adapters.ErrTransient) {
		t.Errorf("quota counts as transient")
	}
}

func TestParsePriceRoundsToMicros(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1.20": 1_200_000, "2": 2_000_000, ".5": 500_000, "0.0000005": 1, "0.00000049": 0, "3.1234567": 3_123_457} {
		m, err := adapters.ParsePrice(in, "EUR")
		if err != nil || m.Micros != want || m.Currency != "EUR" {
			t.Errorf("ParsePrice(%q) = %+v, %v; want %d micros", in, m, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1,5", "1e3", "abc"} {
		if _, err := adapters.ParsePrice(bad, "EUR"); err == nil {
			t.Errorf("ParsePrice(%q) accepted", bad)
		}
	}
	if _, err := adapters.ParsePrice("1", "euro"); err == nil {
		t.Errorf("bad currency accepted")
	}
}

func TestLaunchIdempotentLooksForTheMachineAfterATimeout(t *testing.T) {
	t.Parallel()
	created := 0
	create := func(ctx context.Context) (adapters.Instance, error) {
		created++
		// The provider rents the machine but answers too late.
		<-ctx.Done()
		return adapters.Instance{}, ctx.Err()
	}
	find := func(context.Context, string) (adapters.Instance, bool, error) {
		return adapters.Instance{ProviderID: "m-late"}, created > 0, nil
	}
	cfg := fastRetry
	cfg.AttemptTimeout = 20 * time.Millisecond
	inst, err := adapters.LaunchIdempotent(context.Background(), cfg, launchRequest(), create, find)
	if err != nil || inst.ProviderID != "m-late" || created != 1 {
		t.Errorf("LaunchIdempotent = %+v, %v after %d creates; want m-late after 1", inst, err, created)
	}
}
