package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/tools/totals"
)

// totalsCmd is `roomflow totals`, the one-shot tools of the compacted
// totals topics (issue 35).
func totalsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "totals",
		Short: "Bootstrap the mic totals topics and the mic state's totals from the MySQL facts",
		Long:  help("totals"),
	}
	cmd.AddCommand(totalsBootstrapCmd(g))
	return cmd
}

func totalsBootstrapCmd(g *globals) *cobra.Command {
	var batch int
	cmd := newCmd("bootstrap", "Write every user's totals from the MySQL facts to the mic state changelog and the totals topics, then each partition's marker",
		help("totals-bootstrap"), cobra.NoArgs, g.withDeps(func(cmd *cobra.Command, args []string, d *app.Deps) error {
			defer d.Close()
			if batch < 1 {
				return cfgerr.Usage(fmt.Errorf("--batch-size must be at least 1 (got %d)", batch))
			}
			if !d.Config.Mic.TotalsEnabled {
				return fmt.Errorf("totals bootstrap refused: mic.totals_enabled is false, so the processor keeps no totals")
			}
			if err := checkWireFormat(d); err != nil { // a config mistake: exit 2 before connecting
				return err
			}
			db, err := d.DB(cmd.Context())
			if err != nil {
				return err
			}
			c := totals.ConfigFrom(d.Config, d.Log)
			c.BatchSize = batch
			if c.Frames, err = bootstrapFrames(cmd.Context(), d); err != nil {
				return err
			}
			res, err := totals.Bootstrap(cmd.Context(), c, db)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "totals bootstrap: %d users (%d daily totals from %s) in %d transactions, %d of %d partitions marked before, in %s\n",
				res.Users, res.Days, res.FirstDate(), res.Transactions, res.AlreadyMarked, res.Partitions, res.Elapsed.Round(1e6))
			return nil
		}))
	cmd.Flags().IntVar(&batch, "batch-size", totals.DefaultBatchSize, "users per Kafka transaction")
	return cmd
}

// bootstrapSchemaWait bounds the bootstrap's wait for the totals topics'
// schema ids: a one-shot Job must end with an error, where a long-running
// writer waits not ready.
var bootstrapSchemaWait = time.Minute

// bootstrapFrames is publicFrames for the bootstrap, waiting at most
// bootstrapSchemaWait.
func bootstrapFrames(ctx context.Context, d *app.Deps) (schemareg.Frames, error) {
	wctx, cancel := context.WithTimeout(ctx, bootstrapSchemaWait)
	defer cancel()
	f, err := publicFrames(wctx, d, "totals-bootstrap", "mic_daily_totals", "mic_lifetime_totals")
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return f, fmt.Errorf("totals bootstrap: the totals topics' schema ids were not found in schema_registry.url within %s (run 'roomflow topics' or 'roomflow schemas register' first): %w", bootstrapSchemaWait, err)
	}
	return f, err
}
