package cli

import (
	"github.com/spf13/cobra"

	"github.com/gpuq/gpuq/queue/control/httpapi"
)

func newOpenAPICmd() *cobra.Command {
	return &cobra.Command{
		Use:   "openapi",
		Short: "Print the HTTP API's OpenAPI 3.1 document (what /v1/openapi.json serves)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc, err := httpapi.OpenAPI()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(append(doc, '\n'))
			return err
		},
	}
}
