package mysqlsink_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/testenv"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// errDead is what every operation of a crashConnector returns once the
// simulated process is dead.
var errDead = errors.New("crash connector: process dead")

// crashConnector wraps the MySQL driver's connector to inject a crash at
// the connection level, independent of the store's own hooks: the
// crashAt-th batch transaction (one that locks roomflow_sink_offsets FOR
// UPDATE, i.e. Store.Apply) really commits on the server, then the client
// sees a lost connection (driver.ErrBadConn) instead of the commit's OK.
// With die set, the process is dead from then on: no connection and no
// statement succeeds any more.
type crashConnector struct {
	inner   driver.Connector
	crashAt int64
	die     bool
	// before runs right before the crashing commit is sent.
	before  func()
	batches atomic.Int64
	dead    atomic.Bool
	crashed chan struct{}
}

func newCrashConnector(t *testing.T, dsn string, crashAt int64, die bool) *crashConnector {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &crashConnector{inner: inner, crashAt: crashAt, die: die, crashed: make(chan struct{})}
}

func (c *crashConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.dead.Load() {
		return nil, errDead
	}
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &crashConn{Conn: conn, c: c}, nil
}

func (c *crashConnector) Driver() driver.Driver { return c.inner.Driver() }

type crashConn struct {
	driver.Conn
	c     *crashConnector
	batch bool // the open transaction locked the offsets rows (an Apply)
}

func (cn *crashConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if cn.c.dead.Load() {
		return nil, errDead
	}
	tx, err := cn.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	cn.batch = false
	return &crashTx{Tx: tx, cn: cn}, nil
}

func (cn *crashConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if cn.c.dead.Load() {
		return nil, errDead
	}
	return cn.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (cn *crashConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if cn.c.dead.Load() {
		return nil, errDead
	}
	if strings.Contains(q, "roomflow_sink_offsets") && strings.HasSuffix(q, "FOR UPDATE") {
		cn.batch = true
	}
	return cn.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (cn *crashConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	if cn.c.dead.Load() {
		return nil, errDead
	}
	return cn.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (cn *crashConn) CheckNamedValue(nv *driver.NamedValue) error {
	return cn.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

func (cn *crashConn) ResetSession(ctx context.Context) error {
	if cn.c.dead.Load() {
		return driver.ErrBadConn
	}
	return cn.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (cn *crashConn) IsValid() bool {
	return !cn.c.dead.Load() && cn.Conn.(driver.Validator).IsValid()
}

type crashTx struct {
	driver.Tx
	cn *crashConn
}

func (tx *crashTx) Commit() error {
	c := tx.cn.c
	if !tx.cn.batch || c.batches.Add(1) != c.crashAt {
		return tx.Tx.Commit()
	}
	if c.before != nil {
		c.before()
	}
	if err := tx.Tx.Commit(); err != nil {
		return err
	}
	if c.die {
		c.dead.Store(true)
	}
	close(c.crashed)
	return driver.ErrBadConn // the OK never reached the client
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
		cc := newCrashConnector(t, e.m.DSN, at, true)
		var before int64
		cc.before = func() { before = sum() }
		e.sinkDB = sql.OpenDB(cc)
		r := e.start(t, e.cfg)
		select {
		case <-cc.crashed:
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
	cc := newCrashConnector(t, e.m.DSN, 2, false)
	e.sinkDB = sql.OpenDB(cc)
	defer e.sinkDB.Close()
	r := e.start(t, e.cfg)
	e.waitCaughtUp(t, e.cfg.Group, 90*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cc.crashed:
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
	st := newStore(t, m.DB, "g")
	tp := mysqlsink.TP{Topic: "ledger", Partition: 0}
	claims, err := st.Claim(ctx, "o", []mysqlsink.TP{tp}, 1)
	if err != nil {
		t.Fatal(err)
	}
	gen := map[mysqlsink.TP]int64{tp: claims[tp].Generation}
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
