package command

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/cfgerr"
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
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Write synthetic gift/mic traffic into room_outbox (or Kafka) and print the expected results",
		Long:  help("loadgen"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			sc.AppCode = cfg.AppCode
			o.Out, o.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if ld.Duration > 0 {
				if o.Live {
					return cfgerr.Usage(fmt.Errorf("--live and --duration exclude each other"))
				}
				if err := loadTest(cmd, cfg, &sc, &ld, &o); err != nil {
					return err
				}
				return loadrun.Load(cmd.Context(), cfg, sc, ld, o)
			}
			if o.Live {
				if o.To != "mysql" {
					return fmt.Errorf("--live writes to mysql only")
				}
				if !cmd.Flags().Changed("span") {
					sc.Span = 10 * time.Minute
				}
			}
			return loadrun.Scenario(cmd.Context(), cfg, sc, o)
		},
	}
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
// --batch are shared with the scenario mode and copied in by loadTest.
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

// loadKeys re-keys loadgen.Load's Validate errors to the flags.
var loadKeys = map[string]string{
	"to": "--to", "duration": "--duration", "rate": "--rate", "ramp": "--ramp", "writers": "--writers", "batch": "--batch",
	"hot_room_skew": "--hot-room-skew", "session_median": "--session-median", "session_p99": "--session-p99",
	"publish_failure_share": "--publish-failure-share", "redelivery_share": "--redelivery-share",
	"malformed_share": "--malformed-share", "late_commit_share": "--late-commit-share", "late_commit_hold": "--late-commit-hold",
}

// loadTest applies a load test's own defaults where their flags were not
// given (an evening's users and rooms: the scenario's 300 users would all
// sit on a mic within seconds; loadgen.DefaultLoad's rate) and checks ld,
// naming the flags in its errors.
func loadTest(cmd *cobra.Command, cfg *config.Config, sc *loadgen.Scenario, ld *loadgen.Load, o *loadrun.Options) error {
	if !cmd.Flags().Changed("users") {
		sc.Users = 100_000
	}
	if !cmd.Flags().Changed("rooms") {
		sc.Rooms = 2_000
	}
	if !cmd.Flags().Changed("rate") {
		o.Rate = loadgen.DefaultLoad().Rate
	}
	ld.To, ld.Batch, ld.Rate = o.To, o.Batch, o.Rate
	err := cfgerr.Under("loadgen", loadKeys, ld.Validate())
	if ld.LateCommitShare > 0 && ld.LateCommitHold >= cfg.Relay.GapMaxAge.D() {
		err = errors.Join(err, &cfgerr.FieldError{Key: "--late-commit-hold", Msg: fmt.Sprintf("must be below relay.gap_max_age (%s), or the relay gives the held ids up", cfg.Relay.GapMaxAge.D())})
	}
	return err
}
