package lucky

import (
	"errors"
	"fmt"
)

// Rule is one immutable version of a lucky gift's rule (lucky_gift_rules)
// with its reward tiers (lucky_reward_tiers). ppm fields are int64 so
// arithmetic on them never overflows.
type Rule struct {
	GiftID              string
	RuleVersion         string
	GiftPrice           int64
	PoolRatePPM         int64
	TargetPayoutRatePPM int64
	PlatformWeightPPM   int64
	RoomWeightPPM       int64
	MaxSinglePayout     int64
	MaxUserDailyPayout  int64
	MaxRoomHourlyPayout int64
	Status              string
	EffectiveAtMs       int64
	Tiers               []Tier
}

// Tier is one row of a rule version's probability table.
type Tier struct {
	TierID         string
	RewardType     string // none | fixed | multiplier
	RewardValue    int64
	ProbabilityPPM int64
	MinPoolBalance int64
	Enabled        bool
	// Large: switched off while large_tier_enabled is off (the rule file's
	// `large: true`).
	Large bool
}

// RuleError is one reason a rule version is invalid.
type RuleError struct {
	GiftID, RuleVersion string
	Field               string // column, or tiers[tier_id].column
	Msg                 string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("lucky rule %s/%s: %s: %s", e.GiftID, e.RuleVersion, e.Field, e.Msg)
}

// ErrUnknownRule is a (gift_id, rule_version) with no lucky_gift_rules row.
var ErrUnknownRule = errors.New("lucky: unknown rule version")

// ErrInvalidRule is wrapped by the error Validate returns.
var ErrInvalidRule = errors.New("lucky: invalid rule")

var (
	statuses    = map[string]bool{"draft": true, "active": true, "paused": true, "retired": true}
	rewardTypes = map[string]bool{"none": true, "fixed": true, "multiplier": true}
)

// Validate checks a rule version against LUCKY-6 and the design: every
// ppm within [0, 1e6], platform + room weights at most 1e6 (the gift layer
// takes the remainder), non-negative amounts and caps, a known status, and
// a tier table whose probabilities (enabled or not: a disabled tier's
// probability moves to `none` at draw time) sum to exactly 1,000,000 with
// unique tier ids and known reward types. It returns every violation as a
// *RuleError, joined, together with ErrInvalidRule; nil if valid.
func (r *Rule) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &RuleError{GiftID: r.GiftID, RuleVersion: r.RuleVersion, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	ppm := func(field string, v int64) {
		if v < 0 || v > PPM {
			bad(field, "%d is outside [0, 1000000]", v)
		}
	}
	nonNeg := func(field string, v int64) {
		if v < 0 {
			bad(field, "%d is negative", v)
		}
	}
	if r.GiftID == "" {
		bad("gift_id", "empty")
	}
	if r.RuleVersion == "" {
		bad("rule_version", "empty")
	}
	ppm("pool_rate_ppm", r.PoolRatePPM)
	ppm("target_payout_rate_ppm", r.TargetPayoutRatePPM)
	ppm("platform_weight_ppm", r.PlatformWeightPPM)
	ppm("room_weight_ppm", r.RoomWeightPPM)
	if s := r.PlatformWeightPPM + r.RoomWeightPPM; r.PlatformWeightPPM >= 0 && r.RoomWeightPPM >= 0 && s > PPM {
		bad("platform_weight_ppm+room_weight_ppm", "%d exceeds 1000000", s)
	}
	nonNeg("gift_price", r.GiftPrice)
	nonNeg("max_single_payout", r.MaxSinglePayout)
	nonNeg("max_user_daily_payout", r.MaxUserDailyPayout)
	nonNeg("max_room_hourly_payout", r.MaxRoomHourlyPayout)
	if !statuses[r.Status] {
		bad("status", "%q is not draft, active, paused or retired", r.Status)
	}
	if len(r.Tiers) == 0 {
		bad("tiers", "no reward tiers")
	}
	var sum int64
	seen := map[string]bool{}
	for _, t := range r.Tiers {
		f := "tiers[" + t.TierID + "]."
		if t.TierID == "" {
			bad("tiers[].tier_id", "empty")
		}
		if seen[t.TierID] {
			bad(f+"tier_id", "duplicate")
		}
		seen[t.TierID] = true
		if !rewardTypes[t.RewardType] {
			bad(f+"reward_type", "%q is not none, fixed or multiplier", t.RewardType)
		}
		nonNeg(f+"reward_value", t.RewardValue)
		nonNeg(f+"min_pool_balance", t.MinPoolBalance)
		ppm(f+"probability_ppm", t.ProbabilityPPM)
		if t.ProbabilityPPM >= 0 && t.ProbabilityPPM <= PPM {
			sum += t.ProbabilityPPM
		}
	}
	if len(r.Tiers) > 0 && sum != PPM {
		bad("tiers.probability_ppm", "sum is %d, must be exactly 1000000", sum)
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.Join(append([]error{ErrInvalidRule}, errs...)...)
}
