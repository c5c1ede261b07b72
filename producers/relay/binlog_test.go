package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/hyapp/roomflow/producers/relay"
)

// TestBinlogModeExactlyOnce: a binlog-mode relay snapshots the rows present
// at its first start, then relays from the binlog only the INSERTs into
// room_outbox: not the status UPDATEs and purge DELETEs of the same table,
// not other tables' rows, not a rolled-back transaction; a transaction
// larger than a batch spans several Kafka transactions. A restart resumes
// from the stored binlog position. Every row arrives exactly once, in room
// order.
func TestBinlogModeExactlyOnce(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	cfg.BatchSize = 50
	// Rows before the first start: the snapshot's.
	if err := insertRows(ctx, m.DB, rowsOf("pre", "room-a", 0, 120)); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, k.Config.Topics.RoomEvents, 120, 30*time.Second)

	// Binlog: a 170-row transaction (4 batches), status updates and a
	// purge of relayed rows, another table, a rollback.
	tx, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, tx, rowsOf("big", "room-b", 0, 170)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"UPDATE room_outbox SET status = 'sending' WHERE room_id = 'room-b'",
		"UPDATE room_outbox SET status = 'sent' WHERE room_id = 'room-b'",
		"CREATE TABLE other_table (id BIGINT PRIMARY KEY, v VARCHAR(10))",
		"INSERT INTO other_table VALUES (1, 'x'), (2, 'y')",
	} {
		if _, err := m.DB.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rb, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, rb, rowsOf("rolledback", "room-c", 0, 5)); err != nil {
		t.Fatal(err)
	}
	if err := rb.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, rowsOf("post", "room-a", 120, 30)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, k.Config.Topics.RoomEvents, 320, 30*time.Second)
	x.stop(t)

	// Restart: from the stored binlog position, nothing again.
	if err := insertRows(ctx, m.DB, rowsOf("restart", "room-d", 0, 10)); err != nil {
		t.Fatal(err)
	}
	x = startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, k.Config.Topics.RoomEvents, 330, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // let a wrong duplicate arrive
	x.stop(t)
	if _, err := m.DB.ExecContext(ctx, "DELETE FROM room_outbox WHERE room_id = 'room-b' AND room_version <= 10"); err != nil {
		t.Fatal(err)
	}
	oracle := loadOracle(t, m.DB)
	got := drain(t, k, k.Config.Topics.RoomEvents)
	// The ten purged rows were relayed before the purge: keep them in the
	// oracle by event id.
	for _, r := range got {
		if _, ok := oracle[r.eventID()]; !ok && r.key == "room-b" && r.version() <= 10 {
			oracle[r.eventID()] = oracleRow{eventID: r.eventID(), roomID: r.key, version: r.version(), payload: r.value, occurred: r.ts.UnixMilli()}
		}
	}
	checkExactlyOnce(t, oracle, got)
	if len(got) != 330 {
		t.Fatalf("%d records, want 330", len(got))
	}
	_ = relay.ModeBinlog
}
