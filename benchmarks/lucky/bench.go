package main

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/sqlbuild"
	"github.com/hyapp/roomflow/internal/tlsx"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
)

const (
	appCode  = "hy"
	auditKey = "bench-audit-key"
	// callTimeout is each draw's gRPC deadline, as room-service would set
	// one.
	callTimeout = 2 * time.Second
)

// benchRule is every gift's rule version: 90% of heat_value into the
// pools (20% platform, 30% room, 50% gift), 13.4% of draws pay, 85% of
// coin_spent paid back on average.
func benchRule(gift string) lucky.Rule {
	return lucky.Rule{GiftID: gift, RuleVersion: "v1", GiftPrice: 100, PoolRatePPM: 900_000, TargetPayoutRatePPM: 850_000,
		PlatformWeightPPM: 200_000, RoomWeightPPM: 300_000, MaxSinglePayout: 1_000_000, MaxUserDailyPayout: 1_000_000_000,
		MaxRoomHourlyPayout: 1_000_000_000_000, Status: "active",
		Tiers: []lucky.Tier{
			{TierID: "none", RewardType: "none", ProbabilityPPM: 866_000, Enabled: true},
			{TierID: "x1", RewardType: "multiplier", RewardValue: 1, ProbabilityPPM: 50_000, Enabled: true},
			{TierID: "x5", RewardType: "multiplier", RewardValue: 5, ProbabilityPPM: 40_000, Enabled: true},
			{TierID: "x10", RewardType: "multiplier", RewardValue: 10, ProbabilityPPM: 40_000, Enabled: true},
			{TierID: "x50", RewardType: "multiplier", RewardValue: 50, ProbabilityPPM: 4_000, Enabled: true},
		}}
}

func roomID(i int) string { return fmt.Sprintf("room%04d", i) }
func giftID(i int) string { return fmt.Sprintf("gift%02d", i) }

// request is draw i of a run: its room, gift and sender drawn from a
// source seeded by i, so every mode of a round draws the same sequence.
func (sc scenario) request(prefix string, i, users int) *activityv1.ExecuteLuckyGiftDrawRequest {
	r := rand.New(rand.NewPCG(uint64(i), 0x6c75636b79))
	room, gift, user := r.IntN(sc.rooms), r.IntN(sc.gifts), int64(1+r.IntN(users))
	cmd := prefix + strconv.Itoa(i)
	return &activityv1.ExecuteLuckyGiftDrawRequest{
		Meta: &activityv1.LuckyGiftMeta{AppCode: appCode, CommandId: cmd, RequestId: "req-" + cmd, RoomId: roomID(room),
			SenderUserId: user, TargetUserId: int64(100_000 + room), DeviceId: "dev-" + strconv.FormatInt(user, 10)},
		GiftId: giftID(gift), GiftCount: 1, CoinSpent: 100, HeatValue: 100, BillingReceiptId: "bill-" + cmd}
}

type bench struct {
	o      opts
	wallet *wallet.Client
	// producer is the outbox worker's Kafka client: the benchmark uses
	// only the worker's synchronous Credit (the service's Dispatcher), so
	// nothing is produced and no broker is needed.
	producer *kgo.Client
	log      *slog.Logger
	run      string // random id of this run, in database names
	sec      *security
}

// stage is one mode on one fresh database, served on loopback gRPC.
type stage struct {
	scratch *mysqlx.Scratch
	db      *sql.DB
	stats   dbStats
	reg     *prometheus.Registry
	conn    *grpc.ClientConn
	client  activityv1.LuckyGiftServiceClient
	stop    func()
}

// start creates and migrates a database, publishes sc's rules, funds its
// pools and serves m on 127.0.0.1:0.
func (b *bench) start(ctx context.Context, sc scenario, m mode, label string) (_ *stage, err error) {
	st := &stage{reg: prometheus.NewRegistry()}
	if st.scratch, err = mysqlx.NewScratch(ctx, b.o.serverDSN, "luckybench_"+b.run+"_"+label, true); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.close(ctx, false)
		}
	}()
	if st.db, err = openCounting(ctx, st.scratch.DSN, &st.stats); err != nil {
		return nil, err
	}
	rules := map[string]*lucky.Rule{}
	floor := int64(10_000)
	admin, err := luckydraw.NewAdmin(st.db, luckydraw.AdminConfig{Operator: "bench"})
	if err != nil {
		return nil, err
	}
	pools := [][]any{{appCode, "platform", "global", int64(1_000_000_000_000), int64(1_000_000_000_000), floor}}
	for g := range sc.gifts {
		r := benchRule(giftID(g))
		if _, err := admin.PublishRule(ctx, r); err != nil {
			return nil, err
		}
		rules[r.GiftID] = &r
		pools = append(pools, []any{appCode, "gift", r.GiftID, int64(1_000_000_000), int64(1_000_000_000), floor})
	}
	for i := range sc.rooms {
		pools = append(pools, []any{appCode, "room", roomID(i), int64(1_000_000_000), int64(1_000_000_000), floor})
	}
	// One statement for every pool: the set-up is not what is measured,
	// and `pools fund` (a transaction with its admin log row per pool)
	// would put a thousand operator changes into the run's process CPU.
	if _, err := st.db.ExecContext(ctx, `INSERT INTO lucky_pools (app_code, scope_type, scope_id, balance, funded, reserve_floor) VALUES `+
		sqlbuild.Rows(len(pools), 6), sqlbuild.Flatten(pools)...); err != nil {
		return nil, fmt.Errorf("fund pools: %w", err)
	}

	// The baseline gets the same transport as the service (-mtls).
	guard := tlsx.NewGuard(tlsx.GuardConfig{Listener: "lucky.grpc_addr", Addr: "127.0.0.1:0", Server: b.sec.server, Logger: b.log})
	srv := grpc.NewServer(guard.GRPCServerOptions()...)
	var serve func(context.Context, net.Listener) error
	if m.baseline() {
		activityv1.RegisterLuckyGiftServiceServer(srv, &naive{db: st.db, app: appCode, key: []byte(auditKey), rules: rules,
			wallet: b.wallet})
		serve = func(ctx context.Context, ln net.Listener) error {
			go func() { <-ctx.Done(); srv.GracefulStop() }()
			return srv.Serve(ln)
		}
	} else {
		cfg := luckydraw.Config{AppCode: appCode, AuditKey: auditKey, MaxBatch: m.maxBatch, PipelineDepth: b.o.pipelineDepth, Registerer: st.reg, Logger: b.log,
			DisableWalletCreditDispatch: !b.o.dispatch, TLS: b.sec.server, Randomness: b.o.randomness,
			OutboxFormat: b.o.outboxFormat}
		if cfg.FairnessKeys, err = benchKeyring(); err != nil {
			return nil, err
		}
		if b.o.dispatch {
			if cfg.Dispatcher, err = luckyoutbox.New(luckyoutbox.Config{AppCode: appCode, Topic: config.Default().Kafka.Topics.LuckyEvents,
				Producer: b.producer, Logger: b.log}, st.db, b.wallet); err != nil {
				return nil, err
			}
		}
		svc, err := luckydraw.New(cfg, st.db)
		if err != nil {
			return nil, err
		}
		if err := luckydraw.RecordOwnership(ctx, st.db, "bench", time.Now()); err != nil {
			return nil, err
		}
		// Today's mode (and seed) stored before the first draw, as
		// `roomflow lucky`'s fairness writer does a day ahead.
		if err := svc.FairnessStep(ctx, time.Now()); err != nil {
			return nil, err
		}
		serve = svc.Serve
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serve(sctx, ln) }()
	st.stop = func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			b.log.Warn("serve", "error", err)
		}
	}
	if st.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(b.sec.clientCreds())); err != nil {
		return nil, err
	}
	st.client = activityv1.NewLuckyGiftServiceClient(st.conn)
	return st, nil
}

func (st *stage) close(ctx context.Context, keep bool) {
	if st.conn != nil {
		st.conn.Close()
	}
	if st.stop != nil {
		st.stop()
	}
	if st.db != nil {
		st.db.Close()
	}
	if keep {
		_ = st.scratch.Keep()
		return
	}
	_ = st.scratch.Drop(ctx)
}

// measure runs n draws of sc through m with -clients concurrent clients
// on a fresh database and checks the invariants.
func (b *bench) measure(ctx context.Context, sc scenario, m mode, round, n int) (figures, error) {
	label := fmt.Sprintf("r%d_%s_%d", round, sc.name, m.maxBatch)
	st, err := b.start(ctx, sc, m, label)
	if err != nil {
		return figures{}, err
	}
	defer st.close(ctx, b.o.keepDB)
	before := st.stats.snapshot()
	out := closedLoop(ctx, st.client, sc, label+"-", n, b.o.clients, b.o.users)
	out.db = st.stats.snapshot().sub(before)
	if err := verify(ctx, st.db, out); err != nil {
		return figures{}, err
	}
	f := figures{outcome: out}
	if !m.baseline() {
		_, batches, draws := gather(st.reg, "roomflow_lucky_draw_batch_size")
		if batches > 0 {
			f.batch = draws / float64(batches)
		}
		f.retries, _, _ = gather(st.reg, "roomflow_lucky_draw_retries_total")
	}
	return f, nil
}

// measureRate offers -rate draws/s of sc to the service for
// -rate-duration on a fresh database.
func (b *bench) measureRate(ctx context.Context, sc scenario, round int) (outcome, error) {
	label := fmt.Sprintf("r%d_%s_rate", round, sc.name)
	st, err := b.start(ctx, sc, modeService, label)
	if err != nil {
		return outcome{}, err
	}
	defer st.close(ctx, b.o.keepDB)
	before := st.stats.snapshot()
	out := fixedRate(ctx, st.client, sc, label+"-", b.o.rate, b.o.rateDur, b.o.users)
	out.db = st.stats.snapshot().sub(before)
	return out, verify(ctx, st.db, out)
}

// outcome is one run's answers.
type outcome struct {
	draws, errs, hits, granted int
	firstErr                   error
	elapsed                    time.Duration
	lats                       []time.Duration // sorted
	db                         dbSnapshot
}

func (o outcome) rate() float64 { return float64(o.draws) / o.elapsed.Seconds() }

func (o outcome) hitRate() float64 { return float64(o.hits) / float64(max(o.draws, 1)) }

func (o outcome) stmtsPerDraw() float64 { return float64(o.db.stmts) / float64(max(o.draws, 1)) }

// rowsPerDraw is the rows written per draw (rowsWritten), the synchronous
// credit's included.
func (o outcome) rowsPerDraw() float64 { return float64(o.db.rows) / float64(max(o.draws, 1)) }

// dbWaits is the time the pool waited for MySQL per draw, by statement
// kind, summed over connections (µs).
func (o outcome) dbWaits() string {
	var b strings.Builder
	b.WriteString("db µs/draw:")
	for k, w := range o.db.wait {
		if w > 0 {
			fmt.Fprintf(&b, " %s %.0f", kindNames[k], float64(w.Microseconds())/float64(max(o.draws, 1)))
		}
	}
	return b.String()
}

// pct is the nearest-rank percentile q of the latencies.
func (o outcome) pct(q float64) time.Duration {
	if len(o.lats) == 0 {
		return 0
	}
	i := int(q*float64(len(o.lats))+0.5) - 1
	return o.lats[min(max(i, 0), len(o.lats)-1)]
}

func (o outcome) errNote() string {
	if o.errs == 0 {
		return ""
	}
	return fmt.Sprintf("  %d errors, first: %v", o.errs, o.firstErr)
}

func (f figures) line() string {
	s := fmt.Sprintf("%6.0f draws/s  p50 %-8s p99 %-8s p999 %-8s %5.1f stmts/draw %5.1f rows/draw  hits %4.1f%% (granted %d)", f.rate(),
		f.pct(0.5).Round(100*time.Microsecond), f.pct(0.99).Round(100*time.Microsecond), f.pct(0.999).Round(100*time.Microsecond),
		f.stmtsPerDraw(), f.rowsPerDraw(), 100*f.hitRate(), f.granted)
	if f.batch > 0 {
		s += fmt.Sprintf("  mean batch %.1f  retries %.0f", f.batch, f.retries)
	}
	return s + f.errNote() + "\n" + strings.Repeat(" ", 45) + f.dbWaits()
}

func (o outcome) rateLine(offered int) string {
	return fmt.Sprintf("%6.0f draws/s  p50 %-8s p99 %-8s p999 %-8s %5.1f stmts/draw %5.1f rows/draw  (offered %d/s)", o.rate(),
		o.pct(0.5).Round(100*time.Microsecond), o.pct(0.99).Round(100*time.Microsecond), o.pct(0.999).Round(100*time.Microsecond),
		o.stmtsPerDraw(), o.rowsPerDraw(), offered) + o.errNote() + "\n" + strings.Repeat(" ", 45) + o.dbWaits()
}

// recorder collects answers from concurrent clients.
type recorder struct {
	mu sync.Mutex
	outcome
}

func (r *recorder) add(lat time.Duration, resp *activityv1.ExecuteLuckyGiftDrawResponse, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && resp.GetRejectReason() != "" {
		err = fmt.Errorf("rejected: %s", resp.GetRejectReason())
	}
	if err != nil {
		r.errs++
		if r.firstErr == nil {
			r.firstErr = status.Convert(err).Err()
		}
		return
	}
	r.draws++
	if resp.GetHit() {
		r.hits++
	}
	if resp.GetRewardStatus() == "GRANTED" {
		r.granted++
	}
	r.lats = append(r.lats, lat)
}

func (r *recorder) done(elapsed time.Duration) outcome {
	o := r.outcome
	o.elapsed = elapsed
	sort.Slice(o.lats, func(i, j int) bool { return o.lats[i] < o.lats[j] })
	return o
}

func draw(ctx context.Context, c activityv1.LuckyGiftServiceClient, req *activityv1.ExecuteLuckyGiftDrawRequest) (*activityv1.ExecuteLuckyGiftDrawResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return c.ExecuteLuckyGiftDraw(ctx, req)
}

// closedLoop sends n draws from clients goroutines, each sending its next
// draw when the previous one is answered.
func closedLoop(ctx context.Context, c activityv1.LuckyGiftServiceClient, sc scenario, prefix string, n, clients, users int) outcome {
	reqs := make([]*activityv1.ExecuteLuckyGiftDrawRequest, n)
	for i := range reqs {
		reqs[i] = sc.request(prefix, i, users)
	}
	var rec recorder
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				t := time.Now()
				resp, err := draw(ctx, c, reqs[i])
				rec.add(time.Since(t), resp, err)
			}
		}()
	}
	wg.Wait()
	return rec.done(time.Since(t0))
}

// fixedRate offers rate draws/s for d (open loop: a draw is sent at its
// scheduled time whatever the earlier ones are doing); a draw's latency
// runs from its scheduled time, so a stalled sender is not hidden.
func fixedRate(ctx context.Context, c activityv1.LuckyGiftServiceClient, sc scenario, prefix string, rate int, d time.Duration, users int) outcome {
	n := int(float64(rate) * d.Seconds())
	reqs := make([]*activityv1.ExecuteLuckyGiftDrawRequest, n)
	for i := range reqs {
		reqs[i] = sc.request(prefix, i, users)
	}
	interval := time.Second / time.Duration(rate)
	var rec recorder
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		due := t0.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(due))
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := draw(ctx, c, reqs[i])
			rec.add(time.Since(due), resp, err)
		}()
	}
	wg.Wait()
	return rec.done(time.Since(t0))
}

// verify checks the pools' invariants after a run and that every
// answered draw has its record.
func verify(ctx context.Context, db *sql.DB, o outcome) error {
	var bad, records, hits int
	var out, rewards, layersOut, in, drawIn sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lucky_pools WHERE balance < reserve_floor OR balance <> funded + total_in - total_out`).Scan(&bad); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT SUM(total_out), SUM(total_in) FROM lucky_pools`).Scan(&out, &in); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(reward_coins > 0), 0), SUM(reward_coins),
SUM(platform_out + room_out + gift_out), SUM(pool_in) FROM lucky_draw_records`).Scan(&records, &hits, &rewards, &layersOut, &drawIn); err != nil {
		return err
	}
	switch {
	case bad != 0:
		return fmt.Errorf("invariant: %d pools with balance < reserve_floor or balance <> funded + total_in - total_out", bad)
	case out.Int64 != rewards.Int64 || layersOut.Int64 != rewards.Int64 || in.Int64 != drawIn.Int64:
		return fmt.Errorf("invariant: total_out %d, rewards %d, layer outs %d; total_in %d, draws' inflow %d",
			out.Int64, rewards.Int64, layersOut.Int64, in.Int64, drawIn.Int64)
	case records < o.draws || records > o.draws+o.errs:
		return fmt.Errorf("%d draw records for %d answered draws (%d errors)", records, o.draws, o.errs)
	case o.draws > 0 && hits == 0:
		return fmt.Errorf("no draw paid in %d draws: the pools are not funded as meant", records)
	}
	return nil
}

// gather sums a counter over its labels, or returns a histogram's sample
// count and sum.
func gather(reg *prometheus.Registry, name string) (total float64, count uint64, sum float64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				total += c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				count += h.GetSampleCount()
				sum += h.GetSampleSum()
			}
		}
	}
	return total, count, sum
}

// benchKeyring is a fairness keyring under a fresh random key.
func benchKeyring() (*fairness.Keyring, error) {
	k := make([]byte, 32)
	if _, err := crand.Read(k); err != nil {
		return nil, err
	}
	return fairness.NewKeyring(base64.StdEncoding.EncodeToString(k), nil)
}
