package relay

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// outboxColumns are the columns a relayed row needs, in Row's order.
var outboxColumns = []string{"id", "app_code", "event_id", "event_type", "room_id", "room_version", "payload", "occurred_at_ms"}

// columnMap is the ordinal of each of outboxColumns in the rows of one
// TABLE_MAP of the relayed table, or why its rows cannot be decoded.
type columnMap struct {
	tableID uint64
	ord     [8]int
	err     error // a *BinlogColumnsError, returned for its INSERT rows only
}

// BinlogColumnsError stops binlog mode at a TABLE_MAP of the relayed
// table whose rows it cannot decode for sure: one without column names
// (written while binlog_row_metadata was not FULL) or one without a column
// the relay needs (dropped or renamed). The stream retries from the same
// place, so the relay stops relaying until an operator acts.
type BinlogColumnsError struct {
	Table    string         // schema.table
	Position BinlogPosition // where the stream is, before the rows
	Missing  string         // the needed column the TABLE_MAP lacks; "" when it names none
}

func (e *BinlogColumnsError) Error() string {
	if e.Missing == "" {
		return fmt.Sprintf("relay: binlog rows of %s at %s carry no column names (written while binlog_row_metadata was not FULL), and the table's columns may have changed since: run `roomflow relay --resnapshot` to relay them from a snapshot", e.Table, e.Position.where())
	}
	return fmt.Sprintf("relay: %s has no column %s in the binlog at %s (dropped or renamed?): binlog rows cannot be relayed", e.Table, e.Missing, e.Position.where())
}

// tableColumns maps outboxColumns to their ordinals by tm's own column
// names (binlog_row_metadata=FULL): each row event is decoded with the
// columns the table had when it was written, whatever ALTER TABLE came
// after it, so a relay behind a schema change neither stops nor mixes
// fields up. Today's information_schema cannot stand in for a TABLE_MAP
// without names: it may already be past an ALTER. A TABLE_MAP it cannot
// map stops the relay only at INSERT rows (status UPDATEs need nothing).
func tableColumns(tm *replication.TableMapEvent, table string, at BinlogPosition) columnMap {
	m := columnMap{tableID: tm.TableID}
	if len(tm.ColumnName) == 0 {
		m.err = &BinlogColumnsError{Table: table, Position: at}
		return m
	}
	for i, c := range outboxColumns {
		o := slices.IndexFunc(tm.ColumnName, func(name []byte) bool { return strings.EqualFold(string(name), c) })
		if o < 0 {
			m.err = &BinlogColumnsError{Table: table, Position: at, Missing: c}
			return m
		}
		m.ord[i] = o
	}
	return m
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
