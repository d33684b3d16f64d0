// Command gpuq is the single binary for the gpuq job queue: the server, the
// worker agent and the client commands.
package main

import (
	"os"

	"github.com/gpuq/gpuq/cmd/gpuq/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
