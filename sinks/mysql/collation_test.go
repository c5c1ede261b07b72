package mysqlsink_test

import (
	"context"
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// micSessions is one up and one down per session id (one user each, from
// user 7 on), through the mic domain without its decoder, so ids it would
// refuse still reach the sink: the ledger entries of both.
func micSessions(t *testing.T, ids ...string) []*userv1.MicLedgerEntry {
	t.Helper()
	st := mic.NewMapState()
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).UnixMilli()
	var out []*userv1.MicLedgerEntry
	for i, id := range ids {
		user := int64(7 + i)
		for j, action := range []string{"up", "down"} {
			ev := mic.Event{EventID: "ev:" + id + ":" + action, AppCode: appCode, RoomID: "r", RoomVersion: int64(j + 1),
				OccurredAtMs: t0 + int64(j)*60_000, UserID: user, SeatNo: 1, Action: action, MicSessionID: id, Reason: "leave"}
			o := mic.Handle(st, &ev)
			if o.Outcome != mic.OutcomeConsumed {
				t.Fatalf("session %q %s: outcome %v (%s)", id, action, o.Outcome, o.SkipReason)
			}
			out = append(out, o.Ledger)
		}
	}
	return out
}

// inflow is a lucky gift's inflow of 100 into room and gift "rose", its
// event id from src, its draw drawID.
func inflow(src, room, drawID string) *activityv1.LuckyPoolInflow {
	return &activityv1.LuckyPoolInflow{EventId: "LuckyPoolInflow:" + src, AppCode: appCode, RoomId: room, GiftId: "rose",
		RuleVersion: "v1", HeatValue: 100, PoolIn: 100, PlatformIn: 20, RoomIn: 30, GiftIn: 50,
		OccurredAtMs: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).UnixMilli(), SourceEventId: src, DrawId: drawID}
}

// TestIDsDifferingOnlyInCase: ids that differ only in letter case are
// different ids, as they are in the sink's dedupe and in the mic
// processor's state (docs/reliability.md finding 12): two sessions are two
// user_mic_sessions rows, their events four consumption rows; two gift
// events are two inflows with two draw claims, into two room pools. Under
// the tables' old case-insensitive collation the second id's insert failed
// with a duplicate key on every retry and the sink never caught up.
func TestIDsDifferingOnlyInCase(t *testing.T) {
	e := newEnv(t, 1)
	ledger := micSessions(t, "mic-a", "MIC-A")
	inflows := []*activityv1.LuckyPoolInflow{inflow("gift-a", "room-a", "LD-aa"), inflow("GIFT-A", "ROOM-A", "ld-AA")}
	o := e.produce(t, ledger, inflows)
	e.applyAll(t, o)
	if n := len(e.k.DrainCommitted(t, e.cfg.DLQTopic)); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
	for q, want := range map[string]int64{
		"SELECT COUNT(*) FROM user_mic_sessions WHERE status = 'ended'":                2,
		"SELECT COUNT(*) FROM user_mic_event_consumption WHERE status = 'consumed'":    4,
		"SELECT COUNT(*) FROM lucky_pool_inflow_consumption WHERE status = 'consumed'": 2,
		"SELECT COUNT(*) FROM lucky_pool_inflow_claims WHERE claimed_by = 'stream'":    2,
		"SELECT COUNT(*) FROM lucky_pools WHERE scope_type = 'room' AND balance = 30":  2,
	} {
		if n := count(t, e.m.DB, q); n != want {
			t.Errorf("%s: %d, want %d", q, n, want)
		}
	}
}

// TestIDsEndingInASpaceAreDeadLettered: the id columns are byte exact but
// for trailing spaces (utf8mb4_bin pads them, migration 0015), so an id
// ending in one would share a key with the id without it. The sink refuses
// such a record as a dead letter (padded_id) and moves on; the others are
// applied exactly once. Before, the padded event id's insert failed with a
// duplicate key on every retry, and the padded session id shared a row.
func TestIDsEndingInASpaceAreDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	good := micSessions(t, "mic-p")
	padded := micSessions(t, "mic-p ")
	// A skipped entry (a consumption row alone) whose event id is padded.
	skip := &userv1.MicLedgerEntry{EventId: "ev-s", EventType: "RoomMicChanged", AppCode: appCode, MicSessionId: "nope",
		UserId: 9, Action: "down", Status: "skipped", SkipReason: "unknown_session", OccurredAtMs: 1}
	paddedSkip := &userv1.MicLedgerEntry{EventId: "ev-s ", EventType: skip.EventType, AppCode: appCode, MicSessionId: "nope",
		UserId: 9, Action: "down", Status: "skipped", SkipReason: "unknown_session", OccurredAtMs: 1}
	goodIn := inflow("gift-p", "room-p", "LD-pp")
	badIns := []*activityv1.LuckyPoolInflow{inflow("gift-p ", "room-q", "LD-qq"), inflow("gift-q", "room-q", "LD-pp "), inflow("gift-r", "room-p ", "LD-rr")}
	o := e.produce(t, append(good, skip), []*activityv1.LuckyPoolInflow{goodIn})
	bad := append(sinktest.LedgerRecords(e.ledgerTopic(), append(padded[:1], paddedSkip)), sinktest.InflowRecords(e.inflowTopic(), badIns)...)
	if err := sinktest.Produce(context.Background(), e.k.Client(t), bad); err != nil {
		t.Fatal(err)
	}
	e.applyAll(t, o)
	got := e.k.DrainCommitted(t, e.cfg.DLQTopic)
	if len(got) != len(bad) {
		t.Fatalf("DLQ holds %d records, want %d", len(got), len(bad))
	}
	for _, r := range got {
		if reason := string(envelope.Header(r, envelope.HeaderErrorReason)); reason != envelope.ReasonPaddedID {
			t.Errorf("dead letter %s: reason %q, want %q", envelope.Header(r, envelope.HeaderEventID), reason, envelope.ReasonPaddedID)
		}
	}
}
