package streams

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The stall tracker doubles a partition's backoff while the same record
// fails (up to the maximum), starts over for another record, pauses the
// partition's fetching until the backoff has passed and shows the stall
// on the gauge until the record succeeds.
func TestStallTrackerBacksOffPerRecord(t *testing.T) {
	r := partsRuntime(t, nil)
	st, tk := &r.stalls, partsTask(r, 3)
	st.track(3)
	gauge := r.m.stalled.WithLabelValues("parts", "3")
	failing := errors.New("lookup failed")
	for i, want := range []time.Duration{100, 200, 400, 400} {
		st.record(tk, &kgo.Record{Topic: "in", Partition: 3, Offset: 7}, failing)
		s := st.of(3)
		if s.backoff != want*time.Millisecond || s.attempt != i+1 {
			t.Fatalf("failure %d: backoff %s attempt %d, want %s and %d", i+1, s.backoff, s.attempt, want*time.Millisecond, i+1)
		}
	}
	if !st.of(3).fetchPaused() || !paused(r)[3] || value(t, gauge) != 1 {
		t.Fatalf("stalled record: paused %v in the client %v, gauge %v; want paused and 1", st.of(3).fetchPaused(), paused(r), value(t, gauge))
	}
	st.record(tk, &kgo.Record{Topic: "in", Partition: 3, Offset: 8}, failing)
	if s := st.of(3); s.backoff != 100*time.Millisecond || s.attempt != 1 {
		t.Fatalf("another record: backoff %s attempt %d, want the minimum and 1", s.backoff, s.attempt)
	}
	if got := value(t, r.m.stalls.WithLabelValues("parts", "record")); got != 5 {
		t.Fatalf("stalls_total{record} %v, want 5", got)
	}

	if wait := st.resume(); wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("resume during the backoff: next in %s, want within the backoff", wait)
	}
	if !paused(r)[3] || !st.waiting(3) {
		t.Fatal("resumed before the backoff passed")
	}
	st.of(3).until = time.Now().Add(-time.Millisecond)
	if wait := st.resume(); wait != 0 || paused(r)[3] || st.waiting(3) {
		t.Fatalf("resume after the backoff: next %s, paused %v, waiting %v; want 0, resumed, not waiting", wait, paused(r), st.waiting(3))
	}
	if !st.of(3).recoversAt(8) || st.of(3).recoversAt(7) {
		t.Fatal("the stall must end with its record (offset 8) or a later one, not before")
	}
	st.recovered(tk)
	if st.of(3) != nil || value(t, gauge) != 0 {
		t.Fatalf("recovered: stall %v gauge %v, want none and 0", st.of(3), value(t, gauge))
	}
}

// A failing punctuation stalls its partition without pausing its records;
// it ends when that punctuation runs, and a dropped partition is resumed
// in the client and loses its gauge.
func TestStallTrackerPunctuationAndForget(t *testing.T) {
	r := partsRuntime(t, nil)
	st, tk := &r.stalls, partsTask(r, 1)
	st.track(1)
	st.punctuation(tk, "close", errors.New("mysql down"))
	if s := st.of(1); s.fetchPaused() || !st.waiting(1) || s.recoversAt(1<<40) || len(paused(r)) != 0 {
		t.Fatalf("punctuation stall: paused %v waiting %v; want records flowing and the punctuation waiting", paused(r), st.waiting(1))
	}
	st.punctuationRan(tk, "other")
	if st.of(1) == nil {
		t.Fatal("another punctuation's run ended the stall")
	}
	st.punctuationRan(tk, "close")
	if st.of(1) != nil {
		t.Fatal("the punctuation's run did not end its stall")
	}

	st.record(tk, &kgo.Record{Topic: "in", Partition: 1, Offset: 4}, errors.New("bug"))
	st.forget(1)
	if st.of(1) != nil || paused(r)[1] {
		t.Fatalf("forgotten partition: stall %v, paused %v; want none, resumed", st.of(1), paused(r))
	}
	if n := series(r.m.stalled); n != 0 {
		t.Fatalf("%d stalled gauges after forget, want none", n)
	}
	var none *stall
	if none.waiting() || none.fetchPaused() || none.recoversAt(0) {
		t.Fatal("no stall must read as running")
	}
}

// With several partitions backing off, resume returns the wait until the
// first backoff ends, whatever the order the map gives, so the loop polls
// again in time to resume that partition.
func TestStallTrackerResumeWaitsForTheEarliest(t *testing.T) {
	r := partsRuntime(t, nil)
	st := &r.stalls
	now := time.Now()
	for i, in := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second, 4 * time.Second} {
		p := int32(i)
		st.track(p)
		st.record(partsTask(r, p), &kgo.Record{Topic: "in", Partition: p, Offset: 1}, errors.New("failing"))
		st.of(p).until = now.Add(in)
	}
	if wait := st.resume(); wait <= 0 || wait > time.Second {
		t.Fatalf("next resume in %s, want within the earliest backoff (1s)", wait)
	}
}
