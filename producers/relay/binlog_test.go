package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
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
}

// TestBinlogStartupChecks: each missing prerequisite is named: a server
// without the binary log (the development server), a user without the
// replication privileges, the server's own server id.
func TestBinlogStartupChecks(t *testing.T) {
	ctx := context.Background()
	m := binlogDB(t)
	logs := &testenv.SyncBuffer{}
	check := func(cfg relay.Config, db *sql.DB) error { return checkServer(t, cfg, db, logs) }
	base := binlogConfig(unconnectedConfig(t), m)
	if err := check(base, m.DB); err != nil {
		t.Fatalf("a ready server fails the checks: %v", err)
	}
	want := func(err error, parts ...string) {
		t.Helper()
		var ce *relay.BinlogCheckError
		if !errors.As(err, &ce) {
			t.Fatalf("err = %v, want a *BinlogCheckError", err)
		}
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%q does not name %q", err, p)
			}
		}
	}
	// The server's own id.
	own := base
	own.Binlog.ServerID = 1
	want(check(own, m.DB), "server_id 1")
	// A user with SELECT only.
	if _, err := m.DB.ExecContext(ctx, "CREATE USER 'weak'@'127.0.0.1' IDENTIFIED BY 'pw'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = m.DB.ExecContext(context.Background(), "DROP USER 'weak'@'127.0.0.1'") })
	if _, err := m.DB.ExecContext(ctx, "GRANT SELECT ON `"+m.Name+"`.* TO 'weak'@'127.0.0.1'"); err != nil {
		t.Fatal(err)
	}
	dc, _ := mysql.ParseDSN(m.DSN)
	dc.User, dc.Passwd = "weak", "pw"
	weak, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer weak.Close()
	wc := base
	wc.Binlog.DSN = dc.FormatDSN()
	err = check(wc, weak)
	want(err, "REPLICATION SLAVE", "BINLOG MONITOR")
	if strings.Contains(err.Error(), "pw@") {
		t.Fatalf("password in the error: %v", err)
	}
	// The development server: no binary log.
	dev := testenv.NewMySQL(t)
	var logBin string
	if err := dev.DB.QueryRowContext(ctx, "SELECT @@log_bin").Scan(&logBin); err != nil {
		t.Fatal(err)
	}
	if logBin == "0" {
		dc := base
		dc.Binlog.DSN = dev.DSN
		want(check(dc, dev.DB), "log_bin")
	} else {
		t.Logf("the development server has log_bin on: that case is not checked here")
	}
}

// TestBinlogModeSwitch: poll → binlog → poll on one relay position, with
// ids open as holes at each switch (an insert transaction held open), one
// committed while no relay runs and one committed after the switch. Every
// row arrives exactly once.
func TestBinlogModeSwitch(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	poll := testConfig(t, k)
	poll.BatchSize = 40
	bin := binlogConfig(poll, m)
	total := 0
	insert := func(prefix, room string, n int) {
		t.Helper()
		if err := insertRows(ctx, m.DB, rowsOf(prefix, room, 0, n)); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	hold := func(prefix, room string) *sql.Tx {
		t.Helper()
		tx, err := m.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := insertRows(ctx, tx, rowsOf(prefix, room, 0, 1)); err != nil {
			t.Fatal(err)
		}
		total++
		return tx
	}
	commit := func(tx *sql.Tx) {
		t.Helper()
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Poll mode, two holes open when it stops.
	x := startRelay(t, poll, m.DB, nil)
	insert("p1", "room-1", 100)
	h1, h2 := hold("hole1", "room-h1"), hold("hole2", "room-h2")
	insert("p2", "room-2", 100)
	waitCount(t, k, k.Config.Topics.RoomEvents, 200, 30*time.Second)
	x.stop(t)
	commit(h1) // while no relay runs: the switch's snapshot reads it as a hole
	insert("gap", "room-3", 20)

	// Binlog mode.
	x = startRelay(t, bin, m.DB, nil)
	waitCount(t, k, k.Config.Topics.RoomEvents, 221, 30*time.Second)
	commit(h2) // after the snapshot: from the binlog
	insert("b1", "room-4", 60)
	h3 := hold("hole3", "room-h3")
	insert("b2", "room-5", 60)
	waitCount(t, k, k.Config.Topics.RoomEvents, 342, 30*time.Second)
	x.stop(t)

	// Back to poll: its high-water id and holes are current.
	x = startRelay(t, poll, m.DB, nil)
	commit(h3)
	insert("p3", "room-6", 30)
	waitCount(t, k, k.Config.Topics.RoomEvents, total, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	x.stop(t)
	got := drain(t, k, k.Config.Topics.RoomEvents)
	checkExactlyOnce(t, loadOracle(t, m.DB), got)
	if len(got) != total {
		t.Fatalf("%d records, want %d", len(got), total)
	}
}

// TestBinlogSchemaChange: a column added to the table is picked up (the
// column map follows TABLE_MAP changes); dropping a needed one stops the
// relay with an error naming it, relaying nothing wrong.
func TestBinlogSchemaChange(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	x := startRelay(t, cfg, m.DB, log)
	if err := insertRows(ctx, m.DB, rowsOf("a", "room-a", 0, 10)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, k.Config.Topics.RoomEvents, 10, 30*time.Second)
	if _, err := m.DB.ExecContext(ctx, "ALTER TABLE room_outbox ADD COLUMN extra INT NULL FIRST"); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, rowsOf("b", "room-a", 10, 10)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, k.Config.Topics.RoomEvents, 20, 30*time.Second)
	if _, err := m.DB.ExecContext(ctx, "ALTER TABLE room_outbox DROP COLUMN room_version"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DB.ExecContext(ctx, "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, payload, occurred_at_ms, created_at_ms, updated_at_ms) VALUES ('hyapp', 'c-1', 'RoomMicChanged', 'room-a', 'x', 1, 1, 1)"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		s := logs.String()
		mu.Unlock()
		if strings.Contains(s, "has no column room_version") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error naming room_version; logs:\n%s", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	x.stop(t)
	got := drain(t, k, k.Config.Topics.RoomEvents)
	if len(got) != 20 {
		t.Fatalf("%d records, want the 20 before the drop", len(got))
	}
	for i, r := range got[10:] {
		if r.version() != int64(11+i) || r.key != "room-a" {
			t.Fatalf("after ADD COLUMN: record %d is %s v%d", i, r.key, r.version())
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestBinlogLargeTransactionSpansBatches: one MySQL transaction of 600
// rows of 1 KiB under relay.max_batch_bytes 64 KiB is relayed in batches
// that each read at most max_batch_bytes (plus one row), never the whole
// transaction at once. The relay is stopped after the first of them
// commits: the stored position is the transaction's start plus the rows
// already relayed, and a restart relays the rest, each row once.
func TestBinlogLargeTransactionSpansBatches(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	cfg.MaxBatchBytes = 64 << 10
	const rows, size = 600, 1 << 10
	var mu sync.Mutex
	var batches []relay.BatchInfo
	second := make(chan struct{})
	commits := 0
	hooked := withHooks(cfg, relay.Hooks{BeforeCommit: func(ctx context.Context, b relay.BatchInfo) {
		mu.Lock()
		if b.Rows > 0 {
			commits++
		}
		n := commits
		mu.Unlock()
		if n == 2 { // the second batch of rows: hold it open until the stop aborts it
			close(second)
			<-ctx.Done()
		}
	}, AfterCommit: func(b relay.BatchInfo, err error) {
		if err == nil && b.Rows > 0 {
			mu.Lock()
			batches = append(batches, b)
			mu.Unlock()
		}
	}})
	x := startRelay(t, hooked, m.DB, nil)
	testenv.Eventually(t, 20*time.Second, "the relay to lead", func() bool { return metric(t, x.reg, "roomflow_relay_is_leader") == 1 })
	big := rowsOf("big", "room-big", 0, rows)
	for i := range big {
		big[i].payload = payloadFor(big[i].eventID, size)
	}
	tx, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < rows; i += 100 {
		if err := insertRows(ctx, tx, big[i:i+100]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second:
	case <-time.After(30 * time.Second):
		t.Fatal("the transaction's second batch never reached its commit")
	}
	x.stop(t)
	mu.Lock()
	if len(batches) != 1 || batches[0].Rows >= rows {
		t.Fatalf("committed before the stop: %+v, want one batch of part of the transaction", batches)
	}
	first := batches[0].Rows
	mu.Unlock()
	// The stored position: the transaction's start and the rows done.
	var pos relay.Position
	for _, r := range k.DrainCommitted(t, cfg.OffsetsTopic) {
		if string(r.Key) == cfg.TransactionalID {
			if pos, err = relay.DecodePosition(r.Value); err != nil {
				t.Fatal(err)
			}
		}
	}
	if pos.Mode != relay.ModeBinlog || pos.Binlog.Rows != uint64(first) || pos.Binlog.GTIDSet == "" {
		t.Fatalf("stored position %+v, want binlog mode inside the transaction with %d rows done", pos.Binlog, first)
	}

	// A restart that idles before the transaction's events arrive (a
	// heartbeat period of 1ms) and is stopped before its first rows
	// commit must leave the position inside the transaction: whatever it
	// committed meanwhile may not send the relayed rows again.
	idle := cfg
	idle.Binlog.HeartbeatPeriod = time.Millisecond
	held := make(chan struct{})
	var once sync.Once
	x = startRelay(t, withHooks(idle, relay.Hooks{BeforeCommit: func(ctx context.Context, b relay.BatchInfo) {
		if b.Rows > 0 {
			once.Do(func() { close(held) })
			<-ctx.Done()
		}
	}}), m.DB, nil)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the restarted relay never reached a batch of rows")
	}
	x.stop(t)

	x = startRelay(t, withHooks(cfg, relay.Hooks{AfterCommit: func(b relay.BatchInfo, err error) {
		if err == nil && b.Rows > 0 {
			mu.Lock()
			batches = append(batches, b)
			mu.Unlock()
		}
	}}), m.DB, nil)
	waitCount(t, k, cfg.Topic, rows, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	x.stop(t)
	mu.Lock()
	defer mu.Unlock()
	for _, b := range batches {
		if b.ReadBytes > cfg.MaxBatchBytes+size+64 {
			t.Errorf("a batch held %d payload bytes, above max_batch_bytes %d plus one row", b.ReadBytes, cfg.MaxBatchBytes)
		}
	}
	if len(batches) < rows*size/cfg.MaxBatchBytes {
		t.Errorf("%d batches for %d bytes under max_batch_bytes %d", len(batches), rows*size, cfg.MaxBatchBytes)
	}
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))
}

// TestBinlogSnapshotUnderWrites: the first start snapshots a table of
// several batches while writers keep inserting; the rows written during
// the snapshot come from the binlog after it, none twice, none lost; a
// restart resumes from the stored position. On MySQL 8.0 the binlog from
// before the snapshot repeats rows the snapshot has, dropped by id.
func TestBinlogSnapshotUnderWrites(t *testing.T) {
	t.Run("mariadb", func(t *testing.T) { testSnapshotUnderWrites(t, binlogDB(t)) })
	t.Run("mysql80", func(t *testing.T) { testSnapshotUnderWrites(t, mysql80BinlogDB(t)) })
}

func testSnapshotUnderWrites(t *testing.T, m *testenv.MySQL) {
	k := newKafka(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	cfg.BatchSize = 100
	if err := writers(ctx, m.DB, "pre-", 3000, 4, 50, 48, 0); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	werr := make(chan error, 1)
	go func() { werr <- streamWriters(ctx, m.DB, "live-", 4, 20, 48, 10*time.Millisecond, stop) }()
	time.Sleep(200 * time.Millisecond)
	x := startRelay(t, cfg, m.DB, nil)
	time.Sleep(2 * time.Second)
	close(stop)
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, cfg.Topic, countRows(t, m.DB), 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	x.stop(t)
	if err := insertRows(ctx, m.DB, rowsOf("after", "room-after", 0, 20)); err != nil {
		t.Fatal(err)
	}
	x = startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, cfg.Topic, countRows(t, m.DB), 30*time.Second)
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))
}

// TestBinlogIdleTableAdvancesPosition: with no outbox inserts, other
// tables' transactions still move the stored binlog position (within a
// heartbeat period), so a restart does not re-read them and the binlog
// the position needs can be purged.
func TestBinlogIdleTableAdvancesPosition(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	x := startRelay(t, cfg, m.DB, nil)
	testenv.Eventually(t, 20*time.Second, "the relay to lead", func() bool { return metric(t, x.reg, "roomflow_relay_is_leader") == 1 })
	for _, q := range []string{"CREATE TABLE idle_other (id INT PRIMARY KEY)", "INSERT INTO idle_other VALUES (1)", "INSERT INTO idle_other VALUES (2)"} {
		if _, err := m.DB.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var want string
	if err := m.DB.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&want); err != nil {
		t.Fatal(err)
	}
	stored := func() string {
		c := k.Client(t, kgo.ConsumeTopics(cfg.OffsetsTopic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		defer c.Close()
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var last string
		for {
			fs := c.PollFetches(pctx)
			if pctx.Err() != nil {
				return last
			}
			fs.EachRecord(func(r *kgo.Record) {
				if p, err := relay.DecodePosition(r.Value); err == nil && string(r.Key) == cfg.TransactionalID {
					last = p.Binlog.GTIDSet
				}
			})
		}
	}
	testenv.Eventually(t, 10*time.Second, "the stored GTID set to reach "+want, func() bool { return stored() == want })
	x.stop(t)
	if got := drain(t, k, cfg.Topic); len(got) != 0 {
		t.Fatalf("%d records for an idle outbox", len(got))
	}
}
