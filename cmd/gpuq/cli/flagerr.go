package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpuq/gpuq/queue"
)

// flagError names, after an unknown flag, the command's flags it most
// likely meant: "unknown flag: --gpus (did you mean --gpu-count?)"; and
// after a duration without its unit, what one looks like.
func flagError(cmd *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	if errors.As(err, &invalid) && invalid.GetFlag().Value.Type() == "duration" {
		return fmt.Errorf("%w (a duration has a unit: 90s, 30m, 2h45m)", err)
	}
	var unknown *pflag.NotExistError
	if !errors.As(err, &unknown) || unknown.GetSpecifiedName() == "" {
		return err
	}
	var flags []string
	add := func(f *pflag.Flag) {
		// A persistent flag is both the command's and inherited.
		if !f.Hidden && f.Name != "help" && !slices.Contains(flags, f.Name) {
			flags = append(flags, f.Name)
		}
	}
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	if names := queue.Similar(unknown.GetSpecifiedName(), flags); len(names) > 0 {
		return fmt.Errorf("%w (did you mean --%s?)", err, strings.Join(names, " or --"))
	}
	return err
}
