package retention_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/mysql/retention"
)

const day = 24 * time.Hour

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func count(t *testing.T, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// seed writes, for each consumption table, old rows (processed 40 days
// ago, though their event time is recent for the mic table) and young
// ones (processed 1 day ago, event time 40 days ago for the mic table, so
// the purge must go by processing time); room_outbox rows 1..20, old and
// delivered except 3 (pending), 7 (failed) and 16..20 (young); and old
// lucky_draw_records and lucky_outbox rows, which purge must never touch.
func seed(t *testing.T, db *sql.DB, now time.Time) {
	old, young := now.Add(-40*day).UnixMilli(), now.Add(-day).UnixMilli()
	for i := range 7 {
		proc, event := old, young
		if i >= 5 {
			proc, event = young, old
		}
		exec(t, db, `INSERT INTO user_mic_event_consumption (app_code, event_id, event_type, mic_session_id, user_id, action, status,
			created_at_ms, consumed_at_ms, updated_at_ms) VALUES ('hyapp', ?, 'RoomMicChanged', 's', 1, 'up', 'consumed', ?, ?, ?)`,
			fmt.Sprint("m", i), event, proc, proc)
		exec(t, db, `INSERT INTO lucky_pool_inflow_consumption (app_code, event_id, occurred_at_ms, created_at_ms) VALUES ('hyapp', ?, ?, ?)`,
			fmt.Sprint("i", i), event, proc)
		exec(t, db, `INSERT INTO lucky_event_consumption (app_code, event_id, event_type, created_at_ms) VALUES ('hyapp', ?, 'LuckyGiftDrawn', ?)`,
			fmt.Sprint("l", i), proc)
		exec(t, db, `INSERT INTO lucky_draw_records (draw_id, app_code, command_id, room_id, sender_user_id, gift_id, rule_version,
			candidate_tiers_json, selected_tier_id, random_digest, pool_snapshot_json, risk_snapshot_json, created_at_ms, updated_at_ms)
			VALUES (?, 'hyapp', ?, 'r', 1, 'g', 'v', '[]', 'none', 'x', '{}', '{}', ?, ?)`, fmt.Sprint("d", i), fmt.Sprint("c", i), old, old)
		exec(t, db, `INSERT INTO lucky_outbox (event_id, app_code, event_type, aggregate_id, payload, status, created_at_ms, updated_at_ms)
			VALUES (?, 'hyapp', 'reward_credit', 'a', 'p', 'done', ?, ?)`, fmt.Sprint("o", i), old, old)
	}
	// Room facts: the hours 100 days, 90 days and 2 hours, 90 days less 10
	// minutes and 89 days ago. A 90-day window deletes the first two; the
	// third hour ends inside the window, so it stays.
	for i, age := range []time.Duration{100 * day, 90*day + 2*time.Hour, 90*day - 10*time.Minute, 89 * day} {
		start := now.Add(-age).UnixMilli()
		exec(t, db, `INSERT INTO lucky_room_stats_hourly (app_code, room_id, hour_start_ms, draws) VALUES ('hyapp', ?, ?, 1)`,
			fmt.Sprint("r", i), start-start%3_600_000)
	}
	for id := 1; id <= 20; id++ {
		status, created := "delivered", old
		switch {
		case id == 3:
			status = "pending"
		case id == 7:
			status = "failed"
		case id >= 16:
			created = young
		}
		exec(t, db, `INSERT INTO room_outbox (id, app_code, event_id, event_type, room_id, payload, status, occurred_at_ms, created_at_ms, updated_at_ms)
			VALUES (?, 'hyapp', ?, 'RoomMicChanged', 'r', 'p', ?, ?, ?, ?)`, id, fmt.Sprint("e", id), status, created, created, created)
	}
}

func ids(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestPurge: one pass deletes exactly the consumption rows processed before
// their window (by processing time, not event time), in batches, and the
// delivered room_outbox rows older than the age below the relay's bound;
// never lucky_draw_records or lucky_outbox (LUCKY-9, LUCKY-10). A dry run
// counts the same rows and deletes none. roomflow_purge_deleted_rows_total
// counts per table.
func TestPurge(t *testing.T) {
	m := testenv.NewMySQL(t)
	now := time.Now()
	seed(t, m.DB, now)
	w := retention.Window{Age: 30 * day, Replay: 7 * day}
	below := uint64(12) // the relay's lowest open hole
	reg := prometheus.NewRegistry()
	cfg := retention.Config{
		UserMicEventConsumption: w, LuckyPoolInflowConsumption: w, LuckyEventConsumption: w,
		LuckyRoomStatsHourly: 90 * day,
		RoomOutbox:           retention.RoomOutboxConfig{Enabled: true, Age: 7 * day},
		RelayedBelow:         func(context.Context) (uint64, bool, error) { return below, true, nil },
		BatchSize:            2, BatchPause: -1, Now: func() time.Time { return now },
		Registerer: reg,
	}
	dry := cfg
	dry.DryRun = true
	dry.Registerer = nil
	p, err := retention.New(dry, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"user_mic_event_consumption": 5, "lucky_pool_inflow_consumption": 5, "lucky_event_consumption": 5,
		"lucky_room_stats_hourly": 2, "room_outbox": 9} // 1..11 but 3 and 7
	for _, r := range res {
		if r.Rows != want[r.Table] || r.Skipped != "" {
			t.Errorf("dry run %s: %+v, want %d rows", r.Table, r, want[r.Table])
		}
	}
	if n := count(t, m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption"); n != 7 {
		t.Fatalf("the dry run deleted rows: %d left", n)
	}

	p, err = retention.New(cfg, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	res, err = p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Rows != want[r.Table] {
			t.Errorf("%s: deleted %d, want %d", r.Table, r.Rows, want[r.Table])
		}
		if r.Table != "room_outbox" && r.Table != "lucky_room_stats_hourly" && r.Batches != 3 { // 2 + 2 + 1 rows
			t.Errorf("%s: %d batches, want 3 of at most 2 rows", r.Table, r.Batches)
		}
		if v, _ := testenv.Metric(reg, "roomflow_purge_deleted_rows_total", "table", r.Table); v != float64(want[r.Table]) {
			t.Errorf("roomflow_purge_deleted_rows_total{table=%s} = %v, want %d", r.Table, v, want[r.Table])
		}
	}
	for table, q := range map[string]string{
		"user_mic_event_consumption":    "SELECT event_id FROM user_mic_event_consumption ORDER BY event_id",
		"lucky_pool_inflow_consumption": "SELECT event_id FROM lucky_pool_inflow_consumption ORDER BY event_id",
		"lucky_event_consumption":       "SELECT event_id FROM lucky_event_consumption ORDER BY event_id",
	} {
		got := ids(t, m.DB, q)
		if len(got) != 2 || got[0][1:] != "5" || got[1][1:] != "6" {
			t.Errorf("%s keeps %v, want the two rows processed a day ago", table, got)
		}
	}
	if got := ids(t, m.DB, "SELECT id FROM room_outbox ORDER BY id"); !slices.Equal(got, []string{"3", "7", "12", "13", "14", "15", "16", "17", "18", "19", "20"}) {
		t.Errorf("room_outbox keeps %v: want the pending and failed rows, every id from the relay's bound 12 on", got)
	}
	if got := ids(t, m.DB, "SELECT room_id FROM lucky_room_stats_hourly ORDER BY room_id"); !slices.Equal(got, []string{"r2", "r3"}) {
		t.Errorf("lucky_room_stats_hourly keeps %v, want the hours that ended within 90 days (r2, r3)", got)
	}
	if d, o := count(t, m.DB, "SELECT COUNT(*) FROM lucky_draw_records"), count(t, m.DB, "SELECT COUNT(*) FROM lucky_outbox"); d != 7 || o != 7 {
		t.Errorf("lucky_draw_records %d rows, lucky_outbox %d rows: purge must never touch them (7 each)", d, o)
	}

	// A second pass finds nothing; with the relay at its high-water mark
	// 20 (no hole) the old rows up to 15 go, the young 16..20 stay.
	below = 21
	res, err = p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if wantRows := map[string]int64{"room_outbox": 4}[r.Table]; r.Rows != wantRows {
			t.Errorf("second pass %s: %d rows, want %d", r.Table, r.Rows, wantRows)
		}
	}
	if got := ids(t, m.DB, "SELECT id FROM room_outbox ORDER BY id"); !slices.Equal(got, []string{"3", "7", "16", "17", "18", "19", "20"}) {
		t.Errorf("room_outbox keeps %v after the second pass", got)
	}
}

// TestPurgeRoomOutboxOffByDefault: without room_outbox.enabled, and when
// the relay has no position, room_outbox keeps every row.
func TestPurgeRoomOutboxOffByDefault(t *testing.T) {
	m := testenv.NewMySQL(t)
	now := time.Now()
	seed(t, m.DB, now)
	for _, c := range []retention.Config{
		{},
		{RoomOutbox: retention.RoomOutboxConfig{Enabled: true}, RelayedBelow: func(context.Context) (uint64, bool, error) { return 0, false, nil }},
	} {
		c.Now = func() time.Time { return now }
		p, err := retention.New(c, m.DB)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		last := res[len(res)-1]
		if last.Table != "room_outbox" || last.Skipped == "" || last.Rows != 0 {
			t.Errorf("room_outbox: %+v, want skipped", last)
		}
		if n := count(t, m.DB, "SELECT COUNT(*) FROM room_outbox"); n != 20 {
			t.Fatalf("room_outbox has %d rows, want all 20", n)
		}
		for _, r := range res[:len(res)-1] {
			if r.Skipped != "window 0" {
				t.Errorf("%s: %+v, want skipped with window 0", r.Table, r)
			}
		}
	}
}

// TestPurgeValidate: a window shorter than the Kafka retention of the
// topics its table dedupes, or any window on topics kept forever, is
// refused with the table's key.
func TestPurgeValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  retention.Config
		keys []string
	}{
		{retention.Config{UserMicEventConsumption: retention.Window{Age: 6 * day, Replay: 7 * day}}, []string{"user_mic_event_consumption"}},
		{retention.Config{LuckyPoolInflowConsumption: retention.Window{Age: 6 * day, Replay: -1}}, []string{"lucky_pool_inflow_consumption"}},
		{retention.Config{LuckyEventConsumption: retention.Window{Age: -day}}, []string{"lucky_event_consumption"}},
		{retention.Config{RoomOutbox: retention.RoomOutboxConfig{Enabled: true}}, []string{"relayed_below"}},
		{retention.Config{BatchSize: -1}, []string{"batch_size"}},
		{retention.Config{LuckyRoomStatsHourly: 30 * time.Minute}, []string{"lucky_room_stats_hourly"}},
		{retention.Config{LuckyRoomStatsHourly: -day}, []string{"lucky_room_stats_hourly"}},
		{retention.Config{LuckyRoomStatsHourly: time.Hour}, nil}, // a fact table has no replay bound
		{retention.Config{UserMicEventConsumption: retention.Window{Age: 7 * day, Replay: 7 * day}, LuckyEventConsumption: retention.Window{Replay: -1}}, nil},
	} {
		if got := cfgerr.Keys(tc.cfg.Validate()); !slices.Equal(got, tc.keys) {
			t.Errorf("%+v: keys %v, want %v", tc.cfg, got, tc.keys)
		}
	}
}
