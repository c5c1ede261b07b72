package micproc

import (
	"errors"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// The event_type header values of the records the processor writes
// (shared: kgo never modifies header values).
var (
	typeLedgerCompensated = []byte(mic.EventTypeMicSessionCompensated)
	typeClosed            = []byte(mic.EventTypeSessionClosed)
	typeDaily             = []byte(mic.EventTypeDailyStatsUpdated)
	typeLifetime          = []byte(mic.EventTypeLifetimeStatsUpdated)
)

// plain is the framing of the internal ledger records.
var plain envelope.Framing

// framings are the public records' framings: plain, or the Confluent
// framing under the schema ids the wiring looked up (Topics.Frames).
type framings struct{ closed, daily, lifetime, dailyTotals, lifetimeTotals envelope.Framing }

// newFramings errs (key topics.frames) on a public topic Frames has no
// schema id for: never a plain fallback. The totals topics count only
// when the processor writes them.
func newFramings(t Topics, totals bool) (framings, error) {
	var f framings
	var errs [5]error
	f.closed, errs[0] = t.Frames.For(t.SessionClosed, (&userv1.UserMicSessionClosed{}).ProtoReflect().Descriptor())
	f.daily, errs[1] = t.Frames.For(t.DailyStats, (&userv1.UserMicDailyStatsUpdated{}).ProtoReflect().Descriptor())
	f.lifetime, errs[2] = t.Frames.For(t.LifetimeStats, (&userv1.UserMicLifetimeStatsUpdated{}).ProtoReflect().Descriptor())
	if totals {
		f.dailyTotals, errs[3] = t.Frames.For(t.DailyTotals, (&userv1.UserMicDailyTotals{}).ProtoReflect().Descriptor())
		f.lifetimeTotals, errs[4] = t.Frames.For(t.LifetimeTotals, (&userv1.UserMicLifetimeTotals{}).ProtoReflect().Descriptor())
	}
	if err := errors.Join(errs[:]...); err != nil {
		return f, &cfgerr.FieldError{Key: "topics.frames", Msg: err.Error()}
	}
	return f, nil
}
