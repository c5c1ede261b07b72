package command

import (
	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/tools/purge"
)

func purgeCmd(g *globals) *cobra.Command {
	var dryRun bool
	cmd := newCmd("purge", "Delete consumption rows and room-level lucky facts older than purge.* windows (and, if enabled, relayed delivered room_outbox rows), then exit",
		help("purge"), cobra.NoArgs, g.withDeps(func(cmd *cobra.Command, args []string, d *app.Deps) error {
			defer d.Close()
			return purge.Run(cmd.Context(), d.Config, purge.Options{DryRun: dryRun, DB: d.DB, Registerer: registerer(d), Logger: d.Log},
				cmd.OutOrStdout())
		}))
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count the rows that would be deleted, delete nothing")
	return cmd
}
