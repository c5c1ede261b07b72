package mysqlsink

import (
	"slices"
	"testing"
)

// TestOffsetRowsInOneOrder: Claim and Apply write and lock the offset rows
// of their partitions in one order, topic then partition ascending, so two
// instances whose partition sets overlap (a rebalance, a zombie) wait on
// each other instead of deadlocking; tpWhere lists them the same way.
func TestOffsetRowsInOneOrder(t *testing.T) {
	tps := []TP{{"b", 1}, {"a", 2}, {"b", 0}, {"a", 10}, {"a", 1}, {"c", 0}, {"b", 1}}
	sortTPs(tps)
	want := []TP{{"a", 1}, {"a", 2}, {"a", 10}, {"b", 0}, {"b", 1}, {"b", 1}, {"c", 0}}
	if !slices.Equal(tps, want) {
		t.Fatalf("sortTPs = %v, want %v", tps, want)
	}
	where, args := tpWhere(want, []any{"g"})
	if w := "(topic = ? AND partition_id IN (?,?,?)) OR (topic = ? AND partition_id IN (?,?,?)) OR (topic = ? AND partition_id IN (?))"; where != w {
		t.Fatalf("tpWhere = %q, want %q", where, w)
	}
	if w := []any{"g", "a", int32(1), int32(2), int32(10), "b", int32(0), int32(1), int32(1), "c", int32(0)}; !slices.Equal(args, w) {
		t.Fatalf("tpWhere args = %v, want %v", args, w)
	}
}
