package mysqlsink_test

import (
	"context"
	"testing"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// TestChunkedDedupeRollsBackToSavepoint: with several statements per
// batch, a duplicate in a later chunk must not leave the earlier chunks'
// rows behind as "already consumed": the attempt is rolled back to the
// savepoint and only the known ids are left out.
func TestChunkedDedupeRollsBackToSavepoint(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	st, tp, gen := claimedStore(t, m.DB)
	mysqlsink.SetChunk(st, 10)
	ledger := sinktest.NewLedgerGen(3, "hyapp", 5).Next(30)
	// Entries 20..29 first, then all 30 (at later offsets): chunks 1-2
	// are new, chunk 3 repeats.
	if _, err := st.Apply(ctx, "o", gen, ledgerRecords(tp, 0, ledger[20:30]), 2); err != nil {
		t.Fatal(err)
	}
	res, err := st.Apply(ctx, "o", gen, ledgerRecords(tp, 10, ledger), 3)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Applied["ledger"].Consumed; c.Applied != 20 || c.Deduplicated != 10 {
		t.Fatalf("applied %d, deduplicated %d; want 20 and 10", c.Applied, c.Deduplicated)
	}
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatal(err)
	}
}

// TestConsumeKeepsFirstOfABatch: repeats of one (app_code, event_id)
// within a batch are counted as deduplicated and only the first is
// applied; the same event id of another app is another event.
func TestConsumeKeepsFirstOfABatch(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	st, tp, gen := claimedStore(t, m.DB)
	es := []*userv1.MicLedgerEntry{
		{EventId: "a", AppCode: "x", UserId: 1, Status: "skipped", OccurredAtMs: 5},
		{EventId: "a", AppCode: "x", UserId: 2, Status: "skipped", OccurredAtMs: 6},
		{EventId: "a", AppCode: "y", UserId: 3, Status: "skipped", OccurredAtMs: 7},
	}
	res, err := st.Apply(ctx, "o", gen, ledgerRecords(tp, 0, es), 9)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Applied["ledger"].Consumed; c.Table != micledger.Consumption.Table || c.Applied != 2 || c.Deduplicated != 1 {
		t.Fatalf("consumed %+v, want 2 applied and 1 deduplicated in %s", c, micledger.Consumption.Table)
	}
	if n := count(t, m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption WHERE app_code = 'x' AND event_id = 'a' AND user_id = 1"); n != 1 {
		t.Fatalf("the first entry of the batch was not the one kept")
	}
}
