package command

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/sinks/mysql/rebuild"
)

func rebuildCmd(g *globals) *cobra.Command {
	var (
		noPools   bool
		batchSize int
		idle      time.Duration
	)
	cmd := newCmd("rebuild", "Recompute the mic fact tables (and stream-owned lucky_pools) from Kafka into fresh tables and swap them in",
		help("rebuild"), cobra.NoArgs, g.withDeps(func(cmd *cobra.Command, args []string, d *app.Deps) error {
			defer d.Close()
			c, err := rebuild.ConfigFrom(d.Config, rebuild.Config{BatchSize: batchSize, Idle: idle, Logger: d.Log}, !noPools)
			if err != nil {
				return err
			}
			db, err := d.DB(cmd.Context())
			if err != nil {
				return err
			}
			res, err := rebuild.Run(cmd.Context(), c, db)
			if err != nil {
				return err
			}
			rebuild.Print(cmd.OutOrStdout(), res, !noPools)
			return nil
		}))
	cmd.Flags().BoolVar(&noPools, "no-pools", false, "leave lucky_pools alone (rebuild only the mic fact tables)")
	cmd.Flags().IntVar(&batchSize, "batch-size", rebuild.DefaultBatchSize, "entries applied per transaction into the fresh tables")
	cmd.Flags().DurationVar(&idle, "idle", rebuild.DefaultIdle, "how long to wait for a record below the sink's positions before failing")
	return cmd
}
