package streams_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// TestPunctuationLSOBoundaryDataRecord pins the LSO gate at its boundary
// (issue 21): the input ends with a plain data record (no transaction
// marker after it, so the LSO is the offset right after that record), and
// the first poll after the tick stops exactly one record short of it
// (commit_records is one less than the partition holds). The tick must
// stay deferred at LSO-1 and run once the position equals the LSO, seeing
// every record: a gate of `position > lso` never runs here, one of
// `position >= lso-1` runs a record early.
func TestPunctuationLSOBoundaryDataRecord(t *testing.T) {
	const n = 10
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake fault injection; ROOMFLOW_KAFKA_BROKERS is set")
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: h.in, Value: []byte("x")}
	}
	rttest.Produce(t, h.k.Client(t), recs)

	hold := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: h.in, Err: kerr.NotLeaderForPartition, Count: -1})
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := seen{out: h.out}
	reg := prometheus.NewRegistry()
	rt := h.runtime("toy-lso-edge", s, withTimer(clock.Now, "tick", time.Minute, s.tick), withRegisterer(reg),
		func(c *streams.Config) { c.CommitRecords = n - 1 })
	r := rttest.Start(rt)
	waitFor(t, "the partition assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 1 })
	clock.Advance(time.Minute)
	waitFor(t, "the tick deferred behind the input", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_punctuations_deferred_total", "reason", "behind") >= 1 ||
			metricSum(t, reg, "roomflow_process_punctuations_total") > 0
	})
	hold.Remove()
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 500*time.Millisecond, 30*time.Second)
	if len(out) != 1 {
		t.Fatalf("%d ticks after the input flowed, want 1", len(out))
	}
	if string(out[0].Value) != "10" {
		t.Fatalf("the tick ran having consumed %q records, want all %d (the LSO is after the last data record)", out[0].Value, n)
	}
	r.Stop(t)
}
