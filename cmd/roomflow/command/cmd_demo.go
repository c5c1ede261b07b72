package command

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/cobra"
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
	"github.com/hyapp/roomflow/tools/verify"
)

// demoOptions configure one demo run.
type demoOptions struct {
	Scenario  loadgen.Scenario
	ServerDSN string        // MySQL server (no database); a demo database is created on it
	Database  string        // database name (dropped and recreated)
	Rate      float64       // room_outbox insert rate, events/s (0: as fast as possible)
	Timeout   time.Duration // how long to wait for every fact to match
	Keep      bool          // keep the database afterwards
	LogLevel  string
	Out       io.Writer
}

// demoResult is what the demo measured.
type demoResult struct {
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
	// Lucky is what the draw service answered for the lucky gifts; Pools
	// the lucky_pools rows at the end; Credits the fake wallet's.
	Lucky   loadgen.DrawSummary
	Pools   []demoPool
	Credits int
	// Metrics is what the process registry held once everything had
	// converged, gathered before the shutdown (the alert and dashboard
	// tests check their queries against it).
	Metrics []*dto.MetricFamily
}

// demoPool is one lucky_pools row at the end of the demo.
type demoPool struct {
	Scope                              string
	Balance, Funded, TotalIn, TotalOut int64
}

// runDemo runs the whole pipeline in this process: an embedded kfake
// cluster, a fresh MySQL database, the fake Tencent IM server, every
// registered component (as `roomflow run`), and loadgen traffic; it waits
// until MySQL equals the oracle and every IM message was accepted.
func runDemo(ctx context.Context, o demoOptions) (demoResult, error) {
	var res demoResult
	out := o.Out
	step := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }

	kc, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		return res, err
	}
	defer kc.Close()
	step("embedded Kafka (kfake, 3 brokers) on %s", strings.Join(kc.ListenAddrs(), ","))

	dsn, cleanup, err := demoDatabase(ctx, o)
	if err != nil {
		return res, err
	}
	defer cleanup()

	const secret = "demo-secret-key-not-for-production"
	im := imfake.New(imfake.Config{SDKAppID: 1400000000, AdminIdentifier: "administrator", SecretKey: secret})
	imURL, stopIM, err := im.Listen("127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer stopIM()
	step("fake Tencent IM on %s", imURL)
	wal, err := walletfake.Listen(walletfake.Config{Seed: o.Scenario.Seed}, "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer wal.Close()
	step("fake wallet (hyapp.wallet.v1.WalletService) on %s", wal.Addr())
	luckyAddr, err := freeAddr()
	if err != nil {
		return res, err
	}

	cfg := config.Default()
	cfg.AppCode = o.Scenario.AppCode
	cfg.Log.Level = o.LogLevel
	cfg.Metrics.Addr = "127.0.0.1:0"
	cfg.API.Addr, cfg.API.AppAddr, cfg.API.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Kafka.Brokers = kc.ListenAddrs()
	cfg.Kafka.Partitions = 6
	cfg.MySQL.DSN = dsn
	cfg.IM.Endpoint, cfg.IM.SDKAppID, cfg.IM.SecretKey = imURL, 1400000000, secret
	cfg.IM.FastPathDelay = 0 // no room-service publishes by itself here
	cfg.OutboxWorker.ClaimGrace = config.Duration(2 * time.Second)
	cfg.Relay.PollInterval = config.Duration(20 * time.Millisecond)
	cfg.Lucky.GRPCAddr, cfg.Lucky.WalletGRPCAddr = luckyAddr, wal.Addr()
	cfg.Lucky.AuditKey = "demo-audit-key-not-for-production"
	cfg.Lucky.OutboxPollInterval = config.Duration(100 * time.Millisecond)
	// The scenario's timestamps lie in the past; keep the mic timers from
	// closing sessions whose `down` is still in flight.
	cfg.Mic.CompensationInterval = config.Duration(24 * time.Hour)
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if _, err := imPublisherConfig(&app.Deps{Config: &cfg}, ""); err != nil { // before anything starts
		return res, err
	}
	db, err := mysqlx.Open(ctx, cfg.MySQL)
	if err != nil {
		return res, err
	}
	defer db.Close()
	if err := loadgen.SeedRule(ctx, db, o.Scenario.Rule); err != nil {
		return res, err
	}
	events, oracle := o.Scenario.Generate()
	if err := fundDemoPools(ctx, db, cfg.AppCode, o.Scenario.Rule.GiftID, events); err != nil {
		return res, err
	}
	admCl, err := cfg.Kafka.Cluster(nil, nil).NewClient("demo")
	if err != nil {
		return res, err
	}
	defer admCl.Close()
	if _, err := kafkax.EnsureTopics(ctx, kadm.NewClient(admCl), cfg.Kafka.Layout()); err != nil {
		return res, err
	}
	step("MySQL schema migrated, topics created, lucky rule %s/%s seeded", o.Scenario.Rule.GiftID, o.Scenario.Rule.RuleVersion)

	logOut := io.Discard
	if o.LogLevel == "debug" || o.LogLevel == "info" {
		logOut = os.Stderr
	}
	deps := newDeps(&cfg, cfg.Log.Logger(logOut))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	specs := append(components(), luckySpec()) // as `roomflow run` plus `roomflow lucky`
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	go func() { runErr <- app.Run(runCtx, deps, specs) }()
	step("components running: %s", strings.Join(names, ", "))

	res.Events, res.IMExpected = len(events), oracle.IMMessages
	// Lucky gifts go through the draw service first, as room-service sends
	// them: check, debit, draw; the gift row then names its draw_id.
	conn, err := grpc.NewClient(luckyAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	lucky := activityv1.NewLuckyGiftServiceClient(conn)
	if err := waitServing(ctx, lucky, o.Scenario.Rule.GiftID, runErr); err != nil {
		return res, err
	}
	drawStart := time.Now()
	if res.Lucky, err = loadgen.DrawLucky(ctx, lucky, events, 32); err != nil {
		return res, err
	}
	step("%d lucky gifts drawn in %s (%d hits, %d coins paid), pools owned by roomflow lucky", res.Lucky.Draws,
		time.Since(drawStart).Round(time.Millisecond), res.Lucky.Hits, res.Lucky.RewardCoins)
	step("writing %d room_outbox rows (%d mic sessions over %s, %d gifts)", len(events), len(oracle.Sessions), o.Scenario.Span, o.Scenario.Gifts)
	start := time.Now()
	if _, err := loadgen.WriteOutbox(ctx, db, events, 200, o.Rate); err != nil {
		return res, err
	}
	res.Written = time.Since(start)

	deadline := time.Now().Add(o.Timeout)
	nextProgress := time.Now().Add(5 * time.Second)
	for {
		select {
		case err := <-runErr:
			return res, fmt.Errorf("pipeline stopped: %w", err)
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		res.Report, err = loadgen.Compare(ctx, db, cfg.AppCode, oracle)
		if err != nil {
			return res, err
		}
		if res.Report.OK() && res.FactsEqual == 0 {
			res.FactsEqual = time.Since(start)
		}
		res.IMAccepted = im.Stats().Accepted
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM room_outbox WHERE status = 'delivered'").Scan(&res.Delivered); err != nil {
			return res, err
		}
		pendingRewards, err := countRows(ctx, db, "SELECT COUNT(*) FROM lucky_outbox WHERE status <> 'done'")
		if err != nil {
			return res, err
		}
		if res.Report.OK() && res.IMAccepted >= res.IMExpected && res.Delivered == res.Events && pendingRewards == 0 {
			res.Converged = time.Since(start)
			break
		}
		if time.Now().After(nextProgress) {
			nextProgress = nextProgress.Add(5 * time.Second)
			step("%s: %d facts still differ; IM %d/%d accepted (Tencent's 200 calls/s app limit paces this)",
				time.Since(start).Round(time.Second), len(res.Report.Diffs), res.IMAccepted, res.IMExpected)
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("facts did not converge within %s: %d differences (first: %v), IM %d/%d accepted, %d/%d rows delivered",
				o.Timeout, len(res.Report.Diffs), firstDiff(res.Report), res.IMAccepted, res.IMExpected, res.Delivered, res.Events)
		}
	}
	// What `roomflow verify` does: recompute the facts from the event log in
	// Kafka (not from the generated scenario) and diff them against MySQL.
	if res.Verify, res.VerifyEvents, err = verifyRun(ctx, &cfg, db); err != nil {
		return res, err
	}
	if !res.Verify.OK() {
		return res, fmt.Errorf("verify from the event log: %d differences (first: %v)", len(res.Verify.Diffs), firstDiff(res.Verify))
	}
	if res.Pools, err = demoPools(ctx, db, cfg.AppCode); err != nil {
		return res, err
	}
	res.Credits = len(wal.Ledger())
	if paid, err := countRows(ctx, db, "SELECT COUNT(*) FROM lucky_draw_records WHERE reward_coins > 0 AND reward_status = 'granted'"); err != nil || paid != res.Credits {
		return res, fmt.Errorf("every paid draw must be granted once with one wallet credit: %d granted draws, %d credits (%v)", paid, res.Credits, err)
	}
	if res.Metrics, err = deps.Registry.Gather(); err != nil {
		return res, fmt.Errorf("gather metrics: %w", err)
	}
	stop()
	if err := <-runErr; err != nil {
		return res, fmt.Errorf("shutdown: %w", err)
	}
	return res, nil
}

// fundDemoPools gives the platform, gift and every room pool of the
// scenario a starting balance (as `roomflow lucky pools fund` would), so
// draws can pay from the first gift, and puts the first room on the pilot
// list (pilot_mode stays off: nothing is rejected), so the pilot rooms'
// per-room series exist as in a pilot.
func fundDemoPools(ctx context.Context, db *sql.DB, appCode, giftID string, events []loadgen.Event) error {
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

// waitServing waits until the draw service answers a check of gift.
func waitServing(ctx context.Context, c activityv1.LuckyGiftServiceClient, gift string, runErr <-chan error) error {
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

func demoPools(ctx context.Context, db *sql.DB, appCode string) ([]demoPool, error) {
	var out []demoPool
	err := loadgen.ScanRows(ctx, db, `SELECT scope_type, scope_id, balance, funded, total_in, total_out FROM lucky_pools
		WHERE app_code = ? AND scope_type <> 'room' ORDER BY scope_type, scope_id`, appCode, func(rows *sql.Rows) error {
		var p demoPool
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
func demoDatabase(ctx context.Context, o demoOptions) (string, func(), error) {
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

func demoCmd(g *globals) *cobra.Command {
	o := demoOptions{Scenario: loadgen.DefaultScenario(), Database: "roomflow_demo", Timeout: 3 * time.Minute, LogLevel: "warn"}
	o.Scenario.EventIDPrefix = "demo"
	o.Scenario.Sessions, o.Scenario.Gifts = 1000, 1500
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline on embedded Kafka with synthetic load and print a summary",
		Long: `demo needs nothing but a MySQL-compatible server (the local MariaDB by
default; ROOMFLOW_MYSQL_DSN to choose another): it starts an embedded Kafka
(kfake, 3 brokers) and a fake Tencent IM endpoint in this process, creates
a fresh database (roomflow_demo), runs every component as 'roomflow run'
does, writes a loadgen scenario into room_outbox, waits until the MySQL
facts equal the independently computed oracle and every IM message was
accepted, and prints what happened.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ServerDSN = os.Getenv("ROOMFLOW_MYSQL_DSN")
			if o.ServerDSN == "" {
				o.ServerDSN = "root@tcp(127.0.0.1:3306)/"
			}
			o.Scenario.AppCode = "hyapp"
			o.Out = cmd.OutOrStdout()
			res, err := runDemo(cmd.Context(), o)
			if err != nil {
				return err
			}
			printDemo(o.Out, res)
			return nil
		},
	}
	scenarioFlags(cmd.Flags(), &o.Scenario)
	cmd.Flags().Float64Var(&o.Rate, "rate", 5000, "room_outbox insert rate, events/s (0: unthrottled)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "how long to wait for the facts to converge")
	cmd.Flags().BoolVar(&o.Keep, "keep", false, "keep the roomflow_demo database for inspection")
	cmd.Flags().StringVar(&o.LogLevel, "log-level", o.LogLevel, "component log level (info/debug print to stderr)")
	cmd.Flags().StringVar(&o.Database, "database", o.Database, "demo database name (dropped and recreated)")
	return cmd
}

func printDemo(w io.Writer, r demoResult) {
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
  lucky draws                   %d draws, %d hits, payout rate %s (%d coins paid of %d spent), %d granted = %d wallet credits, %d pending
`, r.Events, r.Written.Round(time.Millisecond), float64(r.Events)/r.Written.Seconds(), r.FactsEqual.Round(time.Millisecond), r.Converged.Round(time.Millisecond),
		r.Report.LifetimeRows, r.Report.DailyRows, r.Report.SessionRows, r.Report.PoolRows, r.IMAccepted, r.IMExpected, r.Delivered, r.Events, len(r.Report.Diffs),
		r.VerifyEvents, r.Verify.LifetimeRows, r.Verify.DailyRows, r.Verify.PoolRows, len(r.Verify.Diffs),
		r.Lucky.Draws, r.Lucky.Hits, ppmPercent(r.Lucky.RewardCoins, r.Lucky.CoinSpent), r.Lucky.RewardCoins, r.Lucky.CoinSpent, r.Lucky.Granted, r.Credits, r.Lucky.Pending)
	for _, p := range r.Pools {
		fmt.Fprintf(w, "  pool %-24s  balance %d = funded %d + in %d - out %d\n", p.Scope, p.Balance, p.Funded, p.TotalIn, p.TotalOut)
	}
}

func ppmPercent(part, whole int64) string {
	if whole == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}
