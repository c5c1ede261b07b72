package luckydraw_test

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// publishV2 publishes rule v2 of rose with edit applied: the deciding
// version from then on.
func publishV2(t *testing.T, e *env, edit func(*lucky.Rule)) {
	t.Helper()
	r := rule("v2", 0)
	edit(&r)
	if _, err := testAdmin(t, e.db).PublishRule(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// drawnRecord is what the caps tests read of a draw's audit material.
type drawnRecord struct {
	reward     int64
	candidates []luckydraw.Candidate
	risk       luckydraw.RiskSnapshot
	pools      luckydraw.PoolSnapshot
}

// draws makes n draws of rule v2 (users 1..n, so no user cap binds) and
// returns their records in order.
func draws(t *testing.T, e *env, n int) []drawnRecord {
	t.Helper()
	var out []drawnRecord
	for i := range n {
		req := drawReq(fmt.Sprintf("cap-%d", i), int64(i+1))
		req.RuleVersion = "v2"
		resp, err := e.client.ExecuteLuckyGiftDraw(context.Background(), req)
		if err != nil || resp.RejectReason != "" {
			t.Fatalf("draw %d: %v %v", i, resp, err)
		}
		var d drawnRecord
		var cand, risk, pools []byte
		if err := e.db.QueryRow(`SELECT reward_coins, candidate_tiers_json, risk_snapshot_json, pool_snapshot_json FROM lucky_draw_records WHERE draw_id = ?`,
			resp.DrawId).Scan(&d.reward, &cand, &risk, &pools); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(cand, &d.candidates); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(risk, &d.risk); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(pools, &d.pools); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func candidate(t *testing.T, d drawnRecord, tier string) luckydraw.Candidate {
	t.Helper()
	for _, c := range d.candidates {
		if c.TierID == tier {
			return c
		}
	}
	t.Fatalf("no candidate %s in %+v", tier, d.candidates)
	return luckydraw.Candidate{}
}

// max_single_payout removes every tier that would pay more than it, in
// every draw: its probability goes to the none tier, and the risk
// snapshot records the cap.
func TestMaxSinglePayoutRemovesTier(t *testing.T) {
	e := start(t, luckydraw.Config{}, 10_000_000)
	publishV2(t, e, func(r *lucky.Rule) { r.MaxSinglePayout = 500 }) // x10 pays 1,000 for 100 coins
	for i, d := range draws(t, e, 30) {
		x10, none := candidate(t, d, "x10"), candidate(t, d, "none")
		if x10.Disabled != luckydraw.DisabledRisk || x10.ProbabilityPPM != 0 || none.ProbabilityPPM != 500_000 {
			t.Fatalf("draw %d: x10 %+v, none %+v: want x10 removed by the cap, its 100,000 ppm on none", i, x10, none)
		}
		if x1 := candidate(t, d, "x1"); x1.Disabled != "" || d.reward > 500 {
			t.Fatalf("draw %d: x1 %+v, reward %d", i, x1, d.reward)
		}
		if d.risk.RiskCapacity != 500 || !capOf(d.risk, "single", 500) {
			t.Fatalf("draw %d: risk snapshot %+v, want the single cap of 500", i, d.risk)
		}
	}
}

// max_room_hourly_payout caps what the room pays in the hour: once what is
// left is below a tier's reward, that tier is removed, so the room never
// pays more than the cap.
func TestMaxRoomHourlyPayoutCapsTheRoom(t *testing.T) {
	e := start(t, luckydraw.Config{}, 10_000_000)
	publishV2(t, e, func(r *lucky.Rule) { r.MaxRoomHourlyPayout = 250 })
	var paid int64
	capped := 0
	for i, d := range draws(t, e, 60) {
		if room := candidate(t, d, "x1"); paid+100 > 250 {
			if room.Disabled != luckydraw.DisabledRisk {
				t.Fatalf("draw %d: the room paid %d of 250, x1 (100) still drawable: %+v", i, paid, room)
			}
			capped++
		} else if room.Disabled != "" {
			t.Fatalf("draw %d: x1 removed although the room paid only %d of 250", i, paid)
		}
		if x10 := candidate(t, d, "x10"); x10.Disabled != luckydraw.DisabledRisk {
			t.Fatalf("draw %d: x10 (1,000) above the hourly cap not removed: %+v", i, x10)
		}
		if !capOf(d.risk, "room", 250) {
			t.Fatalf("draw %d: risk snapshot %+v without the room's hourly cap", i, d.risk)
		}
		paid += d.reward
	}
	if paid > 250 || capped == 0 {
		t.Fatalf("the room paid %d (cap 250), %d draws after the cap bound: want the cap reached", paid, capped)
	}
}

func capOf(r luckydraw.RiskSnapshot, scope string, limit int64) bool {
	for _, l := range r.Limits {
		if l.Scope == scope && l.Cap == limit {
			return true
		}
	}
	return false
}

// pool_snapshot_json is the three pools as the draw found them: each
// layer's balance and floor before the draw, the inflow it added and the
// capacity it computed from them.
func TestPoolSnapshotContents(t *testing.T) {
	const fund = 1_000_000
	e := start(t, luckydraw.Config{}, fund)
	publishV2(t, e, func(*lucky.Rule) {})
	d := draws(t, e, 1)[0]
	p := d.pools
	if p.InflowAppliedBy != "draw" || len(p.Layers) != 3 {
		t.Fatalf("snapshot %+v", p)
	}
	// heat 100 at pool_rate 50%: 50 in, 20% platform, 30% room, the rest gift.
	want := []struct {
		scope, id string
		in        int64
	}{{"platform", "global", 10}, {"room", "r1", 15}, {"gift", "rose", 25}}
	for i, w := range want {
		l := p.Layers[i]
		if l.ScopeType != w.scope || l.ScopeID != w.id || l.Balance != fund || l.ReserveFloor != 100 || l.LayerIn != w.in ||
			l.Capacity != fund+w.in-100 {
			t.Fatalf("layer %d: %+v, want %s/%s balance %d floor 100 in %d capacity %d", i, l, w.scope, w.id, fund, w.in, fund+w.in-100)
		}
	}
	if p.CurrentPoolBalance <= 0 || p.AvailablePayout <= 0 {
		t.Fatalf("snapshot totals %+v", p)
	}
}

// unreachable is SQLHooks that fail every new connection and statement
// (driver.ErrBadConn) while down is set: MySQL out of reach.
func unreachable(down *atomic.Bool) testenv.SQLHooks {
	fail := func() error {
		if down.Load() {
			return driver.ErrBadConn
		}
		return nil
	}
	return testenv.SQLHooks{Connect: fail, Statement: func(context.Context, string) error { return fail() }}
}

// CheckLuckyGift with MySQL down answers Unavailable (retryable), never
// enabled: room-service must not debit a lucky gift nobody can draw.
func TestCheckWithMySQLDown(t *testing.T) {
	var down atomic.Bool
	e := startHooked(t, luckydraw.Config{}, 100_000, unreachable(&down))
	down.Store(true)
	for i := range 3 {
		r, err := e.client.CheckLuckyGift(context.Background(), &activityv1.CheckLuckyGiftRequest{
			Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "rose"})
		if status.Code(err) != codes.Unavailable || r.GetEnabled() {
			t.Fatalf("check %d with MySQL down: %v %v, want Unavailable", i, r, err)
		}
	}
	down.Store(false)
	r, err := e.client.CheckLuckyGift(context.Background(), &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "rose"})
	if err != nil || !r.Enabled {
		t.Fatalf("check after MySQL is back: %v %v", r, err)
	}
}

// TestDrawWithoutDeviceHasNoDeviceCapacity: under
// lucky.max_device_daily_payout a draw without a device_id has nothing
// left on the device cap (an unknown device's remaining is 0, LUCKY-11):
// it draws, every paying tier leaves the table with LuckyRiskRejected
// scope device, and no counter row stands for the missing device. Before,
// such a draw had no device window at all: the audit's 30 draws won 5,300
// coins under a cap of 150. A draw without a target (anchor) is not
// capped so: a gift to the room is legitimate.
func TestDrawWithoutDeviceHasNoDeviceCapacity(t *testing.T) {
	e := start(t, luckydraw.Config{MaxDeviceDailyPayout: 150, MaxAnchorDailyPayout: 1_000_000}, 100_000)
	ctx := context.Background()
	var won int64
	for i := range 30 {
		req := drawReq(fmt.Sprint("nodev-", i), int64(1000+i))
		req.Meta.DeviceId = ""
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil || resp.RejectReason != "" {
			t.Fatalf("draw %d: %v %v, want a draw", i, resp, err)
		}
		won += resp.Tier.GetRewardCoins()
		var cand, risk []byte
		if err := e.db.QueryRow(`SELECT candidate_tiers_json, risk_snapshot_json FROM lucky_draw_records WHERE draw_id = ?`, resp.DrawId).Scan(&cand, &risk); err != nil {
			t.Fatal(err)
		}
		d := drawnRecord{}
		if json.Unmarshal(cand, &d.candidates) != nil || json.Unmarshal(risk, &d.risk) != nil {
			t.Fatalf("draw %d: audit material %s %s", i, cand, risk)
		}
		for _, tier := range []string{"x1", "x10"} {
			if c := candidate(t, d, tier); c.Disabled != luckydraw.DisabledRisk {
				t.Fatalf("draw %d: %s %+v, want removed by the device cap", i, tier, c)
			}
		}
		if d.risk.RiskCapacity != 0 || !capOf(d.risk, "device", 150) || !slices.Contains(d.risk.Rejected, "device") {
			t.Fatalf("draw %d: risk snapshot %+v, want the device cap with nothing left", i, d.risk)
		}
		id := "LuckyRiskRejected:" + resp.DrawId + ":device"
		if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE event_id = ?`, id); n != 1 {
			t.Fatalf("draw %d: %d %s events, want 1", i, n, id)
		}
	}
	if won != 0 {
		t.Fatalf("30 draws without a device_id won %d under max_device_daily_payout=150, want 0", won)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_risk_counters WHERE scope_type = 'device'`); n != 0 {
		t.Fatalf("%d device counter rows for draws without a device", n)
	}
	// A known device, and a gift to the room (target 0), draw as before.
	req := drawReq("dev-known", 2000)
	req.Meta.TargetUserId = 0
	for i := 0; ; i++ {
		req.Meta.CommandId = fmt.Sprint("dev-known-", i)
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Hit {
			break
		}
		if i == 50 {
			t.Fatal("a known device with no target never hit in 50 draws (x1 has 500,000 ppm)")
		}
	}
	e.checkInvariants(t)
}
