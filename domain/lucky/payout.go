package lucky

import (
	"fmt"
	"math"
)

// AnalyticPayoutPPM is the payout rate of r's table as published, before
// any filter (pool floors, caps, switches, disabled tiers all ignored):
// Σ probability × reward ÷ spend, in ppm of the spend. A multiplier tier
// pays reward_value × spend, so it adds probability × reward_value
// whatever the gift count; a fixed tier pays reward_value whatever the
// spend, so its rate is defined at gift_count 1 (spend = gift_price). A
// rule with a paying fixed tier and gift_price 0 has no rate: a *RuleError
// on gift_price.
func (r *Rule) AnalyticPayoutPPM() (float64, error) {
	var sum float64
	for _, t := range r.Tiers {
		p := float64(t.ProbabilityPPM)
		switch t.RewardType {
		case "multiplier":
			sum += p * float64(t.RewardValue)
		case "fixed":
			if t.RewardValue == 0 {
				continue
			}
			if r.GiftPrice <= 0 {
				return 0, &RuleError{GiftID: r.GiftID, RuleVersion: r.RuleVersion, Field: "gift_price",
					Msg: "is 0 and tier " + t.TierID + " pays a fixed reward: its payout rate (at gift_count 1) is undefined"}
			}
			sum += p * float64(t.RewardValue) / float64(r.GiftPrice)
		}
	}
	return sum, nil
}

// PayoutBandError is a rule whose analytic payout rate lies further from
// its target_payout_rate_ppm than the band allows.
type PayoutBandError struct {
	GiftID, RuleVersion string
	AnalyticPPM         float64
	TargetPPM, BandPPM  int64
}

func (e *PayoutBandError) Error() string {
	return fmt.Sprintf("lucky rule %s/%s: target_payout_rate_ppm: the table pays %.0f ppm, more than %d ppm (lucky.publish_payout_band_ppm) from the target %d",
		e.GiftID, e.RuleVersion, e.AnalyticPPM, e.BandPPM, e.TargetPPM)
}

// CheckPayoutBand refuses r when its analytic payout rate is more than
// bandPPM from target_payout_rate_ppm (band 0: no check). It returns the
// analytic rate (when it has one) and a *PayoutBandError or the
// AnalyticPayoutPPM error.
func (r *Rule) CheckPayoutBand(bandPPM int64) (float64, error) {
	a, err := r.AnalyticPayoutPPM()
	if err != nil || bandPPM == 0 {
		return a, err
	}
	if math.Abs(a-float64(r.TargetPayoutRatePPM)) > float64(bandPPM) {
		return a, &PayoutBandError{GiftID: r.GiftID, RuleVersion: r.RuleVersion, AnalyticPPM: a, TargetPPM: r.TargetPayoutRatePPM, BandPPM: bandPPM}
	}
	return a, nil
}
