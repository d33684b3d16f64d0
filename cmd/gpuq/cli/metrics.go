package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// metricsFlags adds --metrics-addr.
func metricsFlags(cmd *cobra.Command) {
	cmd.Flags().String("metrics-addr", "", "address Prometheus metrics are served on, at /metrics, without authentication: bind it to a private interface (env GPUQ_METRICS_ADDR; empty: none)")
}

// startMetrics serves the control plane's metrics, with the Go runtime's
// and the process's, on --metrics-addr until ctx ends or c closes; it
// returns their URL, or "" when no address is set.
func startMetrics(ctx context.Context, v *viper.Viper, c *clients, logger *slog.Logger) (string, error) {
	addr := v.GetString("metrics-addr")
	if addr == "" || c.metrics == nil {
		return "", nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), c.metrics)
	reg.MustRegister(c.metrics.Observed()...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 15 * time.Second}
	ctx, stop := context.WithCancel(ctx)
	c.stopServing = append(c.stopServing, stop)
	c.serving.Add(2)
	go func() {
		defer c.serving.Done()
		<-ctx.Done()
		srv.Close() //nolint:errcheck // stopping
	}()
	go func() {
		defer c.serving.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics stopped", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String() + "/metrics"
	logger.Info("metrics listening", "url", url)
	return url, nil
}
