package mysqlsink

import (
	"slices"
	"testing"
)

// TestOffsetRowsInOneOrder: Claim and Apply write and lock the offset rows
// of their partitions in one order, topic then partition ascending, so two
// instances whose partition sets overlap (a rebalance, a zombie) wait on
// each other instead of deadlocking; offsetKeys lists them the same way.
func TestOffsetRowsInOneOrder(t *testing.T) {
	tps := []TP{{"b", 1}, {"a", 2}, {"b", 0}, {"a", 10}, {"a", 1}, {"c", 0}, {"b", 1}}
	sortTPs(tps)
	want := []TP{{"a", 1}, {"a", 2}, {"a", 10}, {"b", 0}, {"b", 1}, {"b", 1}, {"c", 0}}
	if !slices.Equal(tps, want) {
		t.Fatalf("sortTPs = %v, want %v", tps, want)
	}
	where, args := offsetKeys("g", want[:3])
	if w := "(consumer_group, topic, partition_id) IN ((?,?,?),(?,?,?),(?,?,?))"; where != w {
		t.Fatalf("offsetKeys = %q, want %q", where, w)
	}
	if w := []any{"g", "a", int32(1), "g", "a", int32(2), "g", "a", int32(10)}; !slices.Equal(args, w) {
		t.Fatalf("offsetKeys args = %v, want %v", args, w)
	}
}
