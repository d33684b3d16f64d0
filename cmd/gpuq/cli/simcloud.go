package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/adapters/local"
	"github.com/gpuq/gpuq/adapters/sim"
)

func newSimCloudCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim-cloud",
		Short: "Serve the simulated cloud's provider API over HTTP, in a process of its own",
		Long: `sim-cloud runs the simulated cloud of gpuq dev --provider sim (the same --traces, --sim-speed,
--sim-start and config key sim.pools) as a provider of its own: its instances are worker processes
on this machine, and its API is served over HTTP at --listen. A control plane reaches it through
the config key providers.sim.url, as it reaches a real provider, so that servers can be killed and
restarted while the cloud and its machines live on. It prints its URL and runs until SIGINT or
SIGTERM, which stop its workers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			hold := v.GetInt("hold-launches")
			if hold < 0 {
				return fmt.Errorf("--hold-launches: must not be negative, got %d", hold)
			}
			ctx, stop := shutdownContext(cmd.Context())
			defer stop()
			logger := newLogger()
			cfg, err := simConfig(v, logger)
			if err != nil {
				return err
			}
			cloud, err := sim.New(cfg, &local.Launcher{}, logger, nil)
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			ln, err := net.Listen("tcp", v.GetString("listen"))
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			url := "http://" + ln.Addr().String()
			srv := &http.Server{Handler: cloud.Handler(sim.HandlerOptions{HoldLaunches: hold}), ReadHeaderTimeout: 10 * time.Second}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			ran := make(chan struct{})
			go func() {
				defer close(ran)
				cloud.Run(ctx) //nolint:errcheck // ends with ctx
			}()
			if o, _ := outputFormat(v); o == "json" {
				err = writeJSON(cmd.OutOrStdout(), map[string]string{"url": url})
			} else {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "simulated cloud serving at %s\n  (config: providers: {sim: {url: %s}})\n", url, url)
			}
			if err != nil {
				stop()
			}
			select {
			case <-ctx.Done():
			case err = <-served:
				stop()
			}
			shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			srv.Shutdown(shut) //nolint:errcheck // held launches are cut off
			<-ran
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			return err
		},
	}
	cmd.Flags().String("listen", "127.0.0.1:8090", "address the provider API listens on (port 0: a free port)")
	cmd.Flags().String("traces", "", "the directory of spot traces (ZONE_CARD_COUNT.json) the pools follow, unless the config key sim.pools names them")
	cmd.Flags().Float64("sim-speed", 1, "virtual seconds per real second")
	cmd.Flags().Duration("sim-start", 0, "how far into the traces the virtual clock starts")
	cmd.Flags().Int("hold-launches", 0, "fault injection: the first N launches rent their machine and never answer, as when the caller dies waiting")
	return cmd
}
