// Package luckydraw is the lucky draw service of LUCKY-1 to LUCKY-16 in
// docs/requirements.md (`roomflow lucky`): the gRPC
// hyapp.activity.v1.LuckyGiftService over MySQL. A draw is one MySQL
// transaction (LUCKY-7's transaction boundary): the fence (lucky_fence)
// first, idempotency by (app_code, command_id) over draws and rejections,
// the switches and the deciding rule version, the platform, room and gift
// pool rows and the risk counters locked FOR UPDATE in key order, the inflow
// and payout applied, the draw record and its lucky_outbox rows (the wallet
// credit, the lucky events) inserted. No wallet call happens while locks are
// held: the synchronous credit runs after commit through Config.Dispatcher,
// and the outbox worker retries what it leaves pending.
//
// Group commit: every draw of one app_code locks the platform pool row, so
// draws of an app_code are serialized by MySQL anyway. The service runs
// concurrent draws of one app_code as batches: while one batch's
// transaction runs, arriving draws queue; the next batch takes up to
// Config.MaxBatch of them into one transaction that runs them one after the
// other in memory and writes each table with one multi-row statement. A
// batch that fails on a deadlock, lock wait timeout, duplicate key or lost
// connection is rolled back and retried whole within DrawTimeout, so every
// invariant holds per draw exactly as with one transaction per draw.
package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/internal/promreg"
	"github.com/hyapp/roomflow/internal/tlsx"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
)

// Service is the LuckyGiftService. Its methods are safe for concurrent
// use.
type Service struct {
	activityv1.UnimplementedLuckyGiftServiceServer
	cfg   Config
	db    *sql.DB
	rules *rulestore.Loader
	sw    *switches
	log   *slog.Logger
	m     metrics
	pilot *pilotMetrics
	fair  *fairDays
	// writeMode is how the pool takes a batch's writes (writes.exec).
	writeMode atomic.Int32
	// busy counts the draw batches and synchronous credit groups running
	// (a batch counts until its group has started), which a stop waits
	// for before the wallet closes.
	busy atomic.Int64

	mu     sync.Mutex
	queues map[string]*queue // by app_code
}

type metrics struct {
	draws    *prometheus.CounterVec
	duration prometheus.Histogram
	batch    prometheus.Histogram
	rejects  *prometheus.CounterVec
	retries  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		draws: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "roomflow_lucky_draws_total",
			Help: "ExecuteLuckyGiftDraw answers by outcome: hit, miss, duplicate (a stored draw or rejection), rejected, conflict (a used command_id with another payload), invalid (a key field invalid: nothing recorded), error."}, []string{"outcome"})),
		duration: promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "roomflow_lucky_draw_duration_seconds",
			Help: "ExecuteLuckyGiftDraw latency, queueing and synchronous wallet credit included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})),
		batch: promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "roomflow_lucky_draw_batch_size",
			Help: "Draw requests per draw transaction (group commit).", Buckets: prometheus.ExponentialBuckets(1, 2, 9)})),
		rejects: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "roomflow_lucky_draw_rejects_total",
			Help: "Draws and checks answered with a reject_reason (nothing drawn)."}, []string{"rpc", "reason"})),
		retries: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "roomflow_lucky_draw_retries_total",
			Help: "Draw transactions rolled back and retried, by reason."}, []string{"reason"})),
	}
	// Series at 0 before the first draw, so rate() sees it.
	for _, o := range []string{"hit", "miss", "duplicate", "rejected", "conflict", "invalid", "error"} {
		m.draws.WithLabelValues(o)
	}
	for _, r := range mysqlerr.Reasons {
		m.retries.WithLabelValues(r)
	}
	// The rejections after the debit, at 0 before the first: alert
	// LuckyRejectionsAfterDebit takes their rate.
	m.rejects.WithLabelValues("ExecuteLuckyGiftDraw", RejectGlobalDisabled)
	m.rejects.WithLabelValues("ExecuteLuckyGiftDraw", RejectInvalidRequest)
	return m
}

// New returns the service over db (migrated through 0006). It fails when
// cfg is invalid (see Config.Validate) or db is nil. It does not record
// pool ownership (RecordOwnership) nor listen (Serve).
func New(cfg Config, db *sql.DB) (*Service, error) {
	cfg.setDefaults()
	if db == nil {
		return nil, errors.New("luckydraw: nil database")
	}
	if cfg.PoolConns == 0 {
		cfg.PoolConns = db.Stats().MaxOpenConnections
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rules, err := rulestore.New(rulestore.Config{Now: cfg.Now}, db)
	if err != nil {
		return nil, err
	}
	sw := newSwitches(cfg, db)
	log := cfg.Logger.With("component", "luckydraw")
	promreg.Register(cfg.Registerer, prometheus.Collector(switchCollector{sw: sw, app: cfg.AppCode}))
	promreg.Register(cfg.Registerer, newLargeTierCollector(db, log))
	s := &Service{cfg: cfg, db: db, rules: rules, sw: sw, log: log,
		m: newMetrics(cfg.Registerer), pilot: newPilotMetrics(cfg.Registerer), queues: map[string]*queue{}}
	s.fair = newFairDays(s)
	return s, nil
}

// DispatchEnabled reports whether wallet_credit_dispatch is on for app
// (operator override, else the configured start value), read at most
// SwitchCacheTTL ago. The reward outbox worker asks it before each credit.
func (s *Service) DispatchEnabled(ctx context.Context, app string) (bool, error) {
	v, err := s.sw.get(ctx, s.appCode(app))
	if err != nil {
		return false, err
	}
	return v.global[SwitchWalletDispatch], nil
}

func (s *Service) appCode(app string) string {
	if app == "" {
		return s.cfg.AppCode
	}
	return app
}

// Serve serves LuckyGiftService, the gRPC health service (SERVING while
// it runs) and reflection on ln until ctx ends, then stops gracefully:
// in-flight RPCs finish (a draw's transaction is bounded by DrawTimeout).
// With Config.TLS every caller is checked first (tlsx.Guard): a refused
// one reaches no handler, so it writes nothing. It returns the server's
// error, nil after a stop on ctx.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	g := tlsx.NewGuard(tlsx.GuardConfig{Listener: "lucky.grpc_addr", Addr: ln.Addr().String(), TLSKey: "lucky.tls",
		Server: s.cfg.TLS, Metrics: tlsx.NewMetrics(s.cfg.Registerer), Logger: s.log})
	srv := grpc.NewServer(g.GRPCServerOptions()...)
	activityv1.RegisterLuckyGiftServiceServer(srv, s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(activityv1.LuckyGiftService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	s.log.Info("lucky gift service serving", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil,
		"client_cert_required", s.cfg.TLS.RequiresClientCert(), "names_checked", s.cfg.TLS.ChecksNames())
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	bound := time.After(s.cfg.DrawTimeout + s.creditBound())
	select {
	case <-stopped:
	case <-bound:
		srv.Stop()
		<-stopped
	}
	s.awaitBatches(bound)
	if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// awaitBatches waits, until bound, for the draw batches and credit groups
// still running once no call is left (a caller gone before its batch
// committed, a group outliving its hits' answers): their wallet calls
// must end before the wallet closes, or they would be recorded as failed
// attempts of a wallet that never answered.
func (s *Service) awaitBatches(bound <-chan time.Time) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s.busy.Load() > 0 {
		select {
		case <-tick.C:
		case <-bound:
			s.log.Warn("stopping with draw batches or credit groups still running; the outbox worker takes over what they leave",
				"running", s.busy.Load())
			return
		}
	}
}

// CheckLuckyGift answers whether a lucky gift can be sent now: enabled
// with the active rule version, or enabled=false with exactly one of
// global_disabled, room_paused, fairness_not_committed, no_active_rule
// (also an unknown gift), rule_invalid. It needs only gift_id and
// meta.room_id; every other field it carries is checked as Execute checks
// it (giftFields.validate), a field left out (zero) being no fault, so a
// send Execute could not draw is refused before room-service debits
// (InvalidArgument naming the field). A database failure is Unavailable.
func (s *Service) CheckLuckyGift(ctx context.Context, req *activityv1.CheckLuckyGiftRequest) (*activityv1.CheckLuckyGiftResponse, error) {
	meta := req.GetMeta()
	f := giftFields{meta: meta, giftID: req.GetGiftId(), giftCount: req.GetGiftCount(), coinSpent: req.GetCoinSpent(), heat: req.GetHeatValue()}
	if fault := f.validate(true); fault != nil {
		return nil, fault
	}
	app := s.appCode(meta.GetAppCode())
	sw, err := s.sw.get(ctx, app)
	if err != nil {
		return nil, s.rpcError(ctx, "CheckLuckyGift", err)
	}
	reject := sw.reject(meta.GetRoomId())
	nowMs := s.cfg.Now().UnixMilli() // one reading for the day and the version, as a draw batch
	if reject == "" {
		day, err := s.fair.dayOf(ctx, s.db, app, nowMs)
		if err != nil {
			return nil, s.rpcError(ctx, "CheckLuckyGift", err)
		}
		if day.notCommitted() {
			reject = RejectFairnessNotCommitted
		}
	}
	var version string
	if reject == "" {
		rows, err := readRuleRows(ctx, s.db, []any{req.GetGiftId()})
		if err != nil {
			return nil, s.rpcError(ctx, "CheckLuckyGift", err)
		}
		var rule *lucky.Rule
		rule, reject, err = s.resolveRule(ctx, rows, req.GetGiftId(), "", nowMs)
		if err != nil {
			return nil, s.rpcError(ctx, "CheckLuckyGift", err)
		}
		if rule != nil {
			version = rule.RuleVersion
		}
	}
	if reject != "" {
		s.m.rejects.WithLabelValues("CheckLuckyGift", reject).Inc()
		return &activityv1.CheckLuckyGiftResponse{RejectReason: reject}, nil
	}
	return &activityv1.CheckLuckyGiftResponse{Enabled: true, RuleVersion: version}, nil
}

// rpcError maps a failure to its gRPC status: the caller's context
// ending is its own code; a draw timeout or a transient database error is
// Unavailable (retry with the same command_id: a committed draw is
// returned, never drawn twice); anything else Internal with a generic
// message (the cause is logged).
func (s *Service) rpcError(ctx context.Context, rpc string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	s.log.Error("lucky rpc failed", "rpc", rpc, "error", err)
	if errors.Is(err, ErrDrawTimeout) || mysqlerr.Retryable(err) || errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.Unavailable, "lucky draw temporarily unavailable, retry with the same command_id")
	}
	return status.Error(codes.Internal, "internal error")
}

// validateDraw checks an ExecuteLuckyGiftDrawRequest and returns it as a
// drawReq: a fault of a key field is InvalidArgument (nothing to record it
// under); a fault of another field is the drawReq marked invalid, with its
// values made storable, for its batch to record as a rejection (the
// caller debited it).
func (s *Service) validateDraw(req *activityv1.ExecuteLuckyGiftDrawRequest) (*drawReq, error) {
	m := req.GetMeta()
	fault := giftFields{meta: m, giftID: req.GetGiftId(), giftCount: req.GetGiftCount(), coinSpent: req.GetCoinSpent(),
		heat: req.GetHeatValue(), billingReceiptID: req.GetBillingReceiptId(), ruleVersion: req.GetRuleVersion()}.validate(false)
	if fault != nil && fault.Key {
		return nil, fault
	}
	app := s.appCode(m.GetAppCode())
	r := &drawReq{app: app, drawID: DrawID(app, m.GetCommandId()), commandID: m.GetCommandId(), requestID: m.GetRequestId(),
		deviceID: m.GetDeviceId(), ruleVersion: req.GetRuleVersion(), clientSeed: m.GetClientSeed(), invalid: fault,
		giftPayload: giftPayload{billingReceiptID: req.GetBillingReceiptId(), roomID: m.GetRoomId(), giftID: req.GetGiftId(),
			sender: m.GetSenderUserId(), target: m.GetTargetUserId(), giftCount: req.GetGiftCount(), coinSpent: req.GetCoinSpent(),
			heat: req.GetHeatValue()}}
	if fault != nil {
		r.storable()
	}
	return r, nil
}

// ExecuteLuckyGiftDraw has exactly one outcome per (app_code,
// command_id), a draw or a rejection: a repeated command_id with the same
// payload (giftPayload: billing_receipt_id, room, sender, target, gift,
// gift_count, coin_spent, heat_value) returns the stored one whatever the
// switches, rules or pools say now; with another payload it is a second
// debit or another gift under a used id, answered FailedPrecondition with
// nothing drawn or recorded, so room-service refunds it. A reject_reason (global_disabled, room_paused,
// rule_not_active, no_active_rule, rule_invalid, fairness_not_committed,
// invalid_request: a field other than the key fields failed its check,
// FieldError) means nothing was drawn;
// the rejection is stored (room-service debited before the call, so it
// must be refundable) as a lucky_draw_records row with reward_status
// rejected, its reason and the answer's draw_id: one table and one
// unique key for both outcomes, so the idempotency read that follows the
// fence is the same single indexed read as before, a draw costs no extra
// statement, and the rejection keeps the draw_id room-service already
// names. Caps and filters never reject (they move probability to the
// none tier).
// A paying draw is credited synchronously after commit when
// wallet_credit_dispatch is on and a Dispatcher is configured:
// reward_status GRANTED (with credit_receipt_id) only once the grant is
// committed, else PENDING. Errors: InvalidArgument (a key field's fault:
// nothing written, a caller bug; outcome=invalid),
// FailedPrecondition (a used command_id with another payload: refund),
// Unavailable (draw timeout or transient database error: retry with the
// same command_id), the caller's deadline, Internal.
func (s *Service) ExecuteLuckyGiftDraw(ctx context.Context, req *activityv1.ExecuteLuckyGiftDrawRequest) (*activityv1.ExecuteLuckyGiftDrawResponse, error) {
	t0 := time.Now()
	defer func() { s.m.duration.Observe(time.Since(t0).Seconds()) }()
	r, err := s.validateDraw(req)
	if err != nil {
		s.m.draws.WithLabelValues("invalid").Inc()
		var fault *FieldError
		if errors.As(err, &fault) {
			s.log.Warn("draw request without a valid key: nothing drawn or recorded, answered InvalidArgument; the caller must refund any debit",
				"field", fault.Field, "problem", fault.Problem)
		}
		return nil, err
	}
	d, err := s.submit(ctx, r)
	var conflict *CommandConflictError
	if errors.As(err, &conflict) {
		s.m.draws.WithLabelValues("conflict").Inc()
		s.log.Warn("command_id already stands for another gift: nothing drawn or recorded, answered FailedPrecondition for a refund",
			"app_code", r.app, "command_id", r.commandID, "draw_id", r.drawID, "differs", conflict.Fields)
		return nil, status.Errorf(codes.FailedPrecondition, "meta.command_id was used for another gift (differs in: %s): not drawn, refund this debit",
			strings.Join(conflict.Fields, ", "))
	}
	if err != nil {
		s.m.draws.WithLabelValues("error").Inc()
		return nil, s.rpcError(ctx, "ExecuteLuckyGiftDraw", err)
	}
	if d.reject != "" {
		resp := &activityv1.ExecuteLuckyGiftDrawResponse{DrawId: d.drawID, RuleVersion: d.ruleVersion, RejectReason: d.reject}
		if d.duplicate {
			s.m.draws.WithLabelValues("duplicate").Inc()
			return resp, nil
		}
		s.m.draws.WithLabelValues("rejected").Inc()
		s.m.rejects.WithLabelValues("ExecuteLuckyGiftDraw", d.reject).Inc()
		if r.invalid != nil && d.reject == RejectInvalidRequest {
			// No column holds the field: this line names it for the refund's inquiry.
			s.log.Warn("draw request with an invalid field recorded as a rejection for a refund", "app_code", r.app,
				"command_id", r.commandID, "draw_id", r.drawID, "field", r.invalid.Field, "problem", r.invalid.Problem)
		}
		return resp, nil
	}
	outcome := "miss"
	switch {
	case d.duplicate:
		outcome = "duplicate"
	case d.rewardCoins > 0:
		outcome = "hit"
	}
	s.m.draws.WithLabelValues(outcome).Inc()
	if !d.duplicate && !s.fair.listed[r.app] {
		s.fair.unlisted.WithLabelValues(r.app).Inc()
	}
	if d.credit != nil {
		s.awaitCredit(ctx, r, &d)
	}
	return &activityv1.ExecuteLuckyGiftDrawResponse{DrawId: d.drawID, RuleVersion: d.ruleVersion, Hit: d.rewardCoins > 0,
		Tier:         &activityv1.RewardTierResult{TierId: d.tierID, RewardCoins: d.rewardCoins, TierType: d.tierType},
		RewardStatus: strings.ToUpper(d.rewardStatus), CreditReceiptId: d.creditReceiptID}, nil
}

// batchCredits is the synchronous credit of one committed batch's pending
// rewards: one Dispatcher group, so the batch's hits share its claim read
// and grant commit instead of each paying its own (before, the hits of a
// batch, answered together, started groups of about one).
type batchCredits struct {
	done chan struct{}
	at   map[string]int // reward id -> its outcome in out
	out  []luckyoutbox.CreditOutcome
}

// startCredits starts the credit of the pending rewards among a committed
// batch's results (wallet_credit_dispatch on as the draw read it, a
// Dispatcher configured), a duplicate's stored pending reward included,
// and hands each such result its group; nothing for none. The group runs
// on its own bound, not a caller's: the rows are claimed for it already.
func (s *Service) startCredits(app string, res []drawResult) {
	if s.cfg.Dispatcher == nil {
		return
	}
	var g *batchCredits
	var ids []string
	for i := range res {
		d := &res[i]
		if d.rewardStatus != "pending" || !d.dispatch {
			continue
		}
		if g == nil {
			g = &batchCredits{done: make(chan struct{}), at: map[string]int{}}
		}
		if _, ok := g.at[d.rewardID]; !ok {
			g.at[d.rewardID] = len(ids)
			ids = append(ids, d.rewardID)
		}
		d.credit = g
	}
	if g == nil {
		return
	}
	s.busy.Add(1)
	go func() {
		defer s.busy.Add(-1)
		defer close(g.done)
		ctx, cancel := context.WithTimeout(context.Background(), s.creditBound())
		defer cancel()
		g.out = s.cfg.Dispatcher.CreditRewards(ctx, app, ids)
	}()
}

// creditBound is how long a synchronous credit may take: two wallet calls
// and a second. It is also the lease of the reward_credit row the draw
// claims for it (rewardCreditRow): the worker takes the row over after.
func (s *Service) creditBound() time.Duration { return 2*s.cfg.WalletCreditTimeout + time.Second }

// awaitCredit waits for d's synchronous credit, at most the caller's
// deadline and creditBound; a failure or an outcome not yet known leaves
// it pending for the outbox worker.
func (s *Service) awaitCredit(ctx context.Context, r *drawReq, d *drawResult) {
	ctx, cancel := context.WithTimeout(ctx, s.creditBound())
	defer cancel()
	var o luckyoutbox.CreditOutcome
	select {
	case <-d.credit.done:
		o = d.credit.out[d.credit.at[d.rewardID]]
	case <-ctx.Done():
		// The group goes on; the answer says pending.
		s.log.Info("answering before the batch's synchronous credit ended; it goes on, the outbox takes over what it leaves",
			"draw_id", d.drawID, "reward_id", d.rewardID, "app_code", r.app, "error", ctx.Err())
		return
	}
	if o.Err != nil {
		s.log.Warn("synchronous reward credit failed; the outbox retries it", "draw_id", d.drawID, "reward_id", d.rewardID,
			"app_code", r.app, "error", o.Err)
		return
	}
	switch o.Status {
	case "granted":
		d.rewardStatus, d.creditReceiptID = o.Status, o.CreditReceiptID
	case "pending", "failed":
		d.rewardStatus = o.Status
	default:
		s.log.Error("dispatcher answered an unknown status", "draw_id", d.drawID, "status", o.Status)
	}
}

// queue is an app_code's waiting draws; running: a leader goroutine
// drains it.
type queue struct {
	pending []*call
	running bool
}

type call struct {
	ctx  context.Context
	req  *drawReq
	done chan struct{}
	res  drawResult
	err  error
}

// submit queues r for the next batch of its app_code and waits for its
// result or the caller's context. A caller gone before its batch starts
// is dropped; one gone after gets ctx's error while its draw commits (a
// retry with the same command_id returns it).
func (s *Service) submit(ctx context.Context, r *drawReq) (drawResult, error) {
	c := &call{ctx: ctx, req: r, done: make(chan struct{})}
	s.mu.Lock()
	q := s.queues[r.app]
	if q == nil {
		q = &queue{}
		s.queues[r.app] = q
	}
	q.pending = append(q.pending, c)
	if !q.running {
		q.running = true
		go s.lead(q)
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return drawResult{}, ctx.Err()
	}
}

// lead runs q's batches until q is empty, PipelineDepth at a time: the
// next batch starts (its BEGIN, fence, idempotency and rule reads, inflow
// claims) as soon as the one before it holds its pool locks, so its reads
// overlap the other's writes and it takes the pool locks the moment
// InnoDB releases them, which it does before the commit's log flush.
// Batches of one app_code therefore never wait for each other's fsync nor
// reads, only for each other's locked writes.
func (s *Service) lead(q *queue) {
	inflight := make(chan struct{}, s.cfg.PipelineDepth)
	for {
		s.mu.Lock()
		var batch []*call
		for len(q.pending) > 0 && len(batch) < s.cfg.MaxBatch {
			c := q.pending[0]
			q.pending = q.pending[1:]
			if c.ctx.Err() != nil {
				c.err = c.ctx.Err()
				close(c.done)
				continue
			}
			batch = append(batch, c)
		}
		if len(batch) == 0 {
			q.running = false
			q.pending = nil
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		inflight <- struct{}{} // at most PipelineDepth batches in flight
		reqs := make([]*drawReq, len(batch))
		for i, c := range batch {
			reqs[i] = c.req
		}
		s.m.batch.Observe(float64(len(batch)))
		next := make(chan struct{})
		var once sync.Once
		locked := func() { once.Do(func() { close(next) }) }
		s.busy.Add(1)
		go func() {
			defer s.busy.Add(-1) // after startCredits counted the batch's group
			defer func() { <-inflight }()
			defer locked() // a failed batch lets the next one start too
			res, err := s.runBatch(reqs, locked)
			if err != nil {
				s.log.Warn("draw batch failed", "draws", len(batch), "app_code", reqs[0].app, "error", err)
			} else {
				s.startCredits(reqs[0].app, res)
			}
			for i, c := range batch {
				switch {
				case err != nil:
					c.err = fmt.Errorf("luckydraw: draw %s: %w", c.req.drawID, err)
				case res[i].conflict != nil:
					c.err = res[i].conflict
				default:
					c.res = res[i]
				}
				close(c.done)
			}
		}()
		<-next // the next batch collects draws until this one holds its locks
	}
}
