package rawledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/benchmarks/internal/rawledger"
	"github.com/hyapp/roomflow/internal/testenv"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// The raw limit writes the rows the sink writes: the same ledger through
// rawledger.Write and through the sink's Store leaves equal facts and one
// consumption row per entry, so "sink / raw" compares equal work.
func TestWritesTheSinksRows(t *testing.T) {
	ctx := context.Background()
	ledger := sinktest.NewLedgerGen(7, "hyapp", 40).Next(1200)
	raw, sink := testenv.NewMySQL(t), testenv.NewMySQL(t)
	if err := rawledger.Write(ctx, raw.DB, ledger, 250, true); err != nil {
		t.Fatal(err)
	}

	applier, err := micledger.New(micledger.Config{Topic: "ledger", DefaultAppCode: "hyapp"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "test", Appliers: []mysqlsink.Registration{mysqlsink.Register(applier)}}, sink.DB)
	if err != nil {
		t.Fatal(err)
	}
	tp := mysqlsink.TP{Topic: "ledger", Partition: 0}
	claimed, err := st.Claim(ctx, "test", []mysqlsink.TP{tp}, time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]mysqlsink.Record, len(ledger))
	for i, e := range ledger {
		recs[i] = mysqlsink.Record{TP: tp, Offset: int64(i), Item: e}
	}
	for lo := 0; lo < len(recs); lo += 250 {
		if _, err := st.Apply(ctx, "test", map[mysqlsink.TP]int64{tp: claimed[tp].Generation}, recs[lo:min(len(recs), lo+250)], time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}

	for _, q := range []string{
		"SELECT COUNT(*) FROM user_mic_event_consumption",
		"SELECT app_code, mic_session_id, user_id, status, seat_occupied_ms, mic_online_ms, ended_at_ms, closed_event_id FROM user_mic_sessions ORDER BY app_code, mic_session_id",
		"SELECT app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count FROM user_mic_daily_stats ORDER BY app_code, user_id, stat_date",
		"SELECT app_code, user_id, seat_occupied_ms, mic_online_ms, session_count FROM user_mic_lifetime_stats ORDER BY app_code, user_id",
	} {
		r, s := dump(t, raw.DB, q), dump(t, sink.DB, q)
		if r != s {
			t.Fatalf("%s\nraw:  %.300s\nsink: %.300s", q, r, s)
		}
		if strings.Count(r, "\n") < 2 && !strings.HasPrefix(q, "SELECT COUNT") {
			t.Fatalf("%s: %d rows, want a real comparison", q, strings.Count(r, "\n"))
		}
	}
	var n int
	if err := raw.DB.QueryRow("SELECT COUNT(*) FROM user_mic_event_consumption").Scan(&n); err != nil || n != len(ledger) {
		t.Fatalf("consumption rows %d (%v), want %d", n, err, len(ledger))
	}
}

// dump is every row of q, one line each.
func dump(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&b, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
