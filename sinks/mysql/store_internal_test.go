package mysqlsink

import (
	"context"
	"testing"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// TestChunkedDedupeRollsBackToSavepoint: with several statements per
// batch, a duplicate in a later chunk must not leave the earlier chunks'
// rows behind as "already consumed": the attempt is rolled back to the
// savepoint and only the known ids are left out.
func TestChunkedDedupeRollsBackToSavepoint(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	st := NewStore(m.DB, "g")
	st.chunk = 10
	tp := TP{"ledger", 0}
	claims, err := st.Claim(ctx, "o", []TP{tp}, 1)
	if err != nil {
		t.Fatal(err)
	}
	gen := map[TP]int64{tp: claims[tp].Generation}
	ledger := sinktest.NewLedgerGen(3, "hyapp", 5).Next(30)
	recs := func(from, to int, base int64) []Record {
		var out []Record
		for i := from; i < to; i++ {
			out = append(out, Record{TP: tp, Offset: base + int64(i-from), Ledger: ledger[i]})
		}
		return out
	}
	// Entries 20..29 first, then all 30 (at later offsets): chunks 1-2
	// are new, chunk 3 repeats.
	if _, err := st.Apply(ctx, "o", gen, recs(20, 30, 0), 2); err != nil {
		t.Fatal(err)
	}
	res, err := st.Apply(ctx, "o", gen, recs(0, 30, 10), 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.LedgerApplied != 20 || res.LedgerDeduplicated != 10 {
		t.Fatalf("applied %d, deduplicated %d; want 20 and 10", res.LedgerApplied, res.LedgerDeduplicated)
	}
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatal(err)
	}
}
