package rest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/internal/rest"
)

func TestRetryAfterReadsSecondsAndDates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"7": 7 * time.Second, "": 0, "soon": 0, "-3": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
	} {
		if got := rest.RetryAfter(http.Header{"Retry-After": {v}}, now); got != want {
			t.Errorf("Retry-After %q = %s, want %s", v, got, want)
		}
	}
}

func TestStatusesMapOntoKinds(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]error{400: adapters.ErrInvalidRequest, 401: adapters.ErrAuth, 403: adapters.ErrAuth,
		402: adapters.ErrQuotaExceeded, 404: adapters.ErrNotFound, 429: adapters.ErrRateLimited, 500: adapters.ErrProviderDown, 504: adapters.ErrProviderDown} {
		if got := rest.KindOfStatus(status); got != want {
			t.Errorf("%d → %v, want %v", status, got, want)
		}
	}
}

func TestTransportFailureIsProviderDownWithoutTheURL(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	base := srv.URL
	srv.Close()
	_, err := rest.Do(context.Background(), http.DefaultClient, "p", "offers", base, rest.Request{Method: http.MethodGet, Path: "/x?token=abc"})
	if !errors.Is(err, adapters.ErrProviderDown) || strings.Contains(err.Error(), "token=abc") {
		t.Errorf("Do against a closed server = %v", err)
	}
}

func TestOversizedBodyIsRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write(make([]byte, rest.MaxBody+10)) //nolint:errcheck // test server
	}))
	defer srv.Close()
	_, err := rest.Do(context.Background(), srv.Client(), "p", "list", srv.URL, rest.Request{Method: http.MethodGet, Path: "/"})
	if err == nil || !strings.Contains(err.Error(), "response larger than") {
		t.Errorf("Do = %v", err)
	}
}
