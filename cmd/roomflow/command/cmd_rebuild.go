package command

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/sinks/mysql/rebuild"
)

func rebuildCmd(g *globals) *cobra.Command {
	var (
		noPools   bool
		batchSize int
		idle      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rebuild",
		Short: "Recompute the mic fact tables (and stream-owned lucky_pools) from Kafka into fresh tables and swap them in",
		Long:  help("rebuild"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			defer d.Close()
			c, err := rebuildConfig(d, !noPools, batchSize, idle)
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
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "mic ledger: %d entries below the sink's positions, %d applied, %d repeats, %d dead-lettered by the sink\n",
				res.Entries, res.Applied, res.Repeats, res.Invalid)
			switch {
			case res.PoolsSkipped != "":
				fmt.Fprintf(w, "lucky_pools not rebuilt: %s\n", res.PoolsSkipped)
			case !noPools:
				fmt.Fprintf(w, "lucky pool inflow: %d inflows, %d dead-lettered by the sink\n", res.Inflows, res.InvalidInflows)
			}
			for _, t := range slices.Sorted(maps.Keys(res.Rows)) {
				fmt.Fprintf(w, "rebuilt %s: %d rows\n", t, res.Rows[t])
			}
			fmt.Fprintf(w, "swapped in; the replaced tables are kept: DROP TABLE %s;\n", strings.Join(res.Old, ", "))
			return nil
		},
	}
	cmd.Flags().BoolVar(&noPools, "no-pools", false, "leave lucky_pools alone (rebuild only the mic fact tables)")
	cmd.Flags().IntVar(&batchSize, "batch-size", rebuild.DefaultBatchSize, "entries applied per transaction into the fresh tables")
	cmd.Flags().DurationVar(&idle, "idle", rebuild.DefaultIdle, "how long to wait for a record below the sink's positions before failing")
	return cmd
}
