package verda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/adapters/internal/rest"
	"github.com/gpuq/gpuq/policy"
)

// Provider is the Verda adapter. Its pools are every instance type in every
// location whose country Verda states, on-demand and spot:
// verda-<location>-<instance type>[-spot], with '.' in the type as '_'.
type Provider struct {
	c client

	mu    sync.Mutex
	pools map[string]poolRef // from the latest offers
}

// poolRef is what a pool name stands for.
type poolRef struct {
	location, instanceType string
	spot                   bool
	currency               string
}

// New checks cfg and returns the adapter.
func New(cfg Config) (*Provider, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Provider{c: client{cfg: cfg}}, nil
}

// Name returns "verda".
func (p *Provider) Name() string { return ProviderName }

// The API's shapes, as the Verda SDKs read them.
type (
	sized struct {
		SizeInGigabytes int `json:"size_in_gigabytes"`
	}
	instanceType struct {
		InstanceType string `json:"instance_type"`
		CPU          struct {
			NumberOfCores int `json:"number_of_cores"`
		} `json:"cpu"`
		GPU struct {
			NumberOfGPUs int `json:"number_of_gpus"`
		} `json:"gpu"`
		GPUMemory    sized           `json:"gpu_memory"`
		Memory       sized           `json:"memory"`
		PricePerHour json.RawMessage `json:"price_per_hour"`
		SpotPrice    json.RawMessage `json:"spot_price"`
		Currency     string          `json:"currency"`
	}
	location struct {
		Code        string `json:"code"`
		CountryCode string `json:"country_code"`
	}
	availability struct {
		LocationCode   string   `json:"location_code"`
		Availabilities []string `json:"availabilities"`
	}
	tag struct {
		Key   string `json:"key"`
		Value string `json:"value,omitempty"`
	}
	instance struct {
		ID              string          `json:"id"`
		InstanceType    string          `json:"instance_type"`
		Status          string          `json:"status"`
		CreatedAt       time.Time       `json:"created_at"`
		Hostname        string          `json:"hostname"`
		Location        string          `json:"location"`
		PricePerHour    json.RawMessage `json:"price_per_hour"`
		IsSpot          bool            `json:"is_spot"`
		StartupScriptID *string         `json:"startup_script_id"`
		Tags            []tag           `json:"tags"`
	}
	createInstance struct {
		InstanceType    string   `json:"instance_type"`
		Image           string   `json:"image"`
		Hostname        string   `json:"hostname"`
		Description     string   `json:"description"`
		SSHKeyIDs       []string `json:"ssh_key_ids,omitempty"`
		LocationCode    string   `json:"location_code"`
		Contract        string   `json:"contract,omitempty"`
		StartupScriptID string   `json:"startup_script_id,omitempty"`
		IsSpot          bool     `json:"is_spot"`
		Tags            []tag    `json:"tags,omitempty"`
	}
	instanceAction struct {
		Action string   `json:"action"`
		ID     []string `json:"id"`
	}
)

// get reads path into v, retrying transient failures.
func (p *Provider) get(ctx context.Context, op, pool, path string, v any) error {
	return adapters.Retry(ctx, p.c.cfg.Retry, func(ctx context.Context) error {
		resp, err := p.c.do(ctx, op, pool, rest.Request{Method: http.MethodGet, Path: path}, http.StatusOK)
		if err != nil {
			return err
		}
		return rest.Decode(ProviderName, op, path, resp.Body, v)
	})
}

// Offers lists every instance type in every location with a known
// country, on-demand and (where Verda prices it) spot, with Verda's
// availability for each.
func (p *Provider) Offers(ctx context.Context) ([]policy.Offer, error) {
	path := "/instance-types"
	if p.c.cfg.Currency != "" {
		path += "?currency=" + url.QueryEscape(strings.ToLower(p.c.cfg.Currency))
	}
	var types []instanceType
	if err := p.get(ctx, "offers", "", path, &types); err != nil {
		return nil, err
	}
	var locs []location
	if err := p.get(ctx, "offers", "", "/locations", &locs); err != nil {
		return nil, err
	}
	avail := map[bool]map[string]bool{}
	for _, spot := range []bool{false, true} {
		var got []availability
		q := "/instance-availability"
		if spot {
			q += "?is_spot=true"
		}
		if err := p.get(ctx, "offers", "", q, &got); err != nil {
			return nil, err
		}
		avail[spot] = map[string]bool{}
		for _, a := range got {
			for _, t := range a.Availabilities {
				avail[spot][a.LocationCode+"\x00"+t] = true
			}
		}
	}
	var offers []policy.Offer
	var errs []error
	pools := map[string]poolRef{}
	for _, l := range locs {
		country := strings.ToUpper(l.CountryCode)
		if len(country) != 2 || l.Code == "" {
			continue // a location whose country Verda does not state is left out, never guessed
		}
		for _, t := range types {
			currency := strings.ToUpper(t.Currency)
			if currency == "" {
				currency = p.c.cfg.Currency
			}
			for _, spot := range []bool{false, true} {
				raw := t.PricePerHour
				if spot {
					raw = t.SpotPrice
				}
				if spot && len(raw) == 0 {
					continue // no spot price: no spot offer
				}
				price, err := adapters.ParsePrice(numberText(raw), currency)
				if err != nil {
					errs = append(errs, fmt.Errorf("instance type %s: price: %w", t.InstanceType, err))
					continue
				}
				o := policy.Offer{
					Provider: ProviderName, Pool: poolName(l.Code, t.InstanceType, spot), Region: l.Code, Country: country,
					Card: cardOf(t.InstanceType), GPUCount: t.GPU.NumberOfGPUs, VCPU: t.CPU.NumberOfCores, MemoryGB: t.Memory.SizeInGigabytes,
					Tier: policy.TierOnDemand, PricePerHour: price, Availability: policy.Unavailable,
				}
				if t.GPU.NumberOfGPUs > 0 {
					o.GPUMemoryGB = t.GPUMemory.SizeInGigabytes / t.GPU.NumberOfGPUs
				}
				if spot {
					o.Tier = policy.TierSpot
				}
				if avail[spot][l.Code+"\x00"+t.InstanceType] {
					o.Availability = policy.Available
				}
				if err := o.Validate(); err != nil {
					errs = append(errs, fmt.Errorf("instance type %s in %s: %w", t.InstanceType, l.Code, err))
					continue
				}
				offers = append(offers, o)
				pools[o.Pool] = poolRef{location: l.Code, instanceType: t.InstanceType, spot: spot, currency: currency}
			}
		}
	}
	p.mu.Lock()
	p.pools = pools
	p.mu.Unlock()
	if len(offers) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return offers, nil
}

// numberText is a JSON number's literal, or a JSON string's content: Verda
// sends prices either way.
func numberText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}

// poolName is verda-<location>-<type>[-spot] with the type's dots as '_'.
func poolName(loc, typ string, spot bool) string {
	name := "verda-" + loc + "-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, typ)
	if spot {
		name += "-spot"
	}
	return name
}

// cardOf reads the card from Verda's instance type names, count then card
// then sizes: 1V100.6V → V100, 8H100.80S.176V → H100, CPU.4V.16G → cpu.
func cardOf(typ string) string {
	head, _, _ := strings.Cut(typ, ".")
	card := strings.TrimLeft(head, "0123456789")
	if card == "" || strings.EqualFold(card, "CPU") || strings.EqualFold(head, "CPU") {
		return "cpu"
	}
	return card
}

// pool resolves a pool name, reading the offers when it is not known yet.
func (p *Provider) pool(ctx context.Context, name string) (poolRef, error) {
	p.mu.Lock()
	ref, ok := p.pools[name]
	p.mu.Unlock()
	if ok {
		return ref, nil
	}
	if _, err := p.Offers(ctx); err != nil {
		return poolRef{}, err
	}
	p.mu.Lock()
	ref, ok = p.pools[name]
	p.mu.Unlock()
	if !ok {
		return poolRef{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: name, Kind: adapters.ErrInvalidRequest,
			Err: errors.New("no such pool among Verda's instance types and locations")}
	}
	return ref, nil
}

// Launch deploys one instance: the boot spec goes in as a startup script,
// the client token is the hostname and a tag. Verda has no idempotency
// key, so a launch whose answer was lost is found by its token before any
// retry.
func (p *Provider) Launch(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	if err := req.Validate(); err != nil {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool, Kind: adapters.ErrInvalidRequest, Err: err}
	}
	ref, err := p.pool(ctx, req.Pool)
	if err != nil {
		return adapters.Instance{}, err
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
	var free bool
	q := url.Values{"location_code": {ref.location}}
	if ref.spot {
		q.Set("is_spot", "true")
	}
	if err := p.get(ctx, "launch", req.Pool, "/instance-availability/"+url.PathEscape(ref.instanceType)+"?"+q.Encode(), &free); err != nil {
		return adapters.Instance{}, err
	}
	if !free {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool, Kind: adapters.ErrCapacityUnavailable,
			Err: fmt.Errorf("Verda has no %s available in %s", ref.instanceType, ref.location)}
	}
	script, err := req.Boot.StartupScript()
	if err != nil {
		return adapters.Instance{}, &adapters.ProviderError{Provider: ProviderName, Op: "launch", Pool: req.Pool, Kind: adapters.ErrInvalidRequest, Err: err}
	}
	var scriptID string
	err = adapters.Retry(ctx, p.c.cfg.Retry, func(ctx context.Context) error {
		resp, err := p.c.do(ctx, "launch", req.Pool, rest.Request{Method: http.MethodPost, Path: "/scripts",
			Body: map[string]string{"name": "gpuq-" + req.ClientToken, "script": script}}, http.StatusOK, http.StatusCreated)
		if err != nil {
			return err
		}
		scriptID, err = plainID(resp.Body)
		return err
	})
	if err != nil {
		return adapters.Instance{}, err
	}
	body := createInstance{
		InstanceType: ref.instanceType, Image: p.c.cfg.Image, Hostname: req.ClientToken, Description: "gpuq pool " + req.Pool,
		SSHKeyIDs: p.c.cfg.SSHKeyIDs, LocationCode: ref.location, StartupScriptID: scriptID, IsSpot: ref.spot, Contract: "PAY_AS_YOU_GO",
	}
	if ref.spot {
		body.Contract = "SPOT"
	}
	tags := req.Tags()
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		body.Tags = append(body.Tags, tag{Key: k, Value: tags[k]})
	}
	create := func(ctx context.Context) (adapters.Instance, error) {
		resp, err := p.c.do(ctx, "launch", req.Pool, rest.Request{Method: http.MethodPost, Path: "/instances", Body: body},
			http.StatusOK, http.StatusCreated, http.StatusAccepted)
		if err != nil {
			return adapters.Instance{}, err
		}
		id, err := plainID(resp.Body)
		if err != nil {
			return adapters.Instance{}, err
		}
		if inst, err := p.Describe(ctx, id); err == nil {
			return inst, nil
		}
		// Deployed, but not yet readable: what the request said.
		return adapters.Instance{Provider: ProviderName, ProviderID: id, Pool: req.Pool, State: adapters.StatePending,
			LaunchedAt: time.Now(), ClientToken: req.ClientToken, Tags: req.Tags()}, nil
	}
	return adapters.LaunchIdempotent(ctx, p.c.cfg.Retry, req, create, find)
}

// plainID reads an id answered as plain text (Verda's create answers).
func plainID(body []byte) (string, error) {
	id := strings.Trim(strings.TrimSpace(string(body)), `"`)
	if id == "" || len(id) > 128 || strings.ContainsAny(id, " /\n\r\t?#") {
		return "", &adapters.ProviderError{Provider: ProviderName, Op: "launch", Kind: adapters.ErrProviderDown,
			Err: fmt.Errorf("create answered %q, not an id", rest.Snippet(body))}
	}
	return id, nil
}

// Describe reads one instance.
func (p *Provider) Describe(ctx context.Context, id string) (adapters.Instance, error) {
	var v instance
	if err := p.get(ctx, "describe", "", "/instances/"+url.PathEscape(id), &v); err != nil {
		return adapters.Instance{}, err
	}
	return p.instance(v), nil
}

// Instances lists the project's instances that gpuq launched and f selects.
// Verda's listing is not paginated.
func (p *Provider) Instances(ctx context.Context, f adapters.InstanceFilter) ([]adapters.Instance, error) {
	var all []instance
	if err := p.get(ctx, "list", "", "/instances", &all); err != nil {
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

// instance converts Verda's instance.
func (p *Provider) instance(v instance) adapters.Instance {
	tags := map[string]string{}
	for _, t := range v.Tags {
		if strings.HasPrefix(t.Key, "gpuq-") {
			tags[t.Key] = t.Value
		}
	}
	i := adapters.Instance{
		Provider: ProviderName, ProviderID: v.ID, Pool: tags[adapters.TagPool], LaunchedAt: v.CreatedAt,
		ClientToken: tags[adapters.TagClientToken], Tags: tags, Reason: v.Status,
	}
	i.State = stateOf(v.Status, v.IsSpot)
	// The instance's price is in its type's currency.
	p.mu.Lock()
	ref, ok := p.pools[poolName(v.Location, v.InstanceType, v.IsSpot)]
	p.mu.Unlock()
	currency := p.c.cfg.Currency
	if ok {
		currency = ref.currency
	}
	if m, err := adapters.ParsePrice(numberText(v.PricePerHour), currency); err == nil {
		i.PricePerHour = m
	}
	return i
}

// stateOf maps Verda's instance statuses. A spot instance Verda
// discontinues was reclaimed: that is its preemption, found by polling.
func stateOf(status string, spot bool) adapters.InstanceState {
	switch status {
	case "new", "ordered", "provisioning", "validating", "pending":
		return adapters.StatePending
	case "running":
		return adapters.StateRunning
	case "offline", "deleting":
		return adapters.StateStopping
	case "discontinued":
		if spot {
			return adapters.StatePreempted
		}
		return adapters.StateTerminated
	case "notfound":
		return adapters.StateTerminated
	case "error", "no_capacity", "installation_failed":
		return adapters.StateFailed
	}
	return adapters.StatePending
}

// Terminate deletes the instance (its OS volume with it) and its startup
// script; an instance already gone is not an error.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	var v instance
	err := p.get(ctx, "terminate", "", "/instances/"+url.PathEscape(id), &v)
	if errors.Is(err, adapters.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	err = adapters.Retry(ctx, p.c.cfg.Retry, func(ctx context.Context) error {
		_, err := p.c.do(ctx, "terminate", "", rest.Request{Method: http.MethodPut, Path: "/instances",
			Body: instanceAction{Action: "delete", ID: []string{id}}}, http.StatusOK, http.StatusAccepted, http.StatusNoContent)
		return err
	})
	if err != nil && !errors.Is(err, adapters.ErrNotFound) {
		return err
	}
	if v.StartupScriptID != nil && *v.StartupScriptID != "" {
		// The script served its one boot; a failure here leaves a
		// script, not a machine, so it does not fail the termination.
		p.c.do(ctx, "terminate", "", rest.Request{Method: http.MethodDelete, //nolint:errcheck // best effort, see above
			Path: "/scripts/" + url.PathEscape(*v.StartupScriptID)}, http.StatusOK, http.StatusAccepted, http.StatusNoContent)
	}
	return nil
}

// String names the adapter and its endpoint, nothing secret.
func (p *Provider) String() string { return "verda provider at " + p.c.cfg.BaseURL }
