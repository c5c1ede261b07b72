package mysqlsink_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// TestReplayChangesNothing applies a ledger and inflow stream, then the
// same records appended a second time, then everything again from offset
// 0 under a new consumer group: after the first pass the tables equal the
// oracle, and neither replay changes a single byte.
func TestReplayChangesNothing(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	gen := sinktest.NewLedgerGen(1, "hyapp", 300)
	gen.SkipPct = 0.05
	ledger := gen.Next(6000)
	inflows := sinktest.NewInflowGen(2, "hyapp", 20, 5).Next(2000)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	o.AddInflows(inflows...)

	pcl := e.k.Client(t, kgo.ProducerLinger(0))
	recs := append(sinktest.LedgerRecords(e.cfg.Kafka.Topics.MicLedger, ledger), sinktest.InflowRecords(e.cfg.Kafka.Topics.LuckyPoolInflow, inflows)...)
	if err := sinktest.Produce(ctx, pcl, recs); err != nil {
		t.Fatal(err)
	}

	r := e.start(t, nil)
	e.waitCaughtUp(t, e.cfg.Sink.Group, 60*time.Second, r)
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	first := dump(t, e.m.DB)
	t.Logf("first pass: %d consumption rows, %d sessions, %d daily rows, %d pools", count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption"), count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_sessions"), count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_daily_stats"), count(t, e.m.DB, "SELECT COUNT(*) FROM lucky_pools"))

	// Second pass: the same records again, at new offsets.
	recs = append(sinktest.LedgerRecords(e.cfg.Kafka.Topics.MicLedger, ledger), sinktest.InflowRecords(e.cfg.Kafka.Topics.LuckyPoolInflow, inflows)...)
	if err := sinktest.Produce(ctx, pcl, recs); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(t, e.cfg.Sink.Group, 60*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, e.m.DB); got != first {
		t.Fatalf("second pass changed the tables")
	}

	// Third pass: a new group reads both copies from offset 0.
	cfg3 := *e.cfg
	cfg3.Sink.Group = testenv.UniqueName(t) + "-third"
	r3 := e.start(t, &cfg3)
	e.waitCaughtUp(t, cfg3.Sink.Group, 60*time.Second, r3)
	if err := r3.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, e.m.DB); got != first {
		t.Fatalf("third pass from offset 0 with a new group changed the tables")
	}
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatalf("after replays: %v", err)
	}
}
