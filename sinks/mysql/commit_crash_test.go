package mysqlsink_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// errDead is what every statement of a crashed sink's pool returns.
var errDead = errors.New("test: process dead")

// commitCrash opens a pool on dsn that crashes at the connection level,
// independent of the store's own hooks: the crashAt-th batch transaction
// (one that locks roomflow_sink_offsets FOR UPDATE, i.e. Store.Apply)
// really commits on the server, then the client sees a lost connection
// (driver.ErrBadConn) instead of the commit's OK. With die set the process
// is dead from then on: no connection and no statement succeeds. before
// runs right before the crashing commit is sent; crashed is closed after.
func commitCrash(t *testing.T, dsn string, crashAt int64, die bool, before func()) (db *sql.DB, crashed <-chan struct{}) {
	var batches atomic.Int64
	var dead atomic.Bool
	done := make(chan struct{})
	alive := func() error {
		if dead.Load() {
			return errDead
		}
		return nil
	}
	db = testenv.OpenHooked(t, dsn, testenv.SQLHooks{
		Connect:   alive,
		Statement: func(context.Context, string) error { return alive() },
		Commit: func(stmts []string, commit func() error) error {
			batch := slices.ContainsFunc(stmts, func(q string) bool {
				return strings.Contains(q, "roomflow_sink_offsets") && strings.HasSuffix(q, "FOR UPDATE")
			})
			if !batch || batches.Add(1) != crashAt {
				return commit()
			}
			if before != nil {
				before()
			}
			if err := commit(); err != nil {
				return err
			}
			dead.Store(die)
			close(done)
			return driver.ErrBadConn // the OK never reached the client
		},
	})
	return db, done
}

// TestCrashRightAfterCommit: the sink's process dies right after a batch's
// COMMIT reached MySQL, before the client saw its answer (a wrapping
// database/sql driver, so this does not depend on where the store's own
// hooks sit), at three points of the run. After each crash the stored
// offsets must equal the consumed event ids (the crashed batch counted
// once, with its offsets), and a fresh instance continues from them. Then
// a sink that survives such a lost commit answer retries the batch on a
// new connection, which must find it applied (records behind the stored
// offsets) and apply nothing twice. The tables end equal to the oracle.
func TestCrashRightAfterCommit(t *testing.T) {
	e := newEnv(t, 3)
	e.cfg.BatchSize = 200
	e.cfg.Parallelism = 1
	ctx := context.Background()
	ledger := sinktest.NewLedgerGen(41, "hyapp", 300).Next(4000)
	inflows := sinktest.NewInflowGen(42, "hyapp", 5, 2).Next(600)
	o := e.produce(t, ledger, inflows)
	sum := func() (n int64) {
		for _, v := range stored(t, e.m.DB, e.cfg.Group) {
			n += max(v, 0)
		}
		return n
	}
	for i, at := range []int64{1, 2, 4} {
		var before int64
		db, crashed := commitCrash(t, e.m.DSN, at, true, func() { before = sum() })
		e.sinkDB = db
		r := e.start(t, e.cfg)
		select {
		case <-crashed:
		case err := <-r.done:
			t.Fatalf("crash %d: sink stopped before the crash: %v", i, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("crash %d: batch %d never committed", i, at)
		}
		_ = r.stop(t)
		_ = e.sinkDB.Close()
		after := sum()
		if after <= before {
			t.Fatalf("crash %d: stored offsets %d after the crash, %d before its commit: the crashed batch did not commit", i, after, before)
		}
		e.offsetsAgreeWithFacts(t, fmt.Sprintf("crash %d right after batch %d's COMMIT", i, at))
	}

	// A lost commit answer the sink survives: it retries the batch.
	db, crashed := commitCrash(t, e.m.DSN, 2, false, nil)
	e.sinkDB = db
	r := e.start(t, e.cfg)
	e.waitCaughtUp(t, e.cfg.Group, 90*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	select {
	case <-crashed:
	default:
		t.Fatal("the lost commit answer was never injected")
	}
	if testenv.Total(r.sink.Metrics().Retries) == 0 {
		t.Fatal("the sink did not retry the batch whose commit answer was lost")
	}
	e.offsetsAgreeWithFacts(t, "a lost commit answer and the batch's retry")
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption"); n != int64(len(o.Consumed)) {
		t.Fatalf("consumption rows %d, want %d", n, len(o.Consumed))
	}
}

// TestApplySkipsExactlyWhatIsStored: a replayed batch overlapping the
// stored offset by exactly one record (the retry of a batch whose commit
// answer was lost, partly re-fetched) skips the records below the stored
// offset and no more: the record at the stored offset is applied, the one
// just below it is counted behind, not handed to the applier to be
// deduplicated. A replay wholly below the stored offset keeps it (the
// stored offset never goes back, as reported in Result.Offsets).
func TestApplySkipsExactlyWhatIsStored(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	st, tp, gen := claimedStore(t, m.DB)
	ledger := sinktest.NewLedgerGen(5, "hyapp", 5).Next(20)
	if _, err := st.Apply(ctx, "o", gen, ledgerRecords(tp, 0, ledger[:10]), 2); err != nil {
		t.Fatal(err)
	}
	// Offsets 9..19: 9 is stored already, 10 is the first new one.
	res, err := st.Apply(ctx, "o", gen, ledgerRecords(tp, 9, ledger[9:]), 3)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Applied["ledger"].Consumed; res.Behind != 1 || c.Applied != 10 || c.Deduplicated != 0 {
		t.Fatalf("behind %d, consumed %+v; want 1 behind, 10 applied, none deduplicated", res.Behind, c)
	}
	if res.Offsets[tp] != 20 {
		t.Fatalf("offsets %v, want %s at 20", res.Offsets, tp)
	}
	// A replay of offsets 0..4: all behind, the stored offset stays 20.
	res, err = st.Apply(ctx, "o", gen, ledgerRecords(tp, 0, ledger[:5]), 4)
	if err != nil {
		t.Fatal(err)
	}
	if res.Behind != 5 || res.Offsets[tp] != 20 || len(res.Applied) != 0 {
		t.Fatalf("replay below the stored offset: behind %d, offsets %v, applied %+v; want 5 behind, 20, nothing applied", res.Behind, res.Offsets, res.Applied)
	}
	if got := stored(t, m.DB, "g")[tp]; got != 20 {
		t.Fatalf("stored offset %d, want 20", got)
	}
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatal(err)
	}
}

// claimedStore is a store of group "g" (newStore) on db whose owner "o"
// has claimed partition 0 of topic "ledger": the partition and the claims
// Apply takes.
func claimedStore(t *testing.T, db *sql.DB) (*mysqlsink.Store, mysqlsink.TP, map[mysqlsink.TP]int64) {
	t.Helper()
	st := newStore(t, db, "g")
	tp := mysqlsink.TP{Topic: "ledger", Partition: 0}
	claims, err := st.Claim(context.Background(), "o", []mysqlsink.TP{tp}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st, tp, map[mysqlsink.TP]int64{tp: claims[tp].Generation}
}
