package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/producers/relay"
)

// TestBatchBytesBounded: rows of several MiB, a row larger than
// relay.max_batch_bytes, one larger than relay.max_record_bytes, and a hole
// fill of several MiB rows. No batch reads more payload bytes than
// max_batch_bytes except a row read alone (at most max_record_bytes, besides
// the small payloads read inline); the too-large row goes to the DLQ
// without its payload ever being read; every row arrives exactly once.
// Today's relay reads the whole table (tens of MiB) in its first batch.
// In binlog mode the rows before the start come from the snapshot and the
// hole fill is one binlog transaction, split by the same budget.
func TestBatchBytesBounded(t *testing.T) { forModes(t, testBatchBytesBounded) }

func testBatchBytesBounded(t *testing.T, mode relayMode) {
	const mib = 1 << 20
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.MaxBatchBytes = 5 * mib
	cfg.MaxRecordBytes = 7 * mib
	big := cfg.Topic + ".big"
	createTopic(t, k, big, 16*mib)
	cfg.Routes = map[string]string{"RoomMicChanged": big}

	var mu sync.Mutex
	var batches []relay.BatchInfo
	hooks := relay.Hooks{BeforeCommit: func(_ context.Context, b relay.BatchInfo) {
		mu.Lock()
		batches = append(batches, b)
		mu.Unlock()
	}}
	ctx := context.Background()
	row := func(id string, version int64, n int) outboxRow {
		return outboxRow{eventID: id, eventType: "RoomMicChanged", roomID: "r-" + id, version: version,
			payload: payloadFor(id, n), occurred: time.Now().UnixMilli()}
	}
	// Before the relay starts, so that one unbounded read would take it all.
	for i := range 8 {
		if err := insertRows(ctx, m.DB, []outboxRow{row(fmt.Sprintf("two-%d", i), 1, 2*mib)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []outboxRow{row("alone", 1, 6*mib), row("oversized", 1, 9*mib), row("small", 1, 100)} {
		if err := insertRows(ctx, m.DB, []outboxRow{r}); err != nil {
			t.Fatal(err)
		}
	}
	x := startRelay(t, withHooks(cfg, hooks), m.DB, nil)
	waitCount(t, k, big, 10, 60*time.Second)

	// A hole fill of 3 x 2 MiB: ids taken by an open transaction, rows
	// after them committed and relayed first.
	held, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	for i := range 3 {
		if err := insertRows(ctx, held, []outboxRow{row(fmt.Sprintf("held-%d", i), 1, 2*mib)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := insertRows(ctx, m.DB, []outboxRow{row("after-held", 1, 100)}); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, big, 11, 60*time.Second)
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, big, 14, 60*time.Second)
	waitCount(t, k, cfg.DLQTopic, 1, 30*time.Second)
	x.stop(t)

	mu.Lock()
	defer mu.Unlock()
	peak := 0
	for _, b := range batches {
		peak = max(peak, b.ReadBytes)
		t.Logf("batch: %d rows, ids %d..%d, high %d, %d bytes read", b.Rows, b.FirstID, b.LastID, b.High, b.ReadBytes)
		if b.ReadBytes > cfg.MaxBatchBytes && (b.Rows != 1 || b.ReadBytes > cfg.MaxBatchBytes+cfg.MaxRecordBytes) {
			t.Errorf("batch of %d rows (ids %d..%d) read %d payload bytes, above relay.max_batch_bytes %d and not a single row within max_record_bytes",
				b.Rows, b.FirstID, b.LastID, b.ReadBytes, cfg.MaxBatchBytes)
		}
	}
	t.Logf("%d batches, peak %d payload bytes read (max_batch_bytes %d, the alone row %d)", len(batches), peak, cfg.MaxBatchBytes, 6*mib)
	if peak < 6*mib || peak > 6*mib+1024 {
		t.Errorf("peak batch read %d bytes, want the 6 MiB row read alone (and a few small rows inline)", peak)
	}
	if n := metric(t, x.reg, "roomflow_relay_batch_bytes"); n < float64(len(batches)) {
		t.Errorf("roomflow_relay_batch_bytes observed %v batches, want at least %d", n, len(batches))
	}
	oracle := loadOracle(t, m.DB)
	delete(oracle, "oversized")
	checkExactlyOnce(t, oracle, drain(t, k, big))
	dlq := drain(t, k, cfg.DLQTopic)
	if len(dlq) != 1 || dlq[0].eventID() != "oversized" || dlq[0].headers["error_reason"] != "payload_too_large" ||
		dlq[0].headers["payload_bytes"] != strconv.Itoa(9*mib) || len(dlq[0].value) != 0 {
		t.Fatalf("dlq = %d records %+v, want the 9 MiB row as payload_too_large without its value", len(dlq), dlq)
	}
}

// TestByteBudgetKeepsRoomOrder: holes whose rows appear together exceed
// relay.max_batch_bytes, and a later row of one of their rooms is already
// committed above the high-water id. The budget splits the hole fill, yet
// that later row is not relayed before its room's earlier row. In binlog
// mode the holes commit as one binlog transaction the budget splits.
func TestByteBudgetKeepsRoomOrder(t *testing.T) { forModes(t, testByteBudgetKeepsRoomOrder) }

func testByteBudgetKeepsRoomOrder(t *testing.T, mode relayMode) {
	const mib = 1 << 20
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.MaxBatchBytes = 5 * mib
	cfg.MaxRecordBytes = 4 * mib
	big := cfg.Topic + ".big"
	createTopic(t, k, big, 8*mib)
	cfg.Routes = map[string]string{"RoomMicChanged": big}
	ctx := context.Background()
	row := func(room string, version int64, n int) outboxRow {
		id := fmt.Sprintf("%s-v%d", room, version)
		return outboxRow{eventID: id, eventType: "RoomMicChanged", roomID: room, version: version,
			payload: payloadFor(id, n), occurred: time.Now().UnixMilli()}
	}
	held, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	for _, room := range []string{"x", "y", "z"} {
		if err := insertRows(ctx, held, []outboxRow{row(room, 1, 2*mib)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := insertRows(ctx, m.DB, []outboxRow{row("w", 1, 100)}); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, big, 1, 30*time.Second)
	x.stop(t) // three holes in the committed position
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, []outboxRow{row("z", 2, 100)}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var batches []relay.BatchInfo
	y := startRelay(t, withHooks(cfg, relay.Hooks{BeforeCommit: func(_ context.Context, b relay.BatchInfo) {
		mu.Lock()
		batches = append(batches, b)
		mu.Unlock()
	}}), m.DB, nil)
	waitCount(t, k, big, 5, 30*time.Second)
	y.stop(t)
	mu.Lock()
	if cfg.Mode == relay.ModeBinlog {
		// The stream cuts batches by arrival too: any split within the
		// budget is right.
		for _, b := range batches {
			if b.Rows > 1 && b.ReadBytes > cfg.MaxBatchBytes {
				t.Errorf("batches %+v: want the three 2 MiB holes split by the 5 MiB budget", batches)
			}
		}
	} else if len(batches) < 2 || batches[0].Rows != 2 {
		t.Errorf("batches %+v: want the three 2 MiB holes split by the 5 MiB budget", batches)
	}
	mu.Unlock()
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, big))
}
