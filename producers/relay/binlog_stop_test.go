package relay_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/producers/relay"
)

// TestBinlogStopAfterBudgetCutInsideTransaction (issue 33): one MySQL
// transaction of 40 rows of 500 payload bytes under relay.max_batch_bytes
// 1,250: the budget cuts each batch inside the transaction after two rows,
// before the row that would take it past the budget (inside one binlog rows
// event, so the cut is the budget's, not an idle stream's). The relay is
// stopped right after each of three such batches commits and started again
// from the stored position: every row of the transaction is relayed exactly
// once. It pins the stored position counting only the rows of the batch,
// not the row that starts the next one.
func TestBinlogStopAfterBudgetCutInsideTransaction(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	const rows, size = 40, 500
	cfg.MaxBatchBytes = 2*size + size/2
	txn := rowsOf("txn", "room-txn", 0, rows)
	for i := range txn {
		txn[i].payload = payloadFor(txn[i].eventID, size)
	}
	write := func() {
		tx, err := m.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := insertRows(ctx, tx, txn); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	next := uint64(0)
	for i := range 3 {
		var b relay.BatchInfo
		if i == 0 {
			b = stopAfterRowsCommit(t, cfg, m.DB, write) // after the first start's (empty) snapshot
		} else {
			b = stopAfterRowsCommit(t, cfg, m.DB, nil)
		}
		if b.Rows != 2 || b.ReadBytes != 2*size || b.ReadBytes+size <= cfg.MaxBatchBytes {
			t.Fatalf("stop %d after %+v, want two rows the budget cut before a third", i, b)
		}
		if next != 0 && b.FirstID != next {
			t.Fatalf("stop %d after ids %d..%d, want the transaction's rows from id %d on", i, b.FirstID, b.LastID, next)
		}
		next = b.LastID + 1
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, cfg.Topic, rows, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // let a wrong duplicate arrive
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))
}

// TestBinlogStopMidSnapshot (issue 33): a first start snapshots 350 rows in
// batches of 100; the relay is stopped right after the first snapshot batch
// commits, and again right after the first batch of the snapshot the next
// start resumes from the rows done. The third start finishes the snapshot
// and streams the rows written since: every row exactly once. It pins the
// snapshot's batches storing a position without a binlog part (the
// snapshot's own binlog position only with its last batch) and the ids they
// relayed.
func TestBinlogStopMidSnapshot(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	ctx := context.Background()
	cfg := binlogConfig(testConfig(t, k), m)
	cfg.BatchSize = 100
	for i := range 7 {
		if err := insertRows(ctx, m.DB, rowsOf("pre", "room-pre", i*50, 50)); err != nil {
			t.Fatal(err)
		}
	}
	first := stopAfterRowsCommit(t, cfg, m.DB, nil)
	if first.Rows != cfg.BatchSize || first.FirstID != 1 {
		t.Fatalf("stopped after %+v, want the snapshot's first batch of %d rows", first, cfg.BatchSize)
	}
	resumed := stopAfterRowsCommit(t, cfg, m.DB, nil)
	if resumed.Rows != cfg.BatchSize || resumed.FirstID != first.LastID+1 {
		t.Fatalf("the restart's first batch is %+v, want the snapshot's %d rows after id %d", resumed, cfg.BatchSize, first.LastID)
	}
	if err := insertRows(ctx, m.DB, rowsOf("post", "room-post", 0, 20)); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, cfg.Topic, 370, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // let a wrong duplicate arrive
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))
}

// stopAfterRowsCommit runs a relay on cfg and stops it right after its
// first batch of rows commits: Run's context is cancelled inside that
// commit's AfterCommit hook, so no later batch can commit. write, if not
// nil, runs once the relay committed its first batch of any kind (on a
// first start, the end of the snapshot). It returns the batch stopped after.
func stopAfterRowsCommit(t *testing.T, cfg relay.Config, db *sql.DB, write func()) relay.BatchInfo {
	t.Helper()
	var x *running
	started := make(chan struct{})
	anyCommit := make(chan struct{})
	rowsCommit := make(chan relay.BatchInfo, 1)
	var firstAny, firstRows sync.Once
	x = startRelay(t, withHooks(cfg, relay.Hooks{AfterCommit: func(b relay.BatchInfo, err error) {
		if err != nil {
			return
		}
		firstAny.Do(func() { close(anyCommit) })
		if b.Rows > 0 {
			firstRows.Do(func() {
				<-started
				x.cancel()
				rowsCommit <- b
			})
		}
	}}), db, nil)
	close(started)
	if write != nil {
		select {
		case <-anyCommit:
		case <-time.After(30 * time.Second):
			t.Fatal("the relay committed nothing within 30s")
		}
		write()
	}
	var b relay.BatchInfo
	select {
	case b = <-rowsCommit:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch of rows committed within 30s")
	}
	x.stop(t)
	return b
}
