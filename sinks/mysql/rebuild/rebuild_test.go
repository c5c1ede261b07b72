package rebuild_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
	"github.com/hyapp/roomflow/sinks/mysql/rebuild"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

const appCode = "hyapp"

// sink runs the real MySQL sink (the mic ledger applier) until stop.
type sink struct {
	cancel context.CancelFunc
	done   chan error
}

func startSink(t *testing.T, k *testenv.Kafka, m *testenv.MySQL, group string) *sink {
	t.Helper()
	ml, err := micledger.New(micledger.Config{Topic: k.Config.Topics.MicLedger, DefaultAppCode: appCode})
	if err != nil {
		t.Fatal(err)
	}
	li, err := luckyinflow.New(luckyinflow.Config{Topic: k.Config.Topics.LuckyPoolInflow, DefaultAppCode: appCode})
	if err != nil {
		t.Fatal(err)
	}
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: group, Appliers: []mysqlsink.Registration{mysqlsink.Register(ml), mysqlsink.Register(li)}}, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	s, err := mysqlsink.New(mysqlsink.Config{Group: group, DLQTopic: k.Config.Topics.DLQ, ShutdownTimeout: 5 * time.Second,
		Kafka: k.Cluster(), Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &sink{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	return r
}

func (s *sink) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	if err := <-s.done; err != nil {
		t.Fatalf("sink: %v", err)
	}
}

// caughtUp waits until the sink's stored positions reach the end of the
// ledger and of the inflow topic.
func caughtUp(t *testing.T, k *testenv.Kafka, m *testenv.MySQL, group string) {
	t.Helper()
	for _, topic := range []string{k.Config.Topics.MicLedger, k.Config.Topics.LuckyPoolInflow} {
		caughtUpOn(t, k, m, group, topic)
	}
}

func caughtUpOn(t *testing.T, k *testenv.Kafka, m *testenv.MySQL, group, topic string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "the sink to apply the whole of "+topic, func() bool {
		ends, err := k.Admin(t).ListEndOffsets(context.Background(), topic)
		if err != nil {
			return false
		}
		stored, err := mysqlsink.StoredOffsets(context.Background(), m.DB, group, topic)
		if err != nil {
			return false
		}
		maps.DeleteFunc(stored, func(_ int32, next int64) bool { return next < 0 }) // claimed, nothing applied yet
		want := map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 {
				want[o.Partition] = o.Offset
			}
		})
		return maps.Equal(stored, want)
	})
}

// TestRebuildRepairsCorruptedFacts runs the real sink over a ledger and
// an inflow topic with repeats and undecodable records, corrupts the fact
// tables and lucky_pools, and rebuilds: the facts equal the oracle again
// (the repeats counted once, the dead letters skipped), the replaced
// tables stay as __old, and the sink resumes on the rebuilt tables. Once
// roomflow lucky owns the pools, only the mic tables are rebuilt. Rebuild
// refuses while the sink runs, while __old tables are left, and once
// retention removed ledger records.
func TestRebuildRepairsCorruptedFacts(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	topic := k.Config.Topics.MicLedger
	group := testenv.UniqueName(t) + "-sink"
	gen := sinktest.NewLedgerGen(7, appCode, 40)
	ledger := gen.Next(400)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	recs := sinktest.LedgerRecords(topic, ledger)
	recs = append(recs, sinktest.LedgerRecords(topic, ledger[:30])...) // an upstream replay: repeats
	recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("1"), Value: []byte{0xff, 0x01}})
	inflowTopic := k.Config.Topics.LuckyPoolInflow
	inflows := sinktest.NewInflowGen(9, appCode, 5, 3).Next(120)
	o.AddInflows(inflows...)
	recs = append(recs, sinktest.InflowRecords(inflowTopic, inflows)...)
	recs = append(recs, sinktest.InflowRecords(inflowTopic, inflows[:10])...)
	recs = append(recs, &kgo.Record{Topic: inflowTopic, Key: []byte("r"), Value: []byte{0xff, 0x02}})
	cl := k.Client(t)
	if err := sinktest.Produce(ctx, cl, recs); err != nil {
		t.Fatal(err)
	}
	s := startSink(t, k, m, group)
	caughtUp(t, k, m, group)
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("the sink's facts before the corruption: %v", err)
	}
	cfg := rebuild.Config{Group: group, LedgerTopic: topic, InflowTopic: inflowTopic, DefaultAppCode: appCode, BatchSize: 50, Idle: 10 * time.Second, Kafka: k.Cluster(), Logger: slog.New(slog.DiscardHandler)}
	var pe *rebuild.PreconditionError
	if _, err := rebuild.Run(ctx, cfg, m.DB); !errors.As(err, &pe) || !strings.Contains(err.Error(), "stop every roomflow sink first") {
		t.Fatalf("rebuild while the sink runs: %v", err)
	}
	s.stop(t)

	for _, q := range []string{
		"UPDATE user_mic_lifetime_stats SET mic_online_ms = mic_online_ms + 1000 ORDER BY user_id LIMIT 1",
		"DELETE FROM user_mic_daily_stats ORDER BY user_id, stat_date LIMIT 2",
		"UPDATE user_mic_sessions SET seat_occupied_ms = 1 ORDER BY mic_session_id LIMIT 3",
		"UPDATE lucky_pools SET balance = balance + 5, total_in = total_in + 5 WHERE scope_type = 'room' ORDER BY scope_id LIMIT 1",
	} {
		if _, err := m.DB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Check(ctx, m.DB); err == nil {
		t.Fatal("the corrupted tables pass the oracle's check")
	}
	wrong := cfg
	wrong.Group = "another-group"
	if _, err := rebuild.Run(ctx, wrong, m.DB); !errors.As(err, &pe) || !strings.Contains(err.Error(), "is the sink's group (sink.group) right?") {
		t.Fatalf("rebuild with a group that applied nothing: %v", err)
	}
	res, err := rebuild.Run(ctx, cfg, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("after the rebuild: %v", err)
	}
	if res.Entries != 431 || res.Applied != 400 || res.Repeats != 30 || res.Invalid != 1 || res.Inflows != 120 || res.InvalidInflows != 1 ||
		len(res.Old) != 4 || res.PoolsSkipped != "" {
		t.Errorf("result %+v: want 431 entries, 400 applied, 30 repeats, 1 invalid, 120 inflows, 1 invalid, 4 old tables", res)
	}
	var corrupted int
	if err := m.DB.QueryRow("SELECT COUNT(*) FROM user_mic_sessions__old WHERE seat_occupied_ms = 1").Scan(&corrupted); err != nil || corrupted == 0 {
		t.Errorf("user_mic_sessions__old should keep the replaced (corrupted) rows: %d, %v", corrupted, err)
	}
	// The copies are made LIKE the live tables: the byte-exact ids
	// (migration 0015) stay so.
	for _, c := range [][2]string{{"user_mic_sessions", "mic_session_id"}, {"lucky_pools", "scope_id"}} {
		var live, old string
		if err := m.DB.QueryRow(`SELECT MAX(IF(table_name = ?, collation_name, NULL)), MAX(IF(table_name = ?, collation_name, NULL))
			FROM information_schema.columns WHERE table_schema = DATABASE() AND column_name = ?`, c[0], c[0]+rebuild.OldSuffix, c[1]).Scan(&live, &old); err != nil {
			t.Fatal(err)
		}
		if live != "utf8mb4_bin" || old != live {
			t.Errorf("%s.%s is %s after the rebuild (replaced table: %s), want utf8mb4_bin", c[0], c[1], live, old)
		}
	}

	// The sink resumes on the rebuilt tables from its stored positions.
	more := gen.Next(100)
	o.AddLedger(more...)
	if err := sinktest.Produce(ctx, cl, sinktest.LedgerRecords(topic, more)); err != nil {
		t.Fatal(err)
	}
	s = startSink(t, k, m, group)
	caughtUp(t, k, m, group)
	s.stop(t)
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("the sink after the rebuild: %v", err)
	}

	if _, err := rebuild.Run(ctx, cfg, m.DB); !errors.As(err, &pe) || !strings.Contains(err.Error(), "user_mic_sessions__old is left from an earlier rebuild") {
		t.Fatalf("rebuild with __old tables left: %v", err)
	}
	dropOld := func(tables []string) {
		for _, t0 := range tables {
			if _, err := m.DB.Exec("DROP TABLE " + t0 + rebuild.OldSuffix); err != nil {
				t.Fatal(err)
			}
		}
	}
	dropOld(append(micledger.FactTables.List(), "lucky_pools"))

	// Owned by roomflow lucky: the pools are left alone.
	if _, err := m.DB.Exec("INSERT INTO lucky_pool_owner (id, owner, owned_at_ms) VALUES (1, 'lucky', 1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DB.Exec("UPDATE user_mic_lifetime_stats SET session_count = session_count + 1 ORDER BY user_id LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	res, err = rebuild.Run(ctx, cfg, m.DB)
	if err != nil || len(res.Old) != 3 || !strings.Contains(res.PoolsSkipped, "roomflow lucky owns lucky_pools") || res.Inflows != 0 {
		t.Fatalf("rebuild with owned pools: %+v, %v", res, err)
	}
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("after the rebuild with owned pools: %v", err)
	}
	dropOld(micledger.FactTables.List())
	rs, err := k.Admin(t).DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 1}}})
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rebuild.Run(ctx, cfg, m.DB); !errors.As(err, &pe) || !strings.Contains(err.Error(), "partition 0 starts at offset 1") {
		t.Fatalf("rebuild after retention removed records: %v", err)
	}
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("a refused rebuild changed the facts: %v", err)
	}
}

// TestRebuildReadsFramedInflows: once kafka.public_wire_format is
// confluent the inflow topic holds plain records up to the switch and
// framed ones after it; the rebuild reads both per record, as the sink
// does, so the rebuilt pools keep every inflow.
func TestRebuildReadsFramedInflows(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	topic, inflowTopic := k.Config.Topics.MicLedger, k.Config.Topics.LuckyPoolInflow
	group := testenv.UniqueName(t) + "-sink"
	ledger := sinktest.NewLedgerGen(3, appCode, 10).Next(20)
	inflows := sinktest.NewInflowGen(9, appCode, 12, 3).Next(40)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	o.AddInflows(inflows...)
	framed := sinktest.InflowRecords(inflowTopic, inflows)
	f := envelope.Confluent(11, (&activityv1.LuckyPoolInflow{}).ProtoReflect().Descriptor())
	for _, r := range framed[20:] { // the records after the switch
		r.Value = append(slices.Clip(f.Prefix), r.Value...)
		for i := range r.Headers {
			if r.Headers[i].Key == envelope.HeaderContentType {
				r.Headers[i].Value = f.Header()
			}
		}
	}
	if err := sinktest.Produce(ctx, k.Client(t), append(sinktest.LedgerRecords(topic, ledger), framed...)); err != nil {
		t.Fatal(err)
	}
	s := startSink(t, k, m, group)
	caughtUp(t, k, m, group)
	s.stop(t)
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("the sink's facts: %v", err)
	}
	if _, err := m.DB.Exec("UPDATE lucky_pools SET balance = balance + 5, total_in = total_in + 5 WHERE scope_type = 'room' ORDER BY scope_id LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	cfg := rebuild.Config{Group: group, LedgerTopic: topic, InflowTopic: inflowTopic, DefaultAppCode: appCode, BatchSize: 50, Idle: 5 * time.Second, Kafka: k.Cluster(), Logger: slog.New(slog.DiscardHandler)}
	res, err := rebuild.Run(ctx, cfg, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	if res.Inflows != 40 || res.InvalidInflows != 0 {
		t.Errorf("rebuild read %d inflows, %d invalid: want 40 (20 plain, 20 framed), 0 invalid", res.Inflows, res.InvalidInflows)
	}
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("after the rebuild: %v", err)
	}
}

// TestRebuildRefusesSwapAfterSinkApplied: a sink started after rebuild's
// checks (a Deployment scaled back up, a pod restarted) applies new ledger
// entries to the live tables and advances its positions while rebuild
// reads; swapping then would put those facts in __old for good (their
// consumption rows and positions stay, so nothing applies them again).
// Rebuild must refuse the swap instead, leaving the live tables.
func TestRebuildRefusesSwapAfterSinkApplied(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	topic := k.Config.Topics.MicLedger
	group := testenv.UniqueName(t) + "-sink"
	gen := sinktest.NewLedgerGen(5, appCode, 20)
	ledger := gen.Next(100)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	cl := k.Client(t)
	if err := sinktest.Produce(ctx, cl, sinktest.LedgerRecords(topic, ledger)); err != nil {
		t.Fatal(err)
	}
	s := startSink(t, k, m, group)
	caughtUpOn(t, k, m, group, topic)
	s.stop(t)

	// Once rebuild's checks passed, a sink runs again and applies more
	// entries while rebuild fills the fresh tables.
	var ran bool
	db := testenv.OpenHooked(t, m.DSN, testenv.SQLHooks{Statement: func(_ context.Context, q string) error {
		if ran || !strings.HasPrefix(q, "CREATE TABLE") {
			return nil
		}
		ran = true
		more := gen.Next(50)
		o.AddLedger(more...)
		if err := sinktest.Produce(ctx, cl, sinktest.LedgerRecords(topic, more)); err != nil {
			return err
		}
		s := startSink(t, k, m, group)
		caughtUpOn(t, k, m, group, topic)
		s.stop(t)
		return nil
	}})
	cfg := rebuild.Config{Group: group, LedgerTopic: topic, DefaultAppCode: appCode, BatchSize: 50, Idle: 10 * time.Second, Kafka: k.Cluster(), Logger: slog.New(slog.DiscardHandler)}
	res, err := rebuild.Run(ctx, cfg, db)
	if !ran {
		t.Fatalf("rebuild never reached the swap: %+v, %v", res, err)
	}
	var pe *rebuild.PreconditionError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "moved") {
		t.Errorf("rebuild swapped although the sink applied entries meanwhile: %+v, %v", res, err)
	}
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("the facts the sink applied during the rebuild are gone: %v", err)
	}
}

// TestRebuildRefusesSwapAfterPoolsChanged: rebuild seeds the fresh
// lucky_pools with the live funded and total_out and recomputes the rest
// from the inflow topic. An operator's `lucky pools fund`, or `roomflow
// lucky` taking the pools over and paying out, while it reads would be
// undone by the swap; rebuild must refuse it instead.
func TestRebuildRefusesSwapAfterPoolsChanged(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	topic, inflowTopic := k.Config.Topics.MicLedger, k.Config.Topics.LuckyPoolInflow
	group := testenv.UniqueName(t) + "-sink"
	recs := sinktest.LedgerRecords(topic, sinktest.NewLedgerGen(3, appCode, 10).Next(20))
	recs = append(recs, sinktest.InflowRecords(inflowTopic, sinktest.NewInflowGen(9, appCode, 12, 3).Next(40))...)
	if err := sinktest.Produce(ctx, k.Client(t), recs); err != nil {
		t.Fatal(err)
	}
	s := startSink(t, k, m, group)
	caughtUp(t, k, m, group)
	s.stop(t)
	cfg := rebuild.Config{Group: group, LedgerTopic: topic, InflowTopic: inflowTopic, DefaultAppCode: appCode, BatchSize: 50, Idle: 5 * time.Second, Kafka: k.Cluster(), Logger: slog.New(slog.DiscardHandler)}
	sum := func() (funded, out int64) {
		t.Helper()
		if err := m.DB.QueryRow("SELECT SUM(funded), SUM(total_out) FROM lucky_pools").Scan(&funded, &out); err != nil {
			t.Fatal(err)
		}
		return funded, out
	}
	for _, tc := range []struct {
		name        string
		meantime    []string
		funded, out int64 // what meantime adds to the sums
	}{
		{"lucky pools fund", []string{"UPDATE lucky_pools SET funded = funded + 500, balance = balance + 500 ORDER BY scope_type, scope_id LIMIT 1"}, 500, 0},
		{"roomflow lucky takes over and pays out", []string{
			"INSERT INTO lucky_pool_owner (id, owner, instance_id, owned_at_ms) VALUES (1, 'draw_service', 'lucky-0', 1)",
			"UPDATE lucky_pools SET total_out = total_out + 7, balance = balance - 7 ORDER BY scope_type, scope_id LIMIT 1",
		}, 0, 7},
	} {
		var ran bool
		db := testenv.OpenHooked(t, m.DSN, testenv.SQLHooks{Statement: func(_ context.Context, q string) error {
			// The first write of the recomputed pools: the seed is done.
			if ran || !strings.HasPrefix(q, "INSERT INTO lucky_pools"+rebuild.FreshSuffix) || strings.Contains(q, "SELECT") {
				return nil
			}
			ran = true
			for _, q := range tc.meantime {
				if _, err := m.DB.Exec(q); err != nil {
					return err
				}
			}
			return nil
		}})
		funded, out := sum()
		res, err := rebuild.Run(ctx, cfg, db)
		if !ran {
			t.Fatalf("%s: rebuild never wrote the pools: %+v, %v", tc.name, res, err)
		}
		var pe *rebuild.PreconditionError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "lucky_pools") {
			t.Errorf("%s during the rebuild: it swapped: %+v, %v", tc.name, res, err)
			for _, tb := range res.Old {
				if _, err := m.DB.Exec("DROP TABLE " + tb); err != nil {
					t.Fatal(err)
				}
			}
		}
		if f2, o2 := sum(); f2 != funded+tc.funded || o2 != out+tc.out {
			t.Errorf("%s: lucky_pools funded %d, total_out %d after the rebuild, want %d, %d", tc.name, f2, o2, funded+tc.funded, out+tc.out)
		}
	}
}

// TestRebuildWithPartitionsNeverApplied: the sink claims every partition
// it is assigned with next_offset -1 and moves it only when it applies a
// record, so a topic with partitions that never had a record (no lucky
// gift yet) keeps -1 rows. Those partitions have nothing to rebuild; a
// rebuild must not wait for records below -1 and fail.
func TestRebuildWithPartitionsNeverApplied(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	topic, inflowTopic := k.Config.Topics.MicLedger, k.Config.Topics.LuckyPoolInflow
	group := testenv.UniqueName(t) + "-sink"
	ledger := sinktest.NewLedgerGen(3, appCode, 10).Next(20)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	if err := sinktest.Produce(ctx, k.Client(t), sinktest.LedgerRecords(topic, ledger)); err != nil {
		t.Fatal(err)
	}
	s := startSink(t, k, m, group)
	caughtUpOn(t, k, m, group, topic)
	testenv.Eventually(t, 30*time.Second, "the sink to claim the inflow topic's partitions", func() bool {
		stored, err := mysqlsink.StoredOffsets(ctx, m.DB, group, inflowTopic)
		return err == nil && len(stored) == 3
	})
	s.stop(t)
	cfg := rebuild.Config{Group: group, LedgerTopic: topic, InflowTopic: inflowTopic, DefaultAppCode: appCode, BatchSize: 50, Idle: 2 * time.Second, Kafka: k.Cluster(), Logger: slog.New(slog.DiscardHandler)}
	if res, err := rebuild.Run(ctx, cfg, m.DB); err != nil {
		t.Fatalf("rebuild with an inflow topic the sink claimed but never applied: %+v, %v", res, err)
	}
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("after the rebuild: %v", err)
	}
}
