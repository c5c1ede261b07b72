package streams_test

import (
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// TestRejectGoesToDLQAndPartitionMovesOn: a rejected record lands in the
// DLQ with its original key, value and headers plus the error headers; its
// state write and emit are discarded; later records still flow.
func TestRejectGoesToDLQAndPartitionMovesOn(t *testing.T) {
	h := newHarness(t, 1)
	reg := prometheus.NewRegistry()
	cl := h.k.Client(t)
	recs := []*kgo.Record{
		{Topic: h.in, Key: []byte("a"), Value: []byte("1")},
		{Topic: h.in, Key: []byte("a"), Value: []byte("poison"), Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte("E-poison")}}},
		{Topic: h.in, Key: []byte("a"), Value: []byte("2")},
	}
	rttest.Produce(t, cl, recs)
	r := rttest.Start(h.runtime("toy-dlq", counter{out: h.out}, withRegisterer(reg)))
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 2, 300*time.Millisecond, 30*time.Second)
	dlq := rttest.ReadCommitted(t, h.k.Brokers, h.dlq, 1, 300*time.Millisecond, 30*time.Second)
	r.Stop(t)
	checkCounts(t, out, map[string][]string{"a": {"1", "2"}})
	if len(dlq) != 1 {
		t.Fatalf("dlq has %d records, want 1", len(dlq))
	}
	d := dlq[0]
	for key, want := range map[string]string{
		"event_id": "E-poison", "error_reason": "toy_poison", "error": "toy_poison: value is poison",
		"source_topic": h.in, "source_partition": "0", "source_offset": "1", "stage": "toy",
	} {
		if got := rttest.Header(d, key); got != want {
			t.Errorf("dlq header %s = %q, want %q", key, got, want)
		}
	}
	if string(d.Key) != "a" || string(d.Value) != "poison" {
		t.Errorf("dlq record %q=%q, want the original", d.Key, d.Value)
	}
	mfs, _ := reg.Gather()
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "roomflow_process_dlq_total" {
			for _, m := range mf.GetMetric() {
				found = found || m.GetCounter().GetValue() == 1
			}
		}
	}
	if !found {
		t.Error("roomflow_process_dlq_total{reason=toy_poison} != 1")
	}
	// The rejected record was consumed like the others.
	if n := metricSum(t, reg, "roomflow_process_records_in_total"); n != 3 {
		t.Errorf("records_in %v, want 3", n)
	}
}

// TestFailedProduceAbortsAndRewinds: an output record the broker refuses
// aborts its transaction as cause "produce" (logged with the rewind), never
// commits it, and the rewound input is processed again into one committed
// output.
func TestFailedProduceAbortsAndRewinds(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake fault injection; ROOMFLOW_KAFKA_BROKERS is set")
	}
	h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: h.out, Err: kerr.InvalidRecord, Count: 1})
	rttest.Produce(t, h.k.Client(t), []*kgo.Record{{Topic: h.in, Key: []byte("a"), Value: []byte("1")}})
	reg := prometheus.NewRegistry()
	logs := &testenv.SyncBuffer{}
	r := rttest.Start(h.runtime("toy-produce", counter{out: h.out}, withRegisterer(reg), func(c *streams.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}))
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 500*time.Millisecond, 30*time.Second)
	r.Stop(t)
	checkCounts(t, out, map[string][]string{"a": {"1"}})
	if a := metric(reg, "roomflow_process_txn_aborts_total", "cause", "produce"); a != 1 {
		t.Fatalf("%v transactions aborted for a failed produce, want 1; logs:\n%s", a, logs.String())
	}
	for _, want := range []string{"produce failed; aborting the transaction", `msg="transaction aborted; consumption rewound to the last commit" component=processor processor=toy cause=produce`} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("no %s in the logs:\n%s", want, logs.String())
		}
	}
}

// tally runs proc and counts the records it processed (including those of
// transactions aborted later).
type tally struct {
	proc streams.Processor
	n    atomic.Int64
}

func (c *tally) Process(t streams.Task, rec *kgo.Record) error {
	c.n.Add(1)
	return c.proc.Process(t, rec)
}

// TestTransactionHoldsAtMostCommitRecords: a transaction commits as soon
// as it holds CommitRecords input records, well before its CommitInterval,
// and never takes more, also when its records come in several polls (an
// open transaction keeps polling); records_out counts each topic's records
// of the committed transactions.
func TestTransactionHoldsAtMostCommitRecords(t *testing.T) {
	h := newHarness(t, 1)
	reg := prometheus.NewRegistry()
	proc := &tally{proc: counter{out: h.out}}
	r := rttest.Start(h.runtime("toy-bound", proc, withRegisterer(reg), func(c *streams.Config) {
		c.CommitRecords = 10
		c.CommitInterval = 15 * time.Second // longer than the test waits, at most half the transaction timeout
	}))
	cl := h.k.Client(t)
	produce := func(n int) {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: h.in, Key: []byte("a"), Value: []byte("x")}
		}
		rttest.Produce(t, cl, recs)
	}
	// 5 records open a transaction; 15 more arrive while it waits for its
	// CommitInterval: it takes 5 of them and commits, then the next 10.
	produce(5)
	waitFor(t, "the first 5 records processed", 30*time.Second, func() bool { return proc.n.Load() == 5 })
	produce(15)
	txns := rttest.ReadTransactions(t, h.k.Brokers, h.out, 20, 500*time.Millisecond, 10*time.Second)
	r.Stop(t)
	sizes := make([]int, len(txns))
	for i, txn := range txns {
		sizes[i] = len(txn)
	}
	if !slices.Equal(sizes, []int{10, 10}) {
		t.Fatalf("transactions of %v output records within 10s, want [10 10] (CommitRecords 10)", sizes)
	}
	// a and seen:a per transaction, after the restore marker.
	changelog := rttest.ReadCommitted(t, h.k.Brokers, h.cl, 5, 300*time.Millisecond, 30*time.Second)
	if got, want := metric(reg, "roomflow_process_records_out_total", "topic", h.out), 20.0; got != want {
		t.Errorf("records_out{topic=%s} %v, want %v", h.out, got, want)
	}
	if got, want := metric(reg, "roomflow_process_records_out_total", "topic", h.cl), float64(len(changelog)-1); got != want {
		t.Errorf("records_out{topic=%s} %v, want %v", h.cl, got, want)
	}
}

// slow runs proc taking at least d per record.
type slow struct {
	proc streams.Processor
	d    time.Duration
}

func (s slow) Process(t streams.Task, rec *kgo.Record) error {
	time.Sleep(s.d)
	return s.proc.Process(t, rec)
}

// TestOutputTimestampsFollowProcessing: output records are stamped with the
// time they were processed: a poll's records share a timestamp only for a
// few records (200 records of 2ms each span well over 100ms of stamps), and
// a later poll's output is never stamped with an earlier poll's time.
func TestOutputTimestampsFollowProcessing(t *testing.T) {
	h := newHarness(t, 1)
	h.inputs(200, 1, 0)
	r := rttest.Start(h.runtime("toy-stamp", slow{proc: counter{out: h.out}, d: 2 * time.Millisecond}))
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 200, 0, 30*time.Second)
	if len(out) != 200 {
		t.Fatalf("%d outputs, want 200", len(out))
	}
	for i := 1; i < len(out); i++ {
		if out[i].Timestamp.Before(out[i-1].Timestamp) {
			t.Fatalf("output %d stamped %v, before output %d's %v", i, out[i].Timestamp, i-1, out[i-1].Timestamp)
		}
	}
	if span := out[199].Timestamp.Sub(out[0].Timestamp); span < 100*time.Millisecond {
		t.Fatalf("outputs of 400ms of processing stamped over %v, want the stamp renewed every few records", span)
	}

	time.Sleep(time.Second)
	before := time.Now().Truncate(time.Millisecond) // Kafka timestamps are milliseconds
	h.inputs(1, 1, 200)
	out = rttest.ReadCommitted(t, h.k.Brokers, h.out, 201, 0, 30*time.Second)
	r.Stop(t)
	if last := out[len(out)-1]; last.Timestamp.Before(before) {
		t.Fatalf("output of a record produced at %v stamped %v, earlier", before, last.Timestamp)
	}
}
