package mysqlsink_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// TestLuckyPoolsFourConcurrentPartitions runs four sink instances, one per
// partition, whose small batches all add to the same (platform, global)
// row and a handful of shared gift and room rows at the same time. Totals
// must be exact and no instance may fail: lock waits and deadlocks are
// absorbed by whole-batch retries.
func TestLuckyPoolsFourConcurrentPartitions(t *testing.T) {
	e := newEnv(t, 4)
	e.cfg.BatchSize = 100
	ctx := context.Background()

	var rs []*running
	for i := range 4 {
		// Round robin deals the sorted inflow partitions one per member
		// (the default sticky balancer only balances the total count).
		cfg := e.cfg
		cfg.OwnerID = fmt.Sprintf("pool-%d", i)
		cfg.Kafka.Extra = []kgo.Opt{kgo.Balancers(kgo.RoundRobinBalancer())}
		rs = append(rs, e.start(t, cfg))
	}
	// Wait until every instance owns a partition of the inflow topic.
	testenv.Eventually(t, 45*time.Second, "each of the four instances to own a partition", func() bool {
		return count(t, e.m.DB, "SELECT COUNT(DISTINCT owner_id) FROM roomflow_sink_offsets WHERE consumer_group = ? AND topic = ?", e.cfg.Group, e.inflowTopic()) >= 4
	})

	inflows := sinktest.NewInflowGen(12, "hyapp", 8, 3).Next(20_000)
	o := sinktest.NewOracle()
	o.AddInflows(inflows...)
	pcl := e.k.Client(t)
	if err := sinktest.Produce(ctx, pcl, sinktest.InflowRecords(e.inflowTopic(), inflows)); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(t, e.cfg.Group, 90*time.Second, rs...)
	var retries, batches float64
	for _, r := range rs {
		if err := r.stop(t); err != nil {
			t.Fatalf("%s: %v", r.sink.Owner(), err)
		}
		retries += testenv.Total(r.sink.Metrics().Retries)
		batches += testenv.Total(r.sink.Metrics().TxnSeconds)
	}
	t.Logf("%v transactions, %v retried", batches, retries)
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
	var balance, totalIn, version int64
	if err := e.m.DB.QueryRow("SELECT balance, total_in, version FROM lucky_pools WHERE app_code = 'hyapp' AND scope_type = 'platform' AND scope_id = 'global'").Scan(&balance, &totalIn, &version); err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, in := range inflows {
		want += in.PlatformIn
	}
	if balance != want || totalIn != want {
		t.Fatalf("global pool balance %d total_in %d, want %d", balance, totalIn, want)
	}
	// One version step per applied batch touching the row: far fewer than
	// the inflows (pre-aggregation), at least one per instance.
	if version < 4 || version >= int64(len(inflows)/10) {
		t.Fatalf("global pool version %d: want one step per batch (4 .. %d)", version, len(inflows)/10)
	}
}

// TestDeadlockRetriesWholeBatch makes every third transaction fail inside,
// after its facts were written, with MySQL's deadlock error: the batch is
// rolled back and retried whole, and nothing is half-applied or doubled.
func TestDeadlockRetriesWholeBatch(t *testing.T) {
	e := newEnv(t, 3)
	e.cfg.BatchSize = 200
	ctx := context.Background()
	ledger := sinktest.NewLedgerGen(21, "hyapp", 200).Next(4000)
	inflows := sinktest.NewInflowGen(22, "hyapp", 5, 2).Next(1000)
	o := e.produce(t, ledger, inflows)
	var n atomic.Int64
	cfg := e.cfg
	cfg.Hooks.InTxn = func(context.Context) error {
		if n.Add(1)%3 == 0 {
			return &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}
		}
		return nil
	}
	r := e.start(t, cfg)
	e.waitCaughtUp(t, e.cfg.Group, 60*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := testenv.Total(r.sink.Metrics().Retries); got < 3 {
		t.Fatalf("retries = %v, want the injected deadlocks retried", got)
	}
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
}

// TestLostConnectionRetriesWholeBatch kills the sink's MySQL connections
// (KILL from another session) in the middle of every fourth transaction:
// the server rolls the transaction back, the sink sees a lost connection
// and retries the whole batch on a new one, and the tables stay exact.
func TestLostConnectionRetriesWholeBatch(t *testing.T) {
	e := newEnv(t, 3)
	e.cfg.BatchSize = 300
	ctx := context.Background()
	ledger := sinktest.NewLedgerGen(31, "hyapp", 200).Next(3000)
	inflows := sinktest.NewInflowGen(32, "hyapp", 5, 2).Next(500)
	o := e.produce(t, ledger, inflows)
	admin, err := sql.Open("mysql", testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// The sink connects as a user of its own: only its connections are
	// killed, never the test's (a read of the test killed mid-query failed
	// it with "invalid connection").
	dsn, user := e.m.OwnUser(t)
	if e.sinkDB, err = sql.Open("mysql", dsn); err != nil {
		t.Fatal(err)
	}
	defer e.sinkDB.Close()
	var n, killed atomic.Int64
	cfg := e.cfg
	cfg.Parallelism = 1
	cfg.Hooks.InTxn = func(ctx context.Context) error {
		if n.Add(1)%4 != 0 {
			return nil
		}
		rows, err := admin.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE user = ?", user)
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err == nil {
				killed.Add(1)
			}
		}
		return nil
	}
	r := e.start(t, cfg)
	e.waitCaughtUp(t, e.cfg.Group, 60*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if killed.Load() == 0 || testenv.Total(r.sink.Metrics().Retries) == 0 {
		t.Fatalf("killed %d connections, %v retries: the test did not exercise lost connections", killed.Load(), testenv.Total(r.sink.Metrics().Retries))
	}
	t.Logf("killed %d connections, %v whole-batch retries", killed.Load(), testenv.Total(r.sink.Metrics().Retries))
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
}
