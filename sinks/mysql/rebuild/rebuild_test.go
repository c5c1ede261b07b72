package rebuild_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
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
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: group, Appliers: []mysqlsink.Registration{mysqlsink.Register(ml)}}, m.DB)
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

// caughtUp waits until the sink's stored positions reach the ledger's end.
func caughtUp(t *testing.T, k *testenv.Kafka, m *testenv.MySQL, group string) {
	t.Helper()
	topic := k.Config.Topics.MicLedger
	testenv.Eventually(t, 60*time.Second, "the sink to apply the whole ledger", func() bool {
		ends, err := k.Admin(t).ListEndOffsets(context.Background(), topic)
		if err != nil {
			return false
		}
		stored, err := mysqlsink.StoredOffsets(context.Background(), m.DB, group, topic)
		if err != nil {
			return false
		}
		want := map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 {
				want[o.Partition] = o.Offset
			}
		})
		return maps.Equal(stored, want)
	})
}

// TestRebuildRepairsCorruptedFacts runs the real sink over a ledger with
// repeats and an undecodable record, corrupts the fact tables, and
// rebuilds: the facts equal the oracle again (the repeats counted once,
// the dead letter skipped), the replaced tables stay as __old, and the
// sink resumes on the rebuilt tables. Rebuild refuses while the sink runs,
// while __old tables are left, and once retention removed ledger records.
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
	cl := k.Client(t)
	if err := sinktest.Produce(ctx, cl, recs); err != nil {
		t.Fatal(err)
	}
	s := startSink(t, k, m, group)
	caughtUp(t, k, m, group)
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("the sink's facts before the corruption: %v", err)
	}
	cfg := rebuild.Config{Group: group, LedgerTopic: topic, DefaultAppCode: appCode, BatchSize: 50, Idle: 10 * time.Second, Kafka: k.Cluster()}
	var pe *rebuild.PreconditionError
	if _, err := rebuild.Run(ctx, cfg, m.DB); !errors.As(err, &pe) || !strings.Contains(err.Error(), "stop every roomflow sink first") {
		t.Fatalf("rebuild while the sink runs: %v", err)
	}
	s.stop(t)

	for _, q := range []string{
		"UPDATE user_mic_lifetime_stats SET mic_online_ms = mic_online_ms + 1000 ORDER BY user_id LIMIT 1",
		"DELETE FROM user_mic_daily_stats ORDER BY user_id, stat_date LIMIT 2",
		"UPDATE user_mic_sessions SET seat_occupied_ms = 1 ORDER BY mic_session_id LIMIT 3",
	} {
		if _, err := m.DB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Check(ctx, m.DB); err == nil {
		t.Fatal("the corrupted tables pass the oracle's check")
	}
	res, err := rebuild.Run(ctx, cfg, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Check(ctx, m.DB); err != nil {
		t.Fatalf("after the rebuild: %v", err)
	}
	if res.Entries != 431 || res.Applied != 400 || res.Repeats != 30 || res.Invalid != 1 || len(res.Old) != 3 {
		t.Errorf("result %+v: want 431 entries, 400 applied, 30 repeats, 1 invalid, 3 old tables", res)
	}
	var corrupted int
	if err := m.DB.QueryRow("SELECT COUNT(*) FROM user_mic_sessions__old WHERE seat_occupied_ms = 1").Scan(&corrupted); err != nil || corrupted == 0 {
		t.Errorf("user_mic_sessions__old should keep the replaced (corrupted) rows: %d, %v", corrupted, err)
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
	for _, t0 := range micledger.FactTables.List() {
		if _, err := m.DB.Exec("DROP TABLE " + t0 + rebuild.OldSuffix); err != nil {
			t.Fatal(err)
		}
	}
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
