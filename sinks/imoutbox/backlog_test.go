package imoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

// TestBacklogIsBounded: the gauges' query counts each status up to the
// cap, takes the oldest undelivered row by id, and reads about cap index
// entries per status however many rows wait (IM down for hours).
func TestBacklogIsBounded(t *testing.T) {
	m := testenv.NewMySQL(t)
	// One connection, so the session's handler counters see every read.
	db, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	repo := imoutbox.NewRepo(db)
	ctx := context.Background()

	empty, err := repo.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"pending": 0, "retryable": 0, "delivering": 0, "failed": 0}; fmt.Sprint(empty.ByStatus) != fmt.Sprint(want) || empty.OldestMs != 0 {
		t.Fatalf("empty outbox: %+v", empty)
	}

	now := time.Now().UnixMilli()
	var created []int64 // by id - 1
	add := func(n int, status string, createdMs func(i int) int64, lockMs func(i int) int64) {
		var q strings.Builder
		var args []any
		q.WriteString(`INSERT INTO room_outbox (app_code, event_id, event_type, room_id, payload, status, lock_until_ms, occurred_at_ms, created_at_ms, updated_at_ms) VALUES `)
		for i := range n {
			if i > 0 {
				q.WriteString(",")
			}
			q.WriteString("('hyapp', ?, 'RoomGiftSent', 'r1', 'x', ?, ?, ?, ?, ?)")
			c := createdMs(i)
			args = append(args, fmt.Sprintf("e%d", len(created)), status, lockMs(i), c, c, c)
			created = append(created, c)
		}
		if _, err := m.DB.Exec(q.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	at := func(ago time.Duration) func(int) int64 {
		return func(i int) int64 { return now - ago.Milliseconds() + int64(i) }
	}
	zero := func(int) int64 { return 0 }
	add(2000, imoutbox.StatusDelivered, at(3*time.Hour), zero)
	add(3, imoutbox.StatusFailed, at(2*time.Hour), zero) // older, but failed rows have no age
	firstRetryable := len(created)
	// The lowest-id retryable row failed last, so it is last in index order.
	add(20, imoutbox.StatusRetryable, at(20*time.Minute), func(i int) int64 { return now - int64(i) })
	add(2000, imoutbox.StatusPending, at(10*time.Minute), zero)
	add(5, imoutbox.StatusDelivering, at(5*time.Minute), func(int) int64 { return now + 60_000 })

	for _, tc := range []struct {
		name   string
		cap    int
		counts map[string]int64
		oldest int64
	}{
		{"below the cap: exact", 5000, map[string]int64{"pending": 2000, "retryable": 20, "delivering": 5, "failed": 3}, created[firstRetryable]},
		{"at the cap", 20, map[string]int64{"pending": 20, "retryable": 20, "delivering": 5, "failed": 3}, created[firstRetryable]},
		// The 10 retryable rows read are those that failed first, ids 10..19
		// of the status: the age is a lower bound once a status is capped.
		{"over the cap: at least", 10, map[string]int64{"pending": 10, "retryable": 10, "delivering": 5, "failed": 3}, created[firstRetryable+10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			imoutbox.SetBacklogCap(repo, tc.cap)
			before := indexReads(t, db)
			b, err := repo.Backlog(ctx)
			if err != nil {
				t.Fatal(err)
			}
			reads := indexReads(t, db) - before
			if fmt.Sprint(b.ByStatus) != fmt.Sprint(tc.counts) || b.OldestMs != tc.oldest {
				t.Fatalf("backlog %v oldest %d, want %v oldest %d", b.ByStatus, b.OldestMs, tc.counts, tc.oldest)
			}
			// Each counted entry is read from the index and from the derived
			// table; a few more per status end the ranges and fetch the oldest.
			var counted int64
			for _, n := range tc.counts {
				counted += n
			}
			if limit := 3*counted + 30; reads > limit {
				t.Fatalf("backlog read %d rows for cap %d, want at most %d", reads, tc.cap, limit)
			}
		})
	}
	// The counters do see a query that reads every undelivered row.
	before := indexReads(t, db)
	if _, err := db.Exec(`SELECT status, COUNT(*) FROM room_outbox WHERE status <> 'delivered' GROUP BY status`); err != nil {
		t.Fatal(err)
	}
	if reads := indexReads(t, db) - before; reads < 2028 {
		t.Fatalf("an unbounded count read %d rows, want all 2,028 undelivered rows", reads)
	}
}

// indexReads is the session's row reads so far, from indexes and scans.
func indexReads(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	rows, err := db.Query(`SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_first', 'Handler_read_key', 'Handler_read_next', 'Handler_read_prev', 'Handler_read_last', 'Handler_read_rnd_next')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestBacklogOldestSkipsEmptyStatuses: a status without rows (its oldest
// is 0) leaves the oldest undelivered row of the others as it is.
func TestBacklogOldestSkipsEmptyStatuses(t *testing.T) {
	m := testenv.NewMySQL(t)
	created := time.Now().Add(-time.Minute).UnixMilli()
	if _, err := m.DB.Exec(`INSERT INTO room_outbox (app_code, event_id, event_type, room_id, payload, status, occurred_at_ms, created_at_ms, updated_at_ms)
		VALUES ('hyapp', 'p1', 'RoomGiftSent', 'r1', 'x', 'pending', ?, ?, ?)`, created, created, created); err != nil {
		t.Fatal(err)
	}
	b, err := imoutbox.NewRepo(m.DB).Backlog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b.OldestMs != created || b.ByStatus["pending"] != 1 || b.ByStatus["retryable"] != 0 {
		t.Fatalf("backlog = %+v, want 1 pending, oldest %d", b, created)
	}
}
