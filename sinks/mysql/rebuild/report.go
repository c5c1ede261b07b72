package rebuild

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Print writes what a run did for the operator: the ledger entries below
// the sink's positions and what became of them, the pools (skipped and
// why, or the inflows applied; nothing when pools were not asked for), the
// rows of each rebuilt table, and the DROP TABLE of the replaced ones.
func Print(w io.Writer, res Result, pools bool) {
	fmt.Fprintf(w, "mic ledger: %d entries below the sink's positions, %d applied, %d repeats, %d dead-lettered by the sink\n",
		res.Entries, res.Applied, res.Repeats, res.Invalid)
	switch {
	case res.PoolsSkipped != "":
		fmt.Fprintf(w, "lucky_pools not rebuilt: %s\n", res.PoolsSkipped)
	case pools:
		fmt.Fprintf(w, "lucky pool inflow: %d inflows, %d dead-lettered by the sink\n", res.Inflows, res.InvalidInflows)
	}
	for _, t := range slices.Sorted(maps.Keys(res.Rows)) {
		fmt.Fprintf(w, "rebuilt %s: %d rows\n", t, res.Rows[t])
	}
	fmt.Fprintf(w, "swapped in; the replaced tables are kept: DROP TABLE %s;\n", strings.Join(res.Old, ", "))
}
