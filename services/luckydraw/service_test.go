package luckydraw_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
)

const app = "hy"

func rule(version string, maxUserDaily int64) lucky.Rule {
	return lucky.Rule{GiftID: "rose", RuleVersion: version, GiftPrice: 100, PoolRatePPM: 500000, TargetPayoutRatePPM: 900000,
		PlatformWeightPPM: 200000, RoomWeightPPM: 300000, MaxUserDailyPayout: maxUserDaily, Status: "active",
		Tiers: []lucky.Tier{
			{TierID: "none", RewardType: "none", ProbabilityPPM: 400000, Enabled: true},
			{TierID: "x1", RewardType: "multiplier", RewardValue: 1, ProbabilityPPM: 500000, Enabled: true},
			{TierID: "x10", RewardType: "multiplier", RewardValue: 10, ProbabilityPPM: 100000, Enabled: true},
		}}
}

// testAdmin is an Admin over db with the operator "test".
func testAdmin(t testing.TB, db *sql.DB) *luckydraw.Admin {
	t.Helper()
	a, err := luckydraw.NewAdmin(db, luckydraw.AdminConfig{Operator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type env struct {
	db     *sql.DB
	svc    *luckydraw.Service
	client activityv1.LuckyGiftServiceClient
	conn   *grpc.ClientConn
	reg    *prometheus.Registry
}

// start publishes rule v1, funds the pools and serves a Service on
// 127.0.0.1:0.
func start(t *testing.T, cfg luckydraw.Config, fund int64) *env {
	t.Helper()
	return startOn(t, cfg, fund, nil)
}

// startHooked is start with the Service's connections running h
// (testenv.OpenHooked): faults injected below the draw transaction. e.db
// stays a plain pool for the test's own reads.
func startHooked(t *testing.T, cfg luckydraw.Config, fund int64, h testenv.SQLHooks) *env {
	t.Helper()
	return startOn(t, cfg, fund, &h)
}

// seeded is a fresh database with rule v1 published and the pools of
// gift rose in room r1 funded with fund coins each.
func seeded(t *testing.T, fund int64) *testenv.MySQL {
	t.Helper()
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	if _, err := testAdmin(t, m.DB).PublishRule(ctx, rule("v1", 0)); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{"platform", "global"}, {"room", "r1"}, {"gift", "rose"}} {
		floor := int64(100)
		if _, err := testAdmin(t, m.DB).FundPool(ctx, app, p[0], p[1], fund, &floor); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func startOn(t *testing.T, cfg luckydraw.Config, fund int64, h *testenv.SQLHooks) *env {
	t.Helper()
	m := seeded(t, fund)
	ctx := context.Background()
	e := &env{db: m.DB, reg: prometheus.NewRegistry()}
	cfg.AppCode, cfg.AuditKey, cfg.Registerer = app, "test-key", e.reg
	if cfg.SwitchCacheTTL == 0 {
		cfg.SwitchCacheTTL = time.Nanosecond
	}
	svcDB := m.DB
	if h != nil {
		svcDB = testenv.OpenHooked(t, m.DSN, *h)
	}
	var err error
	if e.svc, err = luckydraw.New(cfg, svcDB); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.svc.Serve(sctx, ln) }()
	if e.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	e.client = activityv1.NewLuckyGiftServiceClient(e.conn)
	return e
}

func drawReq(cmd string, user int64) *activityv1.ExecuteLuckyGiftDrawRequest {
	return &activityv1.ExecuteLuckyGiftDrawRequest{Meta: &activityv1.LuckyGiftMeta{CommandId: cmd, RoomId: "r1", SenderUserId: user,
		TargetUserId: 900, DeviceId: "dev-" + cmd, RequestId: "req"}, GiftId: "rose", GiftCount: 1, CoinSpent: 100, HeatValue: 100}
}

func (e *env) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var n sql.NullInt64
	if err := e.db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n.Int64
}

// checkInvariants: no pool below its floor, balance = funded + total_in -
// total_out, Σ total_out = Σ reward coins = Σ layer outs.
func (e *env) checkInvariants(t *testing.T) {
	t.Helper()
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_pools WHERE balance < reserve_floor OR balance <> funded + total_in - total_out`); n != 0 {
		t.Fatalf("%d pools break balance >= reserve_floor or balance = funded + total_in - total_out", n)
	}
	out := e.count(t, `SELECT SUM(total_out) FROM lucky_pools`)
	rewards := e.count(t, `SELECT SUM(reward_coins) FROM lucky_draw_records`)
	layers := e.count(t, `SELECT SUM(platform_out + room_out + gift_out) FROM lucky_draw_records`)
	in := e.count(t, `SELECT SUM(total_in) FROM lucky_pools`)
	drawIn := e.count(t, `SELECT SUM(pool_in) FROM lucky_draw_records WHERE inflow_applied_by = 'draw'`)
	if out != rewards || layers != rewards || in != drawIn {
		t.Fatalf("total_out %d, rewards %d, layer outs %d; total_in %d, draw inflow %d", out, rewards, layers, in, drawIn)
	}
}

func TestDrawsAuditAndInvariants(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	check, err := e.client.CheckLuckyGift(ctx, &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "rose"})
	if err != nil || !check.Enabled || check.RuleVersion != "v1" || check.RejectReason != "" {
		t.Fatalf("check: %v %v", check, err)
	}
	hits := 0
	for i := range 40 {
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq(fmt.Sprint("c", i), int64(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		if resp.DrawId != luckydraw.DrawID(app, fmt.Sprint("c", i)) || resp.RuleVersion != "v1" || resp.RejectReason != "" {
			t.Fatalf("draw %d: %v", i, resp)
		}
		want := "NONE"
		if resp.Hit {
			hits++
			want = "PENDING"
			if resp.Tier.RewardCoins != 100 && resp.Tier.RewardCoins != 1000 {
				t.Fatalf("reward %d", resp.Tier.RewardCoins)
			}
		}
		if resp.RewardStatus != want {
			t.Fatalf("reward status %s, want %s", resp.RewardStatus, want)
		}
	}
	if hits == 0 || hits == 40 {
		t.Fatalf("%d hits of 40 at 60%%", hits)
	}
	e.checkInvariants(t)
	// Outbox: one credit per hit, LuckyGiftDrawn + 3 LuckyPoolChanged per draw.
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE event_type = 'reward_credit'`); n != int64(hits) {
		t.Fatalf("%d reward_credit rows for %d hits", n, hits)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE message_type = 'LuckyPoolChanged'`); n != 120 {
		t.Fatalf("%d LuckyPoolChanged rows", n)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_risk_counters WHERE scope_type = 'room' AND draw_count = 40 AND hit_count = ?`, hits); n != 1 {
		t.Fatal("room hourly counter does not count the draws")
	}

	res, err := luckydraw.Audit(ctx, e.db, "test-key", luckydraw.AuditQuery{})
	if err != nil || len(res) != 40 {
		t.Fatalf("audit: %d %v", len(res), err)
	}
	for _, r := range res {
		if !r.OK {
			t.Fatalf("audit of untouched draw %s: %v", r.DrawID, r.Mismatches)
		}
	}
	// Tampering with any audited column is detected.
	id := luckydraw.DrawID(app, "c3")
	for _, q := range []string{
		`UPDATE lucky_draw_records SET random_value = (random_value + 500000) % 1000000 WHERE draw_id = ?`,
		`UPDATE lucky_draw_records SET candidate_tiers_json = REPLACE(candidate_tiers_json, '"x10"', '"x9"') WHERE draw_id = ?`,
	} {
		if _, err := e.db.Exec(q, id); err != nil {
			t.Fatal(err)
		}
		res, err := luckydraw.Audit(ctx, e.db, "test-key", luckydraw.AuditQuery{DrawID: id})
		if err != nil || len(res) != 1 || res[0].OK {
			t.Fatalf("tampered (%s) not detected: %+v %v", q, res, err)
		}
	}
	if r, err := luckydraw.Audit(ctx, e.db, "wrong-key", luckydraw.AuditQuery{DrawID: luckydraw.DrawID(app, "c4")}); err != nil || r[0].OK {
		t.Fatalf("a digest under another key passed: %v", err)
	}
	if _, err := luckydraw.Audit(ctx, e.db, "test-key", luckydraw.AuditQuery{DrawID: "LD-nope"}); !errors.Is(err, luckydraw.ErrUnknownDraw) {
		t.Fatalf("unknown draw: %v", err)
	}

	// Health.
	h, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v %v", h, err)
	}
}

// Low water: a pool that cannot pay x10 moves its probability to none;
// the user daily cap filters before the draw and writes LuckyRiskRejected.
func TestLowWaterAndUserDailyCap(t *testing.T) {
	e := start(t, luckydraw.Config{}, 600) // capacity 500 + inflow: x10 (1000) never fits
	ctx := context.Background()
	if _, err := testAdmin(t, e.db).PublishRule(ctx, rule("capped", 150)); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq(fmt.Sprint("w", i), 5))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Tier.TierId == "x10" {
			t.Fatal("x10 drawn although no pool can pay it")
		}
	}
	var cand string
	if err := e.db.QueryRow(`SELECT candidate_tiers_json FROM lucky_draw_records WHERE command_id = 'w0'`).Scan(&cand); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cand, `"pool_capacity"`) || !strings.Contains(cand, `"probability_ppm":500000`) {
		t.Fatalf("candidate table %s", cand)
	}
	e.checkInvariants(t)

	// Rule "capped": user 77 may win 150 a day; after one x1 hit (100),
	// x1 is removed by the user cap, not by a pool.
	won := int64(0)
	for i := 0; i < 30; i++ {
		req := drawReq(fmt.Sprint("u", i), 77)
		req.RuleVersion = "capped"
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		won += resp.Tier.RewardCoins
	}
	if won != 100 {
		t.Fatalf("user 77 won %d under a daily cap of 150 with 100-coin tiers", won)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE event_id LIKE 'LuckyRiskRejected:%:user'`); n == 0 {
		t.Fatal("no LuckyRiskRejected for the user cap")
	}
	if n := e.count(t, `SELECT payout_coins FROM lucky_risk_counters WHERE scope_type = 'user' AND scope_id = '77'`); n != 100 {
		t.Fatalf("user counter %d", n)
	}
	e.checkInvariants(t)
}

func TestDuplicateCommandStorm(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	var wg sync.WaitGroup
	resps := make([]*activityv1.ExecuteLuckyGiftDrawResponse, 50)
	errs := make([]error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := drawReq("same", 1)
			req.Meta.RequestId = fmt.Sprint("req-", i) // duplicates differ in request_id
			req.Meta.SentAtMs = int64(i)
			resps[i], errs[i] = e.client.ExecuteLuckyGiftDraw(context.Background(), req)
		}()
	}
	wg.Wait()
	for i := range 50 {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if resps[i].DrawId != resps[0].DrawId || resps[i].Tier.TierId != resps[0].Tier.TierId || resps[i].Tier.RewardCoins != resps[0].Tier.RewardCoins {
			t.Fatalf("call %d answered %v, call 0 %v", i, resps[i], resps[0])
		}
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records`); n != 1 {
		t.Fatalf("%d draw records for one command_id", n)
	}
	if n := e.count(t, `SELECT draw_count FROM lucky_risk_counters WHERE scope_type = 'room'`); n != 1 {
		t.Fatalf("room counter counts %d draws", n)
	}
	e.checkInvariants(t)
}

func TestConcurrentDrawsOneRoomAndGift(t *testing.T) {
	e := start(t, luckydraw.Config{}, 20_000) // tight pools: x10 comes and goes
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	t0 := time.Now()
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := e.client.ExecuteLuckyGiftDraw(context.Background(), drawReq(fmt.Sprint("k", i), int64(i%20+1)))
			if err == nil && resp.DrawId == "" {
				err = fmt.Errorf("no draw: %v", resp)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("200 concurrent draws in %s", time.Since(t0))
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records`); n != 200 {
		t.Fatalf("%d records", n)
	}
	e.checkInvariants(t)
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_pools WHERE balance < 0`); n != 0 {
		t.Fatal("negative balance")
	}
	res, err := luckydraw.Audit(context.Background(), e.db, "test-key", luckydraw.AuditQuery{})
	if err != nil || len(res) != 200 {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.OK {
			t.Fatalf("%s: %v", r.DrawID, r.Mismatches)
		}
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_draws_total", "outcome", "error"); v != 0 {
		t.Fatalf("%v errors", v)
	}
}

// A draw that cannot get its locks within draw_timeout fails retryably
// and writes nothing; the retry with the same command_id draws once.
func TestDrawTimeoutRetryNoDuplicatePayout(t *testing.T) {
	e := start(t, luckydraw.Config{DrawTimeout: 200 * time.Millisecond}, 100_000)
	ctx := context.Background()
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT balance FROM lucky_pools WHERE app_code = ? AND scope_type = 'platform' FOR UPDATE`, app); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.ExecuteLuckyGiftDraw(ctx, drawReq("t1", 1))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("locked pool: %v", err)
	}
	tx.Rollback()
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records`); n != 0 {
		t.Fatal("a timed-out draw was written")
	}
	first, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("t1", 1))
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("t1", 1))
	if err != nil || again.DrawId != first.DrawId || again.Tier.RewardCoins != first.Tier.RewardCoins {
		t.Fatalf("retry: %v %v", again, err)
	}
	if n := e.count(t, `SELECT SUM(total_out) FROM lucky_pools`); n != first.Tier.RewardCoins {
		t.Fatalf("paid %d for one draw of %d", n, first.Tier.RewardCoins)
	}
	if n := e.count(t, `SELECT SUM(version) FROM lucky_pools`); n != 3 {
		t.Fatalf("pool versions %d after one draw", n)
	}
	e.checkInvariants(t)
}

// TestKillSwitchesAndRuleStatus: every Execute rejected by a switch or
// the rule status is recorded under its own command id (reward_status
// rejected, the reason and the request's fields), and a repeat of it
// answers the stored rejection whatever the switches say by then.
func TestKillSwitchesAndRuleStatus(t *testing.T) {
	e := start(t, luckydraw.Config{LargeTierMinReward: 1000, DisableWalletCreditDispatch: true}, 100_000)
	ctx := context.Background()
	off, on := false, true
	check := func(room string) *activityv1.CheckLuckyGiftResponse {
		r, err := e.client.CheckLuckyGift(ctx, &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: room}, GiftId: "rose"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	draw := func(cmd string, version string) *activityv1.ExecuteLuckyGiftDrawResponse {
		req := drawReq(cmd, 1)
		req.RuleVersion = version
		req.BillingReceiptId = "bill-" + cmd
		r, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// rejected asserts cmd's answer and its stored rejection.
	rejected := func(cmd, version, reason string, r *activityv1.ExecuteLuckyGiftDrawResponse) {
		t.Helper()
		if r.RejectReason != reason || r.DrawId != luckydraw.DrawID(app, cmd) || r.Hit {
			t.Fatalf("%s: %v, want %s", cmd, r, reason)
		}
		var status, why, receipt, room, gift, ver string
		var sender, target, coins, reward int64
		if err := e.db.QueryRow(`SELECT reward_status, reject_reason, billing_receipt_id, room_id, gift_id, rule_version,
	sender_user_id, target_user_id, coin_spent, reward_coins FROM lucky_draw_records WHERE app_code = ? AND command_id = ?`, app, cmd).Scan(
			&status, &why, &receipt, &room, &gift, &ver, &sender, &target, &coins, &reward); err != nil {
			t.Fatalf("%s: no rejection stored: %v", cmd, err)
		}
		if status != "rejected" || why != reason || receipt != "bill-"+cmd || room != "r1" || gift != "rose" || ver != version ||
			sender != 1 || target != 900 || coins != 100 || reward != 0 {
			t.Fatalf("%s stored as %s %s %s %s %s %q %d %d %d %d", cmd, status, why, receipt, room, gift, ver, sender, target, coins, reward)
		}
		// In the same transaction: the refund's event, once, and the claim
		// that keeps the gift's inflow out of the pools.
		drawID := luckydraw.DrawID(app, cmd)
		var payload []byte
		var n int
		if err := e.db.QueryRow(`SELECT COUNT(*), MAX(payload) FROM lucky_outbox WHERE event_type = 'activity_event' AND message_type = 'LuckyDrawRejected'
	AND aggregate_id = ?`, drawID).Scan(&n, &payload); err != nil || n != 1 {
			t.Fatalf("%s: %d LuckyDrawRejected rows (%v), want 1", cmd, n, err)
		}
		var ev activityv1.LuckyDrawRejected
		if err := proto.Unmarshal(payload, &ev); err != nil || ev.EventId != luckydraw.LuckyDrawRejectedEventID(drawID) || ev.Reason != reason ||
			ev.BillingReceiptId != "bill-"+cmd || ev.CoinSpent != 100 || ev.SenderUserId != 1 || ev.RoomId != "r1" || ev.RuleVersion != version || ev.CreatedAtMs <= 0 {
			t.Fatalf("%s: LuckyDrawRejected %v (%v)", cmd, &ev, err)
		}
		var by string
		if err := e.db.QueryRow(`SELECT claimed_by FROM lucky_pool_inflow_claims WHERE app_code = ? AND draw_id = ?`, app, drawID).Scan(&by); err != nil || by != luckydraw.ClaimedByRejection {
			t.Fatalf("%s: inflow claim %q (%v), want %q", cmd, by, err, luckydraw.ClaimedByRejection)
		}
	}
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchGlobal, "", &off); err != nil {
		t.Fatal(err)
	}
	if r := check("r1"); r.Enabled || r.RejectReason != "global_disabled" {
		t.Fatalf("check with global off: %v", r)
	}
	rejected("s1", "v1", "global_disabled", draw("s1", ""))
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchGlobal, "", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchRoomScopePaused, "r1", &on); err != nil {
		t.Fatal(err)
	}
	if r := check("r1"); r.RejectReason != "room_paused" {
		t.Fatalf("paused room: %v", r)
	}
	if r := check("r2"); !r.Enabled {
		t.Fatalf("other room: %v", r)
	}
	rejected("s2", "v1", "room_paused", draw("s2", ""))
	// The switch is back on: s1 and s2 still answer their stored rejection.
	rejected("s1", "v1", "global_disabled", draw("s1", ""))
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchRoomScopePaused, "r1", nil); err != nil {
		t.Fatal(err)
	}
	rejected("s2", "v1", "room_paused", draw("s2", ""))
	if _, err := testAdmin(t, e.db).SetRuleStatus(ctx, "rose", "v1", "paused"); err != nil {
		t.Fatal(err)
	}
	if r := check("r1"); r.RejectReason != "no_active_rule" {
		t.Fatalf("paused rule: %v", r)
	}
	rejected("s3", "v1", "rule_not_active", draw("s3", "v1"))
	rejected("s4", "v1", "no_active_rule", draw("s4", ""))
	if _, err := testAdmin(t, e.db).SetRuleStatus(ctx, "rose", "v1", "active"); err != nil {
		t.Fatal(err)
	}
	rejected("s4", "v1", "no_active_rule", draw("s4", ""))
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE reward_status = 'rejected'`); n != 4 {
		t.Fatalf("%d rejections stored, want 4 (one per command)", n)
	}
	// Each rejection wrote one event and one claim, a repeat nothing more.
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox`); n != 4 {
		t.Fatalf("rejections wrote %d outbox rows, want 4 LuckyDrawRejected", n)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_pool_inflow_claims WHERE claimed_by = 'rejected'`); n != 4 {
		t.Fatalf("rejections wrote %d inflow claims, want 4", n)
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_draw_rejects_total", "rpc", "ExecuteLuckyGiftDraw", "reason", "global_disabled"); v != 1 {
		t.Fatalf("%v global_disabled rejections counted, want 1 (the repeat is a duplicate)", v)
	}
	e.checkInvariants(t)
	if res, err := luckydraw.Audit(ctx, e.db, "test-key", luckydraw.AuditQuery{}); err != nil || len(res) != 0 {
		t.Fatalf("audit of rejections only: %v %v", res, err)
	}
	// Large tier (x10 = 1000 coins) off by config? No: on; switch it off.
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchLargeTier, "", &off); err != nil {
		t.Fatal(err)
	}
	for i := range 15 {
		if r := draw(fmt.Sprint("L", i), ""); r.Tier.TierId == "x10" {
			t.Fatal("large tier drawn while switched off")
		}
	}
	var cand string
	e.db.QueryRow(`SELECT candidate_tiers_json FROM lucky_draw_records WHERE command_id = 'L0'`).Scan(&cand)
	if !strings.Contains(cand, `"large_tier_off"`) {
		t.Fatalf("candidates %s", cand)
	}
	// Dispatch off by config: hits stay PENDING with LuckyRewardPending:{reward_id}:0;
	// a miss has no reward and no such event.
	if on, err := e.svc.DispatchEnabled(ctx, ""); err != nil || on {
		t.Fatalf("dispatch enabled: %v %v", on, err)
	}
	hits := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE reward_coins > 0 AND reward_status = 'pending'`)
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE event_id LIKE 'LuckyRewardPending:LR-LD-%:0'`); n != hits || hits == 0 {
		t.Fatalf("%d pending events for %d pending hits", n, hits)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE message_type = 'LuckyRewardPending'`); n != hits {
		t.Fatalf("%d LuckyRewardPending events for %d hits (misses have none)", n, hits)
	}
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchWalletDispatch, "", &on); err != nil {
		t.Fatal(err)
	}
	if on, _ := e.svc.DispatchEnabled(ctx, app); !on {
		t.Fatal("override on not seen")
	}
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, "nope", "", &on); err == nil {
		t.Fatal("unknown switch accepted")
	}
}

// TestBadRequestsWriteNothing: a request whose key fields (what a
// rejection is stored and refunded under: app_code, command_id, room_id,
// gift_id, billing_receipt_id, coin_spent) are invalid has no record to
// store: InvalidArgument, nothing written, counted outcome=invalid (alert
// LuckyInvalidDrawRequest). The other fields' faults are recorded
// rejections: TestUndrawableRequestIsARecordedRejection.
func TestBadRequestsWriteNothing(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	long := func(n int) string { return strings.Repeat("x", n+1) }
	bad := map[string]func(*activityv1.ExecuteLuckyGiftDrawRequest){
		"empty command_id": func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.CommandId = "" },
		"empty room_id":    func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.RoomId = "" },
		"empty gift_id":    func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.GiftId = "" },
		"no meta":          func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta = nil },
		"negative coins":   func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.CoinSpent = -1 },
		"coins over bound": func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.CoinSpent = envelope.MaxGiftCoins + 1 },
		"long command_id":  func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.CommandId = long(128) },
		"long room_id":     func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.RoomId = long(64) },
		"long gift_id":     func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.GiftId = long(64) },
		"long receipt":     func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.BillingReceiptId = long(128) },
		"long app_code":    func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.AppCode = long(32) },
		// Keys of byte-exact columns that still pad trailing spaces
		// (migration 0015): "c " would be the record of "c".
		"padded command_id": func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.CommandId = "bad " },
		"padded room_id":    func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.RoomId = "r1 " },
		"padded gift_id":    func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.GiftId = "rose " },
	}
	for name, mut := range bad {
		req := drawReq("bad", 1)
		mut(req)
		if _, err := e.client.ExecuteLuckyGiftDraw(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_draws_total", "outcome", "invalid"); int(v) != len(bad) {
		t.Errorf("outcome=invalid counted %v, want %d", v, len(bad))
	}
	for name, req := range map[string]*activityv1.CheckLuckyGiftRequest{
		"check without room": {GiftId: "rose"},
		"check without gift": {Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}},
		"check long gift":    {Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: long(64)},
		"check coins over":   {Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "rose", CoinSpent: envelope.MaxGiftCoins + 1},
		"check heat over":    {Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "rose", HeatValue: math.MaxInt64},
		"check padded room":  {Meta: &activityv1.LuckyGiftMeta{RoomId: "r1 "}, GiftId: "rose"},
		"check padded gift":  {Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "rose "},
	} {
		if _, err := e.client.CheckLuckyGift(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Unknown gift: no active rule.
	r, err := e.client.CheckLuckyGift(context.Background(), &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "tulip"})
	if err != nil || r.RejectReason != "no_active_rule" {
		t.Fatalf("unknown gift: %v %v", r, err)
	}
	for _, table := range []string{"lucky_draw_records", "lucky_outbox", "lucky_risk_counters", "lucky_pool_inflow_claims"} {
		if n := e.count(t, `SELECT COUNT(*) FROM `+table); n != 0 {
			t.Errorf("%s has %d rows after bad requests", table, n)
		}
	}
}

// TestCoinsAtTheBoundDraw: a gift of exactly envelope.MaxGiftCoins (spend
// and heat) is a valid request: it draws, and its inflow enters the pools.
func TestCoinsAtTheBoundDraw(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	req := drawReq("max", 1)
	req.CoinSpent, req.HeatValue = envelope.MaxGiftCoins, envelope.MaxGiftCoins
	if _, err := e.client.CheckLuckyGift(context.Background(), &activityv1.CheckLuckyGiftRequest{Meta: req.Meta, GiftId: req.GiftId,
		CoinSpent: req.CoinSpent, HeatValue: req.HeatValue}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.ExecuteLuckyGiftDraw(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// pool_rate_ppm 500,000: half the heat.
	if n := e.count(t, `SELECT pool_in FROM lucky_draw_records WHERE command_id = 'max'`); n != envelope.MaxGiftCoins/2 {
		t.Fatalf("pool_in %d, want %d", n, envelope.MaxGiftCoins/2)
	}
}

// A gift whose inflow the stream sink claimed first: the draw adds none.
func TestStreamClaimedInflow(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	if _, err := e.db.Exec(`INSERT INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by) VALUES (?, ?, 'stream')`, app, luckydraw.DrawID(app, "sc")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.ExecuteLuckyGiftDraw(context.Background(), drawReq("sc", 1)); err != nil {
		t.Fatal(err)
	}
	var by string
	var poolIn int64
	e.db.QueryRow(`SELECT inflow_applied_by, pool_in FROM lucky_draw_records`).Scan(&by, &poolIn)
	if by != "stream" || poolIn != 50 || e.count(t, `SELECT SUM(total_in) FROM lucky_pools`) != 0 {
		t.Fatalf("applied by %s, pool_in %d, total_in %d", by, poolIn, e.count(t, `SELECT SUM(total_in) FROM lucky_pools`))
	}
}

// A gift whose inflow the sink claims while its draw is in flight: the
// sink's claim is inserted (uncommitted) before the draw transaction
// starts and committed while the draw's INSERT IGNORE of its own claim
// waits for it. The draw must see the sink's claim and add no inflow (the
// sink added it): found by the chaos run (seed 574199634, a gift written
// before its draw answered, the sink's batch committing 7ms into the
// draw's), where the inflow entered lucky_pools twice.
func TestStreamClaimCommittedDuringDraw(t *testing.T) {
	e := start(t, luckydraw.Config{DrawTimeout: 10 * time.Second}, 100_000)
	ctx := context.Background()
	sink, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Rollback() //nolint:errcheck // no-op after Commit
	if _, err := sink.Exec(`INSERT INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by) VALUES (?, ?, 'stream')`, app, luckydraw.DrawID(app, "race")); err != nil {
		t.Fatal(err)
	}
	drawn := make(chan error, 1)
	go func() {
		_, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("race", 1))
		drawn <- err
	}()
	// The draw reads (its snapshot), then waits for the sink's claim row.
	testenv.Eventually(t, 10*time.Second, "the draw waits for the sink's claim", func() bool {
		return e.count(t, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT IGNORE INTO lucky_pool_inflow_claims%'`) > 0
	})
	if err := sink.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-drawn; err != nil {
		t.Fatal(err)
	}
	var by string
	e.db.QueryRow(`SELECT inflow_applied_by FROM lucky_draw_records`).Scan(&by)
	if in := e.count(t, `SELECT SUM(total_in) FROM lucky_pools`); by != "stream" || in != 0 {
		t.Fatalf("inflow applied by %q and %d added to lucky_pools; want stream and 0 (the sink claimed and added it)", by, in)
	}
	e.checkInvariants(t)
}

// grantingDispatcher grants like the outbox's synchronous credit: it
// commits the draw's granted state before answering.
type grantingDispatcher struct{ db *sql.DB }

func (d grantingDispatcher) ClaimedBy() string { return "granting-test" }

func (d grantingDispatcher) CreditRewards(ctx context.Context, appCode string, rewardIDs []string) []luckyoutbox.CreditOutcome {
	out := make([]luckyoutbox.CreditOutcome, len(rewardIDs))
	for i, id := range rewardIDs {
		receipt := "RCPT-" + id
		// By primary key (reward id = "LR-" + draw id): concurrent
		// groups lock only their own rows.
		_, err := d.db.ExecContext(ctx, `UPDATE lucky_draw_records SET reward_status = 'granted', credit_receipt_id = ?
WHERE app_code = ? AND draw_id = ? AND reward_status = 'pending'`, receipt, appCode, strings.TrimPrefix(id, "LR-"))
		out[i] = luckyoutbox.CreditOutcome{Status: "granted", CreditReceiptID: receipt, Err: err}
	}
	return out
}

func TestSynchronousDispatchGrants(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	// The dispatcher needs the db: set it through a second service on the
	// same database.
	svc, err := luckydraw.New(luckydraw.Config{AppCode: app, AuditKey: "test-key", Dispatcher: grantingDispatcher{e.db}}, e.db)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		resp, err := svc.ExecuteLuckyGiftDraw(context.Background(), drawReq(fmt.Sprint("g", i), 1))
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Hit {
			if resp.RewardStatus != "NONE" || resp.CreditReceiptId != "" {
				t.Fatalf("miss: %v", resp)
			}
			continue
		}
		if resp.RewardStatus != "GRANTED" || resp.CreditReceiptId != "RCPT-"+luckydraw.RewardID(resp.DrawId) {
			t.Fatalf("hit: %v", resp)
		}
		// A duplicate after the grant returns the granted state.
		again, err := svc.ExecuteLuckyGiftDraw(context.Background(), drawReq(fmt.Sprint("g", i), 1))
		if err != nil || again.RewardStatus != "GRANTED" || again.CreditReceiptId != resp.CreditReceiptId {
			t.Fatalf("duplicate of a granted draw: %v %v", again, err)
		}
		break
	}
}

// recordingDispatcher grants like grantingDispatcher and records the
// reward ids of each CreditRewards call.
type recordingDispatcher struct {
	grantingDispatcher
	mu    sync.Mutex
	calls [][]string
}

func (d *recordingDispatcher) CreditRewards(ctx context.Context, appCode string, rewardIDs []string) []luckyoutbox.CreditOutcome {
	d.mu.Lock()
	d.calls = append(d.calls, rewardIDs)
	d.mu.Unlock()
	return d.grantingDispatcher.CreditRewards(ctx, appCode, rewardIDs)
}

// A committed batch's hits are credited as one group (one claim read and
// one grant commit for the batch, not one per hit): with 60% hits and
// concurrent draws, no more groups than batches, each paying draw
// credited exactly once and answered GRANTED.
func TestSynchronousDispatchOneGroupPerBatch(t *testing.T) {
	e := start(t, luckydraw.Config{}, 10_000_000)
	d := &recordingDispatcher{grantingDispatcher: grantingDispatcher{e.db}}
	reg := prometheus.NewRegistry()
	svc, err := luckydraw.New(luckydraw.Config{AppCode: app, AuditKey: "test-key", Dispatcher: d, Registerer: reg}, e.db)
	if err != nil {
		t.Fatal(err)
	}
	const draws = 96
	var mu sync.Mutex
	paid := map[string]bool{}
	var wg sync.WaitGroup
	for i := range draws {
		wg.Go(func() {
			resp, err := svc.ExecuteLuckyGiftDraw(context.Background(), drawReq(fmt.Sprint("grp", i), int64(i+1)))
			if err != nil {
				t.Error(err)
				return
			}
			if resp.Hit {
				if resp.RewardStatus != "GRANTED" {
					t.Errorf("hit %s answered %s", resp.DrawId, resp.RewardStatus)
				}
				mu.Lock()
				paid[luckydraw.RewardID(resp.DrawId)] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	credited := map[string]int{}
	for _, c := range d.calls {
		for _, id := range c {
			credited[id]++
		}
	}
	for id := range paid {
		if credited[id] != 1 {
			t.Errorf("reward %s credited %d times, want once", id, credited[id])
		}
	}
	batches, _ := testenv.Metric(reg, "roomflow_lucky_draw_batch_size")
	if len(paid) < 10 || len(credited) != len(paid) || float64(len(d.calls)) > batches {
		t.Fatalf("%d paying draws, %d rewards credited in %d groups over %d batches; want every one credited, at most one group per batch",
			len(paid), len(credited), len(d.calls), int(batches))
	}
	t.Logf("%d paying draws credited in %d groups over %d batches", len(paid), len(d.calls), int(batches))
}

// heldDispatcher grants like grantingDispatcher once release is closed.
type heldDispatcher struct {
	grantingDispatcher
	release chan struct{}
	done    chan []string // the rewards of each finished call
}

func (d heldDispatcher) CreditRewards(ctx context.Context, appCode string, rewardIDs []string) []luckyoutbox.CreditOutcome {
	<-d.release
	out := d.grantingDispatcher.CreditRewards(ctx, appCode, rewardIDs)
	d.done <- rewardIDs
	return out
}

// A caller whose deadline ends before its batch's credit does gets its
// hit answered PENDING at its deadline, and the credit goes on: the reward
// is granted once the wallet answers.
func TestSynchronousDispatchOutlivesTheCaller(t *testing.T) {
	e, d, svc := heldService(t)
	hit := heldHit(t, svc)
	close(d.release)
	want := luckydraw.RewardID(hit.DrawId)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ids := <-d.done:
			if slices.Contains(ids, want) {
				var st string
				if err := e.db.QueryRow(`SELECT reward_status FROM lucky_draw_records WHERE draw_id = ?`, hit.DrawId).Scan(&st); err != nil || st != "granted" {
					t.Fatalf("reward_status %q (%v) after the credit ended; want granted", st, err)
				}
				return
			}
		case <-deadline:
			t.Fatalf("the credit of %s did not go on after its caller left", want)
		}
	}
}

// heldService is a service on a funded pool whose credits wait for
// d.release.
func heldService(t *testing.T) (*env, heldDispatcher, *luckydraw.Service) {
	t.Helper()
	e := start(t, luckydraw.Config{}, 10_000_000)
	d := heldDispatcher{grantingDispatcher{e.db}, make(chan struct{}), make(chan []string, 100)}
	svc, err := luckydraw.New(luckydraw.Config{AppCode: app, AuditKey: "test-key", Dispatcher: d}, e.db)
	if err != nil {
		t.Fatal(err)
	}
	return e, d, svc
}

// heldHit draws until a hit is answered, each caller waiting one second:
// with its credit held, the hit must be answered PENDING.
func heldHit(t *testing.T, svc *luckydraw.Service) *activityv1.ExecuteLuckyGiftDrawResponse {
	t.Helper()
	for i := range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := svc.ExecuteLuckyGiftDraw(ctx, drawReq(fmt.Sprint("held", i), int64(i+1)))
		deadline := ctx.Err() != nil
		cancel()
		switch {
		case err != nil && deadline:
			continue // a slow machine's draw outlived the deadline itself: draw again
		case err != nil:
			t.Fatal(err)
		case resp.Hit && resp.RewardStatus != "PENDING":
			t.Fatalf("hit answered %s while its credit was held; want PENDING", resp.RewardStatus)
		case resp.Hit:
			return resp
		}
	}
	t.Fatal("no hit answered in 50 draws")
	return nil
}

// A stop waits for the credit groups still running after their hits were
// answered (Serve returns only once they end), so the wallet, closed
// after Serve, is never closed under a group's call.
func TestServeWaitsForCreditGroups(t *testing.T) {
	e, d, svc := heldService(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- svc.Serve(ctx, ln) }()
	hit := heldHit(t, svc)
	stop()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) while the credit of %s was running", err, hit.DrawId)
	case <-time.After(300 * time.Millisecond):
	}
	close(d.release)
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return once the credit groups ended")
	}
	var st string
	if err := e.db.QueryRow(`SELECT reward_status FROM lucky_draw_records WHERE draw_id = ?`, hit.DrawId).Scan(&st); err != nil || st != "granted" {
		t.Fatalf("reward_status %q (%v) when Serve returned; want granted", st, err)
	}
}

func TestAdmin(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	r := rule("v1", 0)
	if _, err := testAdmin(t, m.DB).PublishRule(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := testAdmin(t, m.DB).PublishRule(ctx, r); err != nil {
		t.Fatalf("identical republish: %v", err)
	}
	r.Tiers[1].RewardValue = 2
	if _, err := testAdmin(t, m.DB).PublishRule(ctx, r); !errors.Is(err, luckydraw.ErrRuleImmutable) {
		t.Fatalf("edited version: %v", err)
	}
	bad := rule("v2", 0)
	bad.Tiers[0].RewardType = "fixed"
	if _, err := testAdmin(t, m.DB).PublishRule(ctx, bad); !errors.Is(err, luckydraw.ErrRuleInvalid) {
		t.Fatalf("no none tier: %v", err)
	}
	if _, err := testAdmin(t, m.DB).SetRuleStatus(ctx, "rose", "nope", "paused"); !errors.Is(err, lucky.ErrUnknownRule) {
		t.Fatalf("unknown version: %v", err)
	}
	floor := int64(10)
	for range 2 {
		if _, err := testAdmin(t, m.DB).FundPool(ctx, app, "room", "r9", 500, &floor); err != nil {
			t.Fatal(err)
		}
	}
	var bal, funded, fl int64
	m.DB.QueryRow(`SELECT balance, funded, reserve_floor FROM lucky_pools WHERE scope_id = 'r9'`).Scan(&bal, &funded, &fl)
	if bal != 1000 || funded != 1000 || fl != 10 {
		t.Fatalf("funded pool %d %d %d", bal, funded, fl)
	}
	if _, err := testAdmin(t, m.DB).FundPool(ctx, app, "room", "r9 ", 500, nil); err == nil || !strings.Contains(err.Error(), "ends in a space") {
		t.Fatalf("funding a scope id ending in a space (the pool of r9 to the byte-exact but padding scope_id): %v", err)
	}
	now := time.UnixMilli(1_800_000_000_000)
	if err := luckydraw.RecordOwnership(ctx, m.DB, "a", now); err != nil {
		t.Fatal(err)
	}
	if err := luckydraw.RecordOwnership(ctx, m.DB, "b", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var owner, inst string
	var at int64
	m.DB.QueryRow(`SELECT owner, instance_id, owned_at_ms FROM lucky_pool_owner WHERE id = 1`).Scan(&owner, &inst, &at)
	if owner != "draw_service" || inst != "a" || at != now.UnixMilli() {
		t.Fatalf("owner %s %s %d", owner, inst, at)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (luckydraw.Config{AuditKey: "k"}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := luckydraw.Config{DrawTimeout: -1, SwitchCacheTTL: 2 * time.Second, ActivityPeriodPayout: 5, MaxDeviceDailyPayout: -1}.Validate()
	got := strings.Join(cfgerr.Keys(err), ",")
	if got != "audit_key,draw_timeout,switch_cache_ttl,max_device_daily_payout,activity_period_end_ms" {
		t.Fatalf("keys %s (%v)", got, err)
	}
}

// roomflow_lucky_switch_state shows each global switch as draws see it:
// the start value, then an operator's override within the 1 s cache.
func TestSwitchStateGauge(t *testing.T) {
	e := start(t, luckydraw.Config{DisableLargeTier: true}, 100_000)
	state := func(name string) float64 {
		v, ok := testenv.Metric(e.reg, "roomflow_lucky_switch_state", "app_code", app, "name", name)
		if !ok {
			t.Fatalf("no roomflow_lucky_switch_state{name=%s}", name)
		}
		return v
	}
	if state(luckydraw.SwitchGlobal) != 1 || state(luckydraw.SwitchLargeTier) != 0 || state(luckydraw.SwitchWalletDispatch) != 1 {
		t.Fatal("start values: want global and dispatch on, large tiers off (configured)")
	}
	off := false
	if _, err := testAdmin(t, e.db).SetSwitch(context.Background(), app, luckydraw.SwitchWalletDispatch, "", &off); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "dispatch off in the gauge", func() bool { return state(luckydraw.SwitchWalletDispatch) == 0 })
}
