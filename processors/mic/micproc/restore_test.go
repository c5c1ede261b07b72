package micproc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/mic"
)

// TestPrunedStateStaysPrunedAfterRestart: the closed-session tombstones and
// day-room sets the timer drops once they fall out of
// mic.closed_session_retention and mic.day_room_retention stay dropped
// after a restart restores the changelog. Were the deletes lost on the way
// (a changelog without their tombstones), the restored state would have
// its old keys back and a late down of a pruned session would be skipped
// as session_already_closed instead of unknown_session.
func TestPrunedStateStaysPrunedAfterRestart(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, 1, now)
	e.cfg.Settings.CompensationInterval = 10 * time.Second
	e.cfg.Settings.ClosedSessionRetention = 30 * time.Minute
	e.cfg.Settings.DayRoomRetention = 24 * time.Hour // the minimum: day 27 is out of it on the 29th
	c := now.UnixMilli()
	twoDaysAgo := c - 48*hour

	// Users 1-3 closed sessions two days ago (out of both retentions once
	// the watermark is today); user 9 closed one a minute ago (kept).
	var evs []mic.Event
	old := map[int64]*sess{}
	for u := int64(1); u <= 3; u++ {
		old[u] = &sess{u: u, room: "r", id: fmt.Sprintf("ms-%d", u)}
		evs = append(evs, old[u].ev("up", twoDaysAgo), old[u].ev("down", twoDaysAgo+mins, withReason("leave")))
	}
	recent := &sess{u: 9, room: "r", id: "ms-9"}
	evs = append(evs, recent.ev("up", c-2*mins), recent.ev("down", c-mins, withReason("leave")))
	e.produce(evs)
	r := e.start()
	e.collect(8, 30*time.Second)
	stateKeys := func() float64 {
		return metricSum(t, e, "roomflow_process_state_keys", map[string]string{"processor": "mic"})
	}
	// 4 tombstones, 4 user-day room sets, the watermark.
	testenv.Eventually(t, 10*time.Second, "9 state keys", func() bool { return stateKeys() == 9 })

	e.clock.Advance(10 * time.Second)
	waitPunctuations(t, e, 1)
	if n := metricSum(t, e, "roomflow_mic_state_pruned_total", map[string]string{"kind": "closed_session"}); n != 3 {
		t.Fatalf("pruned tombstones %v, want 3", n)
	}
	if n := metricSum(t, e, "roomflow_mic_state_pruned_total", map[string]string{"kind": "day_rooms"}); n != 3 {
		t.Fatalf("pruned day-room sets %v, want 3", n)
	}
	testenv.Eventually(t, 10*time.Second, "3 state keys after pruning", func() bool { return stateKeys() == 3 })
	r.stop(t)

	r = e.start()
	r.waitAssigned(t, 1)
	if n := stateKeys(); n != 3 {
		t.Fatalf("%v state keys restored, want the 3 left after pruning", n)
	}
	e.produce([]mic.Event{old[1].ev("down", c, withReason("leave")), recent.ev("down", c, withReason("leave"))})
	o := e.collect(10, 30*time.Second)
	if l := o.ledger[8]; l.UserId != 1 || l.SkipReason != mic.SkipUnknownSession {
		t.Fatalf("late down of a pruned session after the restart: %v, want %s", l, mic.SkipUnknownSession)
	}
	if l := o.ledger[9]; l.UserId != 9 || l.SkipReason != mic.SkipAlreadyClosed {
		t.Fatalf("late down of a kept session after the restart: %v, want %s", l, mic.SkipAlreadyClosed)
	}
	r.stop(t)
}
