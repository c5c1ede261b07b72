package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/tempmariadb"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// committedBinlog is relay name's committed binlog position; it fails the
// test unless there is one.
func committedBinlog(t *testing.T, k *testenv.Kafka, cfg relay.Config) relay.Position {
	t.Helper()
	pos, found, err := relay.ReadCommittedPosition(context.Background(), k.Cluster(), cfg.OffsetsTopic, cfg.TransactionalID)
	if err != nil || !found || pos.Mode != relay.ModeBinlog || pos.Binlog.File == "" {
		t.Fatalf("committed position %+v (found %v, %v), want a binlog one with a file", pos, found, err)
	}
	return pos
}

// asFileOffset stores pos without its GTID set as cfg's relay's position:
// MariaDB always has GTIDs, so a relay on it never writes such a position
// itself; a MySQL server without gtid_mode does.
func asFileOffset(t *testing.T, k *testenv.Kafka, cfg relay.Config, pos relay.Position) relay.Position {
	t.Helper()
	pos.Binlog.GTIDSet = ""
	if err := relay.StorePosition(context.Background(), k.Cluster(), cfg.OffsetsTopic, cfg.TransactionalID, pos); err != nil {
		t.Fatal(err)
	}
	return pos
}

// TestBinlogFileOffsetResume: from a file/offset position (no GTID set) the
// relay streams by file and offset, keeps storing file/offset positions,
// and a restart resumes from one exactly once, including inside a MySQL
// transaction spanning several Kafka transactions.
func TestBinlogFileOffsetResume(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	topic := cfg.Topic
	if err := insertRows(ctx, m.DB, rowsOf("a", "room-a", 0, 30)); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, topic, 30, 30*time.Second)
	x.stop(t)
	from := asFileOffset(t, k, cfg, committedBinlog(t, k, cfg))

	if err := insertRows(ctx, m.DB, rowsOf("b", "room-b", 0, 20)); err != nil {
		t.Fatal(err)
	}
	// A transaction of 40 rows (ids 51..90) in batches of 8: the relay
	// stops inside it.
	small := cfg
	small.BatchSize = 8
	stopped := make(chan struct{})
	inside := 0
	y := startRelay(t, withHooks(small, relay.Hooks{BeforeCommit: func(_ context.Context, b relay.BatchInfo) {
		if b.Rows > 0 && b.FirstID > 50 && b.LastID < 90 {
			if inside++; inside == 2 {
				close(stopped)
			}
		}
	}}), m.DB, nil)
	waitCount(t, k, topic, 50, 30*time.Second)
	if err := insertRows(ctx, m.DB, rowsOf("c", "room-c", 0, 40)); err != nil {
		t.Fatal(err)
	}
	<-stopped
	y.stop(t)
	mid := committedBinlog(t, k, cfg)
	if mid.Binlog.GTIDSet != "" || mid.Binlog.File != from.Binlog.File || mid.Binlog.Offset <= from.Binlog.Offset {
		t.Fatalf("position after streaming from %+v: %+v, want a later file/offset one without a GTID set", from.Binlog, mid.Binlog)
	}
	t.Logf("stopped at %+v", mid.Binlog)

	if err := insertRows(ctx, m.DB, rowsOf("d", "room-d", 0, 10)); err != nil {
		t.Fatal(err)
	}
	z := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, topic, 100, 30*time.Second)
	// The last rows may commit before their transaction's end event: the
	// position moves past it on the next heartbeat, with no rows.
	testenv.Eventually(t, 10*time.Second, "a position between transactions", func() bool {
		return committedBinlog(t, k, cfg).Binlog.Rows == 0
	})
	z.stop(t)
	if end := committedBinlog(t, k, cfg); end.Binlog.GTIDSet != "" || end.Binlog.Rows != 0 {
		t.Errorf("final position %+v, want file/offset between transactions", end.Binlog)
	}
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, topic))
}

// TestBinlogFailover: the relay reads primary A (the shared binlog
// server), which replica B replicates from the test's start on
// (log_slave_updates: B's binlog has A's transactions under their GTIDs). After a failover to B, a GTID position continues there
// exactly once, across a restart on B; a file/offset position of A names a
// binlog file B does not have and stops with the purged error and metric,
// relaying nothing. (A failover target whose binlog files have A's names
// cannot be told from A by a file/offset position: use GTIDs, or a
// log_bin basename per server.)
func TestBinlogFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := sharedBinlogServer(t)
	b, err := tempmariadb.Start(ctx, tempmariadb.Options{Binlog: true, ServerID: 12,
		Args: []string{"--log-slave-updates", "--log-bin=replica-bin"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	var from string
	if err := open(t, a.DSN).QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&from); err != nil {
		t.Fatal(err)
	}
	bAdmin := open(t, b.DSN)
	for _, q := range []string{
		"SET GLOBAL gtid_slave_pos = '" + from + "'",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_USE_GTID=slave_pos", a.Port),
		"START SLAVE",
	} {
		if _, err := bAdmin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	onA := binlogDB(t) // created and migrated on B too
	dc, err := mysql.ParseDSN(onA.DSN)
	if err != nil {
		t.Fatal(err)
	}
	dc.Addr = fmt.Sprintf("127.0.0.1:%d", b.Port)
	onB := &testenv.MySQL{DB: open(t, dc.FormatDSN()), DSN: dc.FormatDSN(), Name: onA.Name}

	k := newKafka(t)
	cfg := binlogConfig(testConfig(t, k), onA)
	topic := cfg.Topic
	if err := insertRows(ctx, onA.DB, rowsOf("a", "room-a", 0, 30)); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, onA.DB, nil)
	waitCount(t, k, topic, 30, 30*time.Second)
	x.stop(t)
	onPrimary := committedBinlog(t, k, cfg)

	// The failover: B has caught up with A and becomes the primary.
	var gtid string
	if err := onA.DB.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&gtid); err != nil {
		t.Fatal(err)
	}
	var waited int
	if err := bAdmin.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 30)", gtid).Scan(&waited); err != nil || waited != 0 {
		t.Fatalf("replica did not reach %s: %d, %v", gtid, waited, err)
	}
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL"} {
		if _, err := bAdmin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	onNew := cfg
	onNew.Binlog.DSN = onB.DSN
	if err := insertRows(ctx, onB.DB, rowsOf("b", "room-b", 0, 20)); err != nil {
		t.Fatal(err)
	}
	y := startRelay(t, onNew, onB.DB, nil)
	waitCount(t, k, topic, 50, 30*time.Second)
	y.stop(t)
	// A restart on B resumes from a GTID B's own server id wrote.
	if err := insertRows(ctx, onB.DB, rowsOf("c", "room-c", 0, 10)); err != nil {
		t.Fatal(err)
	}
	y = startRelay(t, onNew, onB.DB, nil)
	waitCount(t, k, topic, 60, 30*time.Second)
	y.stop(t)
	if p := committedBinlog(t, k, onNew); !strings.HasPrefix(p.Binlog.GTIDSet, "0-12-") {
		t.Errorf("position on the new primary %+v, want its GTID 0-12-*", p.Binlog)
	}
	checkExactlyOnce(t, loadOracle(t, onB.DB), drain(t, k, topic))

	fileOffset := onNew
	fileOffset.TransactionalID += "-fo"
	asFileOffset(t, k, fileOffset, onPrimary)
	logs := &testenv.SyncBuffer{}
	z := startRelay(t, fileOffset, onB.DB, slog.New(slog.NewTextHandler(logs, nil)))
	testenv.Eventually(t, 20*time.Second, "roomflow_relay_binlog_purged = 1 and the purged error", func() bool {
		return metric(t, z.reg, "roomflow_relay_binlog_purged") == 1 &&
			strings.Contains(logs.String(), "relay: the binlog at the stored position "+onPrimary.Binlog.File)
	})
	z.stop(t)
	if n := len(drain(t, k, topic)); n != 60 {
		t.Errorf("%d records after the file/offset relay on the new primary, want the 60 before it", n)
	}
}

// open is a pool on dsn closed with the test.
func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
