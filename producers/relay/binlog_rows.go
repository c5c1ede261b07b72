package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// outboxColumns are the columns a relayed row needs, in Row's order.
var outboxColumns = []string{"id", "app_code", "event_id", "event_type", "room_id", "room_version", "payload", "occurred_at_ms"}

// columnMap is the ordinal of each of outboxColumns in the table's rows
// as the binlog carries them.
type columnMap struct {
	tableID uint64
	count   uint64
	ord     [8]int
}

// loadColumns reads the table's column ordinals from information_schema.
// It is called for the first TABLE_MAP of the table and whenever one
// differs from the last (a new table id or column count: an ALTER TABLE);
// a needed column that is gone stops the relay with an error naming it.
func (r *Relay) loadColumns(ctx context.Context, schema string, tm *replication.TableMapEvent) (columnMap, error) {
	rs, err := r.db.QueryContext(ctx, "SELECT COLUMN_NAME, ORDINAL_POSITION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, r.cfg.Table)
	if err != nil {
		return columnMap{}, fmt.Errorf("relay: columns of %s: %w", r.cfg.Table, err)
	}
	defer rs.Close()
	pos := map[string]int{}
	for rs.Next() {
		var name string
		var ord int
		if err := rs.Scan(&name, &ord); err != nil {
			return columnMap{}, fmt.Errorf("relay: columns of %s: %w", r.cfg.Table, err)
		}
		pos[strings.ToLower(name)] = ord - 1
	}
	if err := rs.Err(); err != nil {
		return columnMap{}, fmt.Errorf("relay: columns of %s: %w", r.cfg.Table, err)
	}
	m := columnMap{tableID: tm.TableID, count: tm.ColumnCount}
	for i, c := range outboxColumns {
		o, ok := pos[c]
		if !ok || uint64(o) >= tm.ColumnCount {
			return columnMap{}, fmt.Errorf("relay: %s.%s has no column %s any more (schema change?): binlog rows cannot be relayed", schema, r.cfg.Table, c)
		}
		m.ord[i] = o
	}
	if uint64(len(pos)) != tm.ColumnCount {
		return columnMap{}, fmt.Errorf("relay: %s.%s has %d columns in information_schema but %d in the binlog (a schema change after these rows was written?)", schema, r.cfg.Table, len(pos), tm.ColumnCount)
	}
	return m, nil
}

// binlogRow builds a Row from a binlog row image.
func binlogRow(m *columnMap, v []any) (Row, error) {
	var row Row
	var err error
	get := func(i int) any { return v[m.ord[i]] }
	if row.ID, err = asUint(get(0)); err != nil {
		return Row{}, fmt.Errorf("id: %w", err)
	}
	row.AppCode, row.EventID, row.EventType, row.RoomID = asString(get(1)), asString(get(2)), asString(get(3)), asString(get(4))
	rv, err := asUint(get(5))
	if err != nil {
		return Row{}, fmt.Errorf("room_version: %w", err)
	}
	row.RoomVersion = int64(rv)
	switch p := get(6).(type) {
	case []byte:
		row.Payload = p
	case string:
		row.Payload = []byte(p)
	}
	row.PayloadBytes = len(row.Payload)
	occ, err := asUint(get(7))
	if err != nil {
		return Row{}, fmt.Errorf("occurred_at_ms: %w", err)
	}
	row.OccurredAtMs = int64(occ)
	return row, nil
}

func asUint(v any) (uint64, error) {
	switch x := v.(type) {
	case int64:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int32:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case int:
		return uint64(x), nil
	case nil:
		return 0, errors.New("NULL")
	}
	return 0, fmt.Errorf("unexpected %T", v)
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}
