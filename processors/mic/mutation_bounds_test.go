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
	if got := mic.SplitDays(ms("1969-12-31T10:00:00Z"), 0, ms("1969-12-31T11:00:00Z")); len(got) != 1 || got[0].SeatOccupiedMs != hour {
		t.Fatalf("a session wholly before the epoch: %+v", got)
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

// TestRoomVersionZeroIsNotStale: an event without a room version (0)
// after versioned ones is applied, not skipped as stale; an older version
// is.
func TestRoomVersionZeroIsNotStale(t *testing.T) {
	st := mic.NewMapState()
	for _, c := range []struct {
		ev   mic.Event
		want mic.Outcome
	}{
		{e("a", "up", t0, roomVersion(10)), mic.OutcomeConsumed},
		{e("b", "change", t0+sec, seat(3)), mic.OutcomeConsumed},
		{e("c", "change", t0+2*sec, roomVersion(9), seat(4)), mic.OutcomeSkipped},
	} {
		if out := mic.Handle(st, &c.ev); out.Outcome != c.want {
			t.Fatalf("event %s (room version %d): %v %s, want %v", c.ev.EventID, c.ev.RoomVersion, out.Outcome, out.SkipReason, c.want)
		}
	}
}

// TestPublishConfirmedSeat: a publish confirmation that names a seat moves
// the session to it; one without a seat (0) leaves the current seat.
func TestPublishConfirmedSeat(t *testing.T) {
	id := mic.SessionID{AppCode: "hy", UserID: 7, MicSessionID: "s1"}
	for _, c := range []struct {
		seat, want int32
	}{{3, 3}, {0, 1}} {
		st := mic.NewMapState()
		up, pub := e("a", "up", t0), e("b", "publish_confirmed", t0+sec, seat(c.seat))
		mic.Handle(st, &up)
		if out := mic.Handle(st, &pub); out.Outcome != mic.OutcomeConsumed {
			t.Fatalf("publish_confirmed: %v %s", out.Outcome, out.SkipReason)
		}
		if s, _ := st.Session(id); s.CurrentSeatNo != c.want || s.FirstSeatNo != 1 {
			t.Errorf("publish_confirmed on seat %d: current seat %d, first %d; want %d, 1", c.seat, s.CurrentSeatNo, s.FirstSeatNo, c.want)
		}
	}
}

// TestDueAtMsIsTheLastNotDueMillisecond: DueAtMs is start + max age for
// each open status (Due is false at it, true 1 ms later) and 0 once closed.
func TestDueAtMsIsTheLastNotDueMillisecond(t *testing.T) {
	p := mic.Policy{PendingPublishMaxAge: 2 * time.Minute, PublishingSessionMaxAge: 12 * time.Hour}
	pending := mic.Session{Status: mic.StatusPendingPublish, SeatStartedAtMs: t0}
	publishing := mic.Session{Status: mic.StatusPublishing, SeatStartedAtMs: t0, PublishingStartedAtMs: t0 + mins}
	for _, c := range []struct {
		s    mic.Session
		want int64
	}{{pending, t0 + 2*mins}, {publishing, t0 + mins + 12*hour}} {
		at := p.DueAtMs(&c.s)
		_, _, dueAt := p.Due(&c.s, at)
		_, _, dueAfter := p.Due(&c.s, at+1)
		if at != c.want || dueAt || !dueAfter {
			t.Errorf("status %v: DueAtMs %d (want %d), due at it %v, 1 ms later %v", c.s.Status, at, c.want, dueAt, dueAfter)
		}
	}
	if at := p.DueAtMs(&mic.Session{Status: mic.StatusEnded, SeatStartedAtMs: t0}); at != 0 {
		t.Errorf("closed session: DueAtMs %d, want 0", at)
	}
}
