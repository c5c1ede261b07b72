package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/walletv1"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
)

// naive is the baseline: the same draw done the way LUCKY-7 forbids, one
// draw per transaction with the wallet credit of a paying draw made
// INSIDE the transaction, while the platform, room and gift pool rows and
// the risk counters are locked. Every draw of the app locks the platform
// row, so every draw waits for the previous one's wallet call.
//
// It keeps the service's invariants (idempotency by command_id, pools and
// counters locked in key order, the inflow claim, balance = funded +
// total_in - total_out, the draw record with its candidate table, random
// value and digest) but writes no lucky_outbox rows: the baseline does
// less than the service, so the ratio service/baseline is conservative.
// It is served over gRPC like the service, so both are measured through
// the same client path.
type naive struct {
	activityv1.UnimplementedLuckyGiftServiceServer
	db     *sql.DB
	app    string
	key    []byte
	rules  map[string]*lucky.Rule // by gift_id: the published version
	wallet *wallet.Client
}

func (n *naive) ExecuteLuckyGiftDraw(ctx context.Context, req *activityv1.ExecuteLuckyGiftDrawRequest) (*activityv1.ExecuteLuckyGiftDrawResponse, error) {
	rule := n.rules[req.GetGiftId()]
	if rule == nil || req.GetMeta().GetCommandId() == "" {
		return nil, status.Error(codes.InvalidArgument, "unknown gift or no command_id")
	}
	for attempt := 1; ; attempt++ {
		resp, err := n.draw(ctx, req, rule)
		if err == nil {
			return resp, nil
		}
		if !mysqlerr.Retryable(err) || ctx.Err() != nil {
			// Bounded by the caller's deadline (the client's callTimeout).
			return nil, status.Errorf(codes.Unavailable, "naive draw (attempt %d): %v", attempt, err)
		}
	}
}

type naiveCounter struct {
	key, scope, id, window string
	start, end             int64
}

func (n *naive) counters(m *activityv1.LuckyGiftMeta, nowMs int64) []naiveCounter {
	const hour, day = int64(time.Hour / time.Millisecond), int64(24 * time.Hour / time.Millisecond)
	d, h := nowMs-nowMs%day, nowMs-nowMs%hour
	mk := func(scope, id, window string, start, end int64) naiveCounter {
		return naiveCounter{n.app + "|" + scope + "|" + id + "|" + window + "|" + strconv.FormatInt(start, 10), scope, id, window, start, end}
	}
	cs := []naiveCounter{
		mk("user", strconv.FormatInt(m.GetSenderUserId(), 10), "daily", d, d+day),
		mk("room", m.GetRoomId(), "hourly", h, h+hour),
	}
	if m.GetDeviceId() != "" {
		cs = append(cs, mk("device", m.GetDeviceId(), "daily", d, d+day))
	}
	if m.GetTargetUserId() > 0 {
		cs = append(cs, mk("anchor", strconv.FormatInt(m.GetTargetUserId(), 10), "daily", d, d+day))
	}
	slices.SortFunc(cs, func(a, b naiveCounter) int { return strings.Compare(a.key, b.key) })
	return cs
}

func (n *naive) draw(ctx context.Context, req *activityv1.ExecuteLuckyGiftDrawRequest, rule *lucky.Rule) (*activityv1.ExecuteLuckyGiftDrawResponse, error) {
	m := req.GetMeta()
	drawID := luckydraw.DrawID(n.app, m.GetCommandId())
	nowMs := time.Now().UnixMilli()
	tx, err := n.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op

	// Idempotency: a stored draw is answered as it is.
	var tierID, tierType, rewardStatus, receipt string
	var coins int64
	err = tx.QueryRowContext(ctx, `SELECT selected_tier_id, tier_type, reward_coins, reward_status, credit_receipt_id
FROM lucky_draw_records WHERE app_code = ? AND command_id = ?`, n.app, m.GetCommandId()).Scan(&tierID, &tierType, &coins, &rewardStatus, &receipt)
	switch {
	case err == nil:
		return drawResponse(drawID, rule.RuleVersion, tierID, tierType, coins, rewardStatus, receipt), nil
	case !errors.Is(err, sql.ErrNoRows):
		return nil, err
	}
	// The active version (the content is immutable: the published rule).
	var version string
	if err := tx.QueryRowContext(ctx, `SELECT rule_version FROM lucky_gift_rules WHERE gift_id = ? AND status = 'active'
AND effective_at_ms <= ? ORDER BY effective_at_ms DESC, id DESC LIMIT 1`, req.GetGiftId(), nowMs).Scan(&version); err != nil {
		return nil, fmt.Errorf("active rule of %s: %w", req.GetGiftId(), err)
	}
	if version != rule.RuleVersion {
		return nil, fmt.Errorf("active rule of %s is %s, not %s", req.GetGiftId(), version, rule.RuleVersion)
	}

	// Pools, one statement each, in primary-key order (gift < platform < room).
	layers := [3][2]string{{"platform", "global"}, {"room", m.GetRoomId()}, {"gift", req.GetGiftId()}}
	in := luckydraw.DrawInput{Rule: rule, CoinSpent: req.GetCoinSpent(), HeatValue: req.GetHeatValue(), ApplyInflow: true,
		Risks: []luckydraw.RiskLimit{{Scope: "single", Window: "draw", Cap: rule.MaxSinglePayout}}}
	for _, i := range []int{2, 0, 1} {
		p := &in.Pools[i]
		p.ScopeType, p.ScopeID = layers[i][0], layers[i][1]
		if err := tx.QueryRowContext(ctx, `SELECT balance, reserve_floor FROM lucky_pools WHERE app_code = ? AND scope_type = ?
AND scope_id = ? FOR UPDATE`, n.app, p.ScopeType, p.ScopeID).Scan(&p.Balance, &p.ReserveFloor); err != nil {
			return nil, fmt.Errorf("pool %s/%s: %w", p.ScopeType, p.ScopeID, err)
		}
	}
	// Risk counters in key order, each created if missing, then locked.
	caps := map[string]int64{"user": rule.MaxUserDailyPayout, "room": rule.MaxRoomHourlyPayout}
	cs := n.counters(m, nowMs)
	for _, c := range cs {
		if _, err := tx.ExecContext(ctx, `INSERT IGNORE INTO lucky_risk_counters (counter_key, app_code, scope_type, scope_id,
window_type, window_start_ms, window_end_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			c.key, n.app, c.scope, c.id, c.window, c.start, c.end, nowMs); err != nil {
			return nil, err
		}
		l := luckydraw.RiskLimit{Scope: c.scope, ScopeID: c.id, Window: c.window, Cap: caps[c.scope]}
		if err := tx.QueryRowContext(ctx, `SELECT payout_coins FROM lucky_risk_counters WHERE counter_key = ? FOR UPDATE`, c.key).Scan(&l.Used); err != nil {
			return nil, err
		}
		in.Risks = append(in.Risks, l)
	}
	if _, err := tx.ExecContext(ctx, `INSERT IGNORE INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by, created_at_ms)
VALUES (?, ?, 'draw', ?)`, n.app, drawID, nowMs); err != nil {
		return nil, err
	}

	plan, err := luckydraw.NewPlan(in)
	if err != nil {
		return nil, err
	}
	random := rand.Int64N(lucky.PPM)
	o, err := plan.Draw(rule, random)
	if err != nil {
		return nil, err
	}
	reward := o.Tier.RewardCoins
	rewardID, rewardStatus := "", "none"
	if reward > 0 {
		// The forbidden part: the wallet call while the pool rows are locked.
		rewardID = luckydraw.RewardID(drawID)
		resp, err := n.wallet.Credit(ctx, &walletv1.CreditLuckyRewardRequest{RewardId: rewardID, CommandId: m.GetCommandId(),
			DrawId: drawID, RoomId: m.GetRoomId(), UserId: m.GetSenderUserId(), RewardCoins: reward, Reason: "lucky_gift_reward"})
		if err != nil {
			return nil, err
		}
		rewardStatus, receipt = "granted", resp.GetCreditReceiptId()
	}

	for i, l := range layers {
		if _, err := tx.ExecContext(ctx, `UPDATE lucky_pools SET balance = balance + ?, total_in = total_in + ?,
total_out = total_out + ?, version = version + 1, updated_at_ms = ? WHERE app_code = ? AND scope_type = ? AND scope_id = ?`,
			plan.LayerIn[i]-o.LayerOut[i], plan.LayerIn[i], o.LayerOut[i], nowMs, n.app, l[0], l[1]); err != nil {
			return nil, err
		}
	}
	hit := 0
	if o.Hit() {
		hit = 1
	}
	for _, c := range cs {
		if _, err := tx.ExecContext(ctx, `UPDATE lucky_risk_counters SET payout_coins = payout_coins + ?, draw_count = draw_count + 1,
hit_count = hit_count + ?, updated_at_ms = ? WHERE counter_key = ?`, reward, hit, nowMs, c.key); err != nil {
			return nil, err
		}
	}
	cand, err := json.Marshal(plan.Candidates)
	if err != nil {
		return nil, err
	}
	ps := luckydraw.PoolSnapshot{CurrentPoolBalance: plan.CurrentPoolBalance, AvailablePayout: plan.AvailablePayout, InflowAppliedBy: "draw"}
	for i := range layers {
		ps.Layers = append(ps.Layers, luckydraw.PoolLayerSnapshot{PoolState: in.Pools[i], LayerIn: plan.LayerIn[i], Capacity: plan.Capacity[i]})
	}
	rs := luckydraw.RiskSnapshot{Limits: in.Risks, RiskCapacity: plan.RiskCapacity}
	if rs.RiskCapacity == math.MaxInt64 {
		rs.RiskCapacity = -1
	}
	poolJSON, _ := json.Marshal(ps)
	riskJSON, _ := json.Marshal(rs)
	digest := luckydraw.Digest(n.key, luckydraw.DigestInput{DrawID: drawID, CommandID: m.GetCommandId(), AppCode: n.app,
		GiftID: req.GetGiftId(), RuleVersion: rule.RuleVersion, Candidates: plan.Candidates, RandomValue: random})
	if _, err := tx.ExecContext(ctx, `INSERT INTO lucky_draw_records (draw_id, app_code, command_id, request_id, billing_receipt_id,
room_id, sender_user_id, target_user_id, device_id, gift_id, gift_count, coin_spent, heat_value, rule_version, pool_in, platform_in,
room_in, gift_in, inflow_applied_by, candidate_tiers_json, selected_tier_id, tier_type, reward_coins, platform_out, room_out,
gift_out, random_value, random_digest, pool_snapshot_json, risk_snapshot_json, reward_id, reward_status, credit_receipt_id,
created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'draw', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		drawID, n.app, m.GetCommandId(), m.GetRequestId(), req.GetBillingReceiptId(), m.GetRoomId(), m.GetSenderUserId(),
		m.GetTargetUserId(), m.GetDeviceId(), req.GetGiftId(), req.GetGiftCount(), req.GetCoinSpent(), req.GetHeatValue(),
		rule.RuleVersion, plan.Inflow.PoolIn, plan.Inflow.PlatformIn, plan.Inflow.RoomIn, plan.Inflow.GiftIn, cand, o.Tier.TierID,
		o.Tier.RewardType, reward, o.LayerOut[0], o.LayerOut[1], o.LayerOut[2], random, digest, poolJSON, riskJSON, rewardID,
		rewardStatus, receipt, nowMs, nowMs); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return drawResponse(drawID, rule.RuleVersion, o.Tier.TierID, o.Tier.RewardType, reward, rewardStatus, receipt), nil
}

func drawResponse(drawID, version, tierID, tierType string, coins int64, rewardStatus, receipt string) *activityv1.ExecuteLuckyGiftDrawResponse {
	return &activityv1.ExecuteLuckyGiftDrawResponse{DrawId: drawID, RuleVersion: version, Hit: coins > 0,
		Tier: &activityv1.RewardTierResult{TierId: tierID, RewardCoins: coins, TierType: tierType}, RewardStatus: strings.ToUpper(rewardStatus), CreditReceiptId: receipt}
}
