// Package command is the roomflow command line: the root command and the
// one explicit list of its subcommands (commands, components), each of them
// flags and wiring over the packages that do the work. cmd/roomflow's main
// only calls Main; tests and other modules build the tree with NewRoot.
package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/buildinfo"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// Exit statuses: 0 on success and on a clean stop (SIGTERM, interrupt),
// exitUsage for usage and configuration mistakes (an unknown command or
// flag, a wrong argument, a config that does not load or validate: the
// process never started its work), exitFailure for everything that failed
// at run time (a broker or MySQL unreachable, a component that died).
const (
	exitFailure = 1
	exitUsage   = 2
)

// Main runs the command line of os.Args until it ends or SIGTERM or an
// interrupt stops it, and returns the exit status: 0 also for such a stop.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := NewRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "roomflow:", err)
		return exitCode(err)
	}
	return 0
}

// exitCode is the exit status of a command that failed with err.
func exitCode(err error) int {
	if cfgerr.IsUsage(err) {
		return exitUsage
	}
	return exitFailure
}

// usageErrors makes every usage mistake cobra reports a *cfgerr.UsageError
// (exit 2): flag errors through the root's flag error func (inherited by
// every command), argument errors by wrapping each command's Args, and an
// unknown command (cobra's default reports it only on the root, and lets a
// command group print its help for one) by an Args check on every group;
// a group given no argument prints its help as before.
func usageErrors(root *cobra.Command) {
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

// globals are the flags every command shares.
type globals struct {
	configPath string
}

// load reads the configuration and validates its app-wide keys, then
// checks what only the wired components know (checkRoutes), so every
// command refuses a config that would starve a stage. Each component's own
// keys are validated by the command that runs it (wiring.go), at its start.
func (g *globals) load() (*config.Config, error) {
	path := g.configPath
	if path == "" {
		path = os.Getenv("ROOMFLOW_CONFIG")
	}
	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		return nil, err
	}
	if err := checkRoutes(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// deps loads config and builds the process dependencies.
func (g *globals) deps() (*app.Deps, error) {
	cfg, err := g.load()
	if err != nil {
		return nil, err
	}
	return newDeps(cfg, cfg.Log.Logger(os.Stderr)), nil
}

// newDeps is app.NewDeps with the flags of every component at their
// defaults.
func newDeps(cfg *config.Config, log *slog.Logger) *app.Deps {
	return app.NewDeps(cfg, log, components()...)
}

// NewRoot builds the roomflow command tree: the root, commands and a
// command per component. Every call builds a tree of its own (tests build
// many in one process).
func NewRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "roomflow",
		Short:         "Exactly-once stream processing for hyapp's voice-chat rooms",
		Long:          help("roomflow"),
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Get().String(),
	}
	root.PersistentFlags().StringVar(&g.configPath, "config", "", "YAML config file (default $ROOMFLOW_CONFIG; none: defaults)")
	root.AddCommand(commands(g)...)
	for _, s := range components() {
		root.AddCommand(componentCmd(g, s))
	}
	usageErrors(root)
	return root
}

// componentCmd runs one registered component alone.
func componentCmd(g *globals, s app.Spec) *cobra.Command {
	cmd := &cobra.Command{
		Use:   s.Name,
		Short: s.Short,
		Long:  s.Long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			d.Flags = cmd.Flags()
			return app.Run(cmd.Context(), d, []app.Spec{s})
		},
	}
	if s.Flags != nil {
		s.Flags(cmd.Flags())
	}
	return cmd
}

func runCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run every component in one process (small installs, tests, the demo)",
		Long:  help("run"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			specs := components()
			d.Flags = cmd.Flags()
			return app.Run(cmd.Context(), d, specs)
		},
	}
	app.AddFlags(cmd.Flags(), components())
	return cmd
}

// components are the long-running components in their start order: `roomflow
// run` starts them all in it (and stops them in reverse), and each runs
// alone under its own subcommand.
func components() []app.Spec {
	return []app.Spec{relaySpec(), processSpec(), sinkSpec(), publishIMSpec()}
}

// commands are the root's subcommands besides the components: the admin
// commands, `run`, the draw service with its operator commands, and the
// one-shot tools.
func commands(g *globals) []*cobra.Command {
	return []*cobra.Command{
		migrateCmd(g), topicsCmd(g), configCmd(g), runCmd(g), kfakeCmd(),
		apiCmd(g), luckyCmd(g), purgeCmd(g), rebuildCmd(g),
		peekCmd(g), dlqCmd(g), loadgenCmd(g), verifyCmd(g), demoCmd(g),
	}
}
