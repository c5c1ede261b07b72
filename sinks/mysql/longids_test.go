package mysqlsink_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// TestLongestMicSessionIDs: mic_session_id is VARCHAR(128) (MIC-4).
// Sessions with 128-byte ids go through the mic processor's domain (its
// state encoding included) and the sink into MySQL: one closed by its down,
// one by the timer, whose ledger event id "MicSessionCompensated:{id}" is
// 150 bytes (migration 0008 widened the columns that store it). Every row
// equals the oracle, the 150-byte id is stored whole, and nothing is
// dead-lettered.
func TestLongestMicSessionIDs(t *testing.T) {
	e := newEnv(t, 1)
	st := mic.NewMapState()
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixMilli()
	down, timer := strings.Repeat("d", mic.MaxMicSessionIDLen), strings.Repeat("t", mic.MaxMicSessionIDLen)
	evs := []mic.Event{
		{EventID: "e1", AppCode: "hyapp", RoomID: "r", RoomVersion: 1, OccurredAtMs: t0, UserID: 7, SeatNo: 1, Action: "up", MicSessionID: down},
		{EventID: "e2", AppCode: "hyapp", RoomID: "r", RoomVersion: 2, OccurredAtMs: t0 + 1000, UserID: 7, SeatNo: 1, Action: "publish_confirmed", MicSessionID: down, PublishEventTimeMs: t0 + 1000},
		{EventID: "e3", AppCode: "hyapp", RoomID: "r", RoomVersion: 3, OccurredAtMs: t0 + 60000, UserID: 7, SeatNo: 1, Action: "down", MicSessionID: down, Reason: "leave"},
		{EventID: "e4", AppCode: "hyapp", RoomID: "r", RoomVersion: 4, OccurredAtMs: t0, UserID: 8, SeatNo: 2, Action: "up", MicSessionID: timer},
	}
	var ledger []*userv1.MicLedgerEntry
	for i := range evs {
		ev, err := mic.Decode(evs[i].Encode(), "")
		if err != nil {
			t.Fatalf("event %s: %v", evs[i].EventID, err)
		}
		out := mic.Handle(st, &ev)
		if out.Outcome != mic.OutcomeConsumed {
			t.Fatalf("event %s: outcome %v (%s)", ev.EventID, out.Outcome, out.SkipReason)
		}
		ledger = append(ledger, out.Ledger)
	}
	pol := mic.Policy{PendingPublishMaxAge: 2 * time.Minute, PublishingSessionMaxAge: time.Hour}
	out, ok := mic.Compensate(st, pol, mic.SessionID{AppCode: "hyapp", UserID: 8, MicSessionID: timer}, t0+time.Hour.Milliseconds())
	if !ok {
		t.Fatal("the timer did not close the pending session")
	}
	compID := mic.CompensatedEventID(timer)
	if len(compID) != 150 || out.Ledger.EventId != compID || out.Closed.ClosedEventId != compID {
		t.Fatalf("timer close id %q (%d bytes)", out.Ledger.EventId, len(out.Ledger.EventId))
	}
	ledger = append(ledger, out.Ledger)

	o := e.produce(t, ledger, nil)
	e.applyAll(t, o)
	if n := len(e.k.DrainCommitted(t, e.cfg.DLQTopic)); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
	if n := count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption WHERE event_id = ? AND mic_session_id = ?", compID, timer); n != 1 {
		t.Fatalf("%d consumption rows of the 150-byte timer close id, want 1", n)
	}
	if n := count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_sessions WHERE mic_session_id = ? AND closed_event_id = ? AND last_event_id = ? AND status = 'ended'", timer, compID, compID); n != 1 {
		t.Fatalf("%d ended sessions with the 150-byte closed and last event id, want 1", n)
	}
	if n := count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_sessions WHERE mic_session_id = ? AND closed_event_id = 'e3' AND mic_online_ms = 59000", down); n != 1 {
		t.Fatalf("%d sessions closed by their down, want 1", n)
	}
}
