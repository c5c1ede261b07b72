// Command roomflow is the one binary of the roomflow pipeline: every
// component is a subcommand, and `roomflow run` runs them all in one process.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/buildinfo"
	"github.com/hyapp/roomflow/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "roomflow:", err)
		os.Exit(1)
	}
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
	return app.NewDeps(cfg, cfg.Log.Logger(os.Stderr)), nil
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "roomflow",
		Short: "Exactly-once stream processing for hyapp's voice-chat rooms",
		Long: `roomflow relays MySQL room_outbox into Kafka, turns room events into
per-user mic time and lucky-gift pool inflow, sinks the facts into MySQL
exactly once, and publishes room events to Tencent Cloud IM.

Configuration: one YAML file (--config or ROOMFLOW_CONFIG) plus the
environment overrides ROOMFLOW_KAFKA_BROKERS, ROOMFLOW_MYSQL_DSN,
ROOMFLOW_METRICS_ADDR, ROOMFLOW_IM_ENDPOINT, ROOMFLOW_IM_SDK_APP_ID,
ROOMFLOW_IM_ADMIN_IDENTIFIER, ROOMFLOW_IM_SECRET_KEY, ROOMFLOW_APP_CODE.
See 'roomflow config' for every key and its effective value.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Get().String(),
	}
	root.PersistentFlags().StringVar(&g.configPath, "config", "", "YAML config file (default $ROOMFLOW_CONFIG; none: defaults)")
	root.AddCommand(migrateCmd(g), topicsCmd(g), configCmd(g), runCmd(g), kfakeCmd())
	for _, mk := range extraCommands {
		root.AddCommand(mk(g))
	}
	for _, s := range app.Specs() {
		root.AddCommand(componentCmd(g, s))
	}
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
		Long: `run starts every registered component (relay, processors, sink, IM
publisher) in one process sharing one metrics server and one MySQL pool.
Each component also runs alone under its own subcommand; run them
separately to scale them independently. run accepts every component's
flags (--instance-id gives each of its groups a static member id).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			specs := app.Specs()
			if len(specs) == 0 {
				return errors.New("no components are built into this binary")
			}
			d.Flags = cmd.Flags()
			return app.Run(cmd.Context(), d, specs)
		},
	}
	app.AddFlags(cmd.Flags(), app.Specs())
	return cmd
}

// extraCommands are one-shot tools (loadgen, verify, demo) added by their
// own files; they are not components and `run` does not start them.
var extraCommands []func(*globals) *cobra.Command
