package relay_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// purgedBehind relays 50 rows and stops; then 41 rows are committed and
// the binlog holding them is purged. A relay started on cfg then stops
// with roomflow_relay_binlog_purged = 1 and relays nothing more.
func purgedBehind(t *testing.T, k *testenv.Kafka, m *testenv.MySQL, cfg relay.Config) {
	t.Helper()
	ctx := context.Background()
	if err := insertRows(ctx, m.DB, rowsOf("a", "room-a", 0, 50)); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, k.Config.Topics.RoomEvents, 50, 30*time.Second)
	x.stop(t)
	// Rows the relay has not seen, then the binlog holding them is purged.
	if err := insertRows(ctx, m.DB, rowsOf("b", "room-b", 0, 40)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"FLUSH BINARY LOGS", "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, room_version, payload, occurred_at_ms, created_at_ms, updated_at_ms) VALUES ('hyapp', 'c-1', 'RoomMicChanged', 'room-c', 1, 'x', 1, 1, 1)", "FLUSH BINARY LOGS"} {
		if _, err := m.DB.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var file string
	var pos int64
	var rest [2]sql.NullString
	if err := m.DB.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &pos, &rest[0], &rest[1]); err != nil {
		t.Fatal(err)
	}
	purgeBinlogsTo(t, m.DB, file)
	x = startRelay(t, cfg, m.DB, nil)
	testenv.Eventually(t, 20*time.Second, "roomflow_relay_binlog_purged = 1", func() bool {
		return metric(t, x.reg, "roomflow_relay_binlog_purged") == 1
	})
	x.stop(t)
	if n := len(drain(t, k, k.Config.Topics.RoomEvents)); n != 50 {
		t.Fatalf("%d records after the purge, want the 50 before it", n)
	}
}

// resnapshotRelays runs cfg with --resnapshot after purgedBehind: the 41
// rows written meanwhile and 5 more after the snapshot are relayed, once,
// and roomflow_relay_binlog_purged is 0 again.
func resnapshotRelays(t *testing.T, k *testenv.Kafka, m *testenv.MySQL, cfg relay.Config) {
	t.Helper()
	re := cfg
	re.Binlog.Resnapshot = true
	x := startRelay(t, re, m.DB, nil)
	waitCount(t, k, k.Config.Topics.RoomEvents, 91, 30*time.Second)
	if err := insertRows(context.Background(), m.DB, rowsOf("d", "room-d", 0, 5)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, k.Config.Topics.RoomEvents, 96, 30*time.Second)
	if v := metric(t, x.reg, "roomflow_relay_binlog_purged"); v != 0 {
		t.Fatalf("roomflow_relay_binlog_purged = %v after the resnapshot", v)
	}
	time.Sleep(300 * time.Millisecond)
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, k.Config.Topics.RoomEvents))
}

// TestBinlogPurgedAndResnapshot: a binlog purged past the stored position
// stops the relay with roomflow_relay_binlog_purged = 1 and relays
// nothing; --resnapshot (Binlog.Resnapshot) then relays the rows written
// meanwhile, once.
func TestBinlogPurgedAndResnapshot(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	cfg := binlogConfig(testConfig(t, k), m)
	purgedBehind(t, k, m, cfg)
	resnapshotRelays(t, k, m, cfg)
}

// TestBinlogResnapshotCommitFails: the --resnapshot session's snapshot is
// one batch, and its commit fails (here the broker refuses the EndTxn).
// The next leader session of the same process snapshots again instead of
// going back to the purged position (--resnapshot used to be spent once
// the snapshot was handed to the committer, before the commit), and every
// row is relayed once.
func TestBinlogResnapshotCommitFails(t *testing.T) {
	k := newKafka(t)
	if k.Fake == nil {
		t.Skip("needs kfake request control (a real Kafka cluster is configured)")
	}
	m := binlogDB(t)
	cfg := binlogConfig(testConfig(t, k), m)
	purgedBehind(t, k, m, cfg)

	// The commit of the first batch with rows (the whole snapshot) is
	// refused: the control is armed just before it.
	var armed, refused atomic.Bool
	refuse := func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.EndTxnRequest)
		if !req.Commit {
			return nil, nil, false
		}
		refused.Store(true)
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.InvalidTxnState.Code
		return resp, nil, true // handled: the control is dropped
	}
	cfg = withHooks(cfg, relay.Hooks{BeforeCommit: func(_ context.Context, b relay.BatchInfo) {
		if b.Rows > 0 && !armed.Swap(true) {
			k.Fake.ControlKey(kmsg.EndTxn.Int16(), refuse)
		}
	}})
	resnapshotRelays(t, k, m, cfg)
	if !refused.Load() {
		t.Fatal("no commit was refused")
	}
}

// purgeBinlogsTo purges every binlog file before file and waits until the
// server no longer lists them. A file still read by a stream is silently
// kept by PURGE, and an earlier test's relay may reconnect between the
// kill of its stream and the purge, so the two repeat until the purge
// holds.
func purgeBinlogsTo(t *testing.T, db *sql.DB, file string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		killBinlogDumps(t, db)
		if _, err := db.ExecContext(ctx, "PURGE BINARY LOGS TO '"+file+"'"); err != nil {
			t.Fatal(err)
		}
		var first string
		var size int64
		if err := db.QueryRowContext(ctx, "SHOW BINARY LOGS").Scan(&first, &size); err != nil {
			t.Fatal(err)
		}
		if first == file {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("binlog %s still listed after purging to %s", first, file)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
