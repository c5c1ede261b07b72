package rebuild_test

import (
	"strings"
	"testing"

	"github.com/hyapp/roomflow/sinks/mysql/rebuild"
)

func TestPrint(t *testing.T) {
	res := rebuild.Result{Entries: 10, Applied: 8, Repeats: 1, Invalid: 1, Inflows: 4, Rows: map[string]int64{"b": 2, "a": 1},
		Old: []string{"a__old", "b__old"}}
	var b strings.Builder
	rebuild.Print(&b, res, true)
	want := "mic ledger: 10 entries below the sink's positions, 8 applied, 1 repeats, 1 dead-lettered by the sink\n" +
		"lucky pool inflow: 4 inflows, 0 dead-lettered by the sink\n" +
		"rebuilt a: 1 rows\nrebuilt b: 2 rows\n" +
		"swapped in; the replaced tables are kept: DROP TABLE a__old, b__old;\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	res.PoolsSkipped = "roomflow lucky owns the pools"
	rebuild.Print(&b, res, true)
	if !strings.Contains(b.String(), "lucky_pools not rebuilt: roomflow lucky owns the pools\n") || strings.Contains(b.String(), "inflows") {
		t.Errorf("pools skipped:\n%s", b.String())
	}
}
