package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hyapp/roomflow/processors/lucky"
)

// ErrRuleImmutable is a PublishRule of an existing version with other
// content: published versions never change (replays and audits rely on
// it); publish a new version instead.
var ErrRuleImmutable = errors.New("luckydraw: rule version already published with other content")

// PublishRule validates r (lucky.Rule.Validate and exactly one none tier,
// errors wrapping ErrRuleInvalid) and inserts the version with its tiers
// in one transaction. Publishing a version that exists with identical
// content (status included) is a no-op; with any other content it is
// ErrRuleImmutable (change the status with SetRuleStatus).
func PublishRule(ctx context.Context, db *sql.DB, r lucky.Rule) error {
	if err := CheckRule(&r); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("luckydraw: publish rule: %w", err)
	}
	defer tx.Rollback()
	existing, err := loadRuleTx(ctx, tx, r.GiftID, r.RuleVersion)
	if err != nil {
		return err
	}
	if existing != nil {
		if sameRule(existing, &r) {
			return nil
		}
		return fmt.Errorf("%w: %s/%s", ErrRuleImmutable, r.GiftID, r.RuleVersion)
	}
	now := time.Now().UnixMilli()
	if _, err := tx.ExecContext(ctx, `INSERT INTO lucky_gift_rules (gift_id, rule_version, gift_price, pool_rate_ppm,
	target_payout_rate_ppm, platform_weight_ppm, room_weight_ppm, max_single_payout, max_user_daily_payout,
	max_room_hourly_payout, status, effective_at_ms, created_at_ms, updated_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.GiftID, r.RuleVersion, r.GiftPrice, r.PoolRatePPM,
		r.TargetPayoutRatePPM, r.PlatformWeightPPM, r.RoomWeightPPM, r.MaxSinglePayout, r.MaxUserDailyPayout,
		r.MaxRoomHourlyPayout, r.Status, r.EffectiveAtMs, now, now); err != nil {
		return fmt.Errorf("luckydraw: publish rule %s/%s: %w", r.GiftID, r.RuleVersion, err)
	}
	for _, t := range r.Tiers {
		if _, err := tx.ExecContext(ctx, `INSERT INTO lucky_reward_tiers (gift_id, rule_version, tier_id, reward_type,
	reward_value, probability_ppm, min_pool_balance, enabled) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			r.GiftID, r.RuleVersion, t.TierID, t.RewardType, t.RewardValue, t.ProbabilityPPM, t.MinPoolBalance, t.Enabled); err != nil {
			return fmt.Errorf("luckydraw: publish rule %s/%s tier %s: %w", r.GiftID, r.RuleVersion, t.TierID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("luckydraw: publish rule %s/%s: %w", r.GiftID, r.RuleVersion, err)
	}
	return nil
}

// loadRuleTx reads a version with its tiers in tier_id order, nil if
// absent.
func loadRuleTx(ctx context.Context, tx *sql.Tx, gift, version string) (*lucky.Rule, error) {
	r := &lucky.Rule{}
	err := tx.QueryRowContext(ctx, `SELECT gift_id, rule_version, gift_price, pool_rate_ppm, target_payout_rate_ppm,
	platform_weight_ppm, room_weight_ppm, max_single_payout, max_user_daily_payout, max_room_hourly_payout, status,
	effective_at_ms FROM lucky_gift_rules WHERE gift_id = ? AND rule_version = ? FOR UPDATE`, gift, version).Scan(
		&r.GiftID, &r.RuleVersion, &r.GiftPrice, &r.PoolRatePPM, &r.TargetPayoutRatePPM, &r.PlatformWeightPPM,
		&r.RoomWeightPPM, &r.MaxSinglePayout, &r.MaxUserDailyPayout, &r.MaxRoomHourlyPayout, &r.Status, &r.EffectiveAtMs)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("luckydraw: read rule %s/%s: %w", gift, version, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT tier_id, reward_type, reward_value, probability_ppm, min_pool_balance, enabled
FROM lucky_reward_tiers WHERE gift_id = ? AND rule_version = ? ORDER BY tier_id`, gift, version)
	if err != nil {
		return nil, fmt.Errorf("luckydraw: read tiers %s/%s: %w", gift, version, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t lucky.Tier
		if err := rows.Scan(&t.TierID, &t.RewardType, &t.RewardValue, &t.ProbabilityPPM, &t.MinPoolBalance, &t.Enabled); err != nil {
			return nil, fmt.Errorf("luckydraw: read tiers %s/%s: %w", gift, version, err)
		}
		r.Tiers = append(r.Tiers, t)
	}
	return r, rows.Err()
}

// sameRule compares two versions, tiers in tier_id order.
func sameRule(a, b *lucky.Rule) bool {
	sorted := func(r *lucky.Rule) []lucky.Tier {
		ts := slices.Clone(r.Tiers)
		slices.SortFunc(ts, func(x, y lucky.Tier) int {
			if x.TierID < y.TierID {
				return -1
			}
			if x.TierID > y.TierID {
				return 1
			}
			return 0
		})
		return ts
	}
	ac, bc := *a, *b
	ac.Tiers, bc.Tiers = nil, nil
	return ac.GiftID == bc.GiftID && ac.RuleVersion == bc.RuleVersion && ac.GiftPrice == bc.GiftPrice &&
		ac.PoolRatePPM == bc.PoolRatePPM && ac.TargetPayoutRatePPM == bc.TargetPayoutRatePPM &&
		ac.PlatformWeightPPM == bc.PlatformWeightPPM && ac.RoomWeightPPM == bc.RoomWeightPPM &&
		ac.MaxSinglePayout == bc.MaxSinglePayout && ac.MaxUserDailyPayout == bc.MaxUserDailyPayout &&
		ac.MaxRoomHourlyPayout == bc.MaxRoomHourlyPayout && ac.Status == bc.Status && ac.EffectiveAtMs == bc.EffectiveAtMs &&
		slices.Equal(sorted(a), sorted(b))
}

// SetRuleStatus changes a published version's status (draft, active,
// paused, retired: the seed's gift_rule.status switch). An unknown
// version is an error wrapping lucky.ErrUnknownRule.
func SetRuleStatus(ctx context.Context, db *sql.DB, giftID, version, status string) error {
	switch status {
	case "draft", "active", "paused", "retired":
	default:
		return fmt.Errorf("luckydraw: status %q is not draft, active, paused or retired", status)
	}
	res, err := db.ExecContext(ctx, `UPDATE lucky_gift_rules SET status = ?, updated_at_ms = ? WHERE gift_id = ? AND rule_version = ?`,
		status, time.Now().UnixMilli(), giftID, version)
	if err != nil {
		return fmt.Errorf("luckydraw: set rule status: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var one int
		if err := db.QueryRowContext(ctx, `SELECT 1 FROM lucky_gift_rules WHERE gift_id = ? AND rule_version = ?`, giftID, version).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: gift %q version %q", lucky.ErrUnknownRule, giftID, version)
		}
	}
	return nil
}

// FundPool adds amount coins to a pool's balance and funded in one
// upsert (creating the row), and sets its reserve_floor when reserveFloor
// is not nil. scopeType is platform (scopeID "global"), room or gift.
func FundPool(ctx context.Context, db *sql.DB, app, scopeType, scopeID string, amount int64, reserveFloor *int64) error {
	switch {
	case scopeType != "platform" && scopeType != "room" && scopeType != "gift":
		return fmt.Errorf("luckydraw: scope type %q is not platform, room or gift", scopeType)
	case scopeID == "" || len(scopeID) > maxRoomID:
		return fmt.Errorf("luckydraw: scope id must be 1-%d bytes", maxRoomID)
	case amount < 0:
		return fmt.Errorf("luckydraw: fund amount %d is negative", amount)
	case reserveFloor != nil && *reserveFloor < 0:
		return fmt.Errorf("luckydraw: reserve floor %d is negative", *reserveFloor)
	}
	q := `INSERT INTO lucky_pools (app_code, scope_type, scope_id, balance, funded, reserve_floor, updated_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance), funded = funded + VALUES(funded),
	updated_at_ms = VALUES(updated_at_ms)`
	floor := int64(0)
	if reserveFloor != nil {
		floor = *reserveFloor
		q += `, reserve_floor = VALUES(reserve_floor)`
	}
	if _, err := db.ExecContext(ctx, q, app, scopeType, scopeID, amount, amount, floor, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("luckydraw: fund pool %s/%s: %w", scopeType, scopeID, err)
	}
	return nil
}
