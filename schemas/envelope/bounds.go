package envelope

import "fmt"

// Amount bounds (docs/design.md, "Amount bounds"): one per quantity that a
// stage adds up into a BIGINT column, shared by the stage that writes the
// record and the sink that sums it. Each is far above any real event and
// far enough below math.MaxInt64 that a column's sums stay inside BIGINT
// for decades at the design's peak rates. A value outside [0, bound] is
// refused where it enters roomflow and again where a sink decodes it
// (ReasonAmountOutOfRange), never summed.
const (
	// MaxGiftCoins bounds the coins of one lucky gift: its coin_spent and
	// heat_value, and so each LuckyPoolInflow amount (never above the heat).
	MaxGiftCoins = 1_000_000
	// MaxPoolFundCoins bounds one `roomflow lucky pools fund`: a million
	// gifts at MaxGiftCoins. The pool columns it adds to take every draw's
	// inflow after it, so an amount near BIGINT's top stopped every draw.
	MaxPoolFundCoins = 1_000_000_000_000
	// MaxMicDayMs bounds a mic ledger daily delta's seat and mic time:
	// sessions are split at UTC midnight, so a day's share is at most a day.
	MaxMicDayMs = 24 * 60 * 60 * 1000
	// MaxMicSessionMs bounds a lifetime delta's seat and mic time: the mic
	// processor caps a session's window at 400 days.
	MaxMicSessionMs = 400 * MaxMicDayMs
	// MaxMicCountDelta bounds a delta's session and room counts: a close
	// counts its session once, and its room at most once a day.
	MaxMicCountDelta = 1
)

// ReasonAmountOutOfRange is the dead-letter reason of a record carrying an
// amount outside its bound (an *AmountError).
const ReasonAmountOutOfRange = "amount_out_of_range"

// AmountError is an amount outside [0, Max]; Field is its name in the
// record or request.
type AmountError struct {
	Field string
	Value int64
	Max   int64
}

func (e *AmountError) Error() string {
	return fmt.Sprintf("%s is %d, outside [0, %d]", e.Field, e.Value, e.Max)
}

// CheckAmount returns an *AmountError when v is outside [0, max].
func CheckAmount(field string, v, max int64) error {
	if v < 0 || v > max {
		return &AmountError{Field: field, Value: v, Max: max}
	}
	return nil
}
