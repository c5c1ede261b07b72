package live_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/obs"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen/live"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// endpoint serves reg as a roomflow process does (obs.Handler) and
// returns its /metrics URL.
func endpoint(t *testing.T, reg *prometheus.Registry) string {
	srv := httptest.NewServer(obs.Handler(reg, obs.NewHealth()))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// relayRegistry is a relay replica's: its lag and dead-lettered rows.
func relayRegistry(lag float64, deadLettered float64) *prometheus.Registry {
	reg := obs.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "roomflow_relay_lag_seconds", Help: "h"}, func() float64 { return lag }))
	ev := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "roomflow_relay_events_total", Help: "h"}, []string{"result"})
	reg.MustRegister(ev)
	ev.WithLabelValues("relayed").Add(1000)
	ev.WithLabelValues("dead_lettered").Add(deadLettered)
	return reg
}

// TestMetricsSource: the relay lag is the highest replica's, the
// processor lag the slowest processor's, the sink lag and the DLQ records
// are summed over the endpoints; a stage no endpoint exports stays n/a, and one failing
// endpoint fails the source.
func TestMetricsSource(t *testing.T) {
	proc := obs.NewRegistry()
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "roomflow_process_consumer_lag_records", Help: "h"}, []string{"processor", "topic", "partition"})
	dlq := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "roomflow_process_dlq_total", Help: "h"}, []string{"processor", "reason"})
	proc.MustRegister(lag, dlq)
	lag.WithLabelValues("room", "events", "0").Set(7)
	lag.WithLabelValues("room", "events", "1").Set(1)
	lag.WithLabelValues("mic", "events", "1").Set(3)
	dlq.WithLabelValues("mic", "decode").Add(4)
	dlq.WithLabelValues("room", "corrupt_state") // 0, as precreated
	sink := obs.NewRegistry()
	sm := mysqlsink.NewMetrics(sink)
	sm.Lag.WithLabelValues("facts", "0").Set(5)
	sm.Lag.WithLabelValues("facts", "1").Set(6)
	sm.DLQ.WithLabelValues("invalid").Add(1)

	relays := []string{endpoint(t, relayRegistry(0.4, 2)), endpoint(t, relayRegistry(0.1, 0))}
	// A second process instance owns the mic processor's partition 0.
	proc2 := obs.NewRegistry()
	lag2 := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "roomflow_process_consumer_lag_records", Help: "h"}, []string{"processor", "topic", "partition"})
	proc2.MustRegister(lag2)
	lag2.WithLabelValues("mic", "events", "0").Set(6)
	all := append(relays, endpoint(t, proc), endpoint(t, proc2), endpoint(t, sink))
	got, err := live.MetricsSource{URLs: all}.Lag(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := live.Lag{Relay: gauge(0.4), Processor: gauge(3 + 6), Sink: gauge(11), DLQ: gauge(2 + 4 + 1)}
	if got != want {
		t.Fatalf("lag %+v, want %+v", got, want)
	}

	got, err = live.MetricsSource{URLs: relays[1:]}.Lag(t.Context())
	if err != nil || got != (live.Lag{Relay: gauge(0.1), DLQ: gauge(0)}) {
		t.Fatalf("relay alone: %+v %v", got, err)
	}

	bad := strings.TrimSuffix(all[2], "/metrics") + "/nothing"
	for _, u := range []string{bad, "http://" + testenv.ClosedAddr(t) + "/metrics"} {
		if _, err := (live.MetricsSource{URLs: append(all, u)}).Lag(t.Context()); err == nil {
			t.Fatalf("%s: no error", u)
		}
	}
}

// TestKafkaSource against kfake: groups that committed behind the end (the
// slowest processor's lag).
func TestKafkaSource(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(2))
	topics := k.Config.Topics
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: topics.RoomEvents, Partition: int32(i % 2), Value: []byte("e")})
	}
	ctx := t.Context()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := k.Admin(t)
	commit := func(group string, p0, p1 int64) {
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: topics.RoomEvents, Partition: 0, At: p0, LeaderEpoch: -1})
		o.Add(kadm.Offset{Topic: topics.RoomEvents, Partition: 1, At: p1, LeaderEpoch: -1})
		if resp, err := adm.CommitOffsets(ctx, group, o); err == nil && resp.Error() != nil || err != nil {
			t.Fatalf("commit %s: %v %v", group, err, resp.Error())
		}
	}
	commit("room", 10, 4) // 6 behind
	commit("mic", 7, 9)   // 4 behind
	commit("sink", 10, 8) // 2 behind

	src := live.KafkaSource{Admin: adm, ProcessorGroups: []string{"room", "mic"}, SinkGroups: []string{"sink"}}
	got, err := src.Lag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (live.Lag{Processor: gauge(6), Sink: gauge(2)}); got != want {
		t.Fatalf("lag %+v, want %+v", got, want)
	}
	if got, err := (live.KafkaSource{Admin: adm, SinkGroups: []string{"sink"}}).Lag(ctx); err != nil || got != (live.Lag{Sink: gauge(2)}) {
		t.Fatalf("sink alone: %+v %v", got, err)
	}

	// A cluster that does not answer fails the tick, not the run.
	gone, err := kgo.NewClient(kgo.SeedBrokers(testenv.ClosedAddr(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := (live.KafkaSource{Admin: kadm.NewClient(gone), ProcessorGroups: []string{"room"}}).Lag(sctx); err == nil {
		t.Fatal("no error from an unreachable cluster")
	}
}

// TestDLQCounter against kfake: dead letters committed in transactions,
// as the relay and the processors write them, count once each; an aborted
// one and those from before the run do not. The end offsets (markers
// included) would say more.
func TestDLQCounter(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	dlq := k.Config.Topics.DLQ
	ctx := t.Context()
	txn := k.Client(t, kgo.TransactionalID(testenv.UniqueName(t)), kgo.DefaultProduceTopic(dlq))
	write := func(commit bool, n int) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			txn.Produce(ctx, &kgo.Record{Value: []byte("dead")}, nil)
		}
		if err := txn.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	write(true, 2) // an earlier run's
	adm := k.Admin(t)
	end := func() int64 {
		ends, err := adm.ListEndOffsets(ctx, dlq)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(dlq, 0)
		return o.Offset
	}
	before := end()
	time.Sleep(5 * time.Millisecond) // the run starts in a later millisecond

	d := live.NewDLQCounter(k.Client(t, live.DLQConsumeOpts(time.Now(), dlq)...))
	defer d.Close()
	for range 3 {
		write(true, 1)
	}
	write(false, 1)
	write(true, 1)
	testenv.Eventually(t, 10*time.Second, "4 dead letters counted", func() bool {
		l, err := d.Lag(ctx)
		return err == nil && l.DLQ == gauge(4)
	})
	time.Sleep(300 * time.Millisecond)
	if l, err := d.Lag(ctx); err != nil || l.DLQ != gauge(4) {
		t.Fatalf("after settling: %+v %v", l, err)
	}
	if grew := end() - before; grew != 10 { // 5 records, 5 markers
		t.Fatalf("end offsets grew by %d", grew)
	}
}
