package runpod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// maxBody bounds a GraphQL answer.
const maxBody = 4 << 20

type gqlRequest struct {
	Query     string         `json:"query"`
	Variables map[string]any `json:"variables,omitempty"`
}

type gqlError struct {
	Message    string `json:"message"`
	Extensions struct {
		Code string `json:"code"`
	} `json:"extensions"`
}

type gqlResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []gqlError      `json:"errors"`
}

// call runs one GraphQL operation and decodes its data into out (numbers
// as json.Number, so that prices keep their decimal text).
func (p *Provider) call(ctx context.Context, op, pool, query string, vars map[string]any, out any) error {
	body, err := json.Marshal(gqlRequest{Query: query, Variables: vars})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.Endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	// A header rather than the documented ?api_key= query parameter, so
	// that the key never appears in a URL, which Go's errors print.
	req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey.Reveal())
	resp, err := p.cfg.HTTPClient.Do(req)
	if err != nil {
		return p.fail(op, pool, adapters.ErrProviderDown, 0, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return p.fail(op, pool, adapters.ErrProviderDown, 0, err)
	}
	var r gqlResponse
	jsonErr := json.Unmarshal(raw, &r)
	switch s := resp.StatusCode; {
	case s == http.StatusTooManyRequests:
		return p.fail(op, pool, adapters.ErrRateLimited, retryAfter(resp.Header.Get("Retry-After")), statusErr(resp, r))
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return p.fail(op, pool, adapters.ErrAuth, 0, statusErr(resp, r))
	case s >= 500:
		return p.fail(op, pool, adapters.ErrProviderDown, 0, statusErr(resp, r))
	case s != http.StatusOK && len(r.Errors) == 0:
		return p.fail(op, pool, adapters.ErrInvalidRequest, 0, statusErr(resp, r))
	}
	if jsonErr != nil {
		return p.fail(op, pool, adapters.ErrProviderDown, 0, fmt.Errorf("unreadable answer: %w", jsonErr))
	}
	if len(r.Errors) > 0 {
		e := r.Errors[0]
		return p.fail(op, pool, errorKind(e), 0, errors.New(e.Message))
	}
	if out == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(r.Data))
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return p.fail(op, pool, adapters.ErrProviderDown, 0, fmt.Errorf("unreadable data: %w", err))
	}
	return nil
}

// errorKind classifies a GraphQL error. RunPod answers errors with
// messages rather than codes; the phrases below are those its API gives
// (see README: what is confirmed and what is assumed).
func errorKind(e gqlError) error {
	m := strings.ToLower(e.Message)
	switch {
	case e.Extensions.Code == "UNAUTHENTICATED" || e.Extensions.Code == "FORBIDDEN" ||
		strings.Contains(m, "unauthorized") || strings.Contains(m, "api key"):
		return adapters.ErrAuth
	case strings.Contains(m, "no longer any instances available") || strings.Contains(m, "no instances available") ||
		strings.Contains(m, "not enough") && strings.Contains(m, "gpu") || strings.Contains(m, "bid") && strings.Contains(m, "too low"):
		return adapters.ErrCapacityUnavailable
	case strings.Contains(m, "balance") || strings.Contains(m, "insufficient funds") || strings.Contains(m, "spend limit"):
		return adapters.ErrQuotaExceeded
	case strings.Contains(m, "not found") || strings.Contains(m, "does not exist"):
		return adapters.ErrNotFound
	case e.Extensions.Code == "INTERNAL_SERVER_ERROR":
		return adapters.ErrProviderDown
	}
	return adapters.ErrInvalidRequest
}

func statusErr(resp *http.Response, r gqlResponse) error {
	if len(r.Errors) > 0 {
		return fmt.Errorf("%s: %s", resp.Status, r.Errors[0].Message)
	}
	return errors.New(resp.Status)
}

// retryAfter reads a Retry-After header in seconds; zero when absent.
func retryAfter(h string) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

func (p *Provider) fail(op, pool string, kind error, wait time.Duration, err error) error {
	return &adapters.ProviderError{Provider: ProviderName, Op: op, Pool: pool, Kind: kind, RetryAfter: wait, Err: err}
}
