// Package cli is the command line's plumbing over cobra: usage mistakes
// reported as *cfgerr.UsageError, and the process's exit status, which
// tells them (2) apart from failures at run time (1).
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// UsageErrors makes every usage mistake cobra reports a *cfgerr.UsageError
// (exit 2): flag errors through the root's flag error func (inherited by
// every command), argument errors by wrapping each command's Args, and an
// unknown command (cobra's default reports it only on the root, and lets a
// command group print its help for one) by an Args check on every group;
// a group given no argument prints its help as before.
func UsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cfgerr.Usage(err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch args := c.Args; {
		case args != nil:
			c.Args = func(cmd *cobra.Command, a []string) error { return cfgerr.Usage(args(cmd, a)) }
		case c.HasSubCommands():
			if !c.Runnable() {
				// cobra answers a group that cannot run with its help
				// before it checks arguments: run it to check them.
				c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
			}
			c.Args = func(cmd *cobra.Command, a []string) error {
				if len(a) == 0 {
					return nil
				}
				msg := fmt.Sprintf("unknown command %q for %q", a[0], cmd.CommandPath())
				if s := cmd.SuggestionsFor(a[0]); len(s) > 0 {
					msg += "; did you mean " + strings.Join(s, ", ") + "?"
				}
				return cfgerr.Usage(errors.New(msg))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// Exit statuses: 0 on success and on a clean stop (SIGTERM, interrupt),
// ExitUsage for usage and configuration mistakes (an unknown command or
// flag, a wrong argument, a config that does not load or validate: the
// process never started its work), ExitFailure for everything that failed
// at run time (a broker or MySQL unreachable, a component that died).
const (
	ExitFailure = 1
	ExitUsage   = 2
)

// Main runs root on the command line of os.Args until it ends or SIGTERM or an
// interrupt stops it, and returns the exit status: 0 also for such a stop.
func Main(root *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, root.Name()+":", err)
		return ExitCode(err)
	}
	return 0
}

// ExitCode is the exit status of a command that failed with err.
func ExitCode(err error) int {
	if cfgerr.IsUsage(err) {
		return ExitUsage
	}
	return ExitFailure
}
