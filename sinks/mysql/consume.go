package mysqlsink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/sqlbuild"
)

// Tx is the engine's MySQL transaction as an Applier sees it: statements
// only, no Commit or Rollback, which stay with the engine.
type Tx struct {
	tx    *sql.Tx
	nowMs int64
	// chunk caps the rows of one multi-row statement.
	chunk int
}

// defaultChunk is the most rows of one multi-row statement.
const defaultChunk = 1000

// NewTx wraps tx, a transaction the caller commits or rolls back, for an
// applier's statement helpers outside the engine: a rebuild
// (sinks/mysql/rebuild) writes fresh tables with an applier's own
// statements through it. nowMs is the batch's processing time.
func NewTx(tx *sql.Tx, nowMs int64) *Tx { return &Tx{tx: tx, nowMs: nowMs, chunk: defaultChunk} }

// NowMs is the batch's processing time (Unix ms), one value for the whole
// transaction.
func (t *Tx) NowMs() int64 { return t.nowMs }

// ExecContext runs one statement in the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs one query in the transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

// ExecRows writes n rows with multi-row statements of at most the store's
// chunk rows each: head, then row (the placeholders of one row) for each
// row, with add appending the arguments of row i, then tail (an ON
// DUPLICATE KEY UPDATE clause, or "").
func (t *Tx) ExecRows(ctx context.Context, head, row, tail string, n int, add func(i int, args []any) []any) error {
	for lo := 0; lo < n; lo += t.chunk {
		hi := min(n, lo+t.chunk)
		var b strings.Builder
		b.Grow(len(head) + len(tail) + (hi-lo)*(len(row)+1))
		b.WriteString(head)
		var args []any
		for i := lo; i < hi; i++ {
			if i > lo {
				b.WriteByte(',')
			}
			b.WriteString(row)
			args = add(i, args)
		}
		b.WriteString(tail)
		if _, err := t.tx.ExecContext(ctx, b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// EventKey identifies a source event in a consumption table.
type EventKey struct {
	AppCode string
	EventID string
}

// Consumption is an applier's consumption table: one row per source event
// applied, primary key (app_code, event_id). Recording an event there in
// the same transaction as its facts is what makes an Applier idempotent.
type Consumption[T any] struct {
	// Table is the table's name; it labels the sink's record metrics.
	Table string
	// Key is an item's primary key in Table.
	Key func(T) EventKey
	// Head ("INSERT INTO t (cols) VALUES ") and Row ("(?,...)") insert
	// rows; Args appends the values of one item's row.
	Head, Row string
	Args      func(args []any, item T, nowMs int64) []any
}

// Consumed is what Consumption.Consume found.
type Consumed struct {
	Table string
	// Applied items were new: their facts are to be written.
	Applied int
	// Deduplicated items were repeats (of an earlier item in the batch or
	// of a row already in Table) and change nothing.
	Deduplicated int
}

// Consume inserts the rows of items into c.Table and returns the items seen
// for the first time, in order: the first of several items with one key in
// the batch, and none whose key Table already holds. The common case (all
// new) is one optimistic multi-row INSERT per chunk; on a duplicate key the
// attempt is rolled back to a savepoint, the known keys are looked up, and
// only the others are inserted and returned. A concurrent transaction
// inserting the same key makes this one fail with 1062 (Retryable).
func (c Consumption[T]) Consume(ctx context.Context, tx *Tx, items []T) ([]T, Consumed, error) {
	res := Consumed{Table: c.Table}
	if len(items) == 0 {
		return nil, res, nil
	}
	seen := make(map[EventKey]struct{}, len(items))
	uniq := items[:0:0]
	keys := make([]EventKey, 0, len(items))
	for _, it := range items {
		k := c.Key(it)
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		uniq = append(uniq, it)
		keys = append(keys, k)
	}
	insert := func(its []T) error {
		return tx.ExecRows(ctx, c.Head, c.Row, "", len(its), func(i int, a []any) []any { return c.Args(a, its[i], tx.nowMs) })
	}
	known, err := c.optimistic(ctx, tx, keys, func() error { return insert(uniq) })
	if err != nil {
		return nil, res, err
	}
	fresh := uniq
	if known != nil {
		fresh = nil
		for i, it := range uniq {
			if _, ok := known[keys[i]]; !ok {
				fresh = append(fresh, it)
			}
		}
		if err := insert(fresh); err != nil {
			return nil, res, fmt.Errorf("insert %s: %w", c.Table, err)
		}
	}
	res.Applied, res.Deduplicated = len(fresh), len(items)-len(fresh)
	return fresh, res, nil
}

// optimistic runs insert (all keys at once) under a savepoint. It returns
// nil when every key was new. On a duplicate key it rolls back to the
// savepoint, so no chunk of the failed attempt stays behind, and returns
// the keys already in the table; the caller then inserts only the others.
func (c Consumption[T]) optimistic(ctx context.Context, tx *Tx, keys []EventKey, insert func() error) (map[EventKey]struct{}, error) {
	// One statement is rolled back whole by the server on a duplicate
	// key; only several chunks need the savepoint.
	chunked := len(keys) > tx.chunk
	if chunked {
		if _, err := tx.tx.ExecContext(ctx, "SAVEPOINT sink_consume"); err != nil {
			return nil, fmt.Errorf("savepoint: %w", err)
		}
	}
	err := insert()
	if err == nil {
		return nil, nil
	}
	if !isDup(err) {
		return nil, fmt.Errorf("insert %s: %w", c.Table, err)
	}
	if chunked {
		if _, err := tx.tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT sink_consume"); err != nil {
			return nil, fmt.Errorf("rollback to savepoint: %w", err)
		}
	}
	return c.existing(ctx, tx, keys)
}

// existing returns which of keys are already in the table.
func (c Consumption[T]) existing(ctx context.Context, tx *Tx, keys []EventKey) (map[EventKey]struct{}, error) {
	byApp := map[string][]string{}
	for _, k := range keys {
		byApp[k.AppCode] = append(byApp[k.AppCode], k.EventID)
	}
	out := map[EventKey]struct{}{}
	err := tx.QueryIn(ctx, byApp, func(in string) string {
		return "SELECT event_id FROM " + c.Table + " WHERE app_code = ? AND event_id IN (" + in + ")"
	}, func(app string, rows *sql.Rows) error {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		out[EventKey{app, id}] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedupe %s: %w", c.Table, err)
	}
	return out, nil
}

// QueryIn runs query(in) for each app_code of ids (in sorted order) and
// each chunk of its ids, with the arguments (app_code, ids...), where in
// is the chunk's placeholder list, and calls scan on every row with its
// app_code. A row error or an iteration cut short is an error: a lookup
// must never read "absent" for what it did not see.
func (t *Tx) QueryIn(ctx context.Context, ids map[string][]string, query func(in string) string, scan func(app string, rows *sql.Rows) error) error {
	for _, app := range slices.Sorted(maps.Keys(ids)) {
		all := ids[app]
		for lo := 0; lo < len(all); lo += t.chunk {
			chunk := all[lo:min(len(all), lo+t.chunk)]
			rows, err := t.tx.QueryContext(ctx, query(sqlbuild.List(len(chunk))), append([]any{app}, sqlbuild.Args(chunk)...)...)
			if err != nil {
				return err
			}
			for rows.Next() {
				if err := scan(app, rows); err != nil {
					rows.Close()
					return err
				}
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return err
			}
		}
	}
	return nil
}

// isDup reports a duplicate-key error (1062).
func isDup(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}
