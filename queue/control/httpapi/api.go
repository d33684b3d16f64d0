package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/policy"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// Store is what the API reads and changes in the system of record.
type Store interface {
	control.ClientStore
	ListPage(ctx context.Context, p queue.Page) ([]*queue.Job, error)
	CountJobs(ctx context.Context, p queue.Page) (queue.JobCounts, error)
	control.LedgerStore
	Nodes(ctx context.Context, pool string) ([]*queue.Node, error)
	Instances(ctx context.Context, pool string, state queue.InstanceState) ([]*queue.Instance, error)
	DecisionReplay(ctx context.Context, id uuid.UUID, version int) (*queue.DecisionReplay, error)
	TokenStore
	CapacityStore
	control.PolicyStore
	QuotaStore
	SecretStore
}

// TokenStore keeps API tokens.
type TokenStore interface {
	CreateToken(ctx context.Context, t *queue.Token) (*queue.Token, error)
	TokenByPrefix(ctx context.Context, prefix string) (*queue.Token, error)
	Tokens(ctx context.Context, projects []string) ([]*queue.Token, error)
	RevokeToken(ctx context.Context, id uuid.UUID, projects []string) error
	TouchTokens(ctx context.Context, ids []uuid.UUID, at time.Time) error
}

// Streams is the part of JetStream the API uses: submissions are
// published, events and logs are read in order.
type Streams interface {
	queue.Publisher
	queue.OrderedConsumers
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// Archives reads packed archives (job outputs) from their store.
type Archives interface {
	Get(ctx context.Context, uri string, w io.Writer) error
}

// Config is what the API serves from.
type Config struct {
	Store    Store
	JS       Streams
	NATS     Notices
	Archives Archives
	// Sources give the offers that plan and offers answer with.
	Sources []adapters.OfferSource
	// Policy is the placement policy in effect, which plan decides with
	// and the policy operations read and change. Default: a PolicyWatch
	// over Store with Rules as the config file's policy, refreshed from
	// Start on.
	Policy *control.PolicyWatch
	// Rules are the config file's placement rules, when Policy is unset.
	Rules policy.Rules
	// RatePerSecond is the sustained requests per second one token may
	// make. Default 50.
	RatePerSecond float64
	// Burst is how many requests a token may make at once. Default 100.
	Burst int
	// TouchEvery is how often tokens' last use is written. Default 30s.
	TouchEvery time.Duration
	// RecordWait is how long a submission waits for the scheduler to record
	// its job. Default 30s.
	RecordWait time.Duration
	// Workers, when set, counts the live workers of each pool, for the
	// status of a placed job.
	Workers *control.LiveWorkers
	// Placer and Runs place and dispatch the jobs a caller retries; an
	// API without them answers a retry with 501.
	Placer control.Placer
	Runs   control.RunPublisher
	// Workdirs keeps the working directories users upload; an API without
	// it answers an upload with 501 and refuses a spec naming one.
	Workdirs *control.Workdirs
	// Webhooks posts test messages to the webhooks projects' secrets hold
	// (control.Notifier, configured as the server posts the ends of jobs);
	// an API without it answers a test post with 501.
	Webhooks WebhookTester
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.RatePerSecond == 0 {
		c.RatePerSecond = 50
	}
	if c.Burst == 0 {
		c.Burst = 100
	}
	if c.TouchEvery == 0 {
		c.TouchEvery = 30 * time.Second
	}
	if c.RecordWait == 0 {
		c.RecordWait = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("httpapi: Store must be set")
	case c.JS == nil:
		return errors.New("httpapi: JS must be set")
	case c.NATS == nil:
		return errors.New("httpapi: NATS must be set")
	case c.Archives == nil:
		return errors.New("httpapi: Archives must be set")
	case c.RatePerSecond < 0:
		return fmt.Errorf("httpapi: RatePerSecond must be positive, got %v", c.RatePerSecond)
	case c.Burst < 0:
		return fmt.Errorf("httpapi: Burst must be positive, got %d", c.Burst)
	}
	return nil
}

// Server is the HTTP API over one control plane.
type Server struct {
	cfg    Config
	client *control.Client
	auth   *authenticator
	// recorded is nil until Start.
	recorded *recordings
	// policy is cfg.Policy or the one New made; ownPolicy says which.
	policy    *control.PolicyWatch
	ownPolicy bool
	api       huma.API
	mux       *http.ServeMux
	// touched is closed once the tokens' last use is written for the last
	// time, after Start's ctx ends.
	touched chan struct{}
}

// Version is the API's version as the OpenAPI document states it.
const Version = "1.0.0"

// New builds the API; Serve serves it (or Start, then Handler).
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, client: &control.Client{Store: cfg.Store, JS: cfg.JS, NATS: cfg.NATS, RecordWait: cfg.RecordWait, Workers: cfg.Workers,
		Placer: cfg.Placer, Runs: cfg.Runs, Workdirs: cfg.Workdirs},
		policy: cfg.Policy}
	if s.policy == nil {
		s.policy, s.ownPolicy = &control.PolicyWatch{Store: cfg.Store, Config: cfg.Rules, Logger: cfg.Logger}, true
	}
	s.auth = newAuthenticator(cfg.Store, cfg.RatePerSecond, cfg.Burst, cfg.Logger)
	s.mux, s.api = newAPI()
	s.api.UseMiddleware(s.auth.middleware(s.api))
	s.register()
	return s, nil
}

// Handler serves the API.
func (s *Server) Handler() http.Handler { return unmatched(s.mux) }

// unmatched answers the requests no operation serves, an unknown path or a
// method its path does not take, as problem details like every other error
// (404, or 405 with the Allow header the mux sets), instead of the mux's
// plain text.
func unmatched(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &statusOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		status, detail := http.StatusNotFound, "no operation serves this path; /v1/openapi.json lists them"
		if rec.status == http.StatusMethodNotAllowed {
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			status, detail = rec.status, fmt.Sprintf("method %s is not allowed on this path; allowed: %s", r.Method, allow)
		}
		body, _ := json.Marshal(huma.ErrorModel{Title: http.StatusText(status), Status: status, Detail: detail}) // strings and an int: cannot fail
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		w.Write(body) //nolint:errcheck // the client may be gone
	})
}

// statusOnly records the status and headers a handler answers with and
// drops its body.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header { return s.header }

func (s *statusOnly) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
}

func (s *statusOnly) Write(b []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return len(b), nil
}

// Start follows job announcements for submissions and writes tokens' last
// use every TouchEvery, until ctx ends; a policy New made is read and then
// followed.
func (s *Server) Start(ctx context.Context) error {
	if s.ownPolicy {
		if err := s.policy.Refresh(ctx); err != nil {
			return fmt.Errorf("reading the placement policy: %w", err)
		}
		go s.policy.Run(ctx)
	}
	rec := &recordings{}
	if err := rec.start(ctx, s.cfg.NATS); err != nil {
		return fmt.Errorf("following job events: %w", err)
	}
	s.recorded = rec
	s.touched = make(chan struct{})
	go func() {
		defer close(s.touched)
		s.auth.touchLoop(ctx, s.cfg.TouchEvery)
	}()
	return nil
}

// Serve serves the API on ln until ctx ends, then shuts down gracefully:
// it returns once the requests in flight are answered (for up to 5 s) and
// the tokens' last use is written, so that its store may be closed then.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	if err := s.Start(ctx); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	select {
	case <-s.touched:
	case <-sctx.Done():
	}
	return err
}

// OpenAPI returns the API's OpenAPI 3.1 document as /v1/openapi.json
// serves it.
func OpenAPI() ([]byte, error) {
	_, api := newAPI()
	(&Server{}).registerOn(api)
	return json.MarshalIndent(api.OpenAPI(), "", "  ")
}

// newAPI is the huma API with gpuq's document settings and no operations.
func newAPI() (*http.ServeMux, huma.API) {
	mux := http.NewServeMux()
	cfg := huma.DefaultConfig("gpuq", Version)
	cfg.Info.Description = "gpuq's HTTP API: submit jobs, follow them, fetch their results. " +
		"Every operation except the health check needs `Authorization: Bearer <token>`; " +
		"a token sees the jobs of its projects only. Errors are application/problem+json (RFC 9457)."
	// Specs may be posted as YAML; bodies are decoded by queue.ParseSpec,
	// so the format only has to be known.
	yamlFormat := huma.Format{Marshal: func(w io.Writer, v any) error {
		b, err := yaml.Marshal(v)
		if err == nil {
			_, err = w.Write(b)
		}
		return err
	}, Unmarshal: func(data []byte, v any) error {
		// Aliases are refused before anything expands them.
		if err := queue.CheckYAML(data, "body"); err != nil {
			return err
		}
		return yaml.Unmarshal(data, v)
	}}
	cfg.Formats = maps.Clone(cfg.Formats)
	cfg.Formats["application/yaml"], cfg.Formats["yaml"] = yamlFormat, yamlFormat
	cfg.OpenAPIPath = "/v1/openapi"
	cfg.DocsPath = ""
	cfg.SchemasPath = ""
	cfg.CreateHooks = nil // no $schema links in bodies
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "A gpuq token (`gpuq token create`)."},
	}
	cfg.Security = []map[string][]string{{"bearer": {}}}
	api := humago.New(mux, cfg)
	api.OpenAPI().Components.Schemas.RegisterTypeAlias(reflect.TypeFor[queue.Duration](), reflect.TypeFor[string]())
	api.OpenAPI().Components.Schemas.RegisterTypeAlias(reflect.TypeFor[policy.Money](), reflect.TypeFor[moneyDoc]())
	return mux, api
}

func (s *Server) register() { s.registerOn(s.api) }

// registerOn adds every operation to api.
func (s *Server) registerOn(api huma.API) {
	s.registerJobs(api)
	s.registerStreams(api)
	s.registerResults(api)
	s.registerPlacement(api)
	s.registerAdmin(api)
	s.registerCapacity(api)
	s.registerPolicy(api)
	s.registerQuota(api)
	s.registerWorkdirs(api)
	s.registerSecrets(api)
	s.registerWebhooks(api)
}

// register adds an operation, documenting the errors every operation of
// its kind can answer besides those it names.
func register[I, O any](api huma.API, op huma.Operation, h func(context.Context, *I) (*O, error)) {
	if _, ok := op.Metadata[metaRole]; ok {
		op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusServiceUnavailable)
	}
	op.Errors = append(op.Errors, http.StatusInternalServerError)
	slices.Sort(op.Errors)
	op.Errors = slices.Compact(op.Errors)
	huma.Register(api, op, h)
}
