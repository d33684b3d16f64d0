package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gpuq's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			version := "(devel)"
			if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
				version = info.Main.Version
			}
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if o, err := outputFormat(v); err != nil {
				return err
			} else if o == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]string{"version": version})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "gpuq", version)
			return err
		},
	}
}
