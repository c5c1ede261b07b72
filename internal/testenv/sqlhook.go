package testenv

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// SQLHooks inject faults at the connection level of a database/sql pool,
// below the code under test and independent of its own hooks (OpenHooked).
// Every hook may be nil; they run on the calling goroutine of the pool's
// user, concurrently for concurrent connections.
type SQLHooks struct {
	// Connect runs before a new connection is opened; an error fails it.
	Connect func() error
	// Statement runs before a statement is sent (query is "BEGIN" for a
	// transaction's start); an error fails the statement instead.
	Statement func(ctx context.Context, query string) error
	// Commit replaces a transaction's commit: commit is the real one,
	// stmts the transaction's statements so far, and what Commit returns
	// is what the client sees (e.g. driver.ErrBadConn after a successful
	// commit: the answer was lost).
	Commit func(stmts []string, commit func() error) error
}

// OpenHooked opens a pool on dsn (a go-sql-driver/mysql DSN) whose
// connections run h; it is closed when the test ends.
func OpenHooked(t testing.TB, dsn string, h SQLHooks) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(&hookConnector{inner: inner, h: h})
	t.Cleanup(func() { db.Close() })
	return db
}

type hookConnector struct {
	inner driver.Connector
	h     SQLHooks
}

func (c *hookConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.h.Connect != nil {
		if err := c.h.Connect(); err != nil {
			return nil, err
		}
	}
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: conn, h: c.h}, nil
}

func (c *hookConnector) Driver() driver.Driver { return c.inner.Driver() }

// hookConn passes everything through to the MySQL driver's connection
// (which implements each of these interfaces), running the hooks first.
type hookConn struct {
	driver.Conn
	h     SQLHooks
	stmts []string // of the open transaction
}

func (cn *hookConn) statement(ctx context.Context, q string) error {
	cn.stmts = append(cn.stmts, q)
	if cn.h.Statement == nil {
		return nil
	}
	return cn.h.Statement(ctx, q)
}

func (cn *hookConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	cn.stmts = nil
	if err := cn.statement(ctx, "BEGIN"); err != nil {
		return nil, err
	}
	tx, err := cn.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &hookTx{Tx: tx, cn: cn}, nil
}

func (cn *hookConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if err := cn.statement(ctx, q); err != nil {
		return nil, err
	}
	return cn.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (cn *hookConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if err := cn.statement(ctx, q); err != nil {
		return nil, err
	}
	return cn.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (cn *hookConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	if err := cn.statement(ctx, q); err != nil {
		return nil, err
	}
	return cn.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (cn *hookConn) CheckNamedValue(nv *driver.NamedValue) error {
	return cn.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

func (cn *hookConn) ResetSession(ctx context.Context) error {
	return cn.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (cn *hookConn) IsValid() bool { return cn.Conn.(driver.Validator).IsValid() }

type hookTx struct {
	driver.Tx
	cn *hookConn
}

func (tx *hookTx) Commit() error {
	stmts := tx.cn.stmts
	tx.cn.stmts = nil
	if tx.cn.h.Commit == nil {
		return tx.Tx.Commit()
	}
	return tx.cn.h.Commit(stmts, tx.Tx.Commit)
}

func (tx *hookTx) Rollback() error {
	tx.cn.stmts = nil
	return tx.Tx.Rollback()
}
