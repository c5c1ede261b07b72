package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// behindSchemaChange relays 5 rows of room-a and stops, then, while no
// relay runs (a deploy, a restart, or simply lag), commits 5 more rows,
// runs alter (a schema change, or a server setting) and commits 5 more:
// rows written before it wait in the binlog for a relay that starts after
// it.
func behindSchemaChange(t *testing.T, k *testenv.Kafka, m *testenv.MySQL, cfg relay.Config, alter string) {
	t.Helper()
	ctx := context.Background()
	x := startRelay(t, cfg, m.DB, quietLogger(t))
	if err := insertRows(ctx, m.DB, rowsOf("a", "room-a", 0, 5)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, k.Config.Topics.RoomEvents, 5, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // the position committed past them
	x.stop(t)
	if err := insertRows(ctx, m.DB, rowsOf("b", "room-a", 5, 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DB.ExecContext(ctx, alter); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, rowsOf("c", "room-a", 10, 5)); err != nil {
		t.Fatal(err)
	}
}

// TestBinlogColumnAddedWhileBehind: docs/design.md lets room_outbox gain
// columns. Rows written before an ADD COLUMN the relay is behind are
// decoded with the columns their own TABLE_MAP names, rows after it with
// the new ones; none stalls the relay (it used to compare the first
// pre-ALTER TABLE_MAP with today's information_schema, fail on the column
// count, and fail again at the same position on every retry).
func TestBinlogColumnAddedWhileBehind(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	cfg := binlogConfig(testConfig(t, k), m)
	behindSchemaChange(t, k, m, cfg, "ALTER TABLE room_outbox ADD COLUMN extra INT NOT NULL DEFAULT 0")
	logs := &testenv.SyncBuffer{}
	x := startRelay(t, cfg, m.DB, slog.New(slog.NewTextHandler(logs, nil)))
	n, ok := countWithin(t, k, k.Config.Topics.RoomEvents, 15, 20*time.Second)
	x.stop(t)
	if !ok {
		t.Fatalf("%d of 15 rows relayed within 20s after an ADD COLUMN made while the relay was behind; log:\n%s", n, logs.String())
	}
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, k.Config.Topics.RoomEvents))
}

// TestBinlogColumnsReplacedWhileBehind: an ALTER that keeps the column
// count (one column dropped, another added) moves occurred_at_ms to
// another position. Rows written before it are still decoded by their
// own TABLE_MAP's names: every field is the row's (decoded by today's
// positions, occurred_at_ms was read from lock_until_ms).
func TestBinlogColumnsReplacedWhileBehind(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	cfg := binlogConfig(testConfig(t, k), m)
	behindSchemaChange(t, k, m, cfg, "ALTER TABLE room_outbox DROP COLUMN last_error, ADD COLUMN note VARCHAR(16) NULL")
	x := startRelay(t, cfg, m.DB, quietLogger(t))
	waitCount(t, k, k.Config.Topics.RoomEvents, 15, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, k.Config.Topics.RoomEvents))
}

// restoreRowMetadata sets the shared binlog server's binlog_row_metadata
// (global: the package's tests run one at a time) back to FULL, binlog
// mode's requirement, when the test ends.
func restoreRowMetadata(t *testing.T, db *sql.DB) {
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "SET GLOBAL binlog_row_metadata = FULL"); err != nil {
			t.Error(err)
		}
	})
}

// TestBinlogStartupChecksRowMetadata: a server whose binlog_row_metadata
// is not FULL writes TABLE_MAPs without column names; the start-up check
// refuses it, naming the variable and the statement that fixes it.
func TestBinlogStartupChecksRowMetadata(t *testing.T) {
	m := binlogDB(t)
	cfg := binlogConfig(unconnectedConfig(t), m)
	logs := &testenv.SyncBuffer{}
	if err := checkServer(t, cfg, m.DB, logs); err != nil {
		t.Fatalf("a ready server fails the checks: %v", err)
	}
	restoreRowMetadata(t, m.DB)
	if _, err := m.DB.ExecContext(context.Background(), "SET GLOBAL binlog_row_metadata = MINIMAL"); err != nil {
		t.Fatal(err)
	}
	err := checkServer(t, cfg, m.DB, logs)
	var ce *relay.BinlogCheckError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *BinlogCheckError", err)
	}
	for _, p := range []string{"binlog_row_metadata is MINIMAL", "SET GLOBAL binlog_row_metadata=FULL"} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%q does not name %q", err, p)
		}
	}
}

// TestBinlogRowsWithoutColumnNames: rows the binlog holds from before
// binlog_row_metadata was FULL (a relay behind when it was set) carry no
// column names, and today's columns need not be theirs. The relay relays
// the rows before them and stops at them with a *BinlogColumnsError
// naming the variable and --resnapshot, relaying nothing it cannot decode
// for sure; --resnapshot then relays those rows from a snapshot, each
// once.
func TestBinlogRowsWithoutColumnNames(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	restoreRowMetadata(t, m.DB)
	behindSchemaChange(t, k, m, cfg, "SET GLOBAL binlog_row_metadata = MINIMAL")
	if _, err := m.DB.ExecContext(ctx, "SET GLOBAL binlog_row_metadata = FULL"); err != nil {
		t.Fatal(err)
	}

	logs := &testenv.SyncBuffer{}
	x := startRelay(t, cfg, m.DB, slog.New(slog.NewTextHandler(logs, nil)))
	testenv.Eventually(t, 20*time.Second, "an error naming binlog_row_metadata", func() bool {
		return strings.Contains(logs.String(), "level=ERROR") && strings.Contains(logs.String(), "binlog_row_metadata")
	})
	// A batch cut short by the error is relayed by the next session, which
	// stops at the same rows: the 10 before them come, and no more.
	n := 0
	testenv.Eventually(t, 20*time.Second, "the 10 rows before the ones without column names", func() bool {
		n = len(drain(t, k, k.Config.Topics.RoomEvents))
		return n >= 10
	})
	x.stop(t)
	if s := logs.String(); !strings.Contains(s, "--resnapshot") {
		t.Errorf("the error does not name --resnapshot:\n%s", s)
	}
	if n = len(drain(t, k, k.Config.Topics.RoomEvents)); n != 10 {
		t.Fatalf("%d records, want the 10 before the rows without column names", n)
	}

	re := cfg
	re.Binlog.Resnapshot = true
	x = startRelay(t, re, m.DB, quietLogger(t))
	waitCount(t, k, k.Config.Topics.RoomEvents, 15, 30*time.Second)
	if err := insertRows(ctx, m.DB, rowsOf("d", "room-a", 15, 5)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, k.Config.Topics.RoomEvents, 20, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, k.Config.Topics.RoomEvents))
}
