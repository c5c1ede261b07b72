package mic

import (
	"time"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// DayMs is one UTC day in milliseconds: no daily delta exceeds it, the
// ledger's bound envelope.MaxMicDayMs.
const DayMs = int64(envelope.MaxMicDayMs)

// MaxSessionSpanMs caps the window a single session may account for (400
// days): the ledger's bound of a lifetime delta, envelope.MaxMicSessionMs,
// which the sink refuses past. Real sessions are closed by the timers after
// mic.publishing_session_max_age; the cap only bounds the work, the output
// size and the sums a corrupt timestamp could cause.
const MaxSessionSpanMs = int64(envelope.MaxMicSessionMs)

// DayOf returns the UTC day number (days since 1970-01-01) of t.
func DayOf(tMs int64) int64 {
	d := tMs / DayMs
	if tMs%DayMs < 0 {
		d--
	}
	return d
}

// DayDate formats a day number as YYYY-MM-DD (UTC).
func DayDate(day int64) string {
	return time.UnixMilli(day * DayMs).UTC().Format(time.DateOnly)
}

// DaySlice is one UTC day's share of a closed session.
type DaySlice struct {
	Day            int64  // days since the epoch
	Date           string // YYYY-MM-DD
	SeatOccupiedMs int64
	MicOnlineMs    int64
	FirstMicAtMs   int64 // max(seat start, day start)
	LastMicAtMs    int64 // min(end, day end - 1ms), never before FirstMicAtMs
}

// SplitDays splits the closed session [seatStart, end) over UTC days:
// seat time over [seatStart, end), mic online time over [publishStart, end)
// when publishStart > 0. Every day with seat time gets a slice, in order; a
// session of zero seat time gets one slice on its start day, so it still
// counts once. end before seatStart counts as seatStart, publishStart is
// clamped into [seatStart, end], and the span is capped at MaxSessionSpanMs.
// The slices' seat and online times sum to end-seatStart and end-publishStart.
func SplitDays(seatStart, publishStart, end int64) []DaySlice {
	end, publishStart = clampWindow(seatStart, publishStart, end)
	first, last := DayOf(seatStart), first0(seatStart, end)
	out := make([]DaySlice, 0, last-first+1)
	for d := first; d <= last; d++ {
		ds, de := d*DayMs, (d+1)*DayMs
		sl := DaySlice{Day: d, Date: DayDate(d)}
		sl.SeatOccupiedMs = overlap(seatStart, end, ds, de)
		if publishStart > 0 {
			sl.MicOnlineMs = overlap(publishStart, end, ds, de)
		}
		sl.FirstMicAtMs = max(seatStart, ds)
		sl.LastMicAtMs = max(min(end, de-1), sl.FirstMicAtMs)
		out = append(out, sl)
	}
	return out
}

// first0 is the last day with seat time (the start day for an empty window).
func first0(seatStart, end int64) int64 {
	if end <= seatStart {
		return DayOf(seatStart)
	}
	return DayOf(end - 1)
}

// clampWindow applies the rules of SplitDays to the end and publish start.
func clampWindow(seatStart, publishStart, end int64) (int64, int64) {
	if end < seatStart {
		end = seatStart
	}
	if end-seatStart > MaxSessionSpanMs {
		end = seatStart + MaxSessionSpanMs
	}
	if publishStart > 0 {
		publishStart = min(max(publishStart, seatStart), end)
	}
	return end, publishStart
}

func overlap(a0, a1, b0, b1 int64) int64 {
	lo, hi := max(a0, b0), min(a1, b1)
	if hi <= lo {
		return 0
	}
	return hi - lo
}
