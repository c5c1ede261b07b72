package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
)

// openCounting opens a pool on dsn, tuned as mysqlx.Open tunes roomflow's
// pools (interpolated params: one round trip per statement) and sized as
// config's mysql defaults, whose connections count every statement they
// send to the server into n: each Exec and Query, each BEGIN, COMMIT and
// ROLLBACK, and the prepare, execute and close of a prepared statement.
//
// The count is the client's, per pool, so it is exact on a shared server
// where SHOW GLOBAL STATUS's Questions also counts the other clients.
func openCounting(ctx context.Context, dsn string, n *atomic.Int64) (*sql.DB, error) {
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
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{conn: conn, n: c.n}, nil
}

// countingConn forwards to the MySQL driver's connection, which
// implements every optional interface below.
type countingConn struct {
	conn driver.Conn
	n    *atomic.Int64
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
	s, err := c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.n.Add(2) // prepare and close
	return countingStmt{s, c.n}, nil
}

func (c *countingConn) Close() error { return c.conn.Close() }

func (c *countingConn) Begin() (driver.Tx, error) { //nolint:staticcheck // driver.Conn requires it
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *countingConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	tx, err := c.conn.(driver.ConnBeginTx).BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	c.n.Add(1)
	return countingTx{tx, c.n}, nil
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.conn.(driver.ExecerContext).ExecContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.Add(1)
	}
	return r, err
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.n.Add(1)
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
	n  *atomic.Int64
}

func (t countingTx) Commit() error   { t.n.Add(1); return t.tx.Commit() }
func (t countingTx) Rollback() error { t.n.Add(1); return t.tx.Rollback() }

type countingStmt struct {
	driver.Stmt
	n *atomic.Int64
}

func (s countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.n.Add(1)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.n.Add(1)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}
