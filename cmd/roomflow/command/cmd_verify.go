package command

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/tools/verify"
)

func verifyCmd(g *globals) *cobra.Command {
	var o verify.Options
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Recompute facts from the room event log and diff them against MySQL",
		Long: `verify reads the room events topic from the beginning with a
read_committed consumer, recomputes the mic facts (lifetime and UTC daily
per user) and the lucky pool inflow with an independent reference of the
seed rules, and diffs them against user_mic_lifetime_stats,
user_mic_daily_stats, user_mic_sessions (as each session closes, a batch
of rows at a time) and lucky_pools, without holding the log: the oracle
folds it record by record. Users with sessions that never saw a 'down'
(open, or closed by the mic timers) are not compared; with --timers (for
the wall-clock traffic of loadgen --live and --duration) the closes of
the mic timers are predicted from mic.pending_publish_max_age and
mic.publishing_session_max_age instead, and every user is compared.

Once 'roomflow lucky' owns lucky_pools (lucky_pool_owner has its row), the
pools also pay out and are funded: total_in is still every gift's inflow
(entered once, by its draw or by the sink), balance must be funded +
total_in - total_out, and verify reconciles the gifts with
lucky_draw_records by draw_id: every
lucky RoomGiftSent since the ownership (by occurred_at_ms) has its draw,
with the gift, rule version, room and the inflow its rule gives; every draw
has its gift event; a gift without a draw_id since then is a difference
(the sink added it to no pool). And it checks the pool invariants: no pool
below its reserve_floor and the sum of total_out = the sum of the draws'
reward_coins. It also lists
the outbox ids the relay gave up waiting for (gap_abandoned records on the
DLQ topic): rows committed later with those ids were never relayed. It reads
each topic to its committed end at the start, giving up on one idle for
--idle before it. Exit status 1 when anything differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			return verify.Run(cmd.Context(), cfg, o, cmd.OutOrStdout())
		},
	}
	cmd.Flags().DurationVar(&o.Idle, "idle", 3*time.Second, "stop reading after the topic was idle this long")
	cmd.Flags().BoolVar(&o.Timers, "timers", false, "wall-clock traffic (loadgen --live, --duration): predict the mic timers' closes (mic.*_max_age); run it once those ages passed since the last event")
	return cmd
}
