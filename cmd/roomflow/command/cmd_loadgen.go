package command

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/producers/loadgen/live"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/tools/verify"
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
	var lf loadFlags
	var (
		to        string
		rate      float64
		batch     int
		live      bool
		abandoned float64
		luckyAddr string
	)
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
			if ld.Duration > 0 {
				if live {
					return cfgerr.Usage(fmt.Errorf("--live and --duration exclude each other"))
				}
				lf.to, lf.rate, lf.batch, lf.abandoned, lf.luckyAddr = to, rate, batch, abandoned, luckyAddr
				return runLoad(cmd, cfg, sc, ld, lf)
			}
			if live {
				if to != "mysql" {
					return fmt.Errorf("--live writes to mysql only")
				}
				if !cmd.Flags().Changed("span") {
					sc.Span = 10 * time.Minute
				}
				wallClock(&sc, cfg, abandoned)
			}
			events, o := sc.Generate()
			ctx := cmd.Context()
			db, err := openSeeded(ctx, cfg, sc.Rule)
			if err != nil {
				return err
			}
			defer db.Close()
			// With --lucky-addr every lucky gift is drawn before its row is
			// written: all up front, or with --live right before each
			// transaction, at the gift's wall-clock time.
			var draw loadgen.BeforeWrite
			var drawer *luckyDrawer
			if luckyAddr != "" {
				if drawer, err = newLuckyDrawer(luckyAddr); err != nil {
					return err
				}
				defer drawer.Close()
				draw = drawer.draw
				if !live {
					if err := draw(ctx, events); err != nil {
						return err
					}
				}
			}
			start := time.Now()
			switch to {
			case "mysql":
				if live {
					_, _, err = loadgen.WriteOutboxLiveWith(ctx, db, events, batch, draw)
				} else {
					_, err = loadgen.WriteOutbox(ctx, db, events, batch, rate)
				}
				if err != nil {
					return err
				}
			case "kafka":
				cl, err := producerClient(cfg)
				if err != nil {
					return err
				}
				defer cl.Close()
				if err := cl.ProduceSync(ctx, loadgen.Records(cfg.Kafka.Topics.RoomEvents, events)...).FirstErr(); err != nil {
					return err
				}
			default:
				return fmt.Errorf("--to must be mysql or kafka")
			}
			if drawer != nil {
				drawer.print(cmd.OutOrStdout())
			}
			el := time.Since(start)
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d events to %s in %s (%.0f events/s)\n", len(events), to, el.Round(time.Millisecond), float64(len(events))/el.Seconds())
			verify.PrintOracle(cmd.OutOrStdout(), o)
			return nil
		},
	}
	scenarioFlags(cmd.Flags(), &sc)
	cmd.Flags().StringVar(&to, "to", "mysql", "mysql (room_outbox) or kafka (room events topic)")
	cmd.Flags().Float64Var(&rate, "rate", 0, "events per second (0: as fast as possible)")
	cmd.Flags().IntVar(&batch, "batch", 200, "rows per room_outbox transaction")
	cmd.Flags().BoolVar(&live, "live", false, "wall-clock traffic from now over --span (default 10m), sessions closed by the mic timers included")
	cmd.Flags().Float64Var(&abandoned, "abandoned", 0.1, "with --live: share of sessions left for the mic timers to close")
	cmd.Flags().StringVar(&luckyAddr, "lucky-addr", "", "draw every lucky gift through this LuckyGiftService (roomflow lucky) before writing it, as room-service does")
	loadFlagSet(cmd.Flags(), &ld)
	cmd.Flags().StringVar(&lf.report, "report", "", "with --duration: write a Markdown report with SVG charts of rate and lag over time to this file")
	cmd.Flags().StringSliceVar(&lf.metricsURLs, "metrics-url", nil, "with --duration: a stage's /metrics URL for the relay lag (repeatable; the consumer groups' lag and the DLQ are read from Kafka anyway)")
	cmd.Flags().DurationVar(&lf.settle, "settle", time.Minute, "with --report or --verify: how long to wait after the writers for the pipeline to catch up, and then for the sampled mic events' facts or matching facts")
	cmd.Flags().BoolVar(&lf.verify, "verify", false, "with --duration: once the mic timers closed what the run left open, run 'roomflow verify --timers' into the summary and the report (exit status 1 when facts differ)")
	return cmd
}

// loadFlagSet binds the load-test flags (--duration and its shape and
// faults) to ld; --to, --rate and --batch are shared with the scenario
// mode and copied in by runLoad.
func loadFlagSet(fs *pflag.FlagSet, ld *loadgen.Load) {
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
}

// loadKeys re-keys loadgen.Load's Validate errors to the flags.
var loadKeys = map[string]string{
	"to": "--to", "duration": "--duration", "rate": "--rate", "ramp": "--ramp", "writers": "--writers", "batch": "--batch",
	"hot_room_skew": "--hot-room-skew", "session_median": "--session-median", "session_p99": "--session-p99",
	"publish_failure_share": "--publish-failure-share", "redelivery_share": "--redelivery-share",
	"malformed_share": "--malformed-share", "late_commit_share": "--late-commit-share", "late_commit_hold": "--late-commit-hold",
}

// loadFlags are the flags the load test shares with the scenario mode,
// and its live view's.
type loadFlags struct {
	to          string
	rate        float64
	batch       int
	abandoned   float64
	luckyAddr   string
	report      string        // --report FILE.md
	metricsURLs []string      // --metrics-url: the stages' /metrics for the relay lag
	settle      time.Duration // --settle: how long the report waits for the pipeline to catch up
	verify      bool          // --verify: verify --timers at the end, into the summary and report
}

// runLoad is loadgen --duration: a Stream driven in wall-clock time into
// room_outbox or the room events topic, with the oracle folded as it goes.
func runLoad(cmd *cobra.Command, cfg *config.Config, sc loadgen.Scenario, ld loadgen.Load, f loadFlags) error {
	ld.To, ld.Batch = f.to, f.batch
	// A load test's own defaults: an evening's users and rooms (the
	// scenario's 300 users would all sit on a mic within seconds).
	if !cmd.Flags().Changed("users") {
		sc.Users = 100_000
	}
	if !cmd.Flags().Changed("rooms") {
		sc.Rooms = 2_000
	}
	if ld.Rate = f.rate; !cmd.Flags().Changed("rate") {
		ld.Rate = loadgen.DefaultLoad().Rate
	}
	err := cfgerr.Under("loadgen", loadKeys, ld.Validate())
	if ld.LateCommitShare > 0 && ld.LateCommitHold >= cfg.Relay.GapMaxAge.D() {
		err = errors.Join(err, &cfgerr.FieldError{Key: "--late-commit-hold", Msg: fmt.Sprintf("must be below relay.gap_max_age (%s), or the relay gives the held ids up", cfg.Relay.GapMaxAge.D())})
	}
	if err != nil {
		return err
	}
	wallClock(&sc, cfg, f.abandoned)
	ctx := cmd.Context()
	db, err := openSeeded(ctx, cfg, sc.Rule)
	if err != nil {
		return err
	}
	defer db.Close()
	dc := loadgen.DriveConfig{Load: ld, Writer: loadgen.OutboxWriter{DB: db},
		Oracle: loadgen.NewOracleBuilder(map[loadgen.RuleKey]loadgen.LuckyRule{{GiftID: sc.Rule.GiftID, RuleVersion: sc.Rule.RuleVersion}: sc.Rule}, sc.AppCode, sc.Timers)}
	if ld.To == loadgen.ToKafka {
		cl, err := producerClient(cfg)
		if err != nil {
			return err
		}
		defer cl.Close()
		dc.Writer = loadgen.TopicWriter{Client: cl, Topic: cfg.Kafka.Topics.RoomEvents}
	}
	var drawer *luckyDrawer
	if f.luckyAddr != "" {
		if drawer, err = newLuckyDrawer(f.luckyAddr); err != nil {
			return err
		}
		defer drawer.Close()
		dc.Before = drawer.draw
	}
	out := cmd.OutOrStdout()
	// The live view: a progress line per second (a bar on a terminal)
	// with the writers' counts, each stage's lag and this run's dead
	// letters.
	var counter live.Counter
	counter.SetTarget(int64(ld.Rate * (ld.Duration - ld.Ramp/2).Seconds()))
	start := time.Now()
	dlqCl, err := cfg.Kafka.Cluster(nil, nil).NewClient("loadgen-dlq", live.DLQConsumeOpts(start, cfg.Kafka.Topics.DLQ)...)
	if err != nil {
		return err
	}
	defer dlqCl.Close()
	dlq := live.NewDLQCounter(dlqCl)
	defer dlq.Close()
	sources := []live.LagSource{dlq}
	if len(f.metricsURLs) > 0 {
		sources = append(sources, live.MetricsSource{URLs: f.metricsURLs})
	}
	adm, err := cfg.Kafka.Cluster(nil, nil).NewClient("loadgen-lag")
	if err != nil {
		return err
	}
	defer adm.Close()
	sources = append(sources, live.KafkaSource{Admin: kadm.NewClient(adm), ProcessorGroups: []string{cfg.Process.RoomGroup, cfg.Process.MicGroup},
		SinkGroups: []string{cfg.Sink.Group}})
	// With --report, a sample of the mic events is timed from its commit to
	// its user_mic_event_consumption row.
	var lat *live.FactLatency
	if f.report != "" {
		lat = live.NewFactLatency(db, cfg.AppCode, live.LatencyOptions{PerSecond: 100})
		lctx, stopLat := context.WithCancel(ctx)
		defer stopLat()
		go lat.Run(lctx, time.Second) //nolint:errcheck // ends with lctx
	}
	dc.Committed = func(c loadgen.Commit) {
		counter.SetRate(ld.RateAt(time.Since(start)))
		counter.Add(len(c.Events))
		if c.Behind > loadgen.LateAfter {
			counter.Late(c.Behind)
		}
		if lat == nil {
			return
		}
		for _, e := range c.Events {
			if e.Envelope.EventType == "RoomMicChanged" && !e.Malformed {
				lat.Committed(e.Envelope.EventId, c.At)
			}
		}
	}
	progress := live.Start(ctx, live.Options{Counter: &counter, Sources: sources, Out: cmd.ErrOrStderr()})
	sum, err := loadgen.Drive(ctx, loadgen.NewStream(sc, ld), dc)
	var settled error
	if err == nil && f.report != "" {
		settled = progress.Settle(ctx, f.settle) // the report's lag and DLQ are the run's outcome
	}
	rec := progress.Stop()
	printSummary(out, ld, sum)
	if drawer != nil {
		drawer.print(out)
	}
	if err != nil {
		return err
	}
	verify.PrintOracle(cmd.OutOrStdout(), dc.Oracle.Oracle())
	var verified *live.Verify
	if f.verify {
		if verified, err = verifyAfterLoad(ctx, cfg, db, sc.Timers, f.settle); err != nil {
			return err
		}
		fmt.Fprintf(out, "verify: %d differences\n", verified.Differences)
		for _, l := range verified.Lines {
			fmt.Fprintln(out, "  ", l)
		}
	}
	differ := func() error {
		if verified != nil && verified.Differences > 0 {
			return fmt.Errorf("verify: %d facts differ", verified.Differences)
		}
		return nil
	}
	if f.report == "" {
		return differ()
	}
	if err := lat.Drain(ctx, f.settle); err != nil {
		return err
	}
	res := lat.Result()
	s := live.Summary{Recording: rec, ByType: sum.ByType, Latency: &res, Verify: verified, SourceNames: sourceNames(sources), Notes: []string{
		fmt.Sprintf("roomflow loadgen --to %s --duration %s --rate %.0f --ramp %s --writers %d --batch %d --hot-room-skew %v --session-median %s --session-p99 %s",
			ld.To, ld.Duration, ld.Rate, ld.Ramp, ld.Writers, ld.Batch, ld.HotRoomSkew, ld.SessionMedian, ld.SessionP99),
		fmt.Sprintf("faults: %d malformed rows (dead-lettered, not in the oracle), %d redelivered records, %d late commits (held %s)",
			sum.Malformed, sum.Redelivered, sum.LateCommits, ld.LateCommitHold),
	}}
	if settled != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("the pipeline had not caught up at the end: %v", settled))
	}
	if err := live.WriteReport(f.report, s); err != nil {
		return err
	}
	// The report's summary on the terminal too: the sampled latency and
	// verify's outcome are known only now.
	if err := live.WriteSummary(out, s); err != nil {
		return err
	}
	fmt.Fprintf(out, "report written to %s\n", f.report)
	return differ()
}

// verifyAfterLoad is `roomflow verify --timers` at the end of a load test
// (--verify): it waits until the mic timers closed what the run left open
// (the longer max age of pol after the writers stopped), then compares
// until the facts match or wait runs out, as the sink may still be
// catching up. The last comparison is the outcome, its first 20
// differences listed.
func verifyAfterLoad(ctx context.Context, cfg *config.Config, db *sql.DB, pol *loadgen.TimerPolicy, wait time.Duration) (*live.Verify, error) {
	if err := backoff.Sleep(ctx, max(pol.PendingPublishMaxAge, pol.PublishingSessionMaxAge)); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(wait); ; {
		rep, _, _, err := verify.All(ctx, cfg, db, time.Second, pol)
		if err != nil {
			return nil, err
		}
		if rep.OK() || time.Now().After(deadline) {
			v := &live.Verify{Differences: len(rep.Diffs)}
			for _, d := range rep.Diffs[:min(len(rep.Diffs), 20)] {
				v.Lines = append(v.Lines, d.String())
			}
			return v, nil
		}
		if err := backoff.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
}

// sourceNames names the live view's lag sources for the report.
func sourceNames(sources []live.LagSource) []string {
	names := make([]string, len(sources))
	for i, s := range sources {
		switch s.(type) {
		case *live.DLQCounter:
			names[i] = "DLQ topic"
		case live.MetricsSource:
			names[i] = "metrics endpoints"
		case live.KafkaSource:
			names[i] = "Kafka group lag"
		}
	}
	return names
}

// wallClock makes sc wall-clock traffic from now whose abandoned share the
// mic timers of cfg close (--live, --duration), every other session event
// a third of the shorter max age away from its due time.
func wallClock(sc *loadgen.Scenario, cfg *config.Config, abandoned float64) {
	pol := loadgen.TimerPolicy{PendingPublishMaxAge: cfg.Mic.PendingPublishMaxAge.D(), PublishingSessionMaxAge: cfg.Mic.PublishingSessionMaxAge.D()}
	sc.Start, sc.Timers, sc.Abandoned = time.Now().Add(time.Second), &pol, abandoned
	sc.TimerMargin = min(pol.PendingPublishMaxAge, pol.PublishingSessionMaxAge) / 3
}

// openSeeded opens MySQL with rule seeded (loadgen.SeedRule).
func openSeeded(ctx context.Context, cfg *config.Config, rule loadgen.LuckyRule) (*sql.DB, error) {
	db, err := mysqlx.Open(ctx, cfg.MySQL)
	if err != nil {
		return nil, err
	}
	if err := loadgen.SeedRule(ctx, db, rule); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// producerClient is loadgen's client for --to kafka.
func producerClient(cfg *config.Config) (*kgo.Client, error) {
	return cfg.Kafka.Cluster(nil, nil).NewClient("loadgen", kgo.ProducerLinger(5*time.Millisecond))
}

// luckyDrawer draws lucky gifts through the LuckyGiftService at addr
// (--lucky-addr) as room-service does, summing the answers of every call;
// concurrent writers share it.
type luckyDrawer struct {
	addr   string
	conn   *grpc.ClientConn
	client activityv1.LuckyGiftServiceClient
	mu     sync.Mutex
	sum    loadgen.DrawSummary
}

func newLuckyDrawer(addr string) (*luckyDrawer, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &luckyDrawer{addr: addr, conn: conn, client: activityv1.NewLuckyGiftServiceClient(conn)}, nil
}

// draw is a loadgen.BeforeWrite: the lucky gifts of evs drawn, 32 at once.
func (d *luckyDrawer) draw(ctx context.Context, evs []loadgen.Event) error {
	sum, err := loadgen.DrawLucky(ctx, d.client, evs, 32)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sum.Add(sum)
	return err
}

func (d *luckyDrawer) print(w io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sum
	fmt.Fprintf(w, "drew %d lucky gifts through %s: %d hits, %d coins paid of %d spent, %d granted, %d pending, rejected %v (%d after the debit, to refund)\n",
		s.Draws, d.addr, s.Hits, s.RewardCoins, s.CoinSpent, s.Granted, s.Pending, s.Rejected, s.Refunds)
}

func (d *luckyDrawer) Close() error { return d.conn.Close() }

// printSummary writes what a load test wrote and how far its writers
// were behind their schedule.
func printSummary(w io.Writer, ld loadgen.Load, s loadgen.Summary) {
	fmt.Fprintf(w, "wrote %d events (of %d scheduled) to %s in %s: %.0f events/s achieved of %.0f targeted (ramp included), %d transactions by %d writers\n",
		s.Written, s.Due, ld.To, s.Elapsed.Round(time.Millisecond), s.Rate, ld.Rate, s.Batches, ld.Writers)
	fmt.Fprintf(w, "writer lag behind the schedule: max %s, %d of %d transactions late (over %s); nothing dropped\n",
		s.MaxLag.Round(time.Millisecond), s.LateBatches, s.Batches, loadgen.LateAfter)
	types := make([]string, 0, len(s.ByType))
	for t := range s.ByType {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		fmt.Fprintf(w, "  %-18s %d\n", t, s.ByType[t])
	}
	fmt.Fprintf(w, "faults: %d malformed rows (to the DLQ, not in the oracle), %d redelivered records, %d late commits; %d session arrivals found no free user\n",
		s.Malformed, s.Redelivered, s.LateCommits, s.SkippedSessions)
}
