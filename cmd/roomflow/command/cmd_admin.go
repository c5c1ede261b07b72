package command

import (
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/tools/setup"
)

func migrateCmd(g *globals) *cobra.Command {
	var lockWait time.Duration
	cmd := newCmd("migrate", "Create or update the MySQL schema (idempotent, safe on every deploy)", help("migrate"), cobra.NoArgs,
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			return setup.Migrate(cmd.Context(), cfg, lockWait, cfg.Log.Logger(os.Stderr), cmd.OutOrStdout())
		}))
	cmd.Flags().DurationVar(&lockWait, "lock-wait", time.Minute, "how long to wait for another migrate to finish")
	return cmd
}

func topicsCmd(g *globals) *cobra.Command {
	return newCmd("topics", "Create or check every Kafka topic of the design", help("topics"), cobra.NoArgs,
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			return setup.Topics(cmd.Context(), cfg, cmd.OutOrStdout())
		}))
}

func schemasCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schemas", Short: "Schema Registry commands", Long: help("schemas"), Args: cobra.NoArgs}
	cmd.AddCommand(newCmd("register", "Register the public topics' value schemas (idempotent, BACKWARD_TRANSITIVE)", help("schemas-register"), cobra.NoArgs,
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			return setup.Schemas(cmd.Context(), cfg, cmd.OutOrStdout())
		})))
	return cmd
}

func configCmd(g *globals) *cobra.Command {
	return newCmd("config", "Print the effective configuration with secrets redacted", help("config"), cobra.NoArgs,
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			if err := checkComponents(newDeps(cfg, slog.New(slog.DiscardHandler))); err != nil {
				return err
			}
			out, err := cfg.YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		}))
}
