package micledger

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

func TestDecode(t *testing.T) {
	ok := func() *userv1.MicLedgerEntry {
		return &userv1.MicLedgerEntry{EventId: "e1", AppCode: "hyapp", EventType: "RoomMicChanged", UserId: 7, MicSessionId: "s1", Action: "down", Status: "consumed",
			Session: &userv1.MicSession{MicSessionId: "s1", Version: 3}, Daily: []*userv1.MicDailyDelta{{StatDate: "2026-03-01"}}}
	}
	for _, tc := range []struct {
		name   string
		mut    func(e *userv1.MicLedgerEntry)
		reason string // "" = valid
	}{
		{"valid", func(*userv1.MicLedgerEntry) {}, ""},
		{"skipped is valid", func(e *userv1.MicLedgerEntry) { e.Status, e.SkipReason = "skipped", "stale_event" }, ""},
		{"no event id", func(e *userv1.MicLedgerEntry) { e.EventId = "" }, "missing_event_id"},
		{"no app code", func(e *userv1.MicLedgerEntry) { e.AppCode = "" }, "missing_app_code"},
		{"bad status", func(e *userv1.MicLedgerEntry) { e.Status = "done" }, "bad_status"},
		{"150-byte timer close id", func(e *userv1.MicLedgerEntry) {
			e.MicSessionId = strings.Repeat("s", 128)
			e.EventId = "MicSessionCompensated:" + e.MicSessionId
			e.Session.MicSessionId, e.Session.ClosedEventId, e.Session.LastEventId = e.MicSessionId, e.EventId, e.EventId
		}, ""},
		{"event id too long", func(e *userv1.MicLedgerEntry) { e.EventId = strings.Repeat("x", 161) }, "too_long"},
		{"mic_session_id too long", func(e *userv1.MicLedgerEntry) { e.MicSessionId = strings.Repeat("s", 129) }, "too_long"},
		{"closed_event_id too long", func(e *userv1.MicLedgerEntry) { e.Session.ClosedEventId = strings.Repeat("x", 161) }, "too_long"},
		{"opened_event_id too long", func(e *userv1.MicLedgerEntry) { e.Session.OpenedEventId = strings.Repeat("x", 129) }, "too_long"},
		{"snapshot without id", func(e *userv1.MicLedgerEntry) { e.Session.MicSessionId = "" }, "bad_session"},
		{"snapshot of another app", func(e *userv1.MicLedgerEntry) { e.Session.AppCode = "other" }, "bad_session"},
		{"room id too long", func(e *userv1.MicLedgerEntry) { e.Session.RoomId = strings.Repeat("r", 65) }, "too_long"},
		{"bad stat date", func(e *userv1.MicLedgerEntry) { e.Daily[0].StatDate = "2026-3-1" }, "bad_stat_date"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ok()
			tc.mut(e)
			b, _ := proto.Marshal(e)
			_, err := Decode(b, "")
			var ie *mysqlsink.InvalidRecordError
			switch {
			case tc.reason == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.reason != "" && (!errors.As(err, &ie) || ie.Reason != tc.reason):
				t.Fatalf("error %v, want reason %s", err, tc.reason)
			}
		})
	}
	if _, err := Decode([]byte{0xff, 0xff}, ""); err == nil {
		t.Fatal("garbage decoded")
	}
	// No app_code is the configured one: the same entry as naming it.
	noApp := ok()
	noApp.AppCode = ""
	b, _ := proto.Marshal(noApp)
	if got, err := Decode(b, "hyapp"); err != nil || !proto.Equal(got, ok()) {
		t.Fatalf("default app_code: %v %v", err, got)
	}
}

func TestBuildFactsAggregates(t *testing.T) {
	snap := func(id string, v int64) *userv1.MicSession {
		return &userv1.MicSession{MicSessionId: id, UserId: 1, Version: v, Status: "v" + string(rune('0'+v))}
	}
	ledger := []*userv1.MicLedgerEntry{
		{EventId: "a", AppCode: "x", UserId: 1, Status: "consumed", OccurredAtMs: 100, Session: snap("s1", 2),
			Daily:    []*userv1.MicDailyDelta{{StatDate: "2026-03-01", SeatOccupiedDeltaMs: 10, MicOnlineDeltaMs: 5, SessionCountDelta: 1, RoomCountDelta: 1, FirstMicAtMs: 50, LastMicAtMs: 60}},
			Lifetime: &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 10, MicOnlineDeltaMs: 5, SessionCountDelta: 1, FirstMicAtMs: 50, LastMicAtMs: 60}},
		// An older snapshot of s1 arrives later: it must not win.
		{EventId: "b", AppCode: "x", UserId: 1, Status: "consumed", OccurredAtMs: 90, Session: snap("s1", 1)},
		// Same day row: summed; first_mic_at 0 ignored; last is MAX.
		{EventId: "c", AppCode: "x", UserId: 1, Status: "consumed", OccurredAtMs: 300, Session: snap("s2", 1),
			Daily: []*userv1.MicDailyDelta{
				{StatDate: "2026-03-01", SeatOccupiedDeltaMs: 7, SessionCountDelta: 1, RoomCountDelta: 0, FirstMicAtMs: 0, LastMicAtMs: 200},
				{StatDate: "2026-03-02", SeatOccupiedDeltaMs: 3, SessionCountDelta: 1, FirstMicAtMs: 40, LastMicAtMs: 45},
			},
			Lifetime: &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 10, SessionCountDelta: 1, FirstMicAtMs: 30, LastMicAtMs: 45}},
		// Skipped entries carry nothing into the facts.
		{EventId: "d", AppCode: "x", UserId: 1, Status: "skipped", SkipReason: "stale_event", Session: snap("s1", 9),
			Lifetime: &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 1000}},
		// Another app: separate rows.
		{EventId: "a", AppCode: "y", UserId: 1, Status: "consumed", OccurredAtMs: 5, Lifetime: &userv1.MicLifetimeDelta{SessionCountDelta: 1}},
	}
	f := BuildFacts(ledger)

	if len(f.Sessions) != 2 || f.Sessions[0].MicSessionId != "s1" || f.Sessions[0].Version != 2 || f.Sessions[1].MicSessionId != "s2" {
		t.Fatalf("sessions = %+v", f.Sessions)
	}
	wantDaily := []DailyRow{
		{DailyKey{"x", 1, "2026-03-01"}, 17, 5, 2, 1, 50, 200, 300},
		{DailyKey{"x", 1, "2026-03-02"}, 3, 0, 1, 0, 40, 45, 300},
	}
	if len(f.Daily) != 2 || f.Daily[0] != wantDaily[0] || f.Daily[1] != wantDaily[1] {
		t.Fatalf("daily = %+v, want %+v", f.Daily, wantDaily)
	}
	wantLife := []LifetimeRow{
		{LifetimeKey{"x", 1}, 20, 5, 2, 30, 60, 300},
		{LifetimeKey{"y", 1}, 0, 0, 1, 0, 0, 5},
	}
	if len(f.Lifetime) != 2 || f.Lifetime[0] != wantLife[0] || f.Lifetime[1] != wantLife[1] {
		t.Fatalf("lifetime = %+v, want %+v", f.Lifetime, wantLife)
	}
}
