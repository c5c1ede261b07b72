package statsapi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/services/statsapi"
)

// BenchmarkRange measures Store.Range on a realistic user_mic_sessions:
// 1,000,000 closed sessions of 10,000 users over a year plus one heavy
// user (42) with 8,760 sessions (one an hour for a year), for ranges of
// one day to a year ending at the last session, with the covering index of
// migration 0005 and without it (then MariaDB walks the user's sessions
// through idx_user_mic_sessions_user_status).
//
//	go test -run '^$' -bench BenchmarkRange -benchtime 200x ./services/statsapi/
func BenchmarkRange(b *testing.B) {
	m := testenv.NewMySQL(b)
	ctx := context.Background()
	const year = 365 * mic.DayMs
	base := ms("2025-01-01T00:00:00Z")
	// Server-side generation: 1000 x 1000 rows, then the heavy user.
	fill := func(q string, args ...any) {
		if _, err := m.DB.ExecContext(ctx, q, args...); err != nil {
			b.Fatal(err)
		}
	}
	fill("CREATE TEMPORARY TABLE seq (n INT PRIMARY KEY)")
	fill("INSERT INTO seq WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 999) SELECT n FROM s")
	cols := "app_code, mic_session_id, user_id, room_id, status, seat_started_at_ms, publishing_started_at_ms, ended_at_ms, end_reason, " +
		"seat_occupied_ms, mic_online_ms, opened_event_id, last_event_id, created_at_ms, updated_at_ms"
	fill("INSERT INTO user_mic_sessions ("+cols+") SELECT 'hyapp', CONCAT('s-', i), 1000 + i % 10000, 'r', 'ended', "+
		"st, st + 60000, st + 3600000, 'leave', 3600000, 3540000, 'up', 'down', st, st + 3600000 "+
		"FROM (SELECT a.n * 1000 + c.n AS i, ? + (a.n * 1000 + c.n) * 31536 % ? AS st FROM seq a CROSS JOIN seq c) x", base, year)
	fill("INSERT INTO user_mic_sessions ("+cols+") SELECT 'hyapp', CONCAT('h-', i), 42, 'r', 'ended', "+
		"st, st + 60000, st + 1800000, 'leave', 1800000, 1740000, 'up', 'down', st, st + 1800000 "+
		"FROM (SELECT a.n * 1000 + c.n AS i, ? + (a.n * 1000 + c.n) * 3600000 AS st FROM seq a CROSS JOIN seq c) x WHERE i < 8760", base)
	fill("ANALYZE TABLE user_mic_sessions")
	st := statsapi.NewStore(m.DB)
	end := base + 8760*3600000
	for _, idx := range []bool{true, false} {
		if !idx {
			fill("ALTER TABLE user_mic_sessions DROP KEY idx_user_mic_sessions_user_ended")
		}
		for _, days := range []int64{1, 7, 30, 366} {
			r := statsapi.Range{FromMs: end - days*mic.DayMs, ToMs: end}
			b.Run(fmt.Sprintf("index=%v/days=%d", idx, days), func(b *testing.B) {
				var got statsapi.Stats
				for b.Loop() {
					var err error
					if got, err = st.Range(ctx, "hyapp", 42, r); err != nil {
						b.Fatal(err)
					}
				}
				if want := min(days*24, 8760); got.SessionCount != want {
					b.Fatalf("session_count %d, want %d", got.SessionCount, want)
				}
			})
		}
	}
}
