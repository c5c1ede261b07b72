package relay

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Source reads room_outbox. It only ever issues plain consistent reads
// (autocommit SELECTs, no FOR UPDATE / LOCK IN SHARE MODE, no SERIALIZABLE),
// so room-service's inserts never wait on the relay, and it never writes the
// table.
type Source struct {
	db    *sql.DB
	table string
}

// NewSource reads from table (normally "room_outbox") on db.
func NewSource(db *sql.DB, table string) *Source { return &Source{db: db, table: table} }

const rowColumns = "id, app_code, event_id, event_type, room_id, room_version, payload, occurred_at_ms"

// After returns up to limit rows with id > after, ascending. Rows whose
// inserting transaction is still open are invisible to this read; the
// Tracker turns the ids they leave out into holes.
func (s *Source) After(ctx context.Context, after uint64, limit int) ([]Row, error) {
	q := "SELECT " + rowColumns + " FROM " + s.table + " WHERE id > ? ORDER BY id LIMIT ?"
	return s.query(ctx, q, after, limit)
}

// MinID returns the lowest id in the table, 0 when it is empty.
func (s *Source) MinID(ctx context.Context) (uint64, error) {
	var id sql.NullInt64
	if err := s.db.QueryRowContext(ctx, "SELECT MIN(id) FROM "+s.table).Scan(&id); err != nil {
		return 0, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	return uint64(id.Int64), nil
}

// maxInList bounds one hole query; more holes take several queries.
const maxInList = 1000

// ByIDs returns the rows among ids that are visible now, ascending.
func (s *Source) ByIDs(ctx context.Context, ids []uint64) ([]Row, error) {
	var out []Row
	for len(ids) > 0 {
		chunk := ids
		if len(chunk) > maxInList {
			chunk = chunk[:maxInList]
		}
		ids = ids[len(chunk):]
		var b strings.Builder
		args := make([]any, len(chunk))
		b.WriteString("SELECT " + rowColumns + " FROM " + s.table + " WHERE id IN (")
		for i, id := range chunk {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
			args[i] = id
		}
		b.WriteString(") ORDER BY id")
		rows, err := s.query(ctx, b.String(), args...)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

func (s *Source) query(ctx context.Context, q string, args ...any) ([]Row, error) {
	rs, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.ID, &r.AppCode, &r.EventID, &r.EventType, &r.RoomID, &r.RoomVersion, &r.Payload, &r.OccurredAtMs); err != nil {
			return nil, fmt.Errorf("relay: scan %s: %w", s.table, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("relay: read %s: %w", s.table, err)
	}
	return out, nil
}
