package streams_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// failingKey fails every record of key with a non-reject error while
// failing is set: a lookup that keeps failing for one record.
type failingKey struct {
	proc    streams.Processor
	key     string
	failing atomic.Bool
	tries   atomic.Int64 // Process calls for key
}

func (f *failingKey) Process(t streams.Task, rec *kgo.Record) error {
	if string(rec.Key) == f.key {
		f.tries.Add(1)
		if f.failing.Load() {
			return errors.New("lookup failed")
		}
	}
	return f.proc.Process(t, rec)
}

// produceTo writes records with the given keys to one partition and adds
// them to the oracle (value = "p<partition>-<offset index>").
func (h *harness) produceTo(cl *kgo.Client, p int32, keys []string, oracle map[string][]string) {
	h.t.Helper()
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		v := "p" + strconv.Itoa(int(p)) + "-" + strconv.Itoa(len(oracle[k])) + "-" + k
		oracle[k] = append(oracle[k], v)
		recs[i] = &kgo.Record{Topic: h.in, Partition: p, Key: []byte(k), Value: []byte(v),
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte("E-" + v)}}}
	}
	rttest.Produce(h.t, cl, recs)
}

// committed returns the group's committed input offsets by partition
// (kadm FetchOffsets).
func (h *harness) committed(adm *kadm.Client) map[int32]int64 {
	h.t.Helper()
	resp, err := adm.FetchOffsets(context.Background(), h.grp)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == h.in && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

func repeat(key string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = key
	}
	return ks
}

// TestFailingRecordStallsOnlyItsPartition: a record of partition 0 fails
// persistently (a non-reject error, as a failing lookup). Partitions 1-3
// keep committing and their output appears; partition 0's records before
// the failing one commit, its committed offset never passes the failing
// record while the fault lasts, and roomflow_process_partition_stalled is
// 1. Once the fault clears, the record and the rest of the partition are
// processed exactly once.
func TestFailingRecordStallsOnlyItsPartition(t *testing.T) {
	h := newHarness(t, 4)
	manual := h.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := h.k.Admin(t)
	oracle := map[string][]string{}
	// Partition 0: 5 good records, the failing one at offset 5, 4 more.
	h.produceTo(manual, 0, append(append(repeat("a0", 5), "bad"), repeat("a0", 4)...), oracle)
	for p := int32(1); p < 4; p++ {
		h.produceTo(manual, p, repeat("a"+strconv.Itoa(int(p)), 50), oracle)
	}
	proc := &failingKey{proc: counter{out: h.out}, key: "bad"}
	proc.failing.Store(true)
	reg := prometheus.NewRegistry()
	r := rttest.Start(h.runtime("toy-stall", proc, withRegisterer(reg), func(c *streams.Config) {
		c.RetryBackoffMin, c.RetryBackoffMax = 20*time.Millisecond, 300*time.Millisecond
	}))

	// Everything but the failing record and what follows it in partition 0.
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 155, 500*time.Millisecond, 60*time.Second); len(out) != 155 {
		t.Fatalf("%d outputs while partition 0 fails, want 155 (150 of the other partitions, 5 before the failing record)", len(out))
	}
	waitFor(t, "the stalled gauge of partition 0", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_partition_stalled", "partition", "0") == 1
	})
	if s := metricSum(t, reg, "roomflow_process_partition_stalled"); s != 1 {
		t.Fatalf("stalled gauges sum to %v, want only partition 0", s)
	}
	// The other partitions keep committing while partition 0 backs off.
	for p := int32(1); p < 4; p++ {
		h.produceTo(manual, p, repeat("a"+strconv.Itoa(int(p)), 50), oracle)
	}
	waitFor(t, "partitions 1-3 to commit their second batch", 60*time.Second, func() bool {
		c := h.committed(adm)
		if c[0] > 5 {
			t.Fatalf("partition 0 committed offset %d, past the failing record at 5", c[0])
		}
		return c[0] == 5 && c[1] == 100 && c[2] == 100 && c[3] == 100
	})
	waitFor(t, "retries of the failing record", 60*time.Second, func() bool { return proc.tries.Load() >= 3 })
	if c := h.committed(adm); c[0] != 5 {
		t.Fatalf("partition 0 committed offset %d, want the failing record's 5", c[0])
	}
	if n := metricSum(t, reg, "roomflow_process_partition_stalls_total"); n < 3 {
		t.Fatalf("stalls_total %v, want one per failed attempt (>= 3)", n)
	}

	proc.failing.Store(false)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 310, time.Second, 60*time.Second)
	waitFor(t, "the stalled gauge back at 0", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_partition_stalled", "partition", "0") == 0
	})
	waitFor(t, "partition 0 committed to its end", 30*time.Second, func() bool { return h.committed(adm)[0] == 10 })
	r.Stop(t)
	checkCounts(t, out, oracle)
}

// metric is testenv.Metric's value (0 when no series matches).
func metric(reg *prometheus.Registry, name string, labels ...string) float64 {
	v, _ := testenv.Metric(reg, name, labels...)
	return v
}

// TestFailingPunctuationIsRetriedAlone: a punctuation that keeps failing
// on partition 0 is undone and retried after a backoff, with
// roomflow_process_partition_stalled 1, while partition 1 ticks and both
// partitions' records flow; once the fault clears partition 0 ticks.
func TestFailingPunctuationIsRetriedAlone(t *testing.T) {
	h := newHarness(t, 2)
	ticks := h.dlq + ".ticks"
	if _, err := h.k.Admin(t).CreateTopic(context.Background(), 1, -1, nil, ticks); err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	failing.Store(true)
	tick := func(task streams.Task, now time.Time) error {
		task.Emit(&kgo.Record{Topic: ticks, Key: []byte(strconv.Itoa(int(task.Partition())))})
		if task.Partition() == 0 && failing.Load() {
			return errors.New("timer lookup failed") // after an emit, which must be undone
		}
		return nil
	}
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	rt := h.runtime("toy-punct-stall", counter{out: h.out}, withRegisterer(reg),
		withTimer(clock.Now, "tick", time.Minute, tick))
	r := rttest.Start(rt)
	waitFor(t, "2 partitions assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 2 })
	clock.Advance(time.Minute)
	waitFor(t, "the stalled gauge of partition 0", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_partition_stalled", "partition", "0") == 1
	})
	manual := h.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	oracle := map[string][]string{}
	h.produceTo(manual, 0, repeat("a0", 10), oracle)
	h.produceTo(manual, 1, repeat("a1", 10), oracle)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 20, time.Second, 30*time.Second)
	waitFor(t, "retries of the failing punctuation", 60*time.Second, func() bool {
		return metric(reg, "roomflow_process_partition_stalls_total", "cause", "punctuation") >= 3
	})
	if got := rttest.ReadCommitted(t, h.k.Brokers, ticks, 1, 500*time.Millisecond, 30*time.Second); len(got) != 1 || string(got[0].Key) != "1" {
		t.Fatalf("%d ticks while partition 0's fails, want partition 1's only", len(got))
	}
	failing.Store(false)
	if got := rttest.ReadCommitted(t, h.k.Brokers, ticks, 2, 500*time.Millisecond, 30*time.Second); len(got) != 2 {
		t.Fatalf("%d ticks after the fault cleared, want 2", len(got))
	}
	waitFor(t, "the stalled gauge back at 0", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_partition_stalled", "partition", "0") == 0
	})
	r.Stop(t)
	checkCounts(t, out, oracle)
}

// TestStallOfFirstAndLastRecordRecovers: a partition stalled on its only
// record (offset 0, nothing after it) is recovered by that record's
// success: its stalled gauge returns to 0 without waiting for more input.
func TestStallOfFirstAndLastRecordRecovers(t *testing.T) {
	h := newHarness(t, 1)
	proc := &failingKey{proc: counter{out: h.out}, key: "bad"}
	proc.failing.Store(true)
	reg := prometheus.NewRegistry()
	r := rttest.Start(h.runtime("toy-stall-one", proc, withRegisterer(reg)))
	rttest.Produce(t, h.k.Client(t), []*kgo.Record{{Topic: h.in, Key: []byte("bad"), Value: []byte("1")}})
	waitFor(t, "the partition stalled and retried", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_partition_stalled", "partition", "0") == 1 && proc.tries.Load() >= 2
	})
	proc.failing.Store(false)
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 0, 30*time.Second); len(out) != 1 {
		t.Fatalf("%d outputs once the record succeeds, want 1", len(out))
	}
	waitFor(t, "the stalled gauge back at 0", 5*time.Second, func() bool {
		return metric(reg, "roomflow_process_partition_stalled", "partition", "0") == 0
	})
	r.Stop(t)
}
