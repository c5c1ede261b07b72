// Package demo runs the whole pipeline in one process on an embedded Kafka
// and a fresh MySQL database with synthetic load, and reports how it
// converged (`roomflow demo`, and the end-to-end test).
package demo

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
	"github.com/hyapp/roomflow/tools/totals"
	"github.com/hyapp/roomflow/tools/verify"
)

// Options configure one demo run.
type Options struct {
	Scenario  loadgen.Scenario
	ServerDSN string        // MySQL server (no database); a demo database is created on it
	Database  string        // database name (dropped and recreated)
	Rate      float64       // room_outbox insert rate, events/s (0: as fast as possible)
	Timeout   time.Duration // how long to wait for every fact to match
	Keep      bool          // keep the database afterwards
	LogLevel  string
	Out       io.Writer
	// Specs are the components it runs (`roomflow run`'s and the draw
	// service); Check validates the config before anything starts.
	Specs []app.Spec
	Check func(*app.Deps) error
}

// Result is what the demo measured.
type Result struct {
	Events     int
	Written    time.Duration // time to write room_outbox
	FactsEqual time.Duration // from the first insert until the MySQL facts equalled the oracle
	Converged  time.Duration // ... until the facts matched and every IM message was delivered
	Report     loadgen.Report
	IMAccepted int
	IMExpected int
	Delivered  int
	// Verify is `roomflow verify`'s comparison, recomputed from the
	// VerifyEvents events read back from the room events topic.
	Verify       loadgen.Report
	VerifyEvents int
	// Totals is what the totals topics held, all equal to the facts.
	Totals verify.TotalsReport
	// Lucky is what the draw service answered for the lucky gifts; Pools
	// the lucky_pools rows at the end; Credits the fake wallet's.
	Lucky   loadgen.DrawSummary
	Pools   []Pool
	Credits int
	// Fairness is each commit-reveal day the draws fell in, revealed and
	// verified; FairnessWait the time that added after convergence.
	Fairness     []luckydraw.FairnessVerify
	FairnessWait time.Duration
	// Metrics is what the process registry held once everything had
	// converged, gathered before the shutdown (the alert and dashboard
	// tests check their queries against it).
	Metrics []*dto.MetricFamily
}

// Pool is one lucky_pools row at the end of the demo.
type Pool struct {
	Scope                              string
	Balance, Funded, TotalIn, TotalOut int64
}

// Run runs the whole pipeline in this process: an embedded kfake
// cluster, a fresh MySQL database, the fake Tencent IM server and wallet,
// every component of o.Specs, and loadgen traffic; it waits until MySQL
// equals the oracle and every IM message was accepted, then checks what
// `roomflow verify` checks and that every paid draw was credited once. It
// fails when a step fails, a component stops, or the facts do not converge
// within o.Timeout; the Result holds what was measured until then.
func Run(ctx context.Context, o Options) (Result, error) {
	d := &demo{o: o, step: func(format string, args ...any) { fmt.Fprintf(o.Out, "==> "+format+"\n", args...) }}
	defer d.close()
	if err := d.startFakes(ctx); err != nil {
		return d.res, err
	}
	if err := d.configure(); err != nil {
		return d.res, err
	}
	if err := d.prepare(ctx); err != nil {
		return d.res, err
	}
	d.startComponents(ctx)
	if err := d.drawAndWrite(ctx); err != nil {
		return d.res, err
	}
	if err := d.awaitConvergence(ctx); err != nil {
		return d.res, err
	}
	if err := d.verifyFairness(ctx); err != nil {
		return d.res, err
	}
	return d.res, d.finish(ctx)
}

// demo is one run's state, built up step by step; close releases what
// the steps started, in reverse.
type demo struct {
	o      Options
	step   func(format string, args ...any)
	res    Result
	closer []func()

	kc        *kfake.Cluster
	dsn       string
	im        *imfake.Server
	imURL     string
	wal       *walletfake.Wallet
	luckyAddr string
	cfg       config.Config
	db        *sql.DB
	events    []loadgen.Event
	oracle    *loadgen.Oracle
	deps      *app.Deps
	stop      context.CancelFunc
	runErr    chan error
	start     time.Time
}

const secret = "demo-secret-key-not-for-production"

// demoDay is the demo's fairness day: its draws' seeds are revealed
// within one day and demoRevealGrace of the last draw.
const demoDay = 5 * time.Second

// demoRevealGrace is the least lucky.fairness.reveal_grace the default
// lucky.draw_timeout allows (draw_timeout + luckydraw.RevealClockMargin),
// rounded up to a second.
const demoRevealGrace = 2 * time.Second

func (d *demo) close() {
	for i := len(d.closer) - 1; i >= 0; i-- {
		d.closer[i]()
	}
}

// startFakes starts what the pipeline talks to: Kafka, the MySQL
// database, Tencent IM and the wallet.
func (d *demo) startFakes(ctx context.Context) error {
	kc, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		return err
	}
	d.kc = kc
	d.closer = append(d.closer, kc.Close)
	d.step("embedded Kafka (kfake, 3 brokers) on %s", strings.Join(kc.ListenAddrs(), ","))

	dsn, cleanup, err := demoDatabase(ctx, d.o)
	if err != nil {
		return err
	}
	d.dsn = dsn
	d.closer = append(d.closer, cleanup)

	d.im = imfake.New(imfake.Config{SDKAppID: 1400000000, AdminIdentifier: "administrator", SecretKey: secret})
	imURL, stopIM, err := d.im.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	d.imURL = imURL
	d.closer = append(d.closer, func() { stopIM() })
	d.step("fake Tencent IM on %s", imURL)
	wal, err := walletfake.Listen(walletfake.Config{Seed: d.o.Scenario.Seed}, "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.wal = wal
	d.closer = append(d.closer, func() { wal.Close() })
	d.step("fake wallet (hyapp.wallet.v1.WalletService) on %s", wal.Addr())
	d.luckyAddr, err = freeAddr()
	return err
}

// configure points the config at the fakes and checks it before anything
// starts.
func (d *demo) configure() error {
	cfg := config.Default()
	cfg.AppCode = d.o.Scenario.AppCode
	cfg.Log.Level = d.o.LogLevel
	cfg.Metrics.Addr = "127.0.0.1:0"
	cfg.Shutdown.DrainDelay = 0 // no Service routes to the demo: nothing to wait for
	cfg.API.Addr, cfg.API.AppAddr, cfg.API.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Kafka.Brokers = d.kc.ListenAddrs()
	cfg.Kafka.Partitions = 6
	cfg.MySQL.DSN = d.dsn
	cfg.IM.Endpoint, cfg.IM.SDKAppID, cfg.IM.SecretKey = d.imURL, 1400000000, secret
	cfg.IM.FastPathDelay = 0 // no room-service publishes by itself here
	cfg.OutboxWorker.ClaimGrace = config.Duration(2 * time.Second)
	cfg.Relay.PollInterval = config.Duration(20 * time.Millisecond)
	cfg.Lucky.GRPCAddr, cfg.Lucky.WalletGRPCAddr = d.luckyAddr, d.wal.Addr()
	cfg.Lucky.AuditKey = "demo-audit-key-not-for-production"
	cfg.Lucky.OutboxPollInterval = config.Duration(100 * time.Millisecond)
	// Commit-reveal on short days (docs/fairness.md): the draws' days are
	// revealed and verified at the end.
	cfg.Lucky.Randomness = "commit_reveal"
	cfg.Lucky.Fairness.Key = base64.StdEncoding.EncodeToString([]byte("demo-fairness-key-not-for-prod!!"))
	cfg.Lucky.Fairness.DayLength, cfg.Lucky.Fairness.RevealGrace = config.Duration(demoDay), config.Duration(demoRevealGrace)
	// The scenario's timestamps lie in the past; keep the mic timers from
	// closing sessions whose `down` is still in flight.
	cfg.Mic.CompensationInterval = config.Duration(24 * time.Hour)
	if err := cfg.Validate(); err != nil {
		return err
	}
	d.cfg = cfg
	if d.o.Check != nil {
		return d.o.Check(&app.Deps{Config: &d.cfg})
	}
	return nil
}

// prepare migrates MySQL, seeds the lucky rule, funds the pools, creates
// the topics and generates the scenario.
func (d *demo) prepare(ctx context.Context) error {
	db, err := mysqlx.Open(ctx, d.cfg.MySQL)
	if err != nil {
		return err
	}
	d.db = db
	d.closer = append(d.closer, func() { db.Close() })
	if err := loadgen.SeedRule(ctx, db, d.o.Scenario.Rule); err != nil {
		return err
	}
	d.events, d.oracle = d.o.Scenario.Generate()
	if err := FundPools(ctx, db, d.cfg.AppCode, d.o.Scenario.Rule.GiftID, d.events); err != nil {
		return err
	}
	admCl, err := d.cfg.Kafka.Cluster(nil, nil).NewClient("demo")
	if err != nil {
		return err
	}
	defer admCl.Close()
	if _, err := kafkax.EnsureTopics(ctx, kadm.NewClient(admCl), d.cfg.TopicLayout()); err != nil {
		return err
	}
	// A fresh install's bootstrap: the markers only, so the mic processor
	// publishes the totals topics from the first close.
	if _, err := totals.Bootstrap(ctx, totals.ConfigFrom(&d.cfg, nil), db); err != nil {
		return err
	}
	d.step("MySQL schema migrated, topics created, lucky rule %s/%s seeded", d.o.Scenario.Rule.GiftID, d.o.Scenario.Rule.RuleVersion)
	return nil
}

// startComponents runs o.Specs in the background until stop.
func (d *demo) startComponents(ctx context.Context) {
	logOut := io.Discard
	if d.o.LogLevel == "debug" || d.o.LogLevel == "info" {
		logOut = os.Stderr
	}
	d.deps = app.NewDeps(&d.cfg, d.cfg.Log.Logger(logOut), d.o.Specs...)
	runCtx, stop := context.WithCancel(ctx)
	d.stop = stop
	d.closer = append(d.closer, stop)
	d.runErr = make(chan error, 1)
	names := make([]string, len(d.o.Specs))
	for i, s := range d.o.Specs {
		names[i] = s.Name
	}
	go func() { d.runErr <- app.Run(runCtx, d.deps, d.o.Specs) }()
	d.step("components running: %s", strings.Join(names, ", "))
}

// drawAndWrite draws the lucky gifts through the draw service first, as
// room-service sends them (check, debit, draw; the gift row then names its
// draw_id), then writes the scenario into room_outbox.
func (d *demo) drawAndWrite(ctx context.Context) error {
	d.res.Events, d.res.IMExpected = len(d.events), d.oracle.IMMessages
	conn, err := grpc.NewClient(d.luckyAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	d.closer = append(d.closer, func() { conn.Close() })
	lucky := activityv1.NewLuckyGiftServiceClient(conn)
	if err := WaitServing(ctx, lucky, d.o.Scenario.Rule.GiftID, d.runErr); err != nil {
		return err
	}
	drawStart := time.Now()
	if d.res.Lucky, err = loadgen.DrawLucky(ctx, lucky, d.events, 32); err != nil {
		return err
	}
	d.step("%d lucky gifts drawn in %s (%d hits, %d coins paid), pools owned by roomflow lucky", d.res.Lucky.Draws,
		time.Since(drawStart).Round(time.Millisecond), d.res.Lucky.Hits, d.res.Lucky.RewardCoins)
	d.step("writing %d room_outbox rows (%d mic sessions over %s, %d gifts)", len(d.events), len(d.oracle.Sessions), d.o.Scenario.Span, d.o.Scenario.Gifts)
	d.start = time.Now()
	if _, err := loadgen.WriteOutbox(ctx, d.db, d.events, 200, d.o.Rate); err != nil {
		return err
	}
	d.res.Written = time.Since(d.start)
	return nil
}

// awaitConvergence polls until the facts equal the oracle, every IM
// message was accepted, every row delivered and every reward done.
func (d *demo) awaitConvergence(ctx context.Context) error {
	res, db := &d.res, d.db
	deadline := time.Now().Add(d.o.Timeout)
	nextProgress := time.Now().Add(5 * time.Second)
	for {
		select {
		case err := <-d.runErr:
			return fmt.Errorf("pipeline stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		var err error
		res.Report, err = loadgen.Compare(ctx, db, d.cfg.AppCode, d.oracle)
		if err != nil {
			return err
		}
		if res.Report.OK() && res.FactsEqual == 0 {
			res.FactsEqual = time.Since(d.start)
		}
		res.IMAccepted = d.im.Stats().Accepted
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM room_outbox WHERE status = 'delivered'").Scan(&res.Delivered); err != nil {
			return err
		}
		pendingRewards, err := countRows(ctx, db, "SELECT COUNT(*) FROM lucky_outbox WHERE status <> 'done'")
		if err != nil {
			return err
		}
		if res.Report.OK() && res.IMAccepted >= res.IMExpected && res.Delivered == res.Events && pendingRewards == 0 {
			res.Converged = time.Since(d.start)
			return nil
		}
		if time.Now().After(nextProgress) {
			nextProgress = nextProgress.Add(5 * time.Second)
			d.step("%s: %d facts still differ; IM %d/%d accepted (Tencent's 200 calls/s app limit paces this)",
				time.Since(d.start).Round(time.Second), len(res.Report.Diffs), res.IMAccepted, res.IMExpected)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("facts did not converge within %s: %d differences (first: %v), IM %d/%d accepted, %d/%d rows delivered",
				d.o.Timeout, len(res.Report.Diffs), firstDiff(res.Report), res.IMAccepted, res.IMExpected, res.Delivered, res.Events)
		}
	}
}

// finish does what `roomflow verify` does (recompute the facts from the
// event log in Kafka, not from the generated scenario, and diff them
// against MySQL), checks the credits against the wallet's ledger, gathers
// the metrics and stops the components.
func (d *demo) finish(ctx context.Context) error {
	res, db := &d.res, d.db
	var err error
	if res.Verify, res.VerifyEvents, err = verifyRun(ctx, &d.cfg, db); err != nil {
		return err
	}
	if !res.Verify.OK() {
		return fmt.Errorf("verify from the event log: %d differences (first: %v)", len(res.Verify.Diffs), firstDiff(res.Verify))
	}
	tr, diffs, err := verify.Totals(ctx, &d.cfg, db, time.Second)
	if err != nil {
		return err
	}
	if res.Totals = tr; len(diffs) > 0 || tr.Lifetime != tr.LifetimeRows {
		return fmt.Errorf("totals topics: %d differences with the facts (first: %v), %d lifetime totals for %d rows", len(diffs),
			firstDiff(loadgen.Report{Diffs: diffs}), tr.Lifetime, tr.LifetimeRows)
	}
	if res.Pools, err = poolRows(ctx, db, d.cfg.AppCode); err != nil {
		return err
	}
	res.Credits = len(d.wal.Ledger())
	if paid, err := countRows(ctx, db, "SELECT COUNT(*) FROM lucky_draw_records WHERE reward_coins > 0 AND reward_status = 'granted'"); err != nil || paid != res.Credits {
		return fmt.Errorf("every paid draw must be granted once with one wallet credit: %d granted draws, %d credits (%v)", paid, res.Credits, err)
	}
	if res.Metrics, err = d.deps.Registry.Gather(); err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	d.stop()
	if err := <-d.runErr; err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// FundPools gives the platform, gift and every room pool of the
// scenario a starting balance (as `roomflow lucky pools fund` would), so
// draws can pay from the first gift, and puts the first room on the pilot
// list (pilot_mode stays off: nothing is rejected), so the pilot rooms'
// per-room series exist as in a pilot.
func FundPools(ctx context.Context, db *sql.DB, appCode, giftID string, events []loadgen.Event) error {
	pools := map[[2]string]int64{{"platform", "global"}: 5_000_000, {"gift", giftID}: 2_000_000}
	pilot := ""
	for _, e := range events {
		pools[[2]string{"room", e.Envelope.RoomId}] = 200_000
		if pilot == "" || e.Envelope.RoomId < pilot {
			pilot = e.Envelope.RoomId
		}
	}
	admin, err := luckydraw.NewAdmin(db, luckydraw.AdminConfig{Operator: "demo"})
	if err != nil {
		return err
	}
	on := true
	if _, err := admin.SetSwitch(ctx, appCode, luckydraw.SwitchPilotRoom, pilot, &on); err != nil {
		return err
	}
	for p, amount := range pools {
		if _, err := admin.FundPool(ctx, appCode, p[0], p[1], amount, nil); err != nil {
			return err
		}
	}
	return nil
}

// WaitServing waits until the draw service answers a check of gift, and
// fails when ctx ends or runErr reports the service stopped first.
func WaitServing(ctx context.Context, c activityv1.LuckyGiftServiceClient, gift string, runErr <-chan error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := c.CheckLuckyGift(cctx, &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: "demo"}, GiftId: gift})
		cancel()
		if err == nil && r.Enabled {
			return nil
		}
		select {
		case err := <-runErr:
			return fmt.Errorf("pipeline stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func countRows(ctx context.Context, db *sql.DB, q string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}

func poolRows(ctx context.Context, db *sql.DB, appCode string) ([]Pool, error) {
	var out []Pool
	err := loadgen.ScanRows(ctx, db, `SELECT scope_type, scope_id, balance, funded, total_in, total_out FROM lucky_pools
		WHERE app_code = ? AND scope_type <> 'room' ORDER BY scope_type, scope_id`, appCode, func(rows *sql.Rows) error {
		var p Pool
		var st, id string
		if err := rows.Scan(&st, &id, &p.Balance, &p.Funded, &p.TotalIn, &p.TotalOut); err != nil {
			return err
		}
		p.Scope = st + "/" + id
		out = append(out, p)
		return nil
	})
	return out, err
}

// freeAddr is a loopback address nothing listens on yet.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func verifyRun(ctx context.Context, cfg *config.Config, db *sql.DB) (loadgen.Report, int, error) {
	rep, o, err := verify.Facts(ctx, cfg, db, time.Second)
	if err != nil {
		return rep, 0, err
	}
	return rep, o.Events, nil
}

func firstDiff(r loadgen.Report) any {
	if len(r.Diffs) == 0 {
		return "none"
	}
	return r.Diffs[0]
}

// demoDatabase creates and migrates the demo database on the configured
// server; the cleanup drops it unless --keep.
func demoDatabase(ctx context.Context, o Options) (string, func(), error) {
	s, err := mysqlx.NewScratch(ctx, o.ServerDSN, o.Database, true)
	if err != nil {
		return "", nil, fmt.Errorf("demo: MySQL/MariaDB is needed (set ROOMFLOW_MYSQL_DSN; on Debian: start-stop-daemon --start --background --exec /usr/sbin/mariadbd): %w", err)
	}
	return s.DSN, func() {
		if o.Keep {
			s.Keep() //nolint:errcheck // closing an idle connection
			return
		}
		s.Drop(context.Background()) //nolint:errcheck // best effort
	}, nil
}

// Print writes the summary of r.
func Print(w io.Writer, r Result) {
	fmt.Fprintf(w, `
roomflow demo summary
  room_outbox rows written      %d in %s (%.0f events/s)
  MySQL facts equal after       %s
  IM delivery complete after    %s (paced at 200 calls/s)
  mic facts                     %d lifetime rows, %d daily rows, %d sessions equal to the oracle
  lucky pools                   %d pool rows equal to the oracle
  Tencent IM                    %d/%d messages accepted by the fake IM, %d/%d rows delivered
  differences                   %d
  verify (from the Kafka log)   %d events re-read, %d lifetime + %d daily + %d pool rows recomputed, %d differences
  totals topics                 %d lifetime + %d daily totals, equal to the facts
  lucky draws                   %d draws, %d hits, payout rate %s (%d coins paid of %d spent), %d granted = %d wallet credits, %d pending
`, r.Events, r.Written.Round(time.Millisecond), float64(r.Events)/r.Written.Seconds(), r.FactsEqual.Round(time.Millisecond), r.Converged.Round(time.Millisecond),
		r.Report.LifetimeRows, r.Report.DailyRows, r.Report.SessionRows, r.Report.PoolRows, r.IMAccepted, r.IMExpected, r.Delivered, r.Events, len(r.Report.Diffs),
		r.VerifyEvents, r.Verify.LifetimeRows, r.Verify.DailyRows, r.Verify.PoolRows, len(r.Verify.Diffs),
		r.Totals.Lifetime, r.Totals.Daily,
		r.Lucky.Draws, r.Lucky.Hits, ppmPercent(r.Lucky.RewardCoins, r.Lucky.CoinSpent), r.Lucky.RewardCoins, r.Lucky.CoinSpent, r.Lucky.Granted, r.Credits, r.Lucky.Pending)
	for _, p := range r.Pools {
		fmt.Fprintf(w, "  pool %-24s  balance %d = funded %d + in %d - out %d\n", p.Scope, p.Balance, p.Funded, p.TotalIn, p.TotalOut)
	}
	for _, f := range r.Fairness {
		fmt.Fprintf(w, "  fairness day %s  commitment %s, %d draws verified, %d differences\n", f.Day, f.Commitment, f.Draws, len(f.Differences))
	}
	fmt.Fprintf(w, "  fairness reveal wait          %s (%s days, reveal grace %s)\n", r.FairnessWait.Round(time.Millisecond), demoDay, demoRevealGrace)
}

func ppmPercent(part, whole int64) string {
	if whole == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}
