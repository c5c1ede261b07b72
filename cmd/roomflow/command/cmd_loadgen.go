package command

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/tools/loadrun"
)

// scenarioFlags binds a loadgen.Scenario to flags shared by loadgen and demo.
func scenarioFlags(fs *pflag.FlagSet, sc *loadgen.Scenario) {
	fs.Uint64Var(&sc.Seed, "seed", sc.Seed, "random seed (a run is reproducible for its seed)")
	fs.IntVar(&sc.Rooms, "rooms", sc.Rooms, "rooms")
	fs.IntVar(&sc.Users, "users", sc.Users, "users")
	fs.IntVar(&sc.Sessions, "sessions", sc.Sessions, "mic sessions")
	fs.IntVar(&sc.Gifts, "gifts", sc.Gifts, "RoomGiftSent events")
	fs.Float64Var(&sc.LuckyShare, "lucky-share", sc.LuckyShare, "fraction of gifts that are lucky")
	fs.DurationVar(&sc.Span, "span", sc.Span, "simulated time the traffic spreads over (crosses UTC midnights)")
	fs.StringVar(&sc.EventIDPrefix, "id-prefix", sc.EventIDPrefix, "event id prefix (unique per run on one database)")
}

func loadgenCmd(g *globals) *cobra.Command {
	sc := loadgen.DefaultScenario()
	sc.EventIDPrefix = fmt.Sprintf("lg%d", time.Now().Unix())
	ld := loadgen.DefaultLoad()
	var o loadrun.Options
	cmd := newCmd("loadgen", "Write synthetic gift/mic traffic into room_outbox (or Kafka) and print the expected results", help("loadgen"), cobra.NoArgs,
		g.withConfig(func(cmd *cobra.Command, args []string, cfg *config.Config) error {
			o.Out, o.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return loadrun.Run(cmd.Context(), cfg, sc, ld, o, cmd.Flags().Changed)
		}))
	scenarioFlags(cmd.Flags(), &sc)
	cmd.Flags().StringVar(&o.To, "to", "mysql", "mysql (room_outbox) or kafka (room events topic)")
	cmd.Flags().Float64Var(&o.Rate, "rate", 0, "events per second (0: as fast as possible)")
	cmd.Flags().IntVar(&o.Batch, "batch", 200, "rows per room_outbox transaction")
	cmd.Flags().BoolVar(&o.Live, "live", false, "wall-clock traffic from now over --span (default 10m), sessions closed by the mic timers included")
	cmd.Flags().Float64Var(&o.Abandoned, "abandoned", 0.1, "with --live: share of sessions left for the mic timers to close")
	cmd.Flags().StringVar(&o.LuckyAddr, "lucky-addr", "", "draw every lucky gift through this LuckyGiftService (roomflow lucky) before writing it, as room-service does")
	loadFlagSet(cmd.Flags(), &ld, &o)
	return cmd
}

// loadFlagSet binds the load-test flags (--duration and its shape and
// faults) to ld, and its report's and verify's to o; --to, --rate and
// --batch are shared with the scenario mode and copied in by loadrun.Run.
func loadFlagSet(fs *pflag.FlagSet, ld *loadgen.Load, o *loadrun.Options) {
	fs.DurationVar(&ld.Duration, "duration", 0, "load test: generate wall-clock traffic for this long (0: the fixed scenario)")
	fs.DurationVar(&ld.Ramp, "ramp", ld.Ramp, "with --duration: reach --rate linearly over this long")
	fs.IntVar(&ld.Writers, "writers", ld.Writers, "with --duration: concurrent writer transactions (a room's rows stay serial)")
	fs.Float64Var(&ld.HotRoomSkew, "hot-room-skew", ld.HotRoomSkew, "with --duration: Zipf s (> 1) of the rooms gifts go to")
	fs.DurationVar(&ld.SessionMedian, "session-median", ld.SessionMedian, "with --duration: median mic session length")
	fs.DurationVar(&ld.SessionP99, "session-p99", ld.SessionP99, "with --duration: 99th percentile mic session length")
	fs.Float64Var(&ld.PublishFailureShare, "publish-failure-share", ld.PublishFailureShare, "with --duration: share of sessions never published")
	fs.Float64Var(&ld.RedeliveryShare, "redelivery-share", 0, "with --duration --to kafka: share of records produced twice")
	fs.Float64Var(&ld.MalformedShare, "malformed-share", 0, "with --duration: share of rows whose payload no stage decodes (dead-lettered)")
	fs.Float64Var(&ld.LateCommitShare, "late-commit-share", 0, "with --duration --to mysql: share of transactions held open --late-commit-hold")
	fs.DurationVar(&ld.LateCommitHold, "late-commit-hold", ld.LateCommitHold, "how long a late transaction stays open (below relay.gap_max_age)")
	fs.StringVar(&o.Report, "report", "", "with --duration: write a Markdown report with SVG charts of rate and lag over time to this file")
	fs.StringSliceVar(&o.MetricsURLs, "metrics-url", nil, "with --duration: a stage's /metrics URL for the relay lag (repeatable; the consumer groups' lag and the DLQ are read from Kafka anyway)")
	fs.DurationVar(&o.Settle, "settle", time.Minute, "with --report or --verify: how long to wait after the writers for the pipeline to catch up, and then for the sampled mic events' facts or matching facts")
	fs.BoolVar(&o.Verify, "verify", false, "with --duration: once the mic timers closed what the run left open, run 'roomflow verify --timers' into the summary and the report (exit status 1 when facts differ)")
}
