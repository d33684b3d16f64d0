package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/gpuq/gpuq/queue"
)

// metaRole is the Operation.Metadata key naming the role an operation
// needs; an operation without it needs no token.
const metaRole = "gpuq-role"

type tokenKey struct{}

// tokenOf returns the token that authenticated the request.
func tokenOf(ctx context.Context) *queue.Token {
	t, _ := ctx.Value(tokenKey{}).(*queue.Token)
	return t
}

// authenticator checks bearer tokens, applies each token's rate limit and
// remembers when tokens were used, writing that in batches.
type authenticator struct {
	store  TokenStore
	rate   rate.Limit
	burst  int
	logger *slog.Logger

	mu       sync.Mutex
	limiters map[uuid.UUID]*rate.Limiter
	used     map[uuid.UUID]bool
}

func newAuthenticator(store TokenStore, perSecond float64, burst int, logger *slog.Logger) *authenticator {
	return &authenticator{store: store, rate: rate.Limit(perSecond), burst: burst, logger: logger,
		limiters: map[uuid.UUID]*rate.Limiter{}, used: map[uuid.UUID]bool{}}
}

// middleware refuses a request without a valid token of the operation's
// role (401, or 403 for a weaker role) and one over its token's rate (429
// with Retry-After). A token that cannot be checked now, while PostgreSQL
// cannot be reached, is a 503 with Retry-After: the client is to try again,
// not to take its token for a bad one.
func (a *authenticator) middleware(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		need, _ := ctx.Operation().Metadata[metaRole].(queue.Role)
		if need == "" {
			next(ctx)
			return
		}
		tok, reason, err := a.authenticate(ctx.Context(), ctx.Header("Authorization"))
		if err != nil {
			ctx.SetHeader("Retry-After", "1")
			huma.WriteErr(api, ctx, http.StatusServiceUnavailable, "the token could not be checked now; try again") //nolint:errcheck // the response is written
			return
		}
		if tok == nil {
			ctx.SetHeader("WWW-Authenticate", `Bearer realm="gpuq"`)
			huma.WriteErr(api, ctx, http.StatusUnauthorized, reason) //nolint:errcheck // the response is written
			return
		}
		if !tok.Role.Allows(need) {
			huma.WriteErr(api, ctx, http.StatusForbidden, "this token's role is "+string(tok.Role)+"; this operation needs "+string(need)) //nolint:errcheck // the response is written
			return
		}
		if wait := a.limit(tok.ID); wait > 0 {
			ctx.SetHeader("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			huma.WriteErr(api, ctx, http.StatusTooManyRequests, "rate limit of this token exceeded; retry after the Retry-After seconds") //nolint:errcheck // the response is written
			return
		}
		next(huma.WithValue(ctx, tokenKey{}, tok))
	}
}

// authenticate returns the token an Authorization header presents, or why
// there is none; an error when it could not be read. The reason never
// echoes the presented secret.
func (a *authenticator) authenticate(ctx context.Context, header string) (*queue.Token, string, error) {
	scheme, secret, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return nil, "missing bearer token: send Authorization: Bearer <token> (gpuq token create makes one)", nil
	}
	prefix := queue.TokenLookupPrefix(strings.TrimSpace(secret))
	if prefix == "" {
		return nil, "invalid token", nil
	}
	tok, err := a.store.TokenByPrefix(ctx, prefix)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, "invalid token", nil
	}
	if err != nil {
		a.logger.Error("reading token", "prefix", prefix, "err", err)
		return nil, "", err
	}
	if !tok.Matches(strings.TrimSpace(secret)) {
		return nil, "invalid token", nil
	}
	if why := tok.Usable(time.Now()); why != "" {
		return nil, why, nil
	}
	a.mu.Lock()
	a.used[tok.ID] = true
	a.mu.Unlock()
	return tok, "", nil
}

// limit takes one request from the token's allowance and returns how long
// to wait when none is left.
func (a *authenticator) limit(id uuid.UUID) time.Duration { return a.limitN(id, 1) }

// limitN takes n requests from the token's allowance (at most its burst)
// and returns how long to wait when they are not left; it takes nothing
// then.
func (a *authenticator) limitN(id uuid.UUID, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	a.mu.Lock()
	lim := a.limiters[id]
	if lim == nil {
		lim = rate.NewLimiter(a.rate, a.burst)
		a.limiters[id] = lim
	}
	a.mu.Unlock()
	r := lim.ReserveN(time.Now(), min(n, a.burst))
	d := r.Delay()
	if d == 0 {
		return 0
	}
	r.Cancel()
	return d
}

// touchLoop writes which tokens were used every interval, one statement for
// all of them, and once more when ctx ends.
func (a *authenticator) touchLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			a.flush(ctx)
		}
	}
}

// flush writes the tokens used since the last flush as used now.
func (a *authenticator) flush(ctx context.Context) {
	a.mu.Lock()
	ids := make([]uuid.UUID, 0, len(a.used))
	for id := range a.used {
		ids = append(ids, id)
	}
	clear(a.used)
	a.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if err := a.store.TouchTokens(ctx, ids, time.Now()); err != nil {
		a.logger.Warn("recording token use", "tokens", len(ids), "err", err)
	}
}
