package mysqlx_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestScratchLifecycle: a scratch database is created migrated, replaces a
// leftover of its name, and is gone after Drop.
func TestScratchLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := testenv.UniqueName(t)
	first, err := mysqlx.NewScratch(ctx, testenv.ServerDSN(), name, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Keep(); err != nil {
		t.Fatal(err)
	}
	s, err := mysqlx.NewScratch(ctx, testenv.ServerDSN(), name, true) // over the leftover
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM room_outbox").Scan(&n); err != nil || n != 0 {
		t.Fatalf("migrated schema: %d rows, %v", n, err)
	}
	db.Close()
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	m := testenv.NewEmptyMySQL(t)
	if err := m.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n); err != nil || n != 0 {
		t.Fatalf("database %s still there after Drop (%d, %v)", name, n, err)
	}
	if _, err := mysqlx.NewScratch(ctx, testenv.ServerDSN(), "bad`name", false); err == nil {
		t.Fatal("a name that needs quoting was accepted")
	}
}
