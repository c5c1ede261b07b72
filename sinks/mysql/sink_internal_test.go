package mysqlsink

import "testing"

func TestSplitByPartition(t *testing.T) {
	var recs []Record
	for _, tp := range []TP{{"ledger", 0}, {"inflow", 1}, {"ledger", 1}, {"inflow", 0}, {"ledger", 2}, {"ledger", 0}} {
		recs = append(recs, Record{TP: tp, Offset: int64(len(recs))})
	}
	groups := splitByPartition(recs, 2, map[string]bool{"inflow": true})
	if len(groups) != 2 {
		t.Fatalf("%d groups", len(groups))
	}
	where := map[TP]int{}
	total := 0
	for g, rs := range groups {
		last := map[TP]int64{}
		for _, r := range rs {
			if w, ok := where[r.TP]; ok && w != g {
				t.Fatalf("partition %v split across groups", r.TP)
			}
			where[r.TP] = g
			if o, ok := last[r.TP]; ok && r.Offset < o {
				t.Fatalf("partition %v out of order", r.TP)
			}
			last[r.TP] = r.Offset
			total++
		}
	}
	if total != len(recs) || where[TP{"inflow", 0}] != 0 || where[TP{"inflow", 1}] != 0 {
		t.Fatalf("groups %v: every record once, inflow partitions in group 0", where)
	}
	if where[TP{"ledger", 0}] == where[TP{"ledger", 1}] && where[TP{"ledger", 1}] == where[TP{"ledger", 2}] {
		t.Fatalf("ledger partitions not spread: %v", where)
	}
	if g := splitByPartition(recs, 1, map[string]bool{"inflow": true}); len(g) != 1 || len(g[0]) != len(recs) {
		t.Fatalf("parallelism 1: %v", g)
	}
	// Two shared topics: each keeps its partitions in one group, and the
	// two are dealt to different groups.
	groups = splitByPartition(recs, 3, map[string]bool{"inflow": true, "ledger": true})
	home := map[string]int{}
	for g, rs := range groups {
		for _, r := range rs {
			if h, ok := home[r.Topic]; ok && h != g {
				t.Fatalf("shared topic %s split across groups %d and %d", r.Topic, h, g)
			}
			home[r.Topic] = g
		}
	}
	if len(groups) != 2 || home["inflow"] == home["ledger"] {
		t.Fatalf("two shared topics: %d groups, homes %v; want one group each", len(groups), home)
	}
}
