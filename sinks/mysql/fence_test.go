package mysqlsink_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// TestStoreFencesRevokedOwner: once B claimed a partition, A's commit for
// it is rejected and writes nothing, while B's goes through; a claim reads
// the offsets committed before it.
func TestStoreFencesRevokedOwner(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	st := newStore(t, m.DB, "g")
	tp := mysqlsink.TP{Topic: "ledger", Partition: 3}
	ledger := sinktest.NewLedgerGen(5, "hyapp", 10).Next(20)
	recs := func(from int64, n int) []mysqlsink.Record { return ledgerRecords(tp, from, ledger[from:from+int64(n)]) }

	a, err := st.Claim(ctx, "A", []mysqlsink.TP{tp}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a[tp].NextOffset != -1 || a[tp].Generation != 1 {
		t.Fatalf("first claim = %+v, want next -1 generation 1", a[tp])
	}
	if _, err := st.Apply(ctx, "A", map[mysqlsink.TP]int64{tp: 1}, recs(0, 10), 2); err != nil {
		t.Fatal(err)
	}
	b, err := st.Claim(ctx, "B", []mysqlsink.TP{tp}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if b[tp].NextOffset != 10 || b[tp].Generation != 2 {
		t.Fatalf("B's claim = %+v, want next 10 generation 2", b[tp])
	}
	before := count(t, m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption")

	// A's late commit (a zombie that missed the revoke).
	_, err = st.Apply(ctx, "A", map[mysqlsink.TP]int64{tp: 1}, recs(10, 10), 4)
	var fe *mysqlsink.FencedError
	if !errors.As(err, &fe) || len(fe.Partitions) != 1 || fe.Partitions[0] != tp {
		t.Fatalf("A's late commit: %v, want FencedError on %v", err, tp)
	}
	// The same owner id with a stale generation is fenced too.
	if _, err := st.Apply(ctx, "B", map[mysqlsink.TP]int64{tp: 1}, recs(10, 10), 4); !errors.As(err, &fe) {
		t.Fatalf("stale generation: %v, want FencedError", err)
	}
	if n := count(t, m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption"); n != before {
		t.Fatalf("fenced commits wrote %d consumption rows", n-before)
	}
	res, err := st.Apply(ctx, "B", map[mysqlsink.TP]int64{tp: 2}, recs(10, 10), 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied["ledger"].Consumed.Applied != 10 || res.Offsets[tp] != 20 {
		t.Fatalf("B's commit = %+v", res)
	}
	// Records below the stored offset are skipped, not re-applied.
	res, err = st.Apply(ctx, "B", map[mysqlsink.TP]int64{tp: 2}, recs(5, 10), 6)
	if err != nil {
		t.Fatal(err)
	}
	if res.Behind != 10 || res.Applied["ledger"].Consumed.Applied != 0 || res.Offsets[tp] != 20 {
		t.Fatalf("replayed records: %+v, want 10 behind, nothing applied, offset kept at 20", res)
	}
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatal(err)
	}
}

// TestTwoInstancesRebalanceAndZombie runs two sinks in one group with a
// rebalance mid-run. Instance A is held inside a batch (after polling,
// before its transaction) until the group has evicted it and B has claimed
// every partition; A's late commit must then be rejected, and after A
// rejoins and B leaves, the tables still equal the oracle exactly.
func TestTwoInstancesRebalanceAndZombie(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	gen := sinktest.NewLedgerGen(9, "hyapp", 500)
	igen := sinktest.NewInflowGen(10, "hyapp", 10, 4)
	o := sinktest.NewOracle()
	pcl := e.k.Client(t)
	produce := func(n int) {
		t.Helper()
		l := gen.Next(n)
		in := igen.Next(n / 10)
		o.AddLedger(l...)
		o.AddInflows(in...)
		recs := append(sinktest.LedgerRecords(e.ledgerTopic(), l), sinktest.InflowRecords(e.inflowTopic(), in)...)
		if err := sinktest.Produce(ctx, pcl, recs); err != nil {
			t.Fatal(err)
		}
	}
	// Short sessions: Kafka.Extra overrides the sink's group options.
	e.cfg.Kafka.Extra = []kgo.Opt{kgo.RebalanceTimeout(2 * time.Second), kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond)}

	var hold atomic.Bool
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	cfgA := e.cfg
	cfgA.OwnerID = "instance-a"
	cfgA.Hooks = mysqlsink.Hooks{
		BeforeApply: func(ctx context.Context, _ int) error {
			if hold.CompareAndSwap(true, false) {
				held <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		},
	}
	a := e.start(t, cfgA)
	produce(3000)
	e.waitCaughtUp(t, e.cfg.Group, 60*time.Second, a)

	// A polls the next records and stalls before its transaction.
	hold.Store(true)
	produce(2000)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("A never picked up the second batch")
	}
	cfgB := e.cfg
	cfgB.OwnerID = "instance-b"
	b := e.start(t, cfgB)
	testenv.Eventually(t, 45*time.Second, "B to claim every partition while A stalls", func() bool {
		return count(t, e.m.DB, "SELECT COUNT(*) FROM roomflow_sink_offsets WHERE consumer_group = ? AND owner_id <> 'instance-b'", e.cfg.Group) == 0
	})
	e.waitCaughtUp(t, e.cfg.Group, 60*time.Second, b)

	// A wakes up: its commit must be fenced.
	close(release)
	testenv.Eventually(t, 30*time.Second, "A's late commit to be fenced", func() bool {
		return testenv.Total(a.sink.Metrics().Fenced) >= 1
	})

	// Both run; more load; then B leaves mid-run.
	produce(3000)
	time.Sleep(300 * time.Millisecond)
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	produce(2000)
	e.waitCaughtUp(t, e.cfg.Group, 60*time.Second, a)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.m.DB, "SELECT COUNT(*) FROM roomflow_sink_offsets WHERE consumer_group = ? AND owner_id = 'instance-a'", e.cfg.Group); n == 0 {
		t.Fatal("A never owned a partition again after B left")
	}
}

// TestApplyLocksOnlyItsPartitions: a batch's transaction locks the offset
// rows of its own partitions and no others, so the concurrent transactions
// of one batch (Config.Parallelism, disjoint partitions) do not wait for
// each other. MariaDB scanned and locked the whole group's rows when the
// lock named the partitions per topic and the batch had two topics; each
// transaction then waited out the other (a sink as slow as one connection).
func TestApplyLocksOnlyItsPartitions(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	st := newStore(t, m.DB, "g")
	var tps []mysqlsink.TP
	for p := range int32(6) {
		tps = append(tps, mysqlsink.TP{Topic: "ledger", Partition: p}, mysqlsink.TP{Topic: "inflow", Partition: p})
	}
	claimed, err := st.Claim(ctx, "A", tps, 1)
	if err != nil {
		t.Fatal(err)
	}
	claims := map[mysqlsink.TP]int64{}
	for tp, c := range claimed {
		claims[tp] = c.Generation
	}

	// The batch's other transaction (splitByPartition with parallelism 2:
	// every inflow partition and ledger 0, 2, 4 in one, ledger 1, 3, 5 in
	// the other) holds its rows.
	other, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	for _, p := range []int{1, 3, 5} {
		if _, err := other.ExecContext(ctx, "SELECT next_offset FROM roomflow_sink_offsets WHERE consumer_group = 'g' AND topic = 'ledger' AND partition_id = ? FOR UPDATE", p); err != nil {
			t.Fatal(err)
		}
	}

	o := sinktest.NewOracle()
	var recs []mysqlsink.Record
	for _, p := range []int32{0, 2, 4} {
		ledger := sinktest.NewLedgerGen(uint64(p), "hyapp", 10).Next(10)
		o.AddLedger(ledger...)
		recs = append(recs, ledgerRecords(mysqlsink.TP{Topic: "ledger", Partition: p}, 0, ledger)...)
	}
	inflows := sinktest.NewInflowGen(7, "hyapp", 2, 2).Next(6)
	o.AddInflows(inflows...)
	for i, in := range inflows {
		recs = append(recs, mysqlsink.Record{TP: mysqlsink.TP{Topic: "inflow", Partition: int32(i)}, Offset: 0, Item: in})
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t0 := time.Now()
	res, err := st.Apply(actx, "A", claims, recs, 2)
	if err != nil {
		t.Fatalf("apply while the batch's other transaction holds ledger 1, 3, 5: %v after %s", err, time.Since(t0))
	}
	if len(res.Offsets) != 9 || res.Offsets[mysqlsink.TP{Topic: "ledger", Partition: 4}] != 10 || res.Offsets[mysqlsink.TP{Topic: "inflow", Partition: 5}] != 1 {
		t.Fatalf("offsets %v, want ledger 0, 2, 4 at 10 and every inflow partition at 1", res.Offsets)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatal(err)
	}
}
