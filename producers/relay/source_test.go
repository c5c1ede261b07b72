package relay_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/migrate"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// TestAutoIncrement: Source.AutoIncrement reports the table's next id as it
// is now, on MariaDB and (with ROOMFLOW_TESTCONTAINERS=1) MySQL 8.0, whose
// information_schema would otherwise serve a cached value for a day: after
// inserts, after a purge (no rows left: MAX(id) would say nothing, the
// counter stays), after ALTER TABLE ... AUTO_INCREMENT and after TRUNCATE.
func TestAutoIncrement(t *testing.T) {
	t.Run("mariadb", func(t *testing.T) { checkAutoIncrement(t, testenv.NewMySQL(t).DB) })
	t.Run("mysql80", func(t *testing.T) {
		db, err := sql.Open("mysql", testenv.MySQL80DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		ms, err := migrate.Load()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := migrate.Up(context.Background(), db, ms, 30*time.Second, nil); err != nil {
			t.Fatal(err)
		}
		checkAutoIncrement(t, db)
	})
}

func checkAutoIncrement(t *testing.T, db *sql.DB) {
	ctx := context.Background()
	src := relay.NewSource(db, "room_outbox")
	next := func(step string, want uint64) {
		t.Helper()
		got, err := src.AutoIncrement(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got != want {
			t.Fatalf("%s: AUTO_INCREMENT = %d, want %d", step, got, want)
		}
	}
	exec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := insertRows(ctx, db, seq("a-", 1, 3, "room-1")); err != nil {
		t.Fatal(err)
	}
	next("after 3 rows", 4)
	if err := insertRows(ctx, db, seq("b-", 1, 2, "room-2")); err != nil {
		t.Fatal(err)
	}
	next("after 2 more (no cached value)", 6)
	exec("DELETE FROM room_outbox")
	next("after a purge", 6)
	exec("ALTER TABLE room_outbox AUTO_INCREMENT = 1000")
	next("after ALTER TABLE", 1000)
	exec("TRUNCATE TABLE room_outbox")
	next("after TRUNCATE", 1)
}

// TestOldestUnrelayed: the lag's source is the oldest occurred_at_ms among
// the rows above high and the visible rows of the open holes, whichever
// set holds it; holes with no row yet count nothing.
func TestOldestUnrelayed(t *testing.T) {
	db := testenv.NewMySQL(t).DB
	ctx := context.Background()
	occurred := []int64{5000, 500, 6000, 3000, 4000} // ids 1..5
	rows := seq("old-", 1, len(occurred), "room-1")
	for i := range rows {
		rows[i].occurred = occurred[i]
	}
	if err := insertRows(ctx, db, rows); err != nil {
		t.Fatal(err)
	}
	src := relay.NewSource(db, "room_outbox")
	for _, tc := range []struct {
		name  string
		high  uint64
		holes []uint64
		want  int64
		found bool
	}{
		{"a hole older than the rows above high", 3, []uint64{2}, 500, true},
		{"a hole newer than the rows above high", 3, []uint64{1}, 3000, true},
		{"only holes", 5, []uint64{1, 2}, 500, true},
		{"an invisible hole counts nothing", 3, []uint64{99}, 3000, true},
		{"nothing unrelayed", 5, []uint64{99}, 0, false},
	} {
		ms, found, err := src.OldestUnrelayed(ctx, tc.high, tc.holes)
		if err != nil || ms != tc.want || found != tc.found {
			t.Errorf("%s: OldestUnrelayed(%d, %v) = %d, %v, %v; want %d, %v", tc.name, tc.high, tc.holes, ms, found, err, tc.want, tc.found)
		}
	}
	if _, _, err := relay.NewSource(db, "no_such_table").OldestUnrelayed(ctx, 0, []uint64{1}); err == nil {
		t.Error("OldestUnrelayed on a missing table: no error")
	}
}
