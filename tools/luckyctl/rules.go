package luckyctl

import (
	"errors"
	"fmt"
	"io"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// CheckPublish is `lucky rules publish`'s check before anything connects:
// the rule must validate (luckydraw.CheckNewRule), then its table's analytic
// payout rate is printed against the target, and a rate further than
// bandPPM (lucky.publish_payout_band_ppm; 0 = off) from it, or none at all
// (a fixed tier with gift_price 0), is refused unless force, when it is a
// WARNING. Refusals are usage errors (exit 2) naming the field.
func CheckPublish(w io.Writer, r *lucky.Rule, bandPPM int64, force bool) error {
	if err := luckydraw.CheckNewRule(r); err != nil {
		return cfgerr.Usage(err)
	}
	a, err := r.CheckPayoutBand(bandPPM)
	var be *lucky.PayoutBandError
	if err == nil || errors.As(err, &be) {
		fmt.Fprintf(w, "analytic payout rate: %.0f ppm (target_payout_rate_ppm %d)\n", a, r.TargetPayoutRatePPM)
	}
	switch {
	case err == nil:
		return nil
	case bandPPM == 0: // no rate at all, and no band to hold it to
		fmt.Fprintf(w, "analytic payout rate: none: %v\n", err)
		return nil
	case force:
		fmt.Fprintf(w, "  WARNING: --force: %v\n", err)
		return nil
	}
	return cfgerr.Usage(fmt.Errorf("%w (fix the rule, or publish with --force)", err))
}
