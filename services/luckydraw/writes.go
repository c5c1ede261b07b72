package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// writes are a batch's statements after its locking reads (pools, counters,
// daily facts, outbox, records), sent to MySQL in one round trip as a
// multi-statement query: the pool rows stay locked from their read until
// COMMIT, and on a busy server that time goes by round trips, not rows
// (docs/performance.md, "Fewer round trips under the pool locks"). A pool
// that does not take multi-statement queries with interpolated parameters
// (mysqlx.Tune sets both) gets the statements one by one.
type writes struct {
	queries []string
	args    []any
	nargs   []int // args per query
}

// add queues head + one (?, ...) group per row + tail; nothing for no
// rows.
func (w *writes) add(head string, rows [][]any, tail ...string) {
	if len(rows) == 0 {
		return
	}
	q, args := rowsQuery(head, rows, tail...)
	w.queries = append(w.queries, q)
	w.args = append(w.args, args...)
	w.nargs = append(w.nargs, len(args))
}

// How a pool takes writes (Service.writeMode): not known until the first
// batch's writes, then one query or one statement at a time.
const (
	writesUnknown int32 = iota
	writesMulti
	writesSingle
)

// exec sends the queued statements in tx: as one query while mode allows
// it, finding out with the first batch (a pool without multi-statements
// refuses the whole query before running any of it).
func (w *writes) exec(ctx context.Context, tx *sql.Tx, mode *atomic.Int32) error {
	if len(w.queries) == 0 {
		return nil
	}
	m := mode.Load()
	if m != writesSingle && len(w.queries) > 1 {
		_, err := tx.ExecContext(ctx, strings.Join(w.queries, ";\n"), w.args...)
		if err == nil || m == writesMulti || !multiRefused(err) {
			if err == nil {
				mode.Store(writesMulti)
			}
			return err
		}
		mode.Store(writesSingle)
	}
	at := 0
	for i, q := range w.queries {
		if _, err := tx.ExecContext(ctx, q, w.args[at:at+w.nargs[i]]...); err != nil {
			return err
		}
		at += w.nargs[i]
	}
	return nil
}

// multiRefused tells the errors of a pool without multi-statements: a
// syntax error at the first ';' (1064), or a multi-statement prepared
// without interpolated parameters (1295, or 1064 from the prepare).
func multiRefused(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1064 || me.Number == 1295)
}
