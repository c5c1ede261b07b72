package streams

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// partsRuntime is a runtime whose parts are set up as New and Run set
// them up, with a session client that never connects: what the parts do
// with the client here (pause, resume) stays in the client.
func partsRuntime(t *testing.T, set func(*Config)) *Runtime {
	t.Helper()
	cfg := Config{
		Name: "parts", Input: "in", Group: "g", Changelog: "in-changelog", DLQ: "in-dlq",
		Kafka:           kafkax.Cluster{Brokers: []string{"127.0.0.1:1"}},
		RetryBackoffMin: 100 * time.Millisecond, RetryBackoffMax: 400 * time.Millisecond,
		Registerer: prometheus.NewRegistry(),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if set != nil {
		set(&cfg)
	}
	r, err := New(cfg, ProcessorFunc(func(Task, *kgo.Record) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"),
		kgo.ConsumeTopics("in"), kgo.TransactionalID("parts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.Close)
	r.sess = sess
	r.shared.ctx = context.Background()
	return r
}

// partsTask is partition p's task as the runtime builds it.
func partsTask(r *Runtime, p int32) *task { return r.newTask(p) }

// paused is the set of the input's partitions the client holds paused.
func paused(r *Runtime) map[int32]bool {
	out := map[int32]bool{}
	for _, p := range r.client().PauseFetchPartitions(nil)["in"] {
		out[p] = true
	}
	return out
}

// value is the value of one counter or gauge series.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// series counts the series of collector c.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}
