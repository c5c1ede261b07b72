// Package command is the roomflow command line: the root command and the
// one explicit list of its subcommands (commands, components), each of them
// flags and wiring over the packages that do the work. cmd/roomflow's main
// only calls Main; tests and other modules build the tree with NewRoot.
package command

import (
	"context"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/buildinfo"
	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/config"
)

// Main runs the command line of os.Args until it ends or SIGTERM or an
// interrupt stops it, and returns the exit status (cli.Main).
func Main() int { return cli.Main(NewRoot()) }

// globals are the flags every command shares.
type globals struct {
	configPath string
}

// load reads the configuration and validates its app-wide keys, then
// checks what only the wired components know (the routes against
// roomEventConsumers), so every command refuses a config that would
// starve a stage. Each component's own keys are validated by the command
// that runs it (wiring.go), at its start.
func (g *globals) load() (*config.Config, error) {
	path := g.configPath
	if path == "" {
		path = os.Getenv("ROOMFLOW_CONFIG")
	}
	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		return nil, err
	}
	if err := cfg.CheckRoutes(roomEventConsumers...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// withConfig is a RunE that loads the configuration (load) and runs run
// with it.
func (g *globals) withConfig(run func(*cobra.Command, []string, *config.Config) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		cfg, err := g.load()
		if err != nil {
			return err
		}
		return run(cmd, args, cfg)
	}
}

// withDeps is a RunE that loads the configuration (load), builds the
// process dependencies over it and runs run with them.
func (g *globals) withDeps(run func(*cobra.Command, []string, *app.Deps) error) func(*cobra.Command, []string) error {
	return g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
		return run(cmd, args, newDeps(cfg, cfg.Log.Logger(os.Stderr)))
	})
}

// runSpecs is a RunE that runs specs' components in one process, with the
// command's flags (app.Run).
func (g *globals) runSpecs(specs ...app.Spec) func(*cobra.Command, []string) error {
	return g.withDeps(func(cmd *cobra.Command, _ []string, d *app.Deps) error {
		d.Flags = cmd.Flags()
		return app.Run(cmd.Context(), d, specs)
	})
}

// newCmd is a command: its usage line, one-line summary, long help
// (help), the arguments it accepts and what it runs.
func newCmd(use, short, long string, args cobra.PositionalArgs, run func(*cobra.Command, []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Long: long, Args: args, RunE: run}
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
	cli.UsageErrors(root)
	return root
}

// componentCmd runs one registered component alone.
func componentCmd(g *globals, s app.Spec) *cobra.Command {
	cmd := newCmd(s.Name, s.Short, s.Long, cobra.NoArgs, g.runSpecs(s))
	if s.Flags != nil {
		s.Flags(cmd.Flags())
	}
	return cmd
}

func runCmd(g *globals) *cobra.Command {
	cmd := newCmd("run", "Run every component in one process (small installs, tests, the demo)", help("run"), cobra.NoArgs,
		g.runSpecs(components()...))
	app.AddFlags(cmd.Flags(), components())
	return cmd
}

// components are the long-running components in their start order: `roomflow
// run` starts them all in it (and stops them all at once, MySQL last:
// app.Run), and each runs alone under its own subcommand.
func components() []app.Spec {
	return []app.Spec{relaySpec(), processSpec(), sinkSpec(), publishIMSpec()}
}

// componentSpec is the component name, with its one-line summary, its
// command's long help (help/<name>.txt), its flags, how its keys are
// checked and how it is built.
func componentSpec(name, short string, flags func(*pflag.FlagSet), check func(*app.Deps) error,
	build func(context.Context, *app.Deps) (app.Component, error)) app.Spec {
	return app.Spec{Name: name, Short: short, Long: help(name), Flags: flags, Check: check, New: build}
}

// checked is an app.Spec Check from the function that builds a
// component's config (its error only).
func checked[T any](config func(*app.Deps) (T, error)) func(*app.Deps) error {
	return func(d *app.Deps) error {
		_, err := config(d)
		return err
	}
}

// commands are the root's subcommands besides the components: the admin
// commands, `run`, the draw service with its operator commands, and the
// one-shot tools.
func commands(g *globals) []*cobra.Command {
	return []*cobra.Command{
		migrateCmd(g), topicsCmd(g), schemasCmd(g), configCmd(g), runCmd(g), kfakeCmd(),
		apiCmd(g), luckyCmd(g), purgeCmd(g), rebuildCmd(g), totalsCmd(g),
		peekCmd(g), dlqCmd(g), loadgenCmd(g), verifyCmd(g), demoCmd(g),
	}
}
