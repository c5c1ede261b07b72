package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Source reads room_outbox. It only ever issues plain consistent reads
// (autocommit SELECTs, no FOR UPDATE / LOCK IN SHARE MODE, no SERIALIZABLE),
// so room-service's inserts never wait on the relay, and it never writes the
// table.
//
// Reads are bounded by bytes as well as rows: After and ByIDs read the
// rows' small columns, LENGTH(payload) and the payload only where it is at
// most an inline bound (so the whole read is bounded: rows times the
// inline bound), the caller keeps what fits its Budget, and LoadPayloads
// fetches the larger payloads of just those rows. A batch of 16 MiB rows
// never sits in memory whole, and a batch of ordinary small events still
// takes a single query.
type Source struct {
	db    querier
	pool  *sql.DB // MinID's and AutoIncrement's own connections; nil on a snapshot's
	table string
}

// querier is a *sql.DB, or the *sql.Conn of binlog mode's snapshot
// transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// NewSource reads from table (normally "room_outbox") on db.
func NewSource(db *sql.DB, table string) *Source { return &Source{db: db, pool: db, table: table} }

// Budget bounds the payload bytes one batch reads (relay.max_batch_bytes).
// Used starts at what the batch's reads already brought in (inline
// payloads); Fit then charges each row whose payload is still to be
// loaded. A batch always takes its first row, so a row larger than the
// budget is read alone; a row for which Skip is true (it goes to the DLQ as
// too large) is never loaded and costs nothing.
type Budget struct {
	Max   int
	Used  int
	Skip  func(*Row) bool
	taken int
}

// Fit charges the longest prefix of rows that fits and returns its length.
func (b *Budget) Fit(rows []Row) int {
	for i := range rows {
		cost := 0
		if needsPayload(&rows[i], b.Skip) {
			cost = rows[i].PayloadBytes
		}
		if b.taken > 0 && b.Used+cost > b.Max {
			return i
		}
		b.Used += cost
		b.taken++
	}
	return len(rows)
}

// needsPayload reports whether row's payload is still to be loaded.
func needsPayload(row *Row, skip func(*Row) bool) bool {
	return row.Payload == nil && row.PayloadBytes > 0 && (skip == nil || !skip(row))
}

// PayloadBytes sums the loaded payloads of rows.
func PayloadBytes(rows []Row) int {
	n := 0
	for i := range rows {
		n += len(rows[i].Payload)
	}
	return n
}

// rowColumns are the columns After and ByIDs read: the small ones, bounded
// by the schema's VARCHAR sizes, and the payload only up to an inline
// bound (the first placeholder).
const rowColumns = "id, app_code, event_id, event_type, room_id, room_version, LENGTH(payload), IF(LENGTH(payload) <= ?, payload, NULL), occurred_at_ms"

// After returns up to limit rows with id > after, ascending, with their
// payloads where those are at most inline bytes (see LoadPayloads for the
// rest). Rows whose inserting transaction is still open are invisible to
// this read; the Tracker turns the ids they leave out into holes.
func (s *Source) After(ctx context.Context, after uint64, limit, inline int) ([]Row, error) {
	return s.rows(ctx, "SELECT "+rowColumns+" FROM "+s.table+" WHERE id > ? ORDER BY id LIMIT ?", inline, after, limit)
}

// ByIDs returns the rows among ids that are visible now, ascending, with
// their payloads where those are at most inline bytes.
func (s *Source) ByIDs(ctx context.Context, ids []uint64, inline int) ([]Row, error) {
	var out []Row
	for chunk := range chunks(ids) {
		q, args := inQuery("SELECT "+rowColumns+" FROM "+s.table, chunk)
		m, err := s.rows(ctx, q, append([]any{inline}, args...)...)
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	return out, nil
}

// maxInList bounds one IN list; more ids take several queries.
const maxInList = 1000

func chunks(ids []uint64) func(func([]uint64) bool) {
	return func(yield func([]uint64) bool) {
		for len(ids) > 0 {
			n := min(len(ids), maxInList)
			if !yield(ids[:n]) {
				return
			}
			ids = ids[n:]
		}
	}
}

// inQuery is q + " WHERE id IN (ids) ORDER BY id".
func inQuery(q string, ids []uint64) (string, []any) {
	var b strings.Builder
	args := make([]any, len(ids))
	b.WriteString(q + " WHERE id IN (")
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
		args[i] = id
	}
	b.WriteString(") ORDER BY id")
	return b.String(), args
}

// LoadPayloads reads the payloads After or ByIDs left out into rows
// (except those skip is true for) and returns how many bytes it read.
func (s *Source) LoadPayloads(ctx context.Context, rows []Row, skip func(*Row) bool) (int, error) {
	var load []uint64
	byID := map[uint64]*Row{}
	for i := range rows {
		if needsPayload(&rows[i], skip) {
			load = append(load, rows[i].ID)
			byID[rows[i].ID] = &rows[i]
		}
	}
	read := 0
	for chunk := range chunks(load) {
		q, args := inQuery("SELECT id, payload FROM "+s.table, chunk)
		rs, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return read, fmt.Errorf("relay: read %s: %w", s.table, err)
		}
		got := 0
		for rs.Next() {
			var id uint64
			var p []byte
			if err := rs.Scan(&id, &p); err != nil {
				rs.Close()
				return read, fmt.Errorf("relay: scan %s: %w", s.table, err)
			}
			read += len(p)
			if r := byID[id]; r != nil {
				r.Payload = p
				got++
			}
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return read, fmt.Errorf("relay: read %s: %w", s.table, err)
		}
		if got != len(chunk) {
			// Outbox rows are never deleted before they are relayed; one
			// that vanished between the two reads is a purge racing the
			// relay. The session restarts and reads again.
			return read, fmt.Errorf("relay: %d of %d %s rows vanished between reading their sizes and their payloads", len(chunk)-got, len(chunk), s.table)
		}
	}
	return read, nil
}

func (s *Source) rows(ctx context.Context, q string, args ...any) ([]Row, error) {
	rs, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.ID, &r.AppCode, &r.EventID, &r.EventType, &r.RoomID, &r.RoomVersion, &r.PayloadBytes, &r.Payload, &r.OccurredAtMs); err != nil {
			return nil, fmt.Errorf("relay: scan %s: %w", s.table, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	return out, nil
}

// MinID returns the lowest id in the table, 0 when it is empty, counting
// the rows of transactions still open (READ UNCOMMITTED): an insert in
// flight when a relay first starts can hold ids below every committed
// one, and a start position above them would never relay those rows.
func (s *Source) MinID(ctx context.Context) (uint64, error) {
	tx, err := s.pool.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadUncommitted, ReadOnly: true})
	if err != nil {
		return 0, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	var id sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT MIN(id) FROM "+s.table).Scan(&id); err != nil {
		return 0, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	return uint64(id.Int64), nil
}

// AutoIncrement returns the table's next auto-increment id as the server
// reports it in information_schema.TABLES (0 when it reports none). MAX(id)
// would not do: a purged table has no rows, yet its counter stays. MySQL 8
// caches that column for information_schema_stats_expiry seconds (a day by
// default), so the session value is set to 0 first; MariaDB has no such
// cache (nor the variable) and reads InnoDB's counter directly.
func (s *Source) AutoIncrement(ctx context.Context) (uint64, error) {
	conn, err := s.pool.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("relay: auto_increment of %s: %w", s.table, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0"); err != nil {
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1193 { // ER_UNKNOWN_SYSTEM_VARIABLE: MariaDB
			return 0, fmt.Errorf("relay: auto_increment of %s: %w", s.table, err)
		}
	}
	var ai sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", s.table).Scan(&ai)
	if err != nil {
		return 0, fmt.Errorf("relay: auto_increment of %s: %w", s.table, err)
	}
	return uint64(ai.Int64), nil
}

// OldestUnrelayed returns the smallest occurred_at_ms among the rows a
// committed position (high, open holes) has not relayed: the first
// lagScanRows rows above high, and the rows among holes that are visible.
// found is false when there is none. Both reads are primary-key lookups
// with a bounded result, however far behind the relay is.
func (s *Source) OldestUnrelayed(ctx context.Context, high uint64, holes []uint64) (ms int64, found bool, err error) {
	var m sql.NullInt64
	if err := s.db.QueryRowContext(ctx, "SELECT MIN(occurred_at_ms) FROM (SELECT occurred_at_ms FROM "+s.table+
		" WHERE id > ? ORDER BY id LIMIT ?) AS unrelayed", high, lagScanRows).Scan(&m); err != nil {
		return 0, false, fmt.Errorf("relay: oldest unrelayed row of %s: %w", s.table, err)
	}
	for chunk := range chunks(holes) {
		q, args := inQuery("SELECT MIN(occurred_at_ms) FROM "+s.table, chunk)
		var h sql.NullInt64
		if err := s.db.QueryRowContext(ctx, q, args...).Scan(&h); err != nil {
			return 0, false, fmt.Errorf("relay: oldest filled hole of %s: %w", s.table, err)
		}
		if h.Valid && (!m.Valid || h.Int64 < m.Int64) {
			m = h
		}
	}
	return m.Int64, m.Valid, nil
}
