package streams_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// TestCorruptStateGoesToDLQ: a processor that finds a state value it
// cannot decode returns streams.CorruptState; the record goes to the DLQ
// with reason corrupt_state and the partition moves on.
func TestCorruptStateGoesToDLQ(t *testing.T) {
	h := newHarness(t, 1)
	proc := streams.ProcessorFunc(func(task streams.Task, rec *kgo.Record) error {
		k := string(rec.Key)
		if string(rec.Value) == "corrupt" { // plant a value the next record cannot decode
			task.Store().Put(k, []byte("not a number"))
			return nil
		}
		n := 0
		if v, ok := task.Store().Get(k); ok {
			var err error
			if n, err = strconv.Atoi(string(v)); err != nil {
				return streams.CorruptState(k, err)
			}
		}
		task.Store().Put(k, []byte(strconv.Itoa(n+1)))
		task.Emit(&kgo.Record{Topic: h.out, Key: rec.Key, Value: []byte(strconv.Itoa(n + 1))})
		return nil
	})
	rttest.Produce(t, h.k.Client(t), []*kgo.Record{
		{Topic: h.in, Key: []byte("a"), Value: []byte("corrupt")},
		{Topic: h.in, Key: []byte("a"), Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte("E-a")}}},
		{Topic: h.in, Key: []byte("b"), Value: []byte("x")},
	})
	reg := prometheus.NewRegistry()
	r := rttest.Start(h.runtime("toy-corrupt", proc, withRegisterer(reg)))
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 300*time.Millisecond, 30*time.Second)
	dlq := rttest.ReadCommitted(t, h.k.Brokers, h.dlq, 1, 300*time.Millisecond, 30*time.Second)
	r.Stop(t)
	if len(out) != 1 || string(out[0].Key) != "b" {
		t.Fatalf("outputs %v, want b's only", out)
	}
	if len(dlq) != 1 || rttest.Header(dlq[0], "error_reason") != streams.ReasonCorruptState ||
		rttest.Header(dlq[0], "event_id") != "E-a" || rttest.Header(dlq[0], "source_offset") != "1" {
		t.Fatalf("DLQ %v, want a's record with reason corrupt_state", dlq)
	}
	if n := metric(reg, "roomflow_process_dlq_total", "reason", streams.ReasonCorruptState); n != 1 {
		t.Fatalf("dlq_total{reason=corrupt_state} = %v", n)
	}
}
