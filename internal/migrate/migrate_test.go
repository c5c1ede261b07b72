package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/hyapp/roomflow/internal/migrate"
	"github.com/hyapp/roomflow/internal/testenv"
)

var tables = []string{
	"room_outbox", "user_mic_sessions", "user_mic_daily_stats", "user_mic_lifetime_stats",
	"user_mic_event_consumption", "lucky_gift_rules", "lucky_reward_tiers", "lucky_pools",
	"lucky_pool_inflow_consumption", "roomflow_sink_offsets", "schema_migrations",
}

func mustLoad(t *testing.T) []migrate.Migration {
	t.Helper()
	ms, err := migrate.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no embedded migrations")
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].Version <= ms[i-1].Version {
			t.Fatalf("migrations out of order: %d after %d", ms[i].Version, ms[i-1].Version)
		}
	}
	return ms
}

func countApplied(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestUpTwice(t *testing.T) {
	m := testenv.NewEmptyMySQL(t)
	ms := mustLoad(t)
	ctx := context.Background()
	first, err := migrate.Up(ctx, m.DB, ms, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Applied) != len(ms) || first.Current != ms[len(ms)-1].Version {
		t.Fatalf("first run: %+v", first)
	}
	second, err := migrate.Up(ctx, m.DB, ms, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Applied) != 0 || second.Current != first.Current {
		t.Fatalf("second run applied again: %+v", second)
	}
	if got := countApplied(t, m.DB); got != len(ms) {
		t.Fatalf("schema_migrations has %d rows, want %d", got, len(ms))
	}
	for _, tbl := range tables {
		var n int
		if err := m.DB.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", tbl).Scan(&n); err != nil || n != 1 {
			t.Errorf("table %s missing (err %v)", tbl, err)
		}
	}
	// room_outbox exactly as the design: the status index and the unique event_id.
	var idx int
	if err := m.DB.QueryRow(`SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
		AND table_name = 'room_outbox' AND index_name IN ('uk_room_outbox_event_id','idx_room_outbox_status')`).Scan(&idx); err != nil || idx != 4 {
		t.Fatalf("room_outbox indexes: %d columns (err %v), want 4", idx, err)
	}
}

// byteExactIDs are the id columns that key rows roomflow also keys by
// their bytes in Go (migration 0015, docs/design.md "MySQL tables").
var byteExactIDs = [][2]string{
	{"user_mic_event_consumption", "event_id"}, {"user_mic_event_consumption", "mic_session_id"},
	{"user_mic_sessions", "mic_session_id"},
	{"lucky_pool_inflow_consumption", "event_id"}, {"lucky_pool_inflow_consumption", "draw_id"},
	{"lucky_pool_inflow_claims", "draw_id"}, {"lucky_event_consumption", "event_id"},
	{"lucky_draw_records", "command_id"}, {"lucky_pools", "scope_id"}, {"lucky_risk_counters", "counter_key"},
	{"lucky_pool_funds", "fund_id"}, {"lucky_pool_funds", "scope_id"},
}

// TestIDColumnsAreByteExact: after every migration the id columns are
// utf8mb4_bin with their widths, nullability and defaults unchanged, so
// ids differing only in letter case are two keys; and a join with a
// column of the server's default collation still works (the _bin
// collation wins).
func TestIDColumnsAreByteExact(t *testing.T) {
	m := testenv.NewEmptyMySQL(t)
	if _, err := migrate.Up(context.Background(), m.DB, mustLoad(t), 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"event_id": "varchar(160)", "mic_session_id": "varchar(128)", "draw_id": "varchar(128)",
		"command_id": "varchar(128)", "fund_id": "varchar(128)", "scope_id": "varchar(64)", "counter_key": "varchar(255)"}
	for _, c := range byteExactIDs {
		var typ, coll, null string
		var def sql.NullString
		if err := m.DB.QueryRow(`SELECT column_type, collation_name, is_nullable, column_default FROM information_schema.columns
			WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?`, c[0], c[1]).Scan(&typ, &coll, &null, &def); err != nil {
			t.Fatalf("%s.%s: %v", c[0], c[1], err)
		}
		wantDef := c[0] == "lucky_pool_inflow_consumption" && c[1] == "draw_id" // DEFAULT '' (MariaDB shows it quoted)
		if typ != want[c[1]] || coll != "utf8mb4_bin" || null != "NO" || def.Valid != wantDef {
			t.Errorf("%s.%s: %s %s nullable %s default %v", c[0], c[1], typ, coll, null, def)
		}
	}
	for _, id := range []string{"LD-ab", "ld-AB", "LD-AB"} {
		if _, err := m.DB.Exec("INSERT INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by) VALUES ('hy', ?, 'stream')", id); err != nil {
			t.Fatalf("claim %s: %v", id, err)
		}
	}
	if _, err := m.DB.Exec("CREATE TABLE ci_ids (draw_id VARCHAR(128) NOT NULL) DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_general_ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DB.Exec("INSERT INTO ci_ids VALUES ('ld-ab'), ('LD-ab')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := m.DB.QueryRow("SELECT COUNT(*) FROM lucky_pool_inflow_claims c JOIN ci_ids i ON i.draw_id = c.draw_id").Scan(&n); err != nil || n != 1 {
		t.Fatalf("join with a general_ci column: %d rows, %v; want 1 (byte exact)", n, err)
	}
}

func TestUpConcurrent(t *testing.T) {
	m := testenv.NewEmptyMySQL(t)
	ms := mustLoad(t)
	const runners = 6
	var wg sync.WaitGroup
	results := make([]migrate.Result, runners)
	errs := make([]error, runners)
	for i := range runners {
		wg.Go(func() {
			// Each runner has its own pool, as separate processes would.
			db, err := sql.Open("mysql", m.DSN)
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			results[i], errs[i] = migrate.Up(context.Background(), db, ms, 30*time.Second, nil)
		})
	}
	wg.Wait()
	total := 0
	for i := range runners {
		if errs[i] != nil {
			t.Fatalf("runner %d: %v", i, errs[i])
		}
		total += len(results[i].Applied)
	}
	if total != len(ms) {
		t.Fatalf("migrations applied %d times in total, want exactly %d", total, len(ms))
	}
	if got := countApplied(t, m.DB); got != len(ms) {
		t.Fatalf("schema_migrations has %d rows, want %d", got, len(ms))
	}
}

func TestChangedMigrationIsReported(t *testing.T) {
	m := testenv.NewEmptyMySQL(t)
	v1 := fstest.MapFS{"m/0001_a.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS a (id INT PRIMARY KEY);\n")}}
	ms, err := migrate.LoadFS(v1, "m")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(context.Background(), m.DB, ms, 5*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	v2 := fstest.MapFS{"m/0001_a.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS a (id BIGINT PRIMARY KEY);\n")}}
	ms2, _ := migrate.LoadFS(v2, "m")
	_, err = migrate.Up(context.Background(), m.DB, ms2, 5*time.Second, nil)
	var ce *migrate.ChecksumError
	if !errors.As(err, &ce) || ce.Version != 1 {
		t.Fatalf("want ChecksumError for version 1, got %v", err)
	}
}

// A runner that died after a DDL statement but before recording it re-runs
// the file; ADD COLUMN must not fail the second time.
func TestInterruptedMigrationReruns(t *testing.T) {
	m := testenv.NewEmptyMySQL(t)
	src := "CREATE TABLE IF NOT EXISTS b (id INT PRIMARY KEY);\nALTER TABLE b ADD COLUMN c INT NOT NULL DEFAULT 0;\nALTER TABLE b ADD KEY idx_c (c);\n"
	if _, err := m.DB.Exec("CREATE TABLE b (id INT PRIMARY KEY, c INT NOT NULL DEFAULT 0, KEY idx_c (c))"); err != nil {
		t.Fatal(err)
	}
	ms, _ := migrate.LoadFS(fstest.MapFS{"m/0001_b.sql": {Data: []byte(src)}}, "m")
	res, err := migrate.Up(context.Background(), m.DB, ms, 5*time.Second, nil)
	if err != nil || len(res.Applied) != 1 {
		t.Fatalf("rerun after interruption: %+v %v", res, err)
	}
}

func TestLoadFSRejectsBadNames(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"no number": {"m/abc.sql": {Data: []byte("x")}},
		"duplicate": {"m/0001_a.sql": {Data: []byte("x")}, "m/01_b.sql": {Data: []byte("y")}},
	} {
		if _, err := migrate.LoadFS(fsys, "m"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestStatements(t *testing.T) {
	got := migrate.Statements("-- comment\nCREATE TABLE a (\n  x INT -- inline\n);\n\nINSERT INTO a VALUES (1);\nSELECT 1")
	if len(got) != 3 || got[1] != "INSERT INTO a VALUES (1)" || got[2] != "SELECT 1" {
		t.Fatalf("got %q", got)
	}
}

// The same migrations on MySQL 8.0 (container), applied twice and then
// concurrently on a second database.
func TestUpMySQL80(t *testing.T) {
	dsn := testenv.MySQL80DSN(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ms := mustLoad(t)
	for i := range 2 {
		res, err := migrate.Up(context.Background(), db, ms, 30*time.Second, nil)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if want := map[int]int{0: len(ms), 1: 0}[i]; len(res.Applied) != want {
			t.Fatalf("run %d applied %d, want %d", i, len(res.Applied), want)
		}
	}
	if got := countApplied(t, db); got != len(ms) {
		t.Fatalf("schema_migrations has %d rows", got)
	}
}
