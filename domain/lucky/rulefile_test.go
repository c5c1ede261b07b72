package lucky

import (
	"strings"
	"testing"
)

// A rule file decodes into its Rule with the defaults filled (status
// draft, effective now, tiers enabled unless they say not); an unknown
// key and an empty file are errors.
func TestParseRuleFile(t *testing.T) {
	r, err := ParseRuleFile([]byte(`gift_id: lucky-rose
rule_version: v2
pool_rate_ppm: 50000
tiers:
  - {tier_id: none, reward_type: none, probability_ppm: 900000}
  - {tier_id: big_50x, reward_type: multiplier, reward_value: 50, probability_ppm: 100000, large: true, enabled: false}
`), 1234)
	if err != nil {
		t.Fatal(err)
	}
	if r.GiftID != "lucky-rose" || r.RuleVersion != "v2" || r.PoolRatePPM != 50000 || r.Status != "draft" || r.EffectiveAtMs != 1234 || len(r.Tiers) != 2 {
		t.Fatalf("rule %+v", r)
	}
	if !r.Tiers[0].Enabled || r.Tiers[1].Enabled || !r.Tiers[1].Large || r.Tiers[1].RewardValue != 50 {
		t.Fatalf("tiers %+v", r.Tiers)
	}
	if _, err := ParseRuleFile([]byte("gift_id: x\nprice: 1\n"), 0); err == nil || !strings.Contains(err.Error(), "price") {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := ParseRuleFile(nil, 0); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
}
