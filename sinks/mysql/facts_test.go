package mysqlsink

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

func TestDecodeLedger(t *testing.T) {
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
		{"event id too long", func(e *userv1.MicLedgerEntry) { e.EventId = strings.Repeat("x", 129) }, "too_long"},
		{"snapshot without id", func(e *userv1.MicLedgerEntry) { e.Session.MicSessionId = "" }, "bad_session"},
		{"snapshot of another app", func(e *userv1.MicLedgerEntry) { e.Session.AppCode = "other" }, "bad_session"},
		{"room id too long", func(e *userv1.MicLedgerEntry) { e.Session.RoomId = strings.Repeat("r", 65) }, "too_long"},
		{"bad stat date", func(e *userv1.MicLedgerEntry) { e.Daily[0].StatDate = "2026-3-1" }, "bad_stat_date"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := ok()
			tc.mut(e)
			b, _ := proto.Marshal(e)
			_, err := DecodeLedger(b, "")
			var ie *InvalidRecordError
			switch {
			case tc.reason == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.reason != "" && (!errors.As(err, &ie) || ie.Reason != tc.reason):
				t.Fatalf("error %v, want reason %s", err, tc.reason)
			}
		})
	}
	if _, err := DecodeLedger([]byte{0xff, 0xff}, ""); err == nil {
		t.Fatal("garbage decoded")
	}
	// No app_code is the configured one: the same entry as naming it.
	noApp := ok()
	noApp.AppCode = ""
	b, _ := proto.Marshal(noApp)
	if got, err := DecodeLedger(b, "hyapp"); err != nil || !proto.Equal(got, ok()) {
		t.Fatalf("default app_code: %v %v", err, got)
	}
}

func TestDecodeInflow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     *activityv1.LuckyPoolInflow
		reason string
	}{
		{"valid", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", PlatformIn: 1}, ""},
		{"no room", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", GiftId: "g"}, "missing_scope"},
		{"negative", &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", RoomIn: -1}, "negative_inflow"},
		{"id too long", &activityv1.LuckyPoolInflow{EventId: strings.Repeat("i", 161), AppCode: "a", RoomId: "r", GiftId: "g"}, "too_long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := proto.Marshal(tc.in)
			_, err := DecodeInflow(b, "")
			var ie *InvalidRecordError
			if (tc.reason == "") != (err == nil) || (err != nil && (!errors.As(err, &ie) || ie.Reason != tc.reason)) {
				t.Fatalf("error %v, want reason %q", err, tc.reason)
			}
		})
	}
	b, _ := proto.Marshal(&activityv1.LuckyPoolInflow{EventId: "i", RoomId: "r", GiftId: "g", PlatformIn: 1})
	want := &activityv1.LuckyPoolInflow{EventId: "i", AppCode: "a", RoomId: "r", GiftId: "g", PlatformIn: 1}
	if got, err := DecodeInflow(b, "a"); err != nil || !proto.Equal(got, want) {
		t.Fatalf("default app_code: %v %v", err, got)
	}
	if _, err := DecodeInflow(b, ""); err == nil {
		t.Fatal("no app_code and no default must be invalid")
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
	inflows := []*activityv1.LuckyPoolInflow{
		{EventId: "i1", AppCode: "x", RoomId: "r1", GiftId: "g1", PlatformIn: 2, RoomIn: 3, GiftIn: 5, OccurredAtMs: 10},
		{EventId: "i2", AppCode: "x", RoomId: "r2", GiftId: "g1", PlatformIn: 20, RoomIn: 30, GiftIn: 50, OccurredAtMs: 20},
	}
	f := BuildFacts(ledger, inflows)

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
	// The platform row is written once per batch with the summed inflow;
	// rows are sorted by primary key (gift < platform < room).
	wantPools := []PoolRow{
		{PoolKey{"x", "gift", "g1"}, 55, 20},
		{PoolKey{"x", "platform", "global"}, 22, 20},
		{PoolKey{"x", "room", "r1"}, 3, 10},
		{PoolKey{"x", "room", "r2"}, 30, 20},
	}
	if len(f.Pools) != len(wantPools) {
		t.Fatalf("pools = %+v", f.Pools)
	}
	for i := range wantPools {
		if f.Pools[i] != wantPools[i] {
			t.Fatalf("pool %d = %+v, want %+v", i, f.Pools[i], wantPools[i])
		}
	}
}

func TestDedupeKeepsFirst(t *testing.T) {
	es := []*userv1.MicLedgerEntry{{EventId: "a", AppCode: "x", UserId: 1}, {EventId: "a", AppCode: "x", UserId: 2}, {EventId: "a", AppCode: "y"}}
	out, dups := DedupeLedger(es)
	if dups != 1 || len(out) != 2 || out[0].UserId != 1 {
		t.Fatalf("dedupe = %v, %d", out, dups)
	}
}

func TestSplitByPartition(t *testing.T) {
	var recs []Record
	for _, tp := range []TP{{"ledger", 0}, {"inflow", 1}, {"ledger", 1}, {"inflow", 0}, {"ledger", 2}, {"ledger", 0}} {
		recs = append(recs, Record{TP: tp, Offset: int64(len(recs))})
	}
	groups := splitByPartition(recs, 2, "inflow")
	if len(groups) != 2 {
		t.Fatalf("%d groups", len(groups))
	}
	where := map[TP]int{}
	total := 0
	for g, rs := range groups {
		last := map[TP]int64{}
		for _, r := range rs {
			if w, ok := where[r.TP]; ok && w != g {
				t.Fatalf("partition %v split across groups", r.TP)
			}
			where[r.TP] = g
			if o, ok := last[r.TP]; ok && r.Offset < o {
				t.Fatalf("partition %v out of order", r.TP)
			}
			last[r.TP] = r.Offset
			total++
		}
	}
	if total != len(recs) || where[TP{"inflow", 0}] != 0 || where[TP{"inflow", 1}] != 0 {
		t.Fatalf("groups %v: every record once, inflow partitions in group 0", where)
	}
	if where[TP{"ledger", 0}] == where[TP{"ledger", 1}] && where[TP{"ledger", 1}] == where[TP{"ledger", 2}] {
		t.Fatalf("ledger partitions not spread: %v", where)
	}
	if g := splitByPartition(recs, 1, "inflow"); len(g) != 1 || len(g[0]) != len(recs) {
		t.Fatalf("parallelism 1: %v", g)
	}
}
