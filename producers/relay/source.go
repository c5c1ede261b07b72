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
// rows' small columns and LENGTH(payload), the caller keeps what fits its
// Budget, and LoadPayloads fetches only those payloads, so a batch of
// 16 MiB rows never sits in memory whole.
type Source struct {
	db    *sql.DB
	table string
}

// NewSource reads from table (normally "room_outbox") on db.
func NewSource(db *sql.DB, table string) *Source { return &Source{db: db, table: table} }

// Budget bounds the payload bytes one batch reads (relay.max_batch_bytes).
// A batch always takes its first row, so a row larger than the budget is
// read alone; a row for which Skip is true (it goes to the DLQ as too
// large) is read without its payload and costs nothing.
type Budget struct {
	Max  int
	Used int
	Skip func(*Row) bool
}

// Fit charges the longest prefix of rows that fits and returns its length.
func (b *Budget) Fit(rows []Row) int {
	for i := range rows {
		cost := rows[i].PayloadBytes
		if b.Skip != nil && b.Skip(&rows[i]) {
			cost = 0
		}
		if b.Used > 0 && b.Used+cost > b.Max {
			return i
		}
		b.Used += cost
	}
	return len(rows)
}

// metaColumns are the columns read before the payloads: small, bounded by
// the schema's VARCHAR sizes.
const metaColumns = "id, app_code, event_id, event_type, room_id, room_version, LENGTH(payload), occurred_at_ms"

// After returns up to limit rows with id > after, ascending, without their
// payloads (see LoadPayloads). Rows whose inserting transaction is still
// open are invisible to this read; the Tracker turns the ids they leave
// out into holes.
func (s *Source) After(ctx context.Context, after uint64, limit int) ([]Row, error) {
	return s.meta(ctx, "SELECT "+metaColumns+" FROM "+s.table+" WHERE id > ? ORDER BY id LIMIT ?", after, limit)
}

// ByIDs returns the rows among ids that are visible now, ascending,
// without their payloads (see LoadPayloads).
func (s *Source) ByIDs(ctx context.Context, ids []uint64) ([]Row, error) {
	var out []Row
	for chunk := range chunks(ids) {
		q, args := inQuery("SELECT "+metaColumns+" FROM "+s.table, chunk)
		m, err := s.meta(ctx, q, args...)
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

// LoadPayloads reads the payloads of rows (all but those skip is true
// for) into them.
func (s *Source) LoadPayloads(ctx context.Context, rows []Row, skip func(*Row) bool) error {
	var load []uint64
	byID := make(map[uint64]*Row, len(rows))
	for i := range rows {
		if skip == nil || !skip(&rows[i]) {
			load = append(load, rows[i].ID)
			byID[rows[i].ID] = &rows[i]
		}
	}
	for chunk := range chunks(load) {
		q, args := inQuery("SELECT id, payload FROM "+s.table, chunk)
		rs, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("relay: read %s: %w", s.table, err)
		}
		got := 0
		for rs.Next() {
			var id uint64
			var p []byte
			if err := rs.Scan(&id, &p); err != nil {
				rs.Close()
				return fmt.Errorf("relay: scan %s: %w", s.table, err)
			}
			if r := byID[id]; r != nil {
				r.Payload = p
				got++
			}
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return fmt.Errorf("relay: read %s: %w", s.table, err)
		}
		if got != len(chunk) {
			// Outbox rows are never deleted before they are relayed; one
			// that vanished between the two reads is a purge racing the
			// relay. The session restarts and reads again.
			return fmt.Errorf("relay: %d of %d %s rows vanished between reading their sizes and their payloads", len(chunk)-got, len(chunk), s.table)
		}
	}
	return nil
}

func (s *Source) meta(ctx context.Context, q string, args ...any) ([]Row, error) {
	rs, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.ID, &r.AppCode, &r.EventID, &r.EventType, &r.RoomID, &r.RoomVersion, &r.PayloadBytes, &r.OccurredAtMs); err != nil {
			return nil, fmt.Errorf("relay: scan %s: %w", s.table, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	return out, nil
}

// MinID returns the lowest id in the table, 0 when it is empty.
func (s *Source) MinID(ctx context.Context) (uint64, error) {
	var id sql.NullInt64
	if err := s.db.QueryRowContext(ctx, "SELECT MIN(id) FROM "+s.table).Scan(&id); err != nil {
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
	conn, err := s.db.Conn(ctx)
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
