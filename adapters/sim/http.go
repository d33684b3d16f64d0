package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
)

// The simulated cloud's HTTP API, so that the cloud can run in a process of
// its own (`gpuq sim-cloud`) and a control plane reach it the way it reaches
// a real provider: over the network, where a call can be cut off by the
// caller's death.
//
//	GET    /v1/offers?page_token=T     one page of offers
//	GET    /v1/instances?page_token=T  one page of instances, gone ones too
//	POST   /v1/instances               launch (a launchWire body)
//	GET    /v1/instances/{id}          describe
//	DELETE /v1/instances/{id}          terminate
//
// Failures are a JSON errorWire with the HTTP status of their kind.

// maxBody bounds every request and answer body of the API.
const maxBody = 4 << 20

// kindNames are the failure kinds as the API writes them, with their HTTP
// status.
var kindNames = []struct {
	name   string
	kind   *adapters.Kind
	status int
}{
	{"capacity_unavailable", adapters.ErrCapacityUnavailable, http.StatusConflict},
	{"quota_exceeded", adapters.ErrQuotaExceeded, http.StatusForbidden},
	{"auth", adapters.ErrAuth, http.StatusUnauthorized},
	{"invalid_request", adapters.ErrInvalidRequest, http.StatusBadRequest},
	{"not_found", adapters.ErrNotFound, http.StatusNotFound},
	{"rate_limited", adapters.ErrRateLimited, http.StatusTooManyRequests},
	{"provider_down", adapters.ErrProviderDown, http.StatusServiceUnavailable},
	{"transient", adapters.ErrTransient, http.StatusServiceUnavailable},
}

type errorWire struct {
	Kind    string `json:"kind"`
	Op      string `json:"op"`
	Pool    string `json:"pool,omitempty"`
	Message string `json:"message"`
	// RetryAfterMS is the provider's hint for a transient failure.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// launchWire is a launch request on the wire. The credential travels as the
// user data of a real provider's launch does: to the machine, never logged.
type launchWire struct {
	Pool        string   `json:"pool"`
	ClientToken string   `json:"client_token"`
	InstanceID  string   `json:"instance_id"`
	Region      string   `json:"region"`
	Country     string   `json:"country"`
	Slots       int      `json:"slots,omitempty"`
	Notice      string   `json:"notice,omitempty"`
	WorkerArgs  []string `json:"worker_args,omitempty"`
	NATSURL     string   `json:"nats_url"`
	Credential  string   `json:"credential,omitempty"`
	Executable  string   `json:"executable,omitempty"`
	Image       string   `json:"image,omitempty"`
}

func launchToWire(r adapters.LaunchRequest) launchWire {
	b := r.Boot
	return launchWire{Pool: r.Pool, ClientToken: r.ClientToken, InstanceID: b.InstanceID, Region: b.Region, Country: b.Country,
		Slots: b.Slots, Notice: string(b.Notice), WorkerArgs: b.WorkerArgs, NATSURL: b.NATSURL, Credential: b.Credential.Reveal(),
		Executable: b.Executable, Image: b.Image}
}

func (w launchWire) request() adapters.LaunchRequest {
	return adapters.LaunchRequest{Pool: w.Pool, ClientToken: w.ClientToken, Boot: adapters.BootSpec{
		InstanceID: w.InstanceID, Pool: w.Pool, Region: w.Region, Country: w.Country, Slots: w.Slots,
		Notice: adapters.NoticeSource(w.Notice), WorkerArgs: w.WorkerArgs, NATSURL: w.NATSURL,
		Credential: adapters.NewSecret(w.Credential), Executable: w.Executable, Image: w.Image}}
}

type offersPage struct {
	Offers []policy.Offer `json:"offers"`
	Next   string         `json:"next_page_token,omitempty"`
}

type instancesPage struct {
	Instances []adapters.Instance `json:"instances"`
	Next      string              `json:"next_page_token,omitempty"`
}

// HandlerOptions change how the served API answers.
type HandlerOptions struct {
	// HoldLaunches is how many launches, from the first, create their
	// instance and then never answer until the caller hangs up: the
	// provider's answer lost with the caller, as when the control plane
	// dies between asking for a machine and recording the answer.
	HoldLaunches int
}

// Handler serves c's API.
func (c *Cloud) Handler(opts HandlerOptions) http.Handler {
	var held atomic.Int64
	hold := int64(opts.HoldLaunches)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/offers", func(w http.ResponseWriter, r *http.Request) {
		offers, next, err := c.offers(r.Context(), r.URL.Query().Get("page_token"))
		answer(w, http.StatusOK, offersPage{Offers: offers, Next: next}, err)
	})
	mux.HandleFunc("GET /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		got, next, err := c.list(r.Context(), r.URL.Query().Get("page_token"))
		answer(w, http.StatusOK, instancesPage{Instances: got, Next: next}, err)
	})
	mux.HandleFunc("GET /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		got, err := c.get(r.Context(), r.PathValue("id"))
		answer(w, http.StatusOK, got, err)
	})
	mux.HandleFunc("DELETE /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusNoContent, nil, c.remove(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		var body launchWire
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			answer(w, 0, nil, c.fail(OpLaunch, "", adapters.ErrInvalidRequest, fmt.Errorf("launch body: %w", err)))
			return
		}
		got, err := c.create(r.Context(), body.request())
		if err == nil && held.Add(1) <= hold {
			c.logger.Warn("sim: holding the answer to a launch until the caller hangs up", "instance", got.ProviderID, "client_token", body.ClientToken)
			<-r.Context().Done()
			return
		}
		answer(w, http.StatusCreated, got, err)
	})
	return mux
}

// answer writes v with status, or err as an errorWire with its kind's
// status.
func answer(w http.ResponseWriter, status int, v any, err error) {
	if err != nil {
		ew, code := errorWire{Kind: "provider_down", Message: err.Error()}, http.StatusInternalServerError
		var pe *adapters.ProviderError
		if errors.As(err, &pe) {
			ew.Op, ew.Pool, ew.RetryAfterMS = pe.Op, pe.Pool, pe.RetryAfter.Milliseconds()
			if pe.Err != nil {
				ew.Message = pe.Err.Error()
			}
		}
		for _, k := range kindNames {
			if errors.Is(err, k.kind) {
				ew.Kind, code = k.name, k.status
				break
			}
		}
		status, v = code, ew
	}
	if v == nil {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the caller hung up
}

// remote is a simulated cloud served by another process.
type remote struct {
	base   *url.URL
	client *http.Client
}

// Dial returns the adapter of the simulated cloud served at baseURL (a
// `gpuq sim-cloud`), retrying as retry says. It checks only the URL; the
// first call finds out whether the cloud answers.
func Dial(baseURL string, retry adapters.RetryConfig) (*Provider, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("sim.url: want http(s)://host:port with no user, got %q", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Provider{cloud: &remote{base: u, client: &http.Client{}}, retry: retry.WithDefaults()}, nil
}

func (r *remote) offers(ctx context.Context, pageToken string) ([]policy.Offer, string, error) {
	var page offersPage
	err := r.call(ctx, OpOffers, http.MethodGet, "/v1/offers?page_token="+url.QueryEscape(pageToken), nil, &page)
	return page.Offers, page.Next, err
}

func (r *remote) create(ctx context.Context, req adapters.LaunchRequest) (adapters.Instance, error) {
	var got adapters.Instance
	err := r.call(ctx, OpLaunch, http.MethodPost, "/v1/instances", launchToWire(req), &got)
	return got, err
}

func (r *remote) get(ctx context.Context, id string) (adapters.Instance, error) {
	var got adapters.Instance
	err := r.call(ctx, OpDescribe, http.MethodGet, "/v1/instances/"+url.PathEscape(id), nil, &got)
	return got, err
}

func (r *remote) list(ctx context.Context, pageToken string) ([]adapters.Instance, string, error) {
	var page instancesPage
	err := r.call(ctx, OpList, http.MethodGet, "/v1/instances?page_token="+url.QueryEscape(pageToken), nil, &page)
	return page.Instances, page.Next, err
}

func (r *remote) remove(ctx context.Context, id string) error {
	return r.call(ctx, OpTerminate, http.MethodDelete, "/v1/instances/"+url.PathEscape(id), nil, nil)
}

// call makes one API call; a failure is a *adapters.ProviderError whose
// kind the answer names, and one with no answer (refused, cut off, an
// unreadable body) is ErrProviderDown: its outcome is unknown.
func (r *remote) call(ctx context.Context, op Op, method, path string, in, out any) error {
	down := func(err error) error {
		return &adapters.ProviderError{Provider: ProviderName, Op: string(op), Kind: adapters.ErrProviderDown, Err: err}
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base.String()+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return down(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	switch {
	case err != nil:
		return down(err)
	case len(data) > maxBody:
		return down(fmt.Errorf("answer over %d bytes", maxBody))
	}
	if resp.StatusCode >= 300 {
		var ew errorWire
		if err := json.Unmarshal(data, &ew); err != nil || ew.Kind == "" {
			return down(fmt.Errorf("HTTP %d without an error body", resp.StatusCode))
		}
		pe := &adapters.ProviderError{Provider: ProviderName, Op: string(op), Pool: ew.Pool, Kind: adapters.ErrProviderDown,
			RetryAfter: time.Duration(ew.RetryAfterMS) * time.Millisecond, Err: errors.New(ew.Message)}
		for _, k := range kindNames {
			if k.name == ew.Kind {
				pe.Kind = k.kind
			}
		}
		return pe
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return down(fmt.Errorf("reading the answer to %s %s: %w", method, path, err))
	}
	return nil
}
