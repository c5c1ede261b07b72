package command

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/migrate"
	"github.com/hyapp/roomflow/internal/mysqlx"
)

func migrateCmd(g *globals) *cobra.Command {
	var lockWait time.Duration
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or update the MySQL schema (idempotent, safe on every deploy)",
		Long:  help("migrate"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			log := cfg.Log.Logger(os.Stderr)
			db, err := mysqlx.Open(cmd.Context(), cfg.MySQL)
			if err != nil {
				return err
			}
			defer db.Close()
			ms, err := migrate.Load()
			if err != nil {
				return err
			}
			res, err := migrate.Up(cmd.Context(), db, ms, lockWait, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version %d (%d applied now)\n", res.Current, len(res.Applied))
			return nil
		},
	}
	cmd.Flags().DurationVar(&lockWait, "lock-wait", time.Minute, "how long to wait for another migrate to finish")
	return cmd
}

func topicsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "topics",
		Short: "Create or check every Kafka topic of the design",
		Long:  help("topics"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			kc := cfg.Kafka.Cluster(nil, nil)
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			// The release step runs first: a wrong password, CA or
			// listener fails it here, saying which.
			if err := kc.Ping(ctx); err != nil {
				return err
			}
			cl, err := kc.NewClient("topics")
			if err != nil {
				return err
			}
			defer cl.Close()
			statuses, err := kafkax.EnsureTopics(ctx, kadm.NewClient(cl), cfg.Kafka.Layout())
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tCOMPACTED\tCREATED")
			for _, s := range statuses {
				fmt.Fprintf(tw, "%s\t%d\t%v\t%v\n", s.Name, s.Partitions, s.Compacted, s.Created)
			}
			tw.Flush()
			return err
		},
	}
}

func configCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration with secrets redacted",
		Long:  help("config"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			if err := checkComponents(newDeps(cfg, slog.New(slog.DiscardHandler))); err != nil {
				return err
			}
			out, err := cfg.YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
}
