package sim

import (
	"context"
	"errors"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// Provider is the adapter of the simulated cloud: it reaches the cloud only
// through its API calls, so it retries, pages and keeps launches idempotent
// exactly as a real provider's adapter must.
type Provider struct {
	cloud cloudAPI
	retry adapters.RetryConfig
}

// cloudAPI is the simulated cloud's API as its adapter calls it: a Cloud in
// the same process, or one served over HTTP by another (Dial).
type cloudAPI interface {
	offers(ctx context.Context, pageToken string) ([]policy.Offer, string, error)
	create(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error)
	get(ctx context.Context, id string) (adapters.Instance, error)
	list(ctx context.Context, pageToken string) ([]adapters.Instance, string, error)
	remove(ctx context.Context, id string) error
}

// Provider returns the cloud's adapter, retrying as retry says.
func (c *Cloud) Provider(retry adapters.RetryConfig) *Provider {
	return &Provider{cloud: c, retry: retry.WithDefaults()}
}

// Name returns "sim".
func (p *Provider) Name() string { return ProviderName }

// Offers lists one offer per pool, following every page; a spot pool whose
// trace holds no free capacity now is unavailable.
func (p *Provider) Offers(ctx context.Context) ([]policy.Offer, error) {
	var all []policy.Offer
	token := ""
	for {
		var got []policy.Offer
		var next string
		err := adapters.Retry(ctx, p.retry, func(ctx context.Context) error {
			var err error
			got, next, err = p.cloud.offers(ctx, token)
			return err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, got...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

// Launch creates an instance, idempotently by req.ClientToken.
func (p *Provider) Launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	if c, ok := p.cloud.(*Cloud); ok {
		if _, ok := c.pools[req.Pool]; !ok {
			return adapters.Instance{}, c.fail(OpLaunch, req.Pool, adapters.ErrInvalidRequest, errors.New("no such pool"))
		}
	}
	find := func(ctx context.Context, token string) (adapters.Instance, bool, error) {
		got, err := p.Instances(ctx, adapters.InstanceFilter{ClientToken: token})
		if err != nil || len(got) == 0 {
			return adapters.Instance{}, false, err
		}
		return got[0], true, nil
	}
	// A token already used names its instance: the cloud itself keeps no
	// idempotency, like most providers.
	if inst, ok, err := find(ctx, req.ClientToken); err != nil {
		return adapters.Instance{}, err
	} else if ok {
		return inst, nil
	}
	inst, err := adapters.LaunchIdempotent(ctx, p.retry, req,
		func(ctx context.Context) (adapters.Instance, error) { return p.cloud.create(ctx, req) }, find)
	var pe *adapters.ProviderError
	if errors.As(err, &pe) && pe.Provider == "" {
		pe.Provider = ProviderName
	}
	return inst, err
}

// Describe reads one instance.
func (p *Provider) Describe(ctx context.Context, id string) (adapters.Instance, error) {
	var inst adapters.Instance
	err := adapters.Retry(ctx, p.retry, func(ctx context.Context) error {
		var err error
		inst, err = p.cloud.get(ctx, id)
		return err
	})
	return inst, err
}

// Instances follows every page of the listing and keeps gpuq's instances
// that match f.
func (p *Provider) Instances(ctx context.Context, f adapters.InstanceFilter) ([]adapters.Instance, error) {
	var out []adapters.Instance
	token := ""
	for {
		var got []adapters.Instance
		var next string
		err := adapters.Retry(ctx, p.retry, func(ctx context.Context) error {
			var err error
			got, next, err = p.cloud.list(ctx, token)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, i := range got {
			if i.Managed() && f.Match(i) {
				out = append(out, i)
			}
		}
		if next == "" {
			return out, nil
		}
		token = next
	}
}

// Terminate releases the instance; one already gone is not an error.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	err := adapters.Retry(ctx, p.retry, func(ctx context.Context) error { return p.cloud.remove(ctx, id) })
	if errors.Is(err, adapters.ErrNotFound) {
		return nil
	}
	return err
}
