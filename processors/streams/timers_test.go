package streams_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
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

// seen counts the records of its partition in the store; its punctuation
// emits that count, i.e. how much of the input the task had consumed when
// the timer ran.
type seen struct{ out string }

func (s seen) Process(t streams.Task, _ *kgo.Record) error {
	n := 0
	if v, ok := t.Store().Get("n"); ok {
		n, _ = strconv.Atoi(string(v))
	}
	t.Store().Put("n", []byte(strconv.Itoa(n+1)))
	return nil
}

func (s seen) tick(t streams.Task, _ time.Time) error {
	v, _ := t.Store().Get("n")
	t.Emit(&kgo.Record{Topic: s.out, Key: []byte(strconv.Itoa(int(t.Partition()))), Value: append([]byte(nil), v...)})
	return nil
}

// TestPunctuationWaitsForInputLSO: a punctuation runs only once its task
// has consumed the input partition up to the last stable offset read at
// the tick. Fetching the input is held (kfake fault) while the tick comes:
// the tick is deferred and counted, and once the records flow it runs and
// sees every record, including those of a committed transaction (its
// marker must count as consumed). While the LSO cannot be read (ListOffsets
// fault, failing the whole read or one partition in its answer) the tick
// waits too, and the warning says why.
func TestPunctuationWaitsForInputLSO(t *testing.T) {
	h := newHarness(t, 2)
	if h.k.Fake == nil {
		t.Skip("needs kfake fault injection; ROOMFLOW_KAFKA_BROKERS is set")
	}
	manual := h.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range int32(2) {
		recs := make([]*kgo.Record, 100)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: h.in, Partition: p, Value: []byte("x")}
		}
		rttest.Produce(t, manual, recs)
	}
	// 20 more per partition in a committed transaction: each partition
	// ends with a commit marker.
	txn := h.k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(h.grp+"-input"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		for range 20 {
			if err := txn.ProduceSync(context.Background(), &kgo.Record{Topic: h.in, Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := txn.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	hold := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: h.in, Err: kerr.NotLeaderForPartition, Count: -1})
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := seen{out: h.out}
	reg := prometheus.NewRegistry()
	logs := &testenv.SyncBuffer{}
	rt := h.runtime("toy-lso", s, withTimer(clock.Now, "tick", time.Minute, s.tick), withRegisterer(reg),
		func(c *streams.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	r := rttest.Start(rt)
	waitFor(t, "2 partitions assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 2 })
	clock.Advance(time.Minute)
	waitFor(t, "the tick to be deferred or run", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_punctuations_deferred_total", "reason", "behind") >= 2 ||
			metricSum(t, reg, "roomflow_process_punctuations_total") > 0
	})
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 0, 500*time.Millisecond, 500*time.Millisecond); len(out) != 0 {
		t.Fatalf("punctuation ran before its task consumed the input: it had seen %q records", out[0].Value)
	}
	hold.Remove()
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 2, 500*time.Millisecond, 30*time.Second)
	if len(out) != 2 {
		t.Fatalf("%d ticks after the input flowed, want one per partition", len(out))
	}
	for _, rec := range out {
		if string(rec.Value) != "120" {
			t.Fatalf("partition %s ticked having consumed %q records, want all 120", rec.Key, rec.Value)
		}
	}

	// The LSO cannot be read: the next tick waits, it does not run blind.
	lso := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: h.in, Err: kerr.NotLeaderForPartition, Count: -1})
	clock.Advance(time.Minute)
	waitFor(t, "a tick deferred for lack of the LSO", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_punctuations_deferred_total", "reason", "lso_unavailable") >= 2
	})
	// The operator is told while it happens, not only at shutdown, and
	// why: the broker's error, whichever task's read failed last.
	if !strings.Contains(logs.String(), "cannot read the input's last stable offsets") {
		t.Fatalf("no warning while the LSO could not be read; logs:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "NOT_LEADER_FOR_PARTITION") || strings.Contains(logs.String(), "partition missing from the answer") {
		t.Fatalf("the warning does not carry the broker's error; logs:\n%s", logs.String())
	}
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 2, 500*time.Millisecond, time.Second); len(out) != 2 {
		t.Fatalf("%d ticks while the LSO could not be read, want the 2 earlier ones", len(out))
	}
	lso.Remove()
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 4, 500*time.Millisecond, 30*time.Second); len(out) != 4 {
		t.Fatalf("%d ticks after the LSO came back, want 4", len(out))
	}

	// The read answers, but with an error for partition 0: its tick waits
	// as well, partition 1's runs, and the warning names partition 0's
	// error.
	partErr := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: h.in, Partitions: []int32{0},
		Err: kerr.UnknownServerError, Count: -1})
	deferred := metric(reg, "roomflow_process_punctuations_deferred_total", "reason", "lso_unavailable")
	clock.Advance(time.Minute)
	waitFor(t, "a tick deferred for partition 0's LSO error", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_punctuations_deferred_total", "reason", "lso_unavailable") >= deferred+2
	})
	if !strings.Contains(logs.String(), "UNKNOWN_SERVER_ERROR") || strings.Contains(logs.String(), "partition missing from the answer") {
		t.Fatalf("the warning does not carry partition 0's error; logs:\n%s", logs.String())
	}
	out = rttest.ReadCommitted(t, h.k.Brokers, h.out, 5, 500*time.Millisecond, 30*time.Second)
	ticks := map[string]int{}
	for _, rec := range out {
		ticks[string(rec.Key)]++
	}
	if ticks["0"] != 2 || ticks["1"] != 3 {
		t.Fatalf("ticks per partition %v while partition 0's LSO failed, want 0:2 (the earlier ones) and 1:3", ticks)
	}
	partErr.Remove()
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 6, 500*time.Millisecond, 30*time.Second); len(out) != 6 {
		t.Fatalf("%d ticks after partition 0's LSO came back, want 6", len(out))
	}
	r.Stop(t)
}

// catchUp is a punctuation that reports more due (Task.MoreDue) until its
// task has consumed `until` input records; each run emits one record with
// the tick's time and the records seen.
type catchUp struct {
	seen
	until int
}

func (c catchUp) tick(t streams.Task, now time.Time) error {
	v, _ := t.Store().Get("n")
	n, _ := strconv.Atoi(string(v))
	t.Emit(&kgo.Record{Topic: c.out, Value: []byte(fmt.Sprintf("%d %d", now.Unix(), n))})
	if n < c.until {
		t.MoreDue()
	}
	return nil
}

// TestPunctuationCatchUp: a punctuation that calls MoreDue runs again right
// after its transaction commits, with the same tick time, each run in its
// own transaction, without waiting for its interval (the clock stays
// frozen), and input records are processed between the runs: this one
// reports more due until it has seen 10 input records, produced only once
// it has run a few times. Once it stops asking, it runs again one interval
// after the tick.
func TestPunctuationCatchUp(t *testing.T) {
	h := newHarness(t, 1)
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := catchUp{seen: seen{out: h.out}, until: 10}
	reg := prometheus.NewRegistry()
	rt := h.runtime("toy-catchup", c, withTimer(clock.Now, "tick", time.Hour, c.tick),
		withRegisterer(reg), func(cfg *streams.Config) { cfg.CommitInterval = time.Second })
	r := rttest.Start(rt)
	waitFor(t, "the partition assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 1 })
	clock.Advance(time.Hour)
	tick := clock.Now().Unix()
	waitFor(t, "three runs of the catch-up", 30*time.Second, func() bool {
		return metricSum(t, reg, "roomflow_process_punctuations_total") >= 3
	})
	recs := make([]*kgo.Record, 10)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: h.in, Value: []byte("x")}
	}
	rttest.Produce(t, h.k.Client(t), recs)
	waitFor(t, "the catch-up to see the input and stop", 30*time.Second, func() bool {
		out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 0, time.Second)
		return len(out) > 0 && string(out[len(out)-1].Value) == fmt.Sprintf("%d 10", tick)
	})
	txns := rttest.ReadTransactions(t, h.k.Brokers, h.out, 1, 500*time.Millisecond, 10*time.Second)
	runs := metricSum(t, reg, "roomflow_process_punctuations_total")
	if len(txns) < 4 || float64(len(txns)) != runs {
		t.Fatalf("%d transactions of punctuation output for %v runs, want one per run and at least 4", len(txns), runs)
	}
	for i, txn := range txns {
		want := fmt.Sprintf("%d 0", tick)
		if i == len(txns)-1 {
			want = fmt.Sprintf("%d 10", tick)
		}
		if len(txn) != 1 || (i < 3 || i == len(txns)-1) && string(txn[0].Value) != want {
			t.Fatalf("transaction %d holds %d records, first %q; want one run of the tick at %d (%q)", i, len(txn), txn[0].Value, tick, want)
		}
	}

	// Done catching up: the next run is one interval after the tick.
	clock.Advance(time.Hour)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, len(txns)+1, 500*time.Millisecond, 30*time.Second)
	if len(out) != len(txns)+1 || string(out[len(out)-1].Value) != fmt.Sprintf("%d 10", tick+3600) {
		t.Fatalf("%d records after the next interval, last %q; want one more run at %d", len(out), out[len(out)-1].Value, tick+3600)
	}
	r.Stop(t)
}

// TestExpiredKeySweptOnIdlePartition: the TTL sweep deletes a key once it
// expired on the runtime clock, and the tombstone commits to the changelog
// although no record arrives after it (the sweep is work to commit); a
// sweep that finds nothing expired commits no transaction.
func TestExpiredKeySweptOnIdlePartition(t *testing.T) {
	h := newHarness(t, 1)
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	rt := h.runtime("toy-sweep", counter{out: h.out}, withRegisterer(reg), func(c *streams.Config) {
		c.Now = clock.Now
		c.TTLSweepInterval = time.Minute
	})
	r := rttest.Start(rt)
	waitFor(t, "the partition assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 1 })
	// counter writes "a" and "seen:a", the latter with a TTL of an hour.
	rttest.Produce(t, h.k.Client(t), []*kgo.Record{{Topic: h.in, Key: []byte("a"), Value: []byte("v")}})
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 0, 30*time.Second); len(out) != 1 {
		t.Fatalf("%d outputs of the record, want 1", len(out))
	}
	commits := metricSum(t, reg, "roomflow_process_txn_commits_total")

	// Sweeps before the TTL ends find nothing: no transaction.
	for range 3 {
		clock.Advance(time.Minute)
		time.Sleep(300 * time.Millisecond) // several loop turns (CommitInterval 50ms)
	}
	if c := metricSum(t, reg, "roomflow_process_txn_commits_total"); c != commits {
		t.Fatalf("%v transactions committed by sweeps that deleted nothing, want 0", c-commits)
	}

	clock.Advance(time.Hour)
	cl := rttest.ReadCommitted(t, h.k.Brokers, h.cl, 4, 500*time.Millisecond, 30*time.Second)
	if len(cl) != 4 {
		t.Fatalf("%d changelog records, want 4: the restore marker, the writes of a and seen:a, the expired seen:a's tombstone", len(cl))
	}
	if last := cl[3]; string(last.Key) != "seen:a" || last.Value != nil {
		t.Fatalf("last changelog record %q=%q, want the tombstone of seen:a", last.Key, last.Value)
	}
	r.Stop(t)
}

// TestPunctuationCatchUpIsNotHeld: the runs of a catch-up follow each other
// at once: a transaction of punctuation output alone (no input offsets) is
// committed on the client, not held like GroupTransactSession.End holds an
// offset-less commit (500ms each), so 20 runs take well under 5s. Each such
// commit first confirms the membership with a Heartbeat of its own (the
// broker's generation check on offsets does not cover it).
func TestPunctuationCatchUpIsNotHeld(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake to count heartbeats; ROOMFLOW_KAFKA_BROKERS is set")
	}
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const runs = 20
	tick := func(task streams.Task, _ time.Time) error {
		v, _ := task.Store().Get("runs")
		n, _ := strconv.Atoi(string(v))
		n++
		task.Store().Put("runs", []byte(strconv.Itoa(n)))
		task.Emit(&kgo.Record{Topic: h.out, Value: []byte(strconv.Itoa(n))})
		if n < runs {
			task.MoreDue()
		}
		return nil
	}
	rt := h.runtime("toy-catchup-fast", counter{out: h.out}, withTimer(clock.Now, "tick", time.Hour, tick))
	r := rttest.Start(rt)
	waitFor(t, "the partition assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 1 })
	heartbeats := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Count: -1, Observe: true})
	clock.Advance(time.Hour)
	start := time.Now()
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, runs, 0, 5*time.Second)
	took := time.Since(start)
	r.Stop(t)
	if len(out) != runs || string(out[runs-1].Value) != strconv.Itoa(runs) {
		t.Fatalf("%d catch-up runs committed in %v, want %d within 5s", len(out), took, runs)
	}
	// The client's own heartbeats (every 3s) add at most a few.
	if n := heartbeats.Hits(); n < runs {
		t.Fatalf("%d heartbeats for %d commits of punctuation output, want one membership check each", n, runs)
	}
}

// TestPunctuationOutputNeedsConfirmedMembership: a commit of punctuation
// output alone is aborted (cause membership) when the coordinator answers
// its membership Heartbeat with an error; the next tick commits. The
// client's own heartbeats are pushed past the test (HeartbeatInterval), so
// every heartbeat seen is a membership check.
func TestPunctuationOutputNeedsConfirmedMembership(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake fault injection; ROOMFLOW_KAFKA_BROKERS is set")
	}
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tick := func(task streams.Task, now time.Time) error {
		task.Emit(&kgo.Record{Topic: h.out, Value: []byte(now.Format(time.RFC3339))})
		return nil
	}
	reg := prometheus.NewRegistry()
	rt := h.runtime("toy-member", counter{out: h.out}, withTimer(clock.Now, "tick", time.Minute, tick), withRegisterer(reg),
		func(c *streams.Config) {
			c.Kafka.SessionTimeout = time.Minute
			c.Kafka.Extra = append(c.Kafka.Extra, kgo.HeartbeatInterval(50*time.Second))
		})
	r := rttest.Start(rt)
	waitFor(t, "the partition assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 1 })
	refused := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Err: kerr.RebalanceInProgress, Count: 1})
	clock.Advance(time.Minute)
	waitFor(t, "the membership check refused", 30*time.Second, func() bool { return refused.Hits() == 1 })
	waitFor(t, "the punctuation output aborted", 10*time.Second, func() bool {
		return metric(reg, "roomflow_process_txn_aborts_total", "cause", "membership") == 1
	})
	clock.Advance(time.Minute)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 500*time.Millisecond, 30*time.Second)
	r.Stop(t)
	if len(out) != 1 || string(out[0].Value) != "2026-01-01T00:02:00Z" {
		t.Fatalf("committed ticks %v, want only the second one (00:02)", out)
	}
}

// TestTimerSilentAbortRolledBack: a punctuation-only transaction whose
// commit franz-go reports as an abort without an error (finding 11; the
// line is injected here) counts as aborted with cause silent_abort and is
// rolled back: the tick's state write is undone, so the next tick sees the
// first one's value never stored, and ticks go on.
func TestTimerSilentAbortRolledBack(t *testing.T) {
	h := newHarness(t, 1)
	reg := prometheus.NewRegistry()
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var rt *streams.Runtime
	var ticks atomic.Int32
	var seenBefore atomic.Value
	tick := func(task streams.Task, now time.Time) error {
		prev, _ := task.Store().Get("ticks")
		if ticks.Add(1) == 2 {
			seenBefore.Store(string(prev))
		}
		task.Store().Put("ticks", []byte(now.Format(time.RFC3339)))
		task.Emit(&kgo.Record{Topic: h.out, Key: []byte("tick"), Value: []byte(now.Format(time.RFC3339))})
		if ticks.Load() == 1 {
			rt.SilentAbortForTest()
		}
		return nil
	}
	rt = h.runtime("toy-silent", counter{out: h.out}, withRegisterer(reg), withTimer(clock.Now, "tick", time.Minute, tick))
	r := rttest.Start(rt)
	waitFor(t, "the partition assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 1 })
	clock.Advance(time.Minute)
	waitFor(t, "the silent abort counted", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_txn_aborts_total", "cause", "silent_abort") == 1
	})
	clock.Advance(time.Minute)
	waitFor(t, "a second tick", 30*time.Second, func() bool { return ticks.Load() >= 2 })
	if got := seenBefore.Load(); got != "" {
		t.Errorf("the second tick read %q: the first tick's state write survived its rolled-back commit", got)
	}
	r.Stop(t)
}
