package verda

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/internal/rest"
)

// client calls the Verda API with a bearer token it keeps fresh: OAuth2
// client credentials first, the refresh token before expiry, and client
// credentials again when the refresh is refused.
type client struct {
	cfg Config

	mu      sync.Mutex
	access  adapters.Secret
	refresh adapters.Secret
	expires time.Time
}

// tokenResponse is POST /oauth2/token's answer.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	Scope        string `json:"scope"`
}

// apiError is the body of every Verda error: {"code": …, "message": …}.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Verda's documented error codes (the SDKs' ErrorCodes).
var codeKinds = map[string]error{
	"invalid_request":      adapters.ErrInvalidRequest,
	"unauthorized_request": adapters.ErrAuth,
	"insufficient_funds":   adapters.ErrQuotaExceeded,
	"forbidden_action":     adapters.ErrAuth,
	"not_found":            adapters.ErrNotFound,
	"server_error":         adapters.ErrProviderDown,
	"service_unavailable":  adapters.ErrProviderDown,
}

// refreshBefore renews a token this long before it expires.
const refreshBefore = 30 * time.Second

// token returns a valid access token, renewing it when due.
func (c *client) token(ctx context.Context, force bool) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !force && !c.access.IsZero() && time.Now().Add(refreshBefore).Before(c.expires) {
		return c.access.Reveal(), nil
	}
	if !c.refresh.IsZero() && !force {
		err := c.grant(ctx, map[string]string{"grant_type": "refresh_token", "refresh_token": c.refresh.Reveal()})
		if err == nil {
			return c.access.Reveal(), nil
		}
		if !errors.Is(err, adapters.ErrAuth) && !errors.Is(err, adapters.ErrInvalidRequest) {
			return "", err
		}
		// The refresh token expired or was revoked: start over.
	}
	if err := c.grant(ctx, map[string]string{"grant_type": "client_credentials", "client_id": c.cfg.ClientID,
		"client_secret": c.cfg.ClientSecret.Reveal()}); err != nil {
		return "", err
	}
	return c.access.Reveal(), nil
}

// grant asks the token endpoint; c.mu is held.
func (c *client) grant(ctx context.Context, body map[string]string) error {
	resp, err := rest.Do(ctx, c.cfg.HTTPClient, ProviderName, "authenticate", c.cfg.BaseURL,
		rest.Request{Method: http.MethodPost, Path: "/oauth2/token", Body: body})
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK && resp.Status != http.StatusCreated {
		return c.fail("authenticate", "", resp)
	}
	var t tokenResponse
	if err := rest.Decode(ProviderName, "authenticate", "the token", resp.Body, &t); err != nil {
		return err
	}
	if t.AccessToken == "" || t.ExpiresIn <= 0 {
		return &adapters.ProviderError{Provider: ProviderName, Op: "authenticate", Kind: adapters.ErrAuth,
			Err: errors.New("the token endpoint answered without an access token")}
	}
	c.access, c.refresh = adapters.NewSecret(t.AccessToken), adapters.NewSecret(t.RefreshToken)
	c.expires = time.Now().Add(time.Duration(t.ExpiresIn) * time.Second)
	return nil
}

// do calls the API once with a bearer token; a 401 renews the token and
// tries once more, since Verda may revoke a token before its expiry.
func (c *client) do(ctx context.Context, op, pool string, req rest.Request, ok ...int) (*rest.Response, error) {
	for attempt := 0; ; attempt++ {
		tok, err := c.token(ctx, attempt > 0)
		if err != nil {
			return nil, err
		}
		req.Header = http.Header{"Authorization": {"Bearer " + tok}}
		resp, err := rest.Do(ctx, c.cfg.HTTPClient, ProviderName, op, c.cfg.BaseURL, req)
		if err != nil {
			return nil, withPool(err, pool)
		}
		for _, s := range ok {
			if resp.Status == s {
				return resp, nil
			}
		}
		if resp.Status == http.StatusUnauthorized && attempt == 0 {
			continue
		}
		return nil, c.fail(op, pool, resp)
	}
}

func withPool(err error, pool string) error {
	var pe *adapters.ProviderError
	if errors.As(err, &pe) && pe.Pool == "" {
		pe.Pool = pool
	}
	return err
}

// fail maps an error answer onto the contract's kinds: by Verda's code
// when the body names one, else by status.
func (c *client) fail(op, pool string, resp *rest.Response) error {
	var body apiError
	_ = rest.Decode(ProviderName, op, "the error", resp.Body, &body) //nolint:errcheck // a body that is not the envelope falls back to the status
	kind, known := codeKinds[body.Code]
	if !known || resp.Status == http.StatusTooManyRequests {
		kind = rest.KindOfStatus(resp.Status)
	}
	msg := body.Message
	if msg == "" {
		msg = rest.Snippet(resp.Body)
	}
	return &adapters.ProviderError{Provider: ProviderName, Op: op, Pool: pool, Kind: kind,
		RetryAfter: rest.RetryAfter(resp.Header, time.Now()),
		Err:        fmt.Errorf("HTTP %d %s: %s", resp.Status, body.Code, msg)}
}
