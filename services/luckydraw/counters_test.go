package luckydraw_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hyapp/roomflow/services/luckydraw"
)

// TestRiskCountersOfDraws: with a cap on every scope, each draw counts in
// the sender's and the device's daily, the room's hourly and the anchor's
// daily window (draws, hits, coins paid, the window's exact bounds); a
// gift without a target counts for no anchor. A hit's wallet credit is
// due 2 × wallet_credit_timeout + 1 s after the draw.
func TestRiskCountersOfDraws(t *testing.T) {
	const big = 1_000_000_000
	e := start(t, luckydraw.Config{MaxDeviceDailyPayout: big, MaxAnchorDailyPayout: big, WalletCreditTimeout: 3 * time.Second}, 100_000)
	ctx := context.Background()
	r := rule("caps", big)
	r.MaxRoomHourlyPayout = big
	if _, err := testAdmin(t, e.db).PublishRule(ctx, r); err != nil {
		t.Fatal(err)
	}
	var hits, paid int64
	const draws = 12
	for i := range draws {
		req := drawReq(fmt.Sprint("c", i), 5)
		req.RuleVersion, req.Meta.DeviceId = "caps", "dev-1"
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Tier.RewardCoins > 0 {
			hits++
			paid += resp.Tier.RewardCoins
		}
	}
	if hits == 0 || hits == draws {
		t.Fatalf("%d hits of %d draws: the test needs both", hits, draws)
	}
	const dayMs, hourMs = 86_400_000, 3_600_000
	for _, c := range []struct {
		scope, id, window string
		span              int64
	}{{"user", "5", "daily", dayMs}, {"device", "dev-1", "daily", dayMs}, {"room", "r1", "hourly", hourMs}, {"anchor", "900", "daily", dayMs}} {
		var window string
		var n, h, coins, start, end int64
		if err := e.db.QueryRow(`SELECT window_type, draw_count, hit_count, payout_coins, window_start_ms, window_end_ms FROM lucky_risk_counters
			WHERE scope_type = ? AND scope_id = ?`, c.scope, c.id).Scan(&window, &n, &h, &coins, &start, &end); err != nil {
			t.Fatalf("%s %s counter: %v", c.scope, c.id, err)
		}
		if window != c.window || n != draws || h != hits || coins != paid || end-start != c.span || start%c.span != 0 {
			t.Errorf("%s %s counter: %s, %d draws, %d hits, %d coins, window [%d, %d); want %s, %d, %d, %d, a %d ms window",
				c.scope, c.id, window, n, h, coins, start, end, c.window, draws, hits, paid, c.span)
		}
	}
	// Each hit's wallet credit is due for the outbox worker two credit
	// timeouts and a second after its draw (the synchronous dispatch's
	// claim window).
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE event_type = 'reward_credit' AND next_retry_at_ms - created_at_ms = 7000`); n != hits {
		t.Fatalf("%d of %d reward credits due 7 s after their draw", n, hits)
	}
	req := drawReq("no-target", 6)
	req.RuleVersion, req.Meta.TargetUserId = "caps", 0
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_risk_counters WHERE scope_type = 'anchor' AND scope_id <> '900'`); n != 0 {
		t.Fatalf("%d anchor counters for a gift without a target", n)
	}
}
