package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// MaxBody bounds every response body read from a provider.
const MaxBody = 8 << 20

// Request is one call to a provider's API.
type Request struct {
	Method string
	// Path is appended to the base URL; it carries its query string.
	Path string
	// Body is marshalled as JSON when not nil.
	Body any
	// Header is added to the request (Authorization …).
	Header http.Header
}

// Response is a provider's answer, body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends req to base and reads the answer. A transport failure (refused,
// reset, timed out) is returned as ErrProviderDown, since the call may or
// may not have reached the provider.
func Do(ctx context.Context, hc *http.Client, provider, op, base string, req Request) (*Response, error) {
	var body io.Reader
	if req.Body != nil {
		b, err := json.Marshal(req.Body)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, strings.TrimRight(base, "/")+req.Path, body)
	if err != nil {
		return nil, &adapters.ProviderError{Provider: provider, Op: op, Kind: adapters.ErrInvalidRequest, Err: err}
	}
	for k, vs := range req.Header {
		hr.Header[k] = vs
	}
	hr.Header.Set("Accept", "application/json")
	if req.Body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &adapters.ProviderError{Provider: provider, Op: op, Kind: adapters.ErrProviderDown, Err: scrub(err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, &adapters.ProviderError{Provider: provider, Op: op, Kind: adapters.ErrProviderDown, Err: scrub(err)}
	}
	if len(b) > MaxBody {
		return nil, &adapters.ProviderError{Provider: provider, Op: op, Kind: adapters.ErrProviderDown,
			Err: fmt.Errorf("response larger than %d bytes", MaxBody)}
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// scrub keeps the kind of a transport error without the URL, which may
// carry query parameters.
func scrub(err error) error {
	var ue interface{ Unwrap() error }
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return errors.New("timed out")
	case errors.As(err, &ue) && ue.Unwrap() != nil:
		return ue.Unwrap()
	}
	return err
}

// KindOfStatus maps an HTTP status onto the contract's kinds, for answers
// whose body names no provider code the adapter knows.
func KindOfStatus(status int) error {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return adapters.ErrAuth
	case status == http.StatusPaymentRequired:
		return adapters.ErrQuotaExceeded
	case status == http.StatusNotFound:
		return adapters.ErrNotFound
	case status == http.StatusTooManyRequests:
		return adapters.ErrRateLimited
	case status >= 500:
		return adapters.ErrProviderDown
	default:
		return adapters.ErrInvalidRequest
	}
}

// RetryAfter reads a Retry-After header (delay seconds or an HTTP date);
// zero when absent or unreadable.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Decode unmarshals a JSON body, naming what it was in the error.
func Decode(provider, op, what string, body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return &adapters.ProviderError{Provider: provider, Op: op, Kind: adapters.ErrProviderDown,
			Err: fmt.Errorf("reading %s: %w", what, err)}
	}
	return nil
}

// Snippet is the start of a body for an error message: bodies are the
// provider's, bounded, and never carry gpuq's credentials.
func Snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
