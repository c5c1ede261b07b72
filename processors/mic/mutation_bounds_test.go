package mic_test

import (
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
)

// Boundary tests found by mutation testing (issue 21, docs/reliability.md
// "Mutation testing"): each fails when the boundary it pins moves by one.

// TestDayOfBeforeEpoch: days before 1970 round down, not toward zero; a
// midnight is the first millisecond of its day on either side of the epoch.
func TestDayOfBeforeEpoch(t *testing.T) {
	for _, c := range []struct{ ms, day int64 }{
		{0, 0}, {mic.DayMs - 1, 0}, {mic.DayMs, 1},
		{-1, -1}, {-mic.DayMs, -1}, {-mic.DayMs - 1, -2},
	} {
		if got := mic.DayOf(c.ms); got != c.day {
			t.Errorf("DayOf(%d) = %d, want %d", c.ms, got, c.day)
		}
	}
	got := mic.SplitDays(ms("1969-12-31T23:30:00Z"), 0, ms("1970-01-01T00:30:00Z"))
	if len(got) != 2 || got[0].Date != "1969-12-31" || got[0].SeatOccupiedMs != 30*mins ||
		got[1].Date != "1970-01-01" || got[1].SeatOccupiedMs != 30*mins {
		t.Fatalf("a session across the epoch's midnight: %+v", got)
	}
}

// TestTooOldAtExactlyRetention: an up exactly mic.closed_session_retention
// behind the watermark may still open its session; 1 ms older it is
// refused. Other actions and incomplete events are never too old (Handle
// skips them for their own reasons).
func TestTooOldAtExactlyRetention(t *testing.T) {
	r := mic.Retention{ClosedSession: time.Hour}
	wm := t0 + 5*hour
	for _, c := range []struct {
		name string
		ev   mic.Event
		old  bool
	}{
		{"up exactly at the retention", e("a", "up", wm-hour), false},
		{"up 1 ms older", e("a", "up", wm-hour-1), true},
		{"up at the watermark", e("a", "up", wm), false},
		{"down 1 ms older", e("a", "down", wm-hour-1), false},
		{"up without a user", e("a", "up", wm-hour-1, user(0)), false},
		{"up without a session", e("a", "up", wm-hour-1, session("")), false},
	} {
		if got := r.TooOld(&c.ev, wm); got != c.old {
			t.Errorf("%s: TooOld = %v, want %v", c.name, got, c.old)
		}
	}
}
