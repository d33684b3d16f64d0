package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// ExitError carries a specific exit status out of a command; any other error
// exits with status 1.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Main runs gpuq with args and returns the process exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT)
	defer stop()
	root := New()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		if exit.Err != nil {
			fmt.Fprintln(stderr, "gpuq:", exit.Err)
		}
		return exit.Code
	}
	if ctx.Err() != nil {
		// Ctrl-C ended the command: what it was doing was cut short,
		// which is no failure of its own to report.
		fmt.Fprintln(stderr, "gpuq: interrupted")
		return ExitInterrupted
	}
	fmt.Fprintln(stderr, "gpuq:", err)
	return 1
}

// New returns the gpuq root command with every subcommand attached.
func New() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpuq",
		Short:         "A serverless-style job queue for rented GPU and CPU capacity",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringP("output", "o", "table", "output format: table or json")
	root.PersistentFlags().String("config", "", "config file (YAML, JSON or TOML); default $GPUQ_CONFIG")
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(commands()...)
	return root
}

// commands lists the subcommands; each lives in its own file.
func commands() []*cobra.Command {
	return []*cobra.Command{
		newVersionCmd(),
		newDevCmd(),
		newServerCmd(),
		newWorkerCmd(),
		newMigrateCmd(),
		newSubmitCmd(),
		newStatusCmd(),
		newLsCmd(),
		newLogsCmd(),
		newWaitCmd(),
		newCancelCmd(),
		newRetryCmd(),
		newWorkdirCmd(),
		newResultsCmd(),
		newCheckpointCmd(),
		newNodesCmd(),
		newWorkersCmd(),
		newPoolsCmd(),
		newInstancesCmd(),
		newSpendCmd(),
		newCanaryCmd(),
		newPlanCmd(),
		newOffersCmd(),
		newSimulateCmd(),
		newSimCloudCmd(),
		newDemoCmd(),
		newOpenAPICmd(),
		newTokenCmd(),
		newPolicyCmd(),
		newBudgetCmd(),
		newQuotaCmd(),
		newSecretCmd(),
		newNATSAuthCmd(),
	}
}

// exactArgs is cobra.ExactArgs with an error that shows the command's usage:
// "logs takes 1 argument, got 0 (usage: gpuq logs JOB_ID [flags])".
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n {
			return nil
		}
		word := "arguments"
		if n == 1 {
			word = "argument"
		}
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		return fmt.Errorf("%s takes %d %s, got %d (usage: %s)", name, n, word, len(args), cmd.UseLine())
	}
}
