package command

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/tools/luckyctl"
)

// luckyRulesSimulateCmd is `roomflow lucky rules simulate`: a rule's
// table drawn against a traffic model in memory with the draw service's
// own planning code (docs/simulator.md). It reads MySQL only with
// --pools-from-mysql and writes nothing there.
func luckyRulesSimulateCmd(g *globals) *cobra.Command {
	var o luckyctl.SimulateOptions
	cmd := newCmd("simulate FILE...", "Simulate what rule versions pay under the caps and floors, before they are published", help("lucky-rules-simulate"),
		cobra.MinimumNArgs(1), func(cmd *cobra.Command, args []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			o.Files, o.RateSet, o.DrawsSet = args, cmd.Flags().Changed("rate"), cmd.Flags().Changed("draws")
			c, err := luckyctl.SimulateConfig(cfg, o, time.Now().UnixMilli())
			if err != nil {
				return err
			}
			if o.FromMySQL {
				db, err := mysqlx.Open(cmd.Context(), cfg.MySQL)
				if err != nil {
					return err
				}
				defer db.Close()
				app := o.AppCode
				if app == "" {
					app = cfg.AppCode
				}
				if err := luckyctl.PoolsFromMySQL(cmd.Context(), db, app, &c); err != nil {
					return err
				}
			}
			return luckyctl.Simulate(cmd.OutOrStdout(), c, o, cfg.Lucky.PublishPayoutBandPPM)
		})
	f := cmd.Flags()
	f.StringVar(&o.AppCode, "app-code", "", "app_code whose pools --pools-from-mysql reads (default: the configured app_code)")
	f.BoolVar(&o.FromMySQL, "pools-from-mysql", false, "start from the app's lucky_pools balances and reserve floors (read only)")
	f.Int64Var(&o.PlatformBalance, "platform-balance", 10_000_000, "starting balance of the platform pool")
	f.Int64Var(&o.GiftBalance, "gift-balance", 1_000_000, "starting balance of each gift's pool")
	f.Int64Var(&o.RoomBalance, "room-balance", 100_000, "starting balance of each room's pool")
	f.Int64Var(&o.PlatformFloor, "platform-floor", 0, "reserve_floor of the platform pool")
	f.Int64Var(&o.GiftFloor, "gift-floor", 0, "reserve_floor of each gift's pool")
	f.Int64Var(&o.RoomFloor, "room-floor", 0, "reserve_floor of each room's pool")
	f.IntVar(&o.Rooms, "rooms", 200, "rooms (room-0 the most popular)")
	f.IntVar(&o.Users, "users", 10_000, "sending users")
	f.Float64Var(&o.RoomSkew, "room-skew", 1.1, "Zipf exponent of room popularity (0: uniform)")
	f.Float64Var(&o.UserSkew, "user-skew", 0.8, "Zipf exponent of user activity (0: uniform)")
	f.StringVar(&o.GiftMix, "gift-mix", "", "GIFT_ID:COUNT=WEIGHT,... (default: each rule's gift, gift_count 1, equal weights)")
	f.Int64Var(&o.Draws, "draws", 0, "draws, spread evenly over --hours (or give --rate)")
	f.Float64Var(&o.Rate, "rate", 0, "draws a second for --hours (instead of --draws)")
	f.Float64Var(&o.Hours, "hours", 24, "simulated hours")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the traffic and the random values: one seed, one result")
	f.StringVar(&o.Report, "report", "", "write report.md and its SVG charts into this directory")
	return cmd
}
