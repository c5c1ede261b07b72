// Command roomflow is the one binary of the roomflow pipeline: every
// component is a subcommand, and `roomflow run` runs them all in one
// process. The command line lives in package command.
package main

import (
	"os"

	"github.com/hyapp/roomflow/cmd/roomflow/command"
)

func main() { os.Exit(command.Main()) }
