package hivenet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/internal/rest"
	"github.com/gpuq/gpuq/policy"
)

// regionCountries maps Hivenet's regions to countries; a region not in it
// is left out of the offers, never guessed.
var regionCountries = map[string]string{"FR": "FR", "UAE": "AE", "US": "US"}

// Provider is the Hivenet Compute adapter. Its pools are the presets:
// hivenet-<region>-<location>-<sku>, all on-demand.
type Provider struct {
	cfg Config
}

// New checks cfg and returns the adapter.
func New(cfg Config) (*Provider, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Provider{cfg: cfg}, nil
}

// Name returns "hivenet".
func (p *Provider) Name() string { return ProviderName }

// String names the adapter and its endpoint, nothing secret.
func (p *Provider) String() string { return "hivenet provider at " + p.cfg.BaseURL }

// The API's shapes, as the Compute API reference documents them.
type (
	page[T any] struct {
		Data       []T `json:"data"`
		Pagination struct {
			Next *string `json:"next"`
		} `json:"pagination"`
	}
	preset struct {
		ID       string `json:"id"`
		SKU      string `json:"sku"`
		Region   string `json:"region"`
		Location string `json:"location"`
		GPUModel string `json:"gpu_model"`
		GPUCount int    `json:"gpu_count"`
		// CPU, Memory and Storage are numeric strings without units.
		CPU    string `json:"cpu"`
		Memory string `json:"memory"`
		// HourlyPrice and PriceDiscounted are decimal strings; an empty
		// discount means none, not a zero price.
		HourlyPrice     string `json:"hourly_price"`
		PriceDiscounted string `json:"price_discounted"`
	}
	instance struct {
		ID         string      `json:"instance_id"`
		Name       string      `json:"name"`
		Status     string      `json:"status"`
		Region     string      `json:"region"`
		Size       string      `json:"size"`
		HourlyRate json.Number `json:"hourly_rate"`
		CreatedAt  *time.Time  `json:"created_at"`
		StartedAt  *time.Time  `json:"started_at"`
	}
	createInstance struct {
		PresetID  string `json:"preset_id"`
		ImageType string `json:"image_type"`
		ImageID   string `json:"image_id"`
		Name      string `json:"name"`
		UserData  string `json:"user_data,omitempty"`
	}
	apiError struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
)

// call sends one request with the API key and maps an error answer.
func (p *Provider) call(ctx context.Context, op, pool string, req rest.Request, ok ...int) (*rest.Response, error) {
	req.Header = http.Header{"Authorization": {"Bearer " + p.cfg.APIKey.Reveal()}}
	resp, err := rest.Do(ctx, p.cfg.HTTPClient, ProviderName, op, p.cfg.BaseURL, req)
	if err != nil {
		var pe *adapters.ProviderError
		if errors.As(err, &pe) && pe.Pool == "" {
			pe.Pool = pool
		}
		return nil, err
	}
	for _, s := range ok {
		if resp.Status == s {
			return resp, nil
		}
	}
	var body apiError
	_ = rest.Decode(ProviderName, op, "the error", resp.Body, &body) //nolint:errcheck // a body that is not the envelope falls back to the status
	kind := rest.KindOfStatus(resp.Status)
	if resp.Status == http.StatusConflict {
		kind = adapters.ErrCapacityUnavailable
	}
	msg := body.Error.Message
	if msg == "" {
		msg = rest.Snippet(resp.Body)
	}
	return nil, &adapters.ProviderError{Provider: ProviderName, Op: op, Pool: pool, Kind: kind,
		RetryAfter: rest.RetryAfter(resp.Header, time.Now()), Err: fmt.Errorf("HTTP %d %s: %s", resp.Status, body.Error.Code, msg)}
}

// list follows every page of path into out.
func list[T any](ctx context.Context, p *Provider, op, path string, q url.Values) ([]T, error) {
	var all []T
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			return nil, &adapters.ProviderError{Provider: ProviderName, Op: op, Kind: adapters.ErrProviderDown, Err: errors.New("pagination does not end")}
		}
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("size", strconv.Itoa(p.cfg.PageSize))
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		var pg page[T]
		err := adapters.Retry(ctx, p.cfg.Retry, func(ctx context.Context) error {
			resp, err := p.call(ctx, op, "", rest.Request{Method: http.MethodGet, Path: path + "?" + v.Encode()}, http.StatusOK)
			if err != nil {
				return err
			}
			pg = page[T]{}
			return rest.Decode(ProviderName, op, path, resp.Body, &pg)
		})
		if err != nil {
			return nil, err
		}
		all = append(all, pg.Data...)
		if pg.Pagination.Next == nil || *pg.Pagination.Next == "" {
			return all, nil
		}
		cursor = *pg.Pagination.Next
	}
}

// presets reads the whole catalogue.
func (p *Provider) presets(ctx context.Context, op string) ([]preset, error) {
	return list[preset](ctx, p, op, "/presets", nil)
}

// Offers lists one on-demand offer per preset in a region of known country.
func (p *Provider) Offers(ctx context.Context) ([]policy.Offer, error) {
	presets, err := p.presets(ctx, "offers")
	if err != nil {
		return nil, err
	}
	var offers []policy.Offer
	var errs []error
	for _, ps := range presets {
		o, ok, err := p.offer(ps)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			offers = append(offers, o)
		}
	}
	if len(offers) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return offers, nil
}

// offer converts a preset; ok is false for a preset gpuq cannot place
// (unknown country or unreadable numbers, the latter with an error).
func (p *Provider) offer(ps preset) (policy.Offer, bool, error) {
	country, known := regionCountries[strings.ToUpper(ps.Region)]
	if !known {
		return policy.Offer{}, false, nil
	}
	price := ps.HourlyPrice
	if strings.TrimSpace(ps.PriceDiscounted) != "" {
		price = ps.PriceDiscounted
	}
	m, err := adapters.ParsePrice(price, p.cfg.Currency)
	if err != nil {
		return policy.Offer{}, false, fmt.Errorf("preset %s: price: %w", ps.SKU, err)
	}
	vcpu, err1 := atoiOrZero(ps.CPU)
	mem, err2 := atoiOrZero(ps.Memory)
	if err := errors.Join(err1, err2); err != nil {
		return policy.Offer{}, false, fmt.Errorf("preset %s: %w", ps.SKU, err)
	}
	card := "cpu"
	if ps.GPUCount > 0 {
		card = strings.Join(strings.Fields(ps.GPUModel), "-")
	}
	o := policy.Offer{
		Provider: ProviderName, Pool: poolName(ps), Region: ps.Region, Country: country, Card: card, GPUCount: ps.GPUCount,
		VCPU: vcpu, MemoryGB: mem, Tier: policy.TierOnDemand, PricePerHour: m, Availability: policy.Available,
	}
	if err := o.Validate(); err != nil {
		return policy.Offer{}, false, fmt.Errorf("preset %s: %w", ps.SKU, err)
	}
	return o, true, nil
}

func atoiOrZero(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e9 {
		return 0, fmt.Errorf("%q is not a count", s)
	}
	return int(f), nil
}

// poolName is hivenet-<region>-<location>-<sku>, other characters as '_'.
func poolName(ps preset) string {
	return "hivenet-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, ps.Region+"-"+ps.Location+"-"+ps.SKU)
}

// nameOf is the instance name: Hivenet instances carry no tags and names
// are not unique, so gpuq's name holds the client token, its instance id
// and the pool, split by '_' (which neither token nor id contains).
func nameOf(req adapters.LaunchRequest) string {
	return "gpuq_" + req.ClientToken + "_" + req.Boot.InstanceID + "_" + req.Pool
}

// parseName reads nameOf back; ok is false for an instance gpuq did not
// name.
func parseName(name string) (token, id, pool string, ok bool) {
	rest, ok := strings.CutPrefix(name, "gpuq_")
	if !ok {
		return "", "", "", false
	}
	token, rest, ok1 := strings.Cut(rest, "_")
	id, pool, ok2 := strings.Cut(rest, "_")
	return token, id, pool, ok1 && ok2 && token != "" && id != "" && policy.ValidPool(pool)
}

// Launch reads the presets again, finds the pool's preset by region,
// location and SKU (a preset can be retired or edited in place), and
// creates the instance. Creates are not idempotent: after an unknown
// outcome the instances are listed by name before any retry.
func (p *Provider) Launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	if err := req.Validate(); err != nil {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool, Kind: adapters.ErrInvalidRequest, Err: err}
	}
	find := func(ctx context.Context, token string) (adapters.Instance, bool, error) {
		got, err := p.Instances(ctx, adapters.InstanceFilter{ClientToken: token})
		if err != nil || len(got) == 0 {
			return adapters.Instance{}, false, err
		}
		return got[0], true, nil
	}
	if inst, ok, err := find(ctx, req.ClientToken); err != nil {
		return adapters.Instance{}, err
	} else if ok {
		return inst, nil
	}
	userData, err := req.Boot.CloudInit()
	if err != nil {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool, Kind: adapters.ErrInvalidRequest, Err: err}
	}
	create := func(ctx context.Context) (adapters.Instance, error) {
		presets, err := p.presets(ctx, "launch")
		if err != nil {
			return adapters.Instance{}, err
		}
		var ps *preset
		for i := range presets {
			if poolName(presets[i]) == req.Pool {
				ps = &presets[i]
			}
		}
		if ps == nil {
			return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool, Kind: adapters.ErrInvalidRequest,
				Err: errors.New("no preset of this region, location and SKU any more")}
		}
		resp, err := p.call(ctx, "launch", req.Pool, rest.Request{Method: http.MethodPost, Path: "/instances", Body: createInstance{
			PresetID: ps.ID, ImageType: p.cfg.ImageType, ImageID: p.cfg.ImageID, Name: nameOf(req), UserData: userData,
		}}, http.StatusOK, http.StatusCreated, http.StatusAccepted)
		if err != nil {
			var pe *adapters.ProviderError
			if errors.As(err, &pe) && errors.Is(err, adapters.ErrNotFound) {
				// The preset was retired between the read and the create.
				pe.Kind = adapters.ErrCapacityUnavailable
			}
			return adapters.Instance{}, err
		}
		var v instance
		if err := rest.Decode(ProviderName, "launch", "the new instance", resp.Body, &v); err != nil {
			return adapters.Instance{}, err
		}
		return p.instance(v), nil
	}
	return adapters.LaunchIdempotent(ctx, p.cfg.Retry, req, create, find)
}

// Describe reads one instance.
func (p *Provider) Describe(ctx context.Context, id string) (adapters.Instance, error) {
	var v instance
	err := adapters.Retry(ctx, p.cfg.Retry, func(ctx context.Context) error {
		resp, err := p.call(ctx, "describe", "", rest.Request{Method: http.MethodGet, Path: "/instances/" + url.PathEscape(id)}, http.StatusOK)
		if err != nil {
			return err
		}
		return rest.Decode(ProviderName, "describe", "the instance", resp.Body, &v)
	})
	if err != nil {
		return adapters.Instance{}, err
	}
	return p.instance(v), nil
}

// Instances follows every page of the listing and keeps the instances gpuq
// named that f selects.
func (p *Provider) Instances(ctx context.Context, f adapters.InstanceFilter) ([]adapters.Instance, error) {
	all, err := list[instance](ctx, p, "list", "/instances", nil)
	if err != nil {
		return nil, err
	}
	var out []adapters.Instance
	for _, v := range all {
		if i := p.instance(v); i.Managed() && f.Match(i) {
			out = append(out, i)
		}
	}
	return out, nil
}

func (p *Provider) instance(v instance) adapters.Instance {
	i := adapters.Instance{Provider: ProviderName, ProviderID: v.ID, State: stateOf(v.Status), Reason: v.Status}
	if token, id, pool, ok := parseName(v.Name); ok {
		i.Pool, i.ClientToken = pool, token
		i.Tags = map[string]string{adapters.TagManagedBy: adapters.ManagedBy, adapters.TagPool: pool,
			adapters.TagInstance: id, adapters.TagClientToken: token}
	}
	switch {
	case v.CreatedAt != nil:
		i.LaunchedAt = *v.CreatedAt
	case v.StartedAt != nil:
		i.LaunchedAt = *v.StartedAt
	}
	if m, err := adapters.ParsePrice(v.HourlyRate.String(), p.cfg.Currency); err == nil {
		i.PricePerHour = m
	}
	return i
}

// stateOf maps Hivenet's lifecycle states.
func stateOf(status string) adapters.InstanceState {
	switch strings.ToUpper(status) {
	case "CREATED", "DEPLOYED", "STARTING":
		return adapters.StatePending
	case "RUNNING":
		return adapters.StateRunning
	case "TERMINATING", "STOPPING", "STOPPED":
		return adapters.StateStopping
	case "TERMINATED":
		return adapters.StateTerminated
	case "ERRORED":
		return adapters.StateFailed
	}
	return adapters.StatePending
}

// Terminate terminates the instance (permanent; its data is deleted); one
// already gone is not an error.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	err := adapters.Retry(ctx, p.cfg.Retry, func(ctx context.Context) error {
		_, err := p.call(ctx, "terminate", "", rest.Request{Method: http.MethodPost, Path: "/instances/" + url.PathEscape(id) + "/terminate"},
			http.StatusOK, http.StatusAccepted, http.StatusNoContent)
		return err
	})
	if errors.Is(err, adapters.ErrNotFound) {
		return nil
	}
	if err != nil {
		// Terminating an instance already terminated or on its way may
		// be refused; it is gone all the same.
		if inst, derr := p.Describe(ctx, id); derr == nil && (inst.State.Gone() || inst.Reason == "TERMINATING") {
			return nil
		}
	}
	return err
}
