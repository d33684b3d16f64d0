package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/adapters"
	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/queue/store"
)

// httpFlags adds the HTTP API's flags; def is the default address.
func httpFlags(cmd *cobra.Command, def string) {
	cmd.Flags().String("http-addr", def, "address the HTTP API listens on (env GPUQ_HTTP_ADDR; empty: no HTTP API)")
	cmd.Flags().Float64("http-rate", 50, "requests per second one API token may make (burst: twice as many)")
}

// startHTTP serves the HTTP API on --http-addr until ctx ends and returns
// its base URL, or "" when no address is set. With fallback, a default
// address that is taken gives way to a free port. Plan and offers read
// sources, or the configured providers when there are none, as
// startControlPlane does.
func startHTTP(ctx context.Context, v *viper.Viper, c *clients, fallback bool, logger *slog.Logger, sources ...adapters.OfferSource) (string, error) {
	addr := v.GetString("http-addr")
	if addr == "" {
		return "", nil
	}
	if len(sources) == 0 {
		var err error
		if sources, err = offerSources(v); err != nil {
			return "", err
		}
	}
	rules, err := loadRules(v)
	if err != nil {
		return "", err
	}
	rps := v.GetFloat64("http-rate")
	var webhooks httpapi.WebhookTester
	if c.notifier != nil {
		webhooks = c.notifier
	}
	srv, err := httpapi.New(httpapi.Config{Store: c.store, JS: c.js, NATS: c.nc, Archives: archiveStore(c),
		Sources: sources, Policy: c.policy, Rules: rules, RatePerSecond: rps, Burst: int(2 * rps), Workers: c.workers,
		Placer: c.placer, Runs: c.js, Workdirs: c.workdirs, Webhooks: webhooks, Logger: logger})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil && fallback {
		// gpuq dev's default port is taken (another gpuq dev, a test):
		// any free port will do, since its URL is written to the config.
		logger.Warn("HTTP API port taken; using a free port", "addr", addr, "err", err)
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return "", fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	// Served until ctx ends or c closes, which waits for the API's last
	// writes (the tokens' last use) before it closes the store.
	ctx, stop := context.WithCancel(ctx)
	c.stopServing = append(c.stopServing, stop)
	c.serving.Add(1)
	go func() {
		defer c.serving.Done()
		if err := srv.Serve(ctx, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP API stopped", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	logger.Info("HTTP API listening", "url", url)
	return url, nil
}

// devTokenFile holds the token `gpuq dev` makes, for clients that look for
// a token file rather than the config.
const devTokenFile = ".gpuq/token"

// devProjects are the projects of the dev token: all of them, so that the
// one user of a dev setup can also manage its policy (gpuq policy).
var devProjects = []string{queue.AllProjects}

// devToken returns the dev token: the one in devTokenFile while the store
// still accepts it, else a new admin token for all projects, written
// there (mode 0600). Without an HTTP API there is none.
func devToken(ctx context.Context, s *store.Store, apiURL string) (string, error) {
	if apiURL == "" {
		return "", nil
	}
	if b, err := os.ReadFile(devTokenFile); err == nil {
		secret := strings.TrimSpace(string(b))
		if prefix := queue.TokenLookupPrefix(secret); prefix != "" {
			t, err := s.TokenByPrefix(ctx, prefix)
			if err == nil && t.Matches(secret) && t.Usable(time.Now()) == "" {
				return secret, nil
			}
		}
	}
	secret, t, err := queue.NewTokenSecret("gpuq dev", devProjects, queue.RoleAdmin, nil)
	if err != nil {
		return "", err
	}
	if _, err := s.CreateToken(ctx, t); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(devTokenFile), 0o755); err != nil {
		return "", err
	}
	return secret, writePrivate(devTokenFile, []byte(secret+"\n"))
}

// writePrivate writes a file only its owner may read, tightening the mode of
// one that exists.
func writePrivate(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}
