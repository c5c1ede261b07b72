package lucky

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// ruleFile is the YAML `roomflow lucky rules publish` reads: one rule version
// of one gift with its whole tier table (versions are immutable, so a file
// is a version, never a patch).
//
//	gift_id: lucky-rose
//	rule_version: v2
//	gift_price: 100
//	pool_rate_ppm: 50000
//	platform_weight_ppm: 200000
//	room_weight_ppm: 300000
//	target_payout_rate_ppm: 900000
//	max_single_payout: 100000
//	max_user_daily_payout: 0
//	max_room_hourly_payout: 0
//	status: active
//	effective_at_ms: 0        # 0: now
//	tiers:
//	  - {tier_id: none, reward_type: none, probability_ppm: 900000}
//	  - {tier_id: small_4x, reward_type: multiplier, reward_value: 4, probability_ppm: 90000}
//	  - {tier_id: big_54x, reward_type: multiplier, reward_value: 54, probability_ppm: 10000, large: true}
type ruleFile struct {
	GiftID              string     `yaml:"gift_id"`
	RuleVersion         string     `yaml:"rule_version"`
	GiftPrice           int64      `yaml:"gift_price"`
	PoolRatePPM         int64      `yaml:"pool_rate_ppm"`
	PlatformWeightPPM   int64      `yaml:"platform_weight_ppm"`
	RoomWeightPPM       int64      `yaml:"room_weight_ppm"`
	TargetPayoutRatePPM int64      `yaml:"target_payout_rate_ppm"`
	MaxSinglePayout     int64      `yaml:"max_single_payout"`
	MaxUserDailyPayout  int64      `yaml:"max_user_daily_payout"`
	MaxRoomHourlyPayout int64      `yaml:"max_room_hourly_payout"`
	Status              string     `yaml:"status"`
	EffectiveAtMs       int64      `yaml:"effective_at_ms"`
	Tiers               []tierFile `yaml:"tiers"`
}

type tierFile struct {
	TierID         string `yaml:"tier_id"`
	RewardType     string `yaml:"reward_type"`
	RewardValue    int64  `yaml:"reward_value"`
	ProbabilityPPM int64  `yaml:"probability_ppm"`
	MinPoolBalance int64  `yaml:"min_pool_balance"`
	Enabled        *bool  `yaml:"enabled"` // absent: true
	Large          bool   `yaml:"large"`   // switched off by large_tier_enabled off
}

// ParseRuleFile decodes one rule version strictly (unknown keys are an
// error, as in the config) into a Rule; nowMs fills an absent
// effective_at_ms and status defaults to draft. It does not validate the
// rule (Rule.Validate does, when it is published).
func ParseRuleFile(raw []byte, nowMs int64) (Rule, error) {
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return Rule{}, fmt.Errorf("rule file is empty")
		}
		return Rule{}, fmt.Errorf("rule file: %w", err)
	}
	r := Rule{
		GiftID: f.GiftID, RuleVersion: f.RuleVersion, GiftPrice: f.GiftPrice, PoolRatePPM: f.PoolRatePPM,
		PlatformWeightPPM: f.PlatformWeightPPM, RoomWeightPPM: f.RoomWeightPPM, TargetPayoutRatePPM: f.TargetPayoutRatePPM,
		MaxSinglePayout: f.MaxSinglePayout, MaxUserDailyPayout: f.MaxUserDailyPayout, MaxRoomHourlyPayout: f.MaxRoomHourlyPayout,
		Status: f.Status, EffectiveAtMs: f.EffectiveAtMs,
	}
	if r.Status == "" {
		r.Status = "draft"
	}
	if r.EffectiveAtMs == 0 {
		r.EffectiveAtMs = nowMs
	}
	for _, t := range f.Tiers {
		r.Tiers = append(r.Tiers, Tier{TierID: t.TierID, RewardType: t.RewardType, RewardValue: t.RewardValue,
			ProbabilityPPM: t.ProbabilityPPM, MinPoolBalance: t.MinPoolBalance, Enabled: t.Enabled == nil || *t.Enabled, Large: t.Large})
	}
	return r, nil
}
