package lucky

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// The analytic rate: a multiplier tier adds probability × value, a fixed
// one probability × value ÷ gift_price (gift_count 1), none nothing; a
// disabled tier counts (the table before filters).
func TestAnalyticPayoutPPM(t *testing.T) {
	r := Rule{GiftID: "g", RuleVersion: "v1", GiftPrice: 200, Tiers: []Tier{
		{TierID: "none", RewardType: "none", ProbabilityPPM: 850_000},
		{TierID: "x2", RewardType: "multiplier", RewardValue: 2, ProbabilityPPM: 100_000},
		{TierID: "f500", RewardType: "fixed", RewardValue: 500, ProbabilityPPM: 40_000},
		{TierID: "x10", RewardType: "multiplier", RewardValue: 10, ProbabilityPPM: 10_000},
	}}
	got, err := r.AnalyticPayoutPPM()
	if want := 200_000.0 + 40_000*2.5 + 100_000; err != nil || math.Abs(got-want) > 1e-6 {
		t.Fatalf("analytic = %v, %v; want %v", got, err, want)
	}
	r.GiftPrice = 0
	var re *RuleError
	if _, err := r.AnalyticPayoutPPM(); !errors.As(err, &re) || re.Field != "gift_price" || !strings.Contains(err.Error(), "f500") {
		t.Fatalf("fixed tier at gift_price 0: %v", err)
	}
	r.Tiers[2].RewardValue = 0 // a fixed tier paying 0 has a rate at any price
	if got, err := r.AnalyticPayoutPPM(); err != nil || got != 300_000 {
		t.Fatalf("fixed 0 at gift_price 0: %v %v", got, err)
	}
}

// The band: within it (edges included) passes, beyond it fails naming the
// key and both rates, 0 switches the check off.
func TestCheckPayoutBand(t *testing.T) {
	r := Rule{GiftID: "g", RuleVersion: "v1", TargetPayoutRatePPM: 900_000, Tiers: []Tier{
		{TierID: "none", RewardType: "none", ProbabilityPPM: 900_000},
		{TierID: "x8", RewardType: "multiplier", RewardValue: 8, ProbabilityPPM: 100_000},
	}}
	if a, err := r.CheckPayoutBand(100_000); err != nil || a != 800_000 {
		t.Fatalf("at the band's edge: %v %v", a, err)
	}
	var be *PayoutBandError
	if _, err := r.CheckPayoutBand(99_999); !errors.As(err, &be) || !strings.Contains(err.Error(), "lucky.publish_payout_band_ppm") ||
		!strings.Contains(err.Error(), "800000") || !strings.Contains(err.Error(), "900000") {
		t.Fatalf("beyond the band: %v", err)
	}
	if _, err := r.CheckPayoutBand(0); err != nil {
		t.Fatalf("band 0 (off): %v", err)
	}
}
