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
		Long: `loadgen generates a reproducible scenario of rooms, users, mic sessions
(crossing UTC midnights), plain and lucky gifts, joins and heat changes, and
writes it into room_outbox in commit order (--to mysql, the default, as the
room service would) or straight to the room events topic (--to kafka). It
seeds the scenario's lucky_gift_rules row, then prints the oracle: the facts
roomflow must produce. 'roomflow verify' checks them later.

--live writes wall-clock traffic instead: the events lie between now and
now + --span and each row is inserted when the clock reaches its
occurred_at; --abandoned of the sessions are left unpublished or without a
down on purpose, for the mic timers (mic.pending_publish_max_age,
mic.publishing_session_max_age of the config) to close, and the oracle
includes those closes. Every other session keeps its events a third of the
shorter max age away from its timer's due time.

--lucky-addr host:port sends every lucky gift through that draw service
(roomflow lucky's LuckyGiftService) first (with --live right before the
transaction that writes it), as room-service does: check,
the debit's receipt, ExecuteLuckyGiftDraw with the gift's event id as
command_id, then the gift row names the draw_id it answered. Without it,
lucky gifts carry invented draw ids and no draw is made (the stream
inflow owns the pools, as before the draw service). The rule must be
active for the service (loadgen seeds it) and the pools funded ('roomflow
lucky pools fund') for draws to pay.

--duration makes it a load test: new sessions, gifts, joins and heat
changes in wall-clock time from now for that long at --rate events per
second (reached over --ramp), in memory bounded by the open sessions and
the facts, never by the events. Gifts go to rooms by Zipf popularity
(--hot-room-skew, the s > 1); session lengths are log-normal with
--session-median and --session-p99; --publish-failure-share of sessions
never publish and --abandoned never go down (the mic timers close both, as
with --live); sessions still open at the end are left to the timers.
--writers write concurrently, --batch rows per transaction; every row of a
room goes to one writer, after the previous one committed. Faults:
--redelivery-share (--to kafka: the record produced twice),
--malformed-share (rows no stage decodes: the room processor
dead-letters them, counted apart; with --to mysql publish-im cannot
deliver their room_outbox rows and retries them unless
im.mark_permanent_failed is set), --late-commit-share (--to mysql:
transactions held open --late-commit-hold, below relay.gap_max_age, so
ids commit out of order). While it runs it shows a progress line a
second (a bar on a terminal, log lines otherwise): events written against
the schedule, ETA, the processor and sink group lag and the DLQ count from
Kafka, the relay lag from --metrics-url endpoints. At the end it prints
the achieved rate, the writers' lag behind the schedule (nothing is
dropped: a writer behind only delays), the faults and the oracle;
--report FILE.md also writes the run as tables, the commit → fact latency
of sampled mic events and SVG charts of rate and lag over time. 'roomflow
verify --timers' must then find 0 differences; --verify runs it at the
end (once the mic max ages passed), into the summary and the report.`,
		Args: cobra.NoArgs,
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
