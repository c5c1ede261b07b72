package live_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen/live"
)

// row is a user_mic_event_consumption row as the sink writes it for a mic
// event of app, arrived at at.
type row struct {
	app, id string
	at      time.Time
}

// consumed inserts rows in one statement.
func consumed(t *testing.T, m *testenv.MySQL, rows ...row) {
	t.Helper()
	q := "INSERT INTO user_mic_event_consumption (app_code, event_id, event_type, mic_session_id, user_id, action, status, created_at_ms, updated_at_ms) VALUES "
	var args []any
	for i, r := range rows {
		if i > 0 {
			q += ","
		}
		q += "(?, ?, 'RoomMicChanged', 's1', 7, 'up', 'applied', ?, ?)"
		args = append(args, r.app, r.id, r.at.UnixMilli(), r.at.UnixMilli())
	}
	if _, err := m.DB.ExecContext(t.Context(), q, args...); err != nil {
		t.Fatal(err)
	}
}

// TestFactLatency against MariaDB: latencies from the rows' updated_at_ms,
// another app's rows ignored, the per-second share and the pending bound
// respected, rows that never come counted missing.
func TestFactLatency(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := t.Context()
	base := time.Now().Truncate(time.Second).Add(-10 * time.Second)
	f := live.NewFactLatency(m.DB, "a", live.LatencyOptions{PerSecond: 3, MaxPending: 1000, GiveUp: time.Minute})
	sampled := 0
	var rows []row
	for i := range 700 { // 7 seconds of commit time, 100 events each
		id := fmt.Sprintf("e%d", i)
		at := base.Add(time.Duration(i) * 10 * time.Millisecond)
		if f.Committed(id, at) {
			sampled++
			rows = append(rows, row{"a", id, at.Add(time.Duration(10*(i%100+1)) * time.Millisecond)})
		}
		rows = append(rows, row{"b", id, at}) // another app's consumption of the same id
	}
	consumed(t, m, rows...)
	if sampled != 7*3 || f.Pending() != sampled {
		t.Fatalf("sampled %d, pending %d; want 3 of each second", sampled, f.Pending())
	}
	f.Committed("never", time.Now())
	if err := f.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	r := f.Result()
	// The first three of each second: 10, 20, 30 ms after their commit.
	if r.Count != 21 || r.Min != 10*time.Millisecond || r.P50 != 20*time.Millisecond || r.Max != 30*time.Millisecond || r.Missing != 0 || f.Pending() != 1 {
		t.Fatalf("result %+v, pending %d", r, f.Pending())
	}
	// Drain gives up on the event whose row never comes.
	if err := f.Drain(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r := f.Result(); r.Missing != 1 || r.Count != 21 || f.Pending() != 0 {
		t.Fatalf("after drain %+v, pending %d", r, f.Pending())
	}

	// Every event offered (the benchmark's way), bounded by MaxPending;
	// one waiting longer than GiveUp is missing at the next poll.
	all := live.NewFactLatency(m.DB, "a", live.LatencyOptions{MaxPending: 2, GiveUp: 5 * time.Second})
	if !all.Committed("e0", base) || !all.Committed("gone", base) || all.Committed("e1", base) {
		t.Fatal("MaxPending 2 not kept")
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- all.Run(runCtx, 20*time.Millisecond) }()
	testenv.Eventually(t, 10*time.Second, "both events settled", func() bool { return all.Pending() == 0 })
	cancel()
	<-done
	if r := all.Result(); r.Count != 1 || r.Min != 10*time.Millisecond || r.Missing != 1 {
		t.Fatalf("every event: %+v", r)
	}
}
