package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
)

// Statement kinds of dbStats, by a statement's first keyword.
const (
	kindBegin = iota
	kindSelect
	kindInsert
	kindUpdate
	kindCommit // COMMIT and ROLLBACK
	kindOther
	nKinds
)

var kindNames = [nKinds]string{"begin", "select", "insert", "update", "commit", "other"}

func kindOf(q string) int {
	q = strings.TrimLeft(q, " \t\n(")
	word, _, _ := strings.Cut(q, " ")
	switch strings.ToUpper(word) {
	case "SELECT":
		return kindSelect
	case "INSERT", "REPLACE":
		return kindInsert
	case "UPDATE", "DELETE":
		return kindUpdate
	}
	return kindOther
}

// dbStats counts the statements a pool sends and the time it waits for
// each kind (from sending it to its answer's header: for a query, before
// its rows are read).
type dbStats struct {
	stmts atomic.Int64
	rows  atomic.Int64 // rows written (rowsWritten)
	nanos [nKinds]atomic.Int64
}

func (s *dbStats) add(kind int, n int64, t0 time.Time) {
	s.stmts.Add(n)
	s.nanos[kind].Add(int64(time.Since(t0)))
}

// snapshot is the statements and per-kind waits so far.
func (s *dbStats) snapshot() dbSnapshot {
	var d dbSnapshot
	d.stmts = s.stmts.Load()
	d.rows = s.rows.Load()
	for k := range d.wait {
		d.wait[k] = time.Duration(s.nanos[k].Load())
	}
	return d
}

type dbSnapshot struct {
	stmts int64
	rows  int64
	wait  [nKinds]time.Duration
}

func (a dbSnapshot) sub(b dbSnapshot) dbSnapshot {
	a.stmts -= b.stmts
	a.rows -= b.rows
	for k := range a.wait {
		a.wait[k] -= b.wait[k]
	}
	return a
}

// openCounting opens a pool on dsn, tuned as mysqlx.Open tunes roomflow's
// pools (interpolated params: one round trip per statement) and sized as
// config's mysql defaults, whose connections count every statement they
// send to the server into n, with the time waited per kind: each Exec and
// Query, each BEGIN, COMMIT and ROLLBACK, and the prepare, execute and
// close of a prepared statement.
//
// The count is the client's, per pool, so it is exact on a shared server
// where SHOW GLOBAL STATUS's Questions also counts the other clients.
func openCounting(ctx context.Context, dsn string, n *dbStats) (*sql.DB, error) {
	dc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, errors.New("mysql: the DSN does not parse")
	}
	mysqlx.Tune(dc)
	c, err := mysql.NewConnector(dc)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(countingConnector{c, n})
	cfg := config.Default().MySQL
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxIdleConns)
	db.SetConnMaxLifetime(cfg.ConnMaxLife.D())
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: ping %s: %w", dc.Addr, err)
	}
	return db, nil
}

type countingConnector struct {
	driver.Connector
	n *dbStats
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{conn: conn, n: c.n}, nil
}

// countingConn forwards to the MySQL driver's connection, which
// implements every optional interface below. Rows written inside a
// transaction count once it commits: a rolled back attempt (a deadlock,
// a draw timeout) writes nothing.
type countingConn struct {
	conn    driver.Conn
	n       *dbStats
	inTx    bool
	pending int64 // rows written by the open transaction
}

// wrote counts rows written by a statement of c.
func (c *countingConn) wrote(rows int64) {
	if c.inTx {
		c.pending += rows
		return
	}
	c.n.rows.Add(rows)
}

// endTx ends c's transaction, its rows counted if committed.
func (c *countingConn) endTx(committed bool) {
	if committed {
		c.n.rows.Add(c.pending)
	}
	c.inTx, c.pending = false, 0
}

var (
	_ driver.ExecerContext      = (*countingConn)(nil)
	_ driver.QueryerContext     = (*countingConn)(nil)
	_ driver.ConnBeginTx        = (*countingConn)(nil)
	_ driver.ConnPrepareContext = (*countingConn)(nil)
	_ driver.SessionResetter    = (*countingConn)(nil)
	_ driver.Validator          = (*countingConn)(nil)
	_ driver.NamedValueChecker  = (*countingConn)(nil)
	_ driver.Pinger             = (*countingConn)(nil)
)

func (c *countingConn) Prepare(q string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), q)
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	t0 := time.Now()
	s, err := c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.n.add(kindOther, 2, t0) // prepare and close
	return countingStmt{s, c, kindOf(q)}, nil
}

func (c *countingConn) Close() error { return c.conn.Close() }

func (c *countingConn) Begin() (driver.Tx, error) { //nolint:staticcheck // driver.Conn requires it
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *countingConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	t0 := time.Now()
	tx, err := c.conn.(driver.ConnBeginTx).BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	c.n.add(kindBegin, 1, t0)
	c.inTx, c.pending = true, 0
	return countingTx{tx, c}, nil
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	t0 := time.Now()
	r, err := c.conn.(driver.ExecerContext).ExecContext(ctx, q, args)
	// A multi-statement query (the draw batch's writes, joined by ";\n"
	// with placeholders: no data in q) counts each statement, its time
	// on the first.
	stmts := strings.Split(q, ";\n")
	if !errors.Is(err, driver.ErrSkip) {
		for i, s := range stmts {
			if i == 0 {
				c.n.add(kindOf(s), 1, t0)
			} else {
				c.n.add(kindOf(s), 1, time.Now())
			}
		}
	}
	if err == nil {
		affected := []int64{0}
		if m, ok := r.(mysql.Result); ok {
			affected = m.AllRowsAffected()
		} else {
			affected[0], _ = r.RowsAffected()
		}
		for i, s := range stmts {
			if i < len(affected) {
				c.wrote(rowsWritten(s, affected[i]))
			}
		}
	}
	return r, err
}

// rowsWritten is how many rows statement q wrote, each inserted or
// updated row once: an upsert's value groups (MySQL's affected rows count
// an updated row twice), else the affected rows (INSERT IGNORE: those
// inserted; UPDATE: those changed).
func rowsWritten(q string, affected int64) int64 {
	if head, _, upsert := strings.Cut(q, "ON DUPLICATE KEY UPDATE"); upsert && kindOf(q) == kindInsert {
		_, values, _ := strings.Cut(head, "VALUES")
		return int64(strings.Count(values, "("))
	}
	return affected
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	t0 := time.Now()
	r, err := c.conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.add(kindOf(q), 1, t0)
	}
	return r, err
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	return c.conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *countingConn) IsValid() bool { return c.conn.(driver.Validator).IsValid() }

func (c *countingConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

func (c *countingConn) Ping(ctx context.Context) error { return c.conn.(driver.Pinger).Ping(ctx) }

type countingTx struct {
	tx driver.Tx
	c  *countingConn
}

func (t countingTx) Commit() error {
	defer t.c.n.add(kindCommit, 1, time.Now())
	err := t.tx.Commit()
	t.c.endTx(err == nil)
	return err
}

func (t countingTx) Rollback() error {
	defer t.c.n.add(kindCommit, 1, time.Now())
	t.c.endTx(false)
	return t.tx.Rollback()
}

type countingStmt struct {
	driver.Stmt
	c    *countingConn
	kind int
}

func (s countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	defer s.c.n.add(s.kind, 1, time.Now())
	r, err := s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	if err == nil && s.kind != kindSelect {
		n, _ := r.RowsAffected()
		s.c.wrote(n)
	}
	return r, err
}

func (s countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	defer s.c.n.add(s.kind, 1, time.Now())
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}
