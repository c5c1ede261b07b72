package micledger

import (
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/envelope"
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
		{"padded event id", func(e *userv1.MicLedgerEntry) { e.EventId += " " }, "padded_id"},
		{"padded mic_session_id", func(e *userv1.MicLedgerEntry) { e.MicSessionId += " " }, "padded_id"},
		{"padded snapshot id", func(e *userv1.MicLedgerEntry) { e.Session.MicSessionId += " " }, "padded_id"},
		{"closed_event_id too long", func(e *userv1.MicLedgerEntry) { e.Session.ClosedEventId = strings.Repeat("x", 161) }, "too_long"},
		{"opened_event_id too long", func(e *userv1.MicLedgerEntry) { e.Session.OpenedEventId = strings.Repeat("x", 129) }, "too_long"},
		{"snapshot without id", func(e *userv1.MicLedgerEntry) { e.Session.MicSessionId = "" }, "bad_session"},
		{"snapshot of another app", func(e *userv1.MicLedgerEntry) { e.Session.AppCode = "other" }, "bad_session"},
		{"room id too long", func(e *userv1.MicLedgerEntry) { e.Session.RoomId = strings.Repeat("r", 65) }, "too_long"},
		{"bad stat date", func(e *userv1.MicLedgerEntry) { e.Daily[0].StatDate = "2026-3-1" }, "bad_stat_date"},
		{"every delta at its bound", func(e *userv1.MicLedgerEntry) {
			*e.Daily[0] = userv1.MicDailyDelta{StatDate: "2026-03-01", SeatOccupiedDeltaMs: envelope.MaxMicDayMs, MicOnlineDeltaMs: envelope.MaxMicDayMs,
				SessionCountDelta: envelope.MaxMicCountDelta, RoomCountDelta: envelope.MaxMicCountDelta}
			e.Lifetime = &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: envelope.MaxMicSessionMs, MicOnlineDeltaMs: envelope.MaxMicSessionMs,
				SessionCountDelta: envelope.MaxMicCountDelta}
		}, ""},
		{"daily seat over a day", func(e *userv1.MicLedgerEntry) { e.Daily[0].SeatOccupiedDeltaMs = envelope.MaxMicDayMs + 1 }, envelope.ReasonAmountOutOfRange},
		{"daily mic over a day", func(e *userv1.MicLedgerEntry) { e.Daily[0].MicOnlineDeltaMs = envelope.MaxMicDayMs + 1 }, envelope.ReasonAmountOutOfRange},
		{"daily negative seat", func(e *userv1.MicLedgerEntry) { e.Daily[0].SeatOccupiedDeltaMs = -1 }, envelope.ReasonAmountOutOfRange},
		{"daily two sessions", func(e *userv1.MicLedgerEntry) { e.Daily[0].SessionCountDelta = 2 }, envelope.ReasonAmountOutOfRange},
		{"daily negative rooms", func(e *userv1.MicLedgerEntry) { e.Daily[0].RoomCountDelta = -1 }, envelope.ReasonAmountOutOfRange},
		{"second daily delta over", func(e *userv1.MicLedgerEntry) {
			e.Daily = append(e.Daily, &userv1.MicDailyDelta{StatDate: "2026-03-02", MicOnlineDeltaMs: math.MaxInt64})
		}, envelope.ReasonAmountOutOfRange},
		{"lifetime seat over a session", func(e *userv1.MicLedgerEntry) {
			e.Lifetime = &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: envelope.MaxMicSessionMs + 1}
		}, envelope.ReasonAmountOutOfRange},
		{"lifetime mic over a session", func(e *userv1.MicLedgerEntry) {
			e.Lifetime = &userv1.MicLifetimeDelta{MicOnlineDeltaMs: math.MaxInt64/2 + 1}
		}, envelope.ReasonAmountOutOfRange},
		{"lifetime two sessions", func(e *userv1.MicLedgerEntry) { e.Lifetime = &userv1.MicLifetimeDelta{SessionCountDelta: 2} }, envelope.ReasonAmountOutOfRange},
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

// BuildFacts refuses a batch whose sum for a row leaves int64 (Decode's
// bounds keep real batches far from it) with an *mysqlsink.OverflowError
// naming the column, instead of wrapping.
func TestBuildFactsOverflowIsAnError(t *testing.T) {
	const half = math.MaxInt64/2 + 1
	entry := func(id string, d *userv1.MicDailyDelta, l *userv1.MicLifetimeDelta) *userv1.MicLedgerEntry {
		var daily []*userv1.MicDailyDelta
		if d != nil {
			daily = []*userv1.MicDailyDelta{d}
		}
		return &userv1.MicLedgerEntry{EventId: id, AppCode: "x", UserId: 1, Status: "consumed", Daily: daily, Lifetime: l}
	}
	for _, tc := range []struct {
		name, column string
		a, b         *userv1.MicLedgerEntry
	}{
		{"daily", "user_mic_daily_stats.mic_online_ms",
			entry("a", &userv1.MicDailyDelta{StatDate: "2026-03-01", MicOnlineDeltaMs: half}, nil),
			entry("b", &userv1.MicDailyDelta{StatDate: "2026-03-01", MicOnlineDeltaMs: half}, nil)},
		{"lifetime", "user_mic_lifetime_stats.seat_occupied_ms",
			entry("a", nil, &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: half}),
			entry("b", nil, &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: half})},
	} {
		var oe *mysqlsink.OverflowError
		if _, err := BuildFacts([]*userv1.MicLedgerEntry{tc.a, tc.b}); !errors.As(err, &oe) || oe.Column != tc.column {
			t.Errorf("%s: %v, want the %s overflow", tc.name, err, tc.column)
		}
		if _, err := BuildFacts([]*userv1.MicLedgerEntry{tc.a}); err != nil {
			t.Errorf("%s, one entry: %v", tc.name, err)
		}
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
	f, err := BuildFacts(ledger)
	if err != nil {
		t.Fatal(err)
	}

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
