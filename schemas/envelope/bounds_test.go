package envelope_test

import (
	"errors"
	"math"
	"testing"

	"github.com/hyapp/roomflow/schemas/envelope"
)

func TestCheckAmount(t *testing.T) {
	for _, tc := range []struct {
		v, max int64
		msg    string // "" = within the bound
	}{
		{0, envelope.MaxGiftCoins, ""},
		{envelope.MaxGiftCoins, envelope.MaxGiftCoins, ""},
		{envelope.MaxGiftCoins + 1, envelope.MaxGiftCoins, "heat_value is 1000001, outside [0, 1000000]"},
		{-1, envelope.MaxGiftCoins, "heat_value is -1, outside [0, 1000000]"},
		{math.MaxInt64, envelope.MaxMicDayMs, "heat_value is 9223372036854775807, outside [0, 86400000]"},
		{math.MinInt64, envelope.MaxMicCountDelta, "heat_value is -9223372036854775808, outside [0, 1]"},
	} {
		err := envelope.CheckAmount("heat_value", tc.v, tc.max)
		var ae *envelope.AmountError
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%d of %d: %v", tc.v, tc.max, err)
		case tc.msg != "" && (!errors.As(err, &ae) || err.Error() != tc.msg || ae.Value != tc.v || ae.Max != tc.max || ae.Field != "heat_value"):
			t.Errorf("%d of %d: %v, want %q", tc.v, tc.max, err, tc.msg)
		}
	}
}

// TestAmountBoundsHeadroom pins the arithmetic docs/design.md gives for
// each bound ("Amount bounds"): raising one past it fails here.
func TestAmountBoundsHeadroom(t *testing.T) {
	const (
		peakPerSecond  = 20_000 // the pipeline's design target, events a second
		secondsPerYear = 31_557_600
		secondsPerDay  = 86_400
	)
	// lucky_pools' platform row sums every lucky gift: if every event at
	// the peak were one at the bound, it would still take years to fill.
	if years := math.MaxInt64 / (envelope.MaxGiftCoins * peakPerSecond * secondsPerYear); years < 14 {
		t.Errorf("gift coins: %d years to fill BIGINT at the peak, want at least 14", years)
	}
	// An operator's funds: millions of them at the bound fill no pool.
	if n := math.MaxInt64 / envelope.MaxPoolFundCoins; n < 9_000_000 {
		t.Errorf("pool funds: %d funds at the bound fill BIGINT, want over 9e6", n)
	}
	// A user's daily row: every ledger record of a day at the peak, all
	// for one user and day and each a whole day, stays under 2% of BIGINT.
	if day := int64(envelope.MaxMicDayMs) * peakPerSecond * secondsPerDay; day > math.MaxInt64/50 {
		t.Errorf("mic daily: %d ms a day at the peak, over 2%% of BIGINT", day)
	}
	// A user's lifetime row: sessions at the bound would take more than
	// 2.6e8 of one user.
	if n := math.MaxInt64 / envelope.MaxMicSessionMs; n < 260_000_000 {
		t.Errorf("mic lifetime: %d sessions at the bound fill BIGINT, want over 2.6e8", n)
	}
}
