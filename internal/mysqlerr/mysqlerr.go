// Package mysqlerr classifies MySQL errors for the retry loops of every
// MySQL writer (the sink's batches, the draw service's transactions, the
// lucky outbox's records): which are transient, and a short label for
// metrics; InTx is the retry loop of a whole transaction. It has no dependency on roomflow's config, so components may
// import it.
package mysqlerr

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/go-sql-driver/mysql"
)

// Retryable reports whether err is transient for a retry of the whole
// transaction: a deadlock (1213), a lock wait timeout (1205), a duplicate
// key inserted concurrently (1062: the retry reads what the other writer
// committed), or a lost connection. The transaction was rolled back, or
// its outcome is unknown: callers retry only writes that are idempotent
// (the sink's offsets check and event_id dedupe, the draw's command_id).
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213, 1205, 1062, 1053, 1927, 2006, 2013, 1158, 1159, 1160, 1161:
			return true
		}
		return false
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) || errors.As(err, &ne)
}

// Reasons are the values Reason returns besides "mysql_<number>": what a
// retry counter labelled by Reason pre-creates at 0.
var Reasons = []string{"deadlock", "lock_wait_timeout", "duplicate_key", "connection"}

// Reason is a short label for metrics.
func Reason(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213:
			return "deadlock"
		case 1205:
			return "lock_wait_timeout"
		case 1062:
			return "duplicate_key"
		}
		return fmt.Sprintf("mysql_%d", me.Number)
	}
	return "connection"
}

// Beginner starts transactions: a *sql.DB, or a *sql.Conn whose session
// settings the transactions need.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// InTx runs fn in a transaction with opts and commits it, again from the
// start after a Retryable error, up to attempts times while ctx lasts:
// the draw transactions, the outbox and the operator commands touch the
// same rows, and MySQL may pick any of them as a deadlock victim. fn must
// be safe to run again (it re-reads what it decides on).
func InTx(ctx context.Context, b Beginner, opts *sql.TxOptions, attempts int, fn func(*sql.Tx) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = inTxOnce(ctx, b, opts, fn); err == nil || !Retryable(err) || attempt >= attempts || ctx.Err() != nil {
			return err
		}
	}
}

func inTxOnce(ctx context.Context, b Beginner, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
