// Package loadrun drives loadgen's traffic into the pipeline: the fixed
// scenario into room_outbox or the room events topic, and the load test in
// wall-clock time with its live view, report and closing verify
// (`roomflow loadgen`).
package loadrun

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/producers/loadgen/live"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/tools/verify"
)

// Options are loadgen's flags besides the scenario and the load's shape.
type Options struct {
	To        string  // mysql (room_outbox) or kafka (the room events topic)
	Rate      float64 // events per second (0: as fast as possible)
	Batch     int     // rows per room_outbox transaction
	Live      bool    // the fixed scenario in wall-clock time from now
	Abandoned float64 // with Live or a load test: share of sessions left to the mic timers
	// LuckyAddr, when set, draws every lucky gift through that
	// LuckyGiftService before its row is written, as room-service does.
	LuckyAddr string
	// The load test's: Report is a Markdown file to write the run to,
	// MetricsURLs the stages' /metrics for the relay lag, Settle how long
	// to wait for the pipeline to catch up, Verify whether to run verify
	// --timers at the end.
	Report      string
	MetricsURLs []string
	Settle      time.Duration
	Verify      bool
	// Out gets the summary, Progress the live view's line a second.
	Out, Progress io.Writer
}

// Scenario writes the fixed scenario sc (WallClock traffic with o.Live)
// after seeding its rule, and prints how long it took and the oracle. It
// fails when MySQL, Kafka or the draw service fail, or on an unknown o.To.
func Scenario(ctx context.Context, cfg *config.Config, sc loadgen.Scenario, o Options) error {
	if o.Live {
		WallClock(&sc, cfg, o.Abandoned)
	}
	events, oracle := sc.Generate()
	db, err := openSeeded(ctx, cfg, sc.Rule)
	if err != nil {
		return err
	}
	defer db.Close()
	// With LuckyAddr every lucky gift is drawn before its row is written:
	// all up front, or with Live right before each transaction, at the
	// gift's wall-clock time.
	var draw loadgen.BeforeWrite
	var drawer *luckyDrawer
	if o.LuckyAddr != "" {
		if drawer, err = newLuckyDrawer(o.LuckyAddr); err != nil {
			return err
		}
		defer drawer.Close()
		draw = drawer.draw
		if !o.Live {
			if err := draw(ctx, events); err != nil {
				return err
			}
		}
	}
	start := time.Now()
	switch o.To {
	case "mysql":
		if o.Live {
			_, _, err = loadgen.WriteOutboxLiveWith(ctx, db, events, o.Batch, draw)
		} else {
			_, err = loadgen.WriteOutbox(ctx, db, events, o.Batch, o.Rate)
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
		drawer.print(o.Out)
	}
	el := time.Since(start)
	fmt.Fprintf(o.Out, "wrote %d events to %s in %s (%.0f events/s)\n", len(events), o.To, el.Round(time.Millisecond), float64(len(events))/el.Seconds())
	verify.PrintOracle(o.Out, oracle)
	return nil
}

// Load is loadgen --duration: a Stream of sc shaped by ld (validated)
// driven in wall-clock time into room_outbox or the room events topic, with
// the oracle folded as it goes, a live view on o.Progress, and, as o says,
// a closing verify and a report. It fails when a writer, MySQL or Kafka
// fail, or when the closing verify finds differences.
func Load(ctx context.Context, cfg *config.Config, sc loadgen.Scenario, ld loadgen.Load, o Options) error {
	ld.To, ld.Batch, ld.Rate = o.To, o.Batch, o.Rate
	WallClock(&sc, cfg, o.Abandoned)
	db, err := openSeeded(ctx, cfg, sc.Rule)
	if err != nil {
		return err
	}
	defer db.Close()
	r := &run{cfg: cfg, ld: ld, o: o, db: db}
	defer r.close()
	dc, err := r.driveConfig(sc)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := r.liveView(ctx, start); err != nil {
		return err
	}
	dc.Committed = r.committed(start)
	progress := live.Start(ctx, live.Options{Counter: &r.counter, Sources: r.sources, Out: o.Progress})
	sum, err := loadgen.Drive(ctx, loadgen.NewStream(sc, ld), dc)
	var settled error
	if err == nil && o.Report != "" {
		settled = progress.Settle(ctx, o.Settle) // the report's lag and DLQ are the run's outcome
	}
	rec := progress.Stop()
	printSummary(o.Out, ld, sum)
	if r.drawer != nil {
		r.drawer.print(o.Out)
	}
	if err != nil {
		return err
	}
	verify.PrintOracle(o.Out, dc.Oracle.Oracle())
	var verified *live.Verify
	if o.Verify {
		if verified, err = verifyAfterLoad(ctx, cfg, db, sc.Timers, o.Settle); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "verify: %d differences\n", verified.Differences)
		for _, l := range verified.Lines {
			fmt.Fprintln(o.Out, "  ", l)
		}
	}
	if o.Report != "" {
		if err := r.report(ctx, rec, sum, verified, settled); err != nil {
			return err
		}
	}
	if verified != nil && verified.Differences > 0 {
		return fmt.Errorf("verify: %d facts differ", verified.Differences)
	}
	return nil
}

// run is one load test's clients and live view; close releases them.
type run struct {
	cfg     *config.Config
	ld      loadgen.Load
	o       Options
	db      *sql.DB
	drawer  *luckyDrawer
	counter live.Counter
	sources []live.LagSource
	lat     *live.FactLatency
	closer  []func()
}

func (r *run) close() {
	for i := len(r.closer) - 1; i >= 0; i-- {
		r.closer[i]()
	}
}

// driveConfig picks the writer (room_outbox or the topic), the oracle of
// the scenario's rule and, with LuckyAddr, the draws before each write.
func (r *run) driveConfig(sc loadgen.Scenario) (loadgen.DriveConfig, error) {
	dc := loadgen.DriveConfig{Load: r.ld, Writer: loadgen.OutboxWriter{DB: r.db},
		Oracle: loadgen.NewOracleBuilder(map[loadgen.RuleKey]loadgen.LuckyRule{{GiftID: sc.Rule.GiftID, RuleVersion: sc.Rule.RuleVersion}: sc.Rule}, sc.AppCode, sc.Timers)}
	if r.ld.To == loadgen.ToKafka {
		cl, err := producerClient(r.cfg)
		if err != nil {
			return dc, err
		}
		r.closer = append(r.closer, cl.Close)
		dc.Writer = loadgen.TopicWriter{Client: cl, Topic: r.cfg.Kafka.Topics.RoomEvents}
	}
	if r.o.LuckyAddr != "" {
		drawer, err := newLuckyDrawer(r.o.LuckyAddr)
		if err != nil {
			return dc, err
		}
		r.drawer = drawer
		r.closer = append(r.closer, func() { drawer.Close() })
		dc.Before = drawer.draw
	}
	return dc, nil
}

// liveView sets up the live view: a progress line per second (a bar on a
// terminal) with the writers' counts, each stage's lag and this run's
// dead letters; with Report, a sample of the mic events timed from its
// commit to its user_mic_event_consumption row.
func (r *run) liveView(ctx context.Context, start time.Time) error {
	cfg, ld := r.cfg, r.ld
	r.counter.SetTarget(int64(ld.Rate * (ld.Duration - ld.Ramp/2).Seconds()))
	dlqCl, err := cfg.Kafka.Cluster(nil, nil).NewClient("loadgen-dlq", live.DLQConsumeOpts(start, cfg.Kafka.Topics.DLQ)...)
	if err != nil {
		return err
	}
	r.closer = append(r.closer, dlqCl.Close)
	dlq := live.NewDLQCounter(dlqCl)
	r.closer = append(r.closer, func() { dlq.Close() })
	r.sources = []live.LagSource{dlq}
	if len(r.o.MetricsURLs) > 0 {
		r.sources = append(r.sources, live.MetricsSource{URLs: r.o.MetricsURLs})
	}
	adm, err := cfg.Kafka.Cluster(nil, nil).NewClient("loadgen-lag")
	if err != nil {
		return err
	}
	r.closer = append(r.closer, adm.Close)
	r.sources = append(r.sources, live.KafkaSource{Admin: kadm.NewClient(adm), ProcessorGroups: []string{cfg.Process.RoomGroup, cfg.Process.MicGroup},
		SinkGroups: []string{cfg.Sink.Group}})
	if r.o.Report != "" {
		r.lat = live.NewFactLatency(r.db, cfg.AppCode, live.LatencyOptions{PerSecond: 100})
		lctx, stopLat := context.WithCancel(ctx)
		r.closer = append(r.closer, stopLat)
		go r.lat.Run(lctx, time.Second) //nolint:errcheck // ends with lctx
	}
	return nil
}

// committed counts each commit into the live view and, with Report, times
// its mic events.
func (r *run) committed(start time.Time) func(loadgen.Commit) {
	return func(c loadgen.Commit) {
		r.counter.SetRate(r.ld.RateAt(time.Since(start)))
		r.counter.Add(len(c.Events))
		if c.Behind > loadgen.LateAfter {
			r.counter.Late(c.Behind)
		}
		if r.lat == nil {
			return
		}
		for _, e := range c.Events {
			if e.Envelope.EventType == "RoomMicChanged" && !e.Malformed {
				r.lat.Committed(e.Envelope.EventId, c.At)
			}
		}
	}
}

// report writes the run to o.Report, and its summary to o.Out too: the
// sampled latency and verify's outcome are known only now.
func (r *run) report(ctx context.Context, rec *live.Recording, sum loadgen.Summary, verified *live.Verify, settled error) error {
	ld, out := r.ld, r.o.Out
	if err := r.lat.Drain(ctx, r.o.Settle); err != nil {
		return err
	}
	res := r.lat.Result()
	s := live.Summary{Recording: rec, ByType: sum.ByType, Latency: &res, Verify: verified, SourceNames: sourceNames(r.sources), Notes: []string{
		fmt.Sprintf("roomflow loadgen --to %s --duration %s --rate %.0f --ramp %s --writers %d --batch %d --hot-room-skew %v --session-median %s --session-p99 %s",
			ld.To, ld.Duration, ld.Rate, ld.Ramp, ld.Writers, ld.Batch, ld.HotRoomSkew, ld.SessionMedian, ld.SessionP99),
		fmt.Sprintf("faults: %d malformed rows (dead-lettered, not in the oracle), %d redelivered records, %d late commits (held %s)",
			sum.Malformed, sum.Redelivered, sum.LateCommits, ld.LateCommitHold),
	}}
	if settled != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("the pipeline had not caught up at the end: %v", settled))
	}
	if err := live.WriteReport(r.o.Report, s); err != nil {
		return err
	}
	if err := live.WriteSummary(out, s); err != nil {
		return err
	}
	fmt.Fprintf(out, "report written to %s\n", r.o.Report)
	return nil
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

// WallClock makes sc wall-clock traffic from now whose abandoned share the
// mic timers of cfg close (--live, --duration), every other session event
// a third of the shorter max age away from its due time.
func WallClock(sc *loadgen.Scenario, cfg *config.Config, abandoned float64) {
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
