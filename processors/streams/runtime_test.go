package streams_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// counter is a toy stateful processor: per key it counts records in its
// store and emits "key|count|input value". Value "poison" is rejected
// after it already wrote state and emitted, to prove both are discarded.
// Value "dump" emits the task's whole store, sorted, to dump instead.
// Value "delete" deletes the key's state (the count starts again at 1).
type counter struct{ out, dump string }

func (c counter) Process(t streams.Task, rec *kgo.Record) error {
	k := string(rec.Key)
	switch string(rec.Value) {
	case "dump":
		dumpStore(t, c.dump)
		return nil
	case "delete":
		t.Store().Delete(k)
		t.Store().Delete("seen:" + k)
		return nil
	}
	t.Store().PutTTL("seen:"+k, rec.Value, time.Hour) // TTL'd state is restored too
	n := 0
	if v, ok := t.Store().Get(k); ok {
		n, _ = strconv.Atoi(string(v))
	}
	n++
	t.Store().Put(k, []byte(strconv.Itoa(n)))
	t.Emit(&kgo.Record{Topic: c.out, Key: rec.Key, Value: fmt.Appendf(nil, "%s|%d|%s", k, n, rec.Value)})
	if string(rec.Value) == "poison" {
		return streams.Reject("toy_poison", errors.New("value is poison"))
	}
	return nil
}

// dumpStore emits t's whole store, sorted, as "k=v;k=v" keyed by the
// partition number.
func dumpStore(t streams.Task, topic string) {
	var entries []string
	t.Store().Range(func(k string, v []byte) bool { entries = append(entries, k+"="+string(v)); return true })
	slices.Sort(entries)
	t.Emit(&kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(int(t.Partition()))), Value: []byte(strings.Join(entries, ";"))})
}

type harness struct {
	t    *testing.T
	k    *testenv.Kafka
	in   string
	out  string
	cl   string
	dlq  string
	dump string // where counter dumps its stores
	grp  string
}

func newHarness(t *testing.T, partitions int32) *harness {
	k := testenv.NewKafka(t, testenv.Partitions(partitions))
	tp := k.Config.Topics
	return &harness{t: t, k: k, in: tp.RoomEvents, out: tp.UserMicEvents, cl: tp.MicStateChangelog, dlq: tp.DLQ,
		dump: tp.MicLedger, grp: testenv.UniqueName(t)}
}

// dumps asks every one of partitions for a dump of its store and returns
// the latest dump per partition once the dump topic holds want dumps.
func (h *harness) dumps(partitions int32, want int) map[string]string {
	h.t.Helper()
	manual := h.k.Client(h.t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range partitions {
		rttest.Produce(h.t, manual, []*kgo.Record{{Topic: h.in, Partition: p, Value: []byte("dump")}})
	}
	got := map[string]string{}
	for _, r := range rttest.ReadCommitted(h.t, h.k.Brokers, h.dump, want, 300*time.Millisecond, 30*time.Second) {
		got[string(r.Key)] = string(r.Value)
	}
	return got
}

// memberID is the group member id of the instance whose client id is
// clientID.
func (h *harness) memberID(clientID string) string {
	h.t.Helper()
	described, err := h.k.Admin(h.t).DescribeGroups(context.Background(), h.grp)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, m := range described[h.grp].Members {
		if m.ClientID == clientID {
			return m.MemberID
		}
	}
	h.t.Fatalf("no member with client id %s in %+v", clientID, described[h.grp].Members)
	return ""
}

// dropHeartbeats makes kfake fail every heartbeat of the member whose
// client id is clientID, so the group expires it while the instance
// notices nothing (a paused process).
func (h *harness) dropHeartbeats(clientID string) {
	h.t.Helper()
	member := h.memberID(clientID)
	h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Err: kerr.CoordinatorNotAvailable, Count: -1,
		When: func(req kmsg.Request) bool {
			hb, ok := req.(*kmsg.HeartbeatRequest)
			return ok && hb.MemberID == member
		}})
}

// config is the toy runtime's config of instance txnID on the harness.
func (h *harness) config(txnID string) streams.Config {
	kafka := h.k.Cluster()
	kafka.SessionTimeout = 6 * time.Second
	kafka.Extra = []kgo.Opt{kgo.RebalanceTimeout(5 * time.Second)}
	return streams.Config{
		Name: "toy", Input: h.in, Group: h.grp, Changelog: h.cl, DLQ: h.dlq,
		TransactionalID: txnID,
		Kafka:           kafka,
		CommitInterval:  50 * time.Millisecond, CommitRecords: 500,
		RetryBackoffMin: 20 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond,
		LagInterval: 200 * time.Millisecond,
	}
}

// runtime builds a toy runtime of instance txnID running proc on the
// harness's config, changed by set.
func (h *harness) runtime(txnID string, proc streams.Processor, set ...func(*streams.Config)) *streams.Runtime {
	h.t.Helper()
	cfg := h.config(txnID)
	for _, f := range set {
		f(&cfg)
	}
	rt, err := streams.New(cfg, proc)
	if err != nil {
		h.t.Fatal(err)
	}
	return rt
}

// withRegisterer sets the runtime's metrics registerer.
func withRegisterer(reg prometheus.Registerer) func(*streams.Config) {
	return func(c *streams.Config) { c.Registerer = reg }
}

// withTimer sets the runtime's clock and adds a punctuation.
func withTimer(now func() time.Time, name string, interval time.Duration, fn streams.PunctuateFunc) func(*streams.Config) {
	return func(c *streams.Config) {
		c.Now = now
		c.Punctuations = append(c.Punctuations, streams.Punctuation{Name: name, Interval: interval, Fn: fn})
	}
}

// withClientID adds a client id option (the restore client's id gets
// "-restore" appended).
func withClientID(id string, more ...kgo.Opt) func(*streams.Config) {
	return func(c *streams.Config) {
		c.Kafka.Extra = append(append(c.Kafka.Extra, kgo.ClientID(id)), more...)
	}
}

// inputs produces n records over keys keys, value = sequence number, and
// returns the oracle: per key, the values in production order.
func (h *harness) inputs(n, keys int, from int) map[string][]string {
	cl := h.k.Client(h.t)
	oracle := map[string][]string{}
	recs := make([]*kgo.Record, 0, n)
	for i := from; i < from+n; i++ {
		key := "k" + strconv.Itoa(i%keys)
		v := strconv.Itoa(i)
		oracle[key] = append(oracle[key], v)
		recs = append(recs, &kgo.Record{Topic: h.in, Key: []byte(key), Value: []byte(v)})
	}
	rttest.Produce(h.t, cl, recs)
	return oracle
}

// counting produces n inputs over keys keys, starts a toy counter of
// instance txnID on them (changed by set) and waits until it has counted
// them all; it returns the runtime, its run and the oracle.
func (h *harness) counting(txnID string, n, keys int, set ...func(*streams.Config)) (*streams.Runtime, *rttest.Running, map[string][]string) {
	h.t.Helper()
	oracle := h.inputs(n, keys, 0)
	rt := h.runtime(txnID, counter{out: h.out, dump: h.dump}, set...)
	run := rttest.Start(rt)
	rttest.ReadCommitted(h.t, h.k.Brokers, h.out, n, 0, 30*time.Second)
	return rt, run, oracle
}

// checkCounts asserts the output holds, per key, exactly "key|i|v_i" for
// the oracle's values in order: each input exactly once, state continuous.
func checkCounts(t *testing.T, out []*kgo.Record, oracle map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	total := 0
	for _, r := range out {
		parts := strings.Split(string(r.Value), "|")
		if len(parts) != 3 || parts[0] != string(r.Key) {
			t.Fatalf("bad output %q", r.Value)
		}
		got[parts[0]] = append(got[parts[0]], parts[1]+"|"+parts[2])
	}
	for key, vs := range oracle {
		want := make([]string, len(vs))
		for i, v := range vs {
			want[i] = strconv.Itoa(i+1) + "|" + v
		}
		if !slices.Equal(got[key], want) {
			g := got[key]
			t.Fatalf("key %s: got %d outputs, want %d; first difference near %v", key, len(g), len(want), firstDiff(g, want))
		}
		total += len(vs)
	}
	if len(out) != total {
		t.Fatalf("got %d outputs, want %d", len(out), total)
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("index %d: got %s want %s", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("lengths %d vs %d", len(a), len(b))
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatefulRestoreAfterRestart: a toy counter keeps per-key counts (and
// TTL'd last values) in its store; a second instance started after the
// first stopped restores exactly the same state from the changelog (the
// dumps of every partition are equal), is ready once restored, and
// continues the counts.
func TestStatefulRestoreAfterRestart(t *testing.T) {
	h := newHarness(t, 3)
	toy := counter{out: h.out, dump: h.dump}
	reg := prometheus.NewRegistry()
	oracle := h.inputs(900, 30, 0)
	a := rttest.Start(h.runtime("toy-a", toy, withRegisterer(reg)))
	rttest.ReadCommitted(t, h.k.Brokers, h.out, 900, 0, 30*time.Second)
	before := h.dumps(3, 3)
	a.Stop(t)

	bRT := h.runtime("toy-b", toy, withRegisterer(reg))
	b := rttest.Start(bRT)
	after := h.dumps(3, 6)
	if len(before) != 3 || len(after) != 3 {
		t.Fatalf("dumps of %d and %d partitions, want 3", len(before), len(after))
	}
	waitFor(t, "the restored instance ready", 10*time.Second, func() bool { return bRT.Ready() == nil })
	for p, st := range before {
		if after[p] != st || strings.Count(st, ";") < 5 {
			t.Fatalf("partition %s state after restart differs:\nbefore %s\nafter  %s", p, st, after[p])
		}
	}
	more := h.inputs(300, 30, 900)
	for k, v := range more {
		oracle[k] = append(oracle[k], v...)
	}
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1200, 500*time.Millisecond, 30*time.Second)
	if n := metricSum(t, reg, "roomflow_process_state_keys"); n != 60 {
		t.Fatalf("state keys %v, want 60 (30 counts, 30 TTL'd last values)", n)
	}
	waitFor(t, "consumer lag 0 on 3 partitions", 10*time.Second, func() bool {
		return metricCount(t, reg, "roomflow_process_consumer_lag_records") == 3 && metricSum(t, reg, "roomflow_process_consumer_lag_records") == 0 &&
			metricCount(t, reg, "roomflow_process_consumer_lag") == 3 // the deprecated name, kept one release
	})
	b.Stop(t)
	checkCounts(t, out, oracle)

	if n := metricSum(t, reg, "roomflow_process_records_in_total"); n != 1206 {
		t.Fatalf("records_in %v, want 1206 (1200 counted, 6 dumps)", n)
	}
	// Batching: transactions cover many records (CommitRecords 500, 50ms).
	if c := metricSum(t, reg, "roomflow_process_txn_commits_total"); c < 2 || c > 1206/10 {
		t.Fatalf("%v committed transactions for 1206 records, want batches", c)
	}
	if n := metricSum(t, reg, "roomflow_process_restore_duration_seconds"); n < 2 {
		t.Fatalf("restore durations observed %v, want one per restored partition", n)
	}
	if n := metricSum(t, reg, "roomflow_process_state_keys"); n != 0 {
		t.Fatalf("state keys %v after stop, want the gauges dropped", n)
	}
}

// metricCount counts the series of the named metric.
func metricCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// metricSum sums every series of the named counter or gauge (histograms:
// the sample count).
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, _ := testenv.Metric(reg, name)
	return v
}

// TestStatefulExactlyOnceAcrossCrashes kills the processor at random
// points (mid-transaction, after a random number of records), restarts it,
// and injects broker faults (failed offset commits, a failed changelog
// produce): every input is counted exactly once, in order, and the state
// continues across every restart.
func TestStatefulExactlyOnceAcrossCrashes(t *testing.T) {
	h := newHarness(t, 4)
	const n = 6000
	oracle := h.inputs(n, 40, 0)
	reg := prometheus.NewRegistry()
	if h.k.Fake != nil {
		h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.UnknownServerError, Count: 2})
		h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: h.cl, Err: kerr.InvalidRecord, Count: 1})
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for range 6 {
		ka := &rttest.KillAfter{Proc: counter{out: h.out}, N: 1 + rng.IntN(1500)}
		ka.RT = h.runtime("toy-crashy", ka, func(c *streams.Config) { c.CommitRecords = 100 + rng.IntN(400) }, withRegisterer(reg))
		r := rttest.Start(ka.RT)
		select {
		case <-r.Done:
		case <-time.After(30 * time.Second):
			t.Fatal("instance not killed within 30s")
		}
	}
	final := rttest.Start(h.runtime("toy-crashy", counter{out: h.out}, withRegisterer(reg)))
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, n, time.Second, 60*time.Second)
	final.Stop(t)
	checkCounts(t, out, oracle)
	if h.k.Fake != nil {
		if a := metricSum(t, reg, "roomflow_process_txn_aborts_total"); a < 2 {
			t.Fatalf("%v aborted transactions, want the injected faults to abort at least 2", a)
		}
	}
}

// TestRebalanceBetweenInstances runs two instances (distinct transactional
// ids) that split, then hand over, the partitions while records flow.
func TestRebalanceBetweenInstances(t *testing.T) {
	h := newHarness(t, 4)
	oracle := h.inputs(2000, 40, 0)
	a := rttest.Start(h.runtime("toy-a", counter{out: h.out}))
	time.Sleep(300 * time.Millisecond)
	b := rttest.Start(h.runtime("toy-b", counter{out: h.out}))
	var wg sync.WaitGroup
	var more map[string][]string
	wg.Go(func() { time.Sleep(200 * time.Millisecond); more = h.inputs(2000, 40, 2000) })
	time.Sleep(time.Second)
	a.Stop(t) // graceful: commits or aborts, B takes every partition over
	wg.Wait()
	for k, v := range more {
		oracle[k] = append(oracle[k], v...)
	}
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 4000, time.Second, 60*time.Second)
	b.Stop(t)
	checkCounts(t, out, oracle)
}

// TestTimerFiresOnIdlePartition: punctuations run per owned partition on
// the injected clock even though no record ever arrives.
func TestTimerFiresOnIdlePartition(t *testing.T) {
	h := newHarness(t, 3)
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tick := func(task streams.Task, now time.Time) error {
		task.Store().Put("ticks", []byte(now.Format(time.RFC3339)))
		task.Emit(&kgo.Record{Topic: h.out, Key: []byte(strconv.Itoa(int(task.Partition()))), Value: []byte(now.Format(time.RFC3339))})
		return nil
	}
	rt := h.runtime("toy-timer", counter{out: h.out}, withTimer(clock.Now, "tick", time.Minute, tick))
	r := rttest.Start(rt)
	waitFor(t, "3 partitions assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 3 })
	clock.Advance(59 * time.Second)
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 0, 500*time.Millisecond, 500*time.Millisecond); len(out) != 0 {
		t.Fatalf("punctuation fired before its interval: %d records", len(out))
	}
	clock.Advance(time.Second)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 3, 500*time.Millisecond, 30*time.Second)
	if len(out) != 3 {
		t.Fatalf("got %d ticks after one interval, want one per partition (3)", len(out))
	}
	seen := map[string]bool{}
	for _, rec := range out {
		seen[string(rec.Key)] = true
		if string(rec.Value) != "2026-01-01T00:01:00Z" {
			t.Fatalf("tick at %s, want the injected clock's time", rec.Value)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("ticks for partitions %v, want all 3", seen)
	}
	clock.Advance(time.Minute)
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 6, 500*time.Millisecond, 30*time.Second); len(out) != 6 {
		t.Fatalf("got %d ticks after two intervals, want 6", len(out))
	}
	r.Stop(t)
}

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

// blocker stalls Process on the record whose value is at, until released:
// an instance hung mid-transaction (GC pause, stuck I/O) that later wakes
// up as a zombie.
type blocker struct {
	proc             streams.Processor
	at               string
	reached, release chan struct{}
	once             sync.Once
}

func (b *blocker) Process(t streams.Task, rec *kgo.Record) error {
	if string(rec.Value) == b.at {
		b.once.Do(func() { close(b.reached); <-b.release })
	}
	return b.proc.Process(t, rec)
}

// TestZombieIsFenced: instance A hangs in the middle of a transaction and
// its heartbeats stop reaching the broker (kfake drops them), so the group
// expires it while A itself notices nothing; B takes the partition over,
// with A's transactional id (a restarted pod) or its own (another
// replica). When A wakes up and tries to commit, it is fenced by the
// producer epoch or by the group generation in TxnOffsetCommit (KIP-447):
// nothing it did after hanging becomes visible, and every input is counted
// exactly once.
func TestZombieIsFenced(t *testing.T) {
	for _, sameID := range []bool{true, false} {
		t.Run(fmt.Sprintf("same_transactional_id=%v", sameID), func(t *testing.T) {
			h := newHarness(t, 1)
			if h.k.Fake == nil {
				t.Skip("needs kfake fault injection; ROOMFLOW_KAFKA_BROKERS is set")
			}
			oracle := h.inputs(1000, 10, 0)
			bl := &blocker{proc: counter{out: h.out}, at: "500", reached: make(chan struct{}), release: make(chan struct{})}
			a := rttest.Start(h.runtime("zombie-a", bl, func(c *streams.Config) { c.CommitRecords = 100 },
				withClientID("zombie-a-client")))
			select {
			case <-bl.reached:
			case <-time.After(30 * time.Second):
				t.Fatal("A never reached the hang point")
			}
			h.dropHeartbeats("zombie-a-client") // A is hung: its heartbeats no longer count
			idB := "zombie-b"
			if sameID {
				idB = "zombie-a"
			}
			bRT := h.runtime(idB, counter{out: h.out})
			b := rttest.Start(bRT)
			waitFor(t, "B to own the partition", 60*time.Second, func() bool { return len(bRT.Assigned()) == 1 })
			time.Sleep(500 * time.Millisecond)
			close(bl.release) // A wakes up inside its old transaction
			more := h.inputs(500, 10, 1000)
			for k, v := range more {
				oracle[k] = append(oracle[k], v...)
			}
			out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1500, 2*time.Second, 60*time.Second)
			a.Cancel()
			select {
			case err := <-a.Done:
				t.Logf("zombie A returned %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("A did not stop")
			}
			b.Stop(t)
			checkCounts(t, out, oracle)
		})
	}
}

// TestZombiePunctuationIsFenced: A hangs inside a punctuation (output but
// no input offsets in its transaction) while the group expires it; B takes
// over. A's punctuation output never becomes visible, and the timer keeps
// running at B.
func TestZombiePunctuationIsFenced(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake fault injection; ROOMFLOW_KAFKA_BROKERS is set")
	}
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tick := func(who string) streams.PunctuateFunc {
		return func(task streams.Task, now time.Time) error {
			if who == "a" {
				once.Do(func() { close(reached); <-release })
			}
			task.Store().Put("last-tick", []byte(who))
			task.Emit(&kgo.Record{Topic: h.out, Key: []byte("tick"), Value: []byte(who + "-tick")})
			return nil
		}
	}
	aRT := h.runtime("zp-a", counter{out: h.out}, withTimer(clock.Now, "tick", time.Minute, tick("a")),
		withClientID("zp-a-client"))
	a := rttest.Start(aRT)
	waitFor(t, "A owns the partition", 30*time.Second, func() bool { return len(aRT.Assigned()) == 1 })
	clock.Advance(time.Minute)
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("A's punctuation never ran")
	}
	h.dropHeartbeats("zp-a-client")
	bRT := h.runtime("zp-b", counter{out: h.out}, withTimer(clock.Now, "tick", time.Minute, tick("b")))
	b := rttest.Start(bRT)
	waitFor(t, "B owns the partition", 60*time.Second, func() bool { return len(bRT.Assigned()) == 1 })
	close(release)
	if out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 0, 2*time.Second, 10*time.Second); len(out) != 0 {
		t.Fatalf("zombie punctuation output visible: %q", out[0].Value)
	}
	clock.Advance(time.Minute)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, time.Second, 30*time.Second)
	if len(out) != 1 || string(out[0].Value) != "b-tick" {
		t.Fatalf("after takeover got %d ticks (%v), want B's only", len(out), out)
	}
	a.Cancel()
	<-a.Done
	b.Stop(t)
}

// TestChangelogMustBeCoPartitioned: a changelog with fewer partitions than
// the input stops Run with an error naming both topics.
func TestChangelogMustBeCoPartitioned(t *testing.T) {
	h := newHarness(t, 3)
	small := h.cl + ".small"
	if _, err := h.k.Admin(t).CreateTopic(context.Background(), 2, -1, nil, small); err != nil {
		t.Fatal(err)
	}
	rt := h.runtime("toy-copart", counter{out: h.out}, func(c *streams.Config) { c.Changelog = small })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := rt.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), small) || !strings.Contains(err.Error(), "co-partitioned") {
		t.Fatalf("Run = %v, want a co-partitioning error", err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	p := counter{}
	minimal := func() streams.Config {
		return streams.Config{Name: "toy", Input: "i", Group: "g", DLQ: "d", Kafka: kafkax.Cluster{Brokers: []string{"localhost:9092"}}}
	}
	for key, set := range map[string]func(*streams.Config){
		"name":                  func(c *streams.Config) { c.Name = "" },
		"input":                 func(c *streams.Config) { c.Input = "" },
		"group":                 func(c *streams.Config) { c.Group = "" },
		"dlq":                   func(c *streams.Config) { c.DLQ = "" },
		"commit_records":        func(c *streams.Config) { c.CommitRecords = -1 },
		"commit_interval":       func(c *streams.Config) { c.CommitInterval = -time.Second },
		"changelog":             func(c *streams.Config) { c.Changelog = "i" },
		"punctuations.x":        func(c *streams.Config) { c.Punctuations = []streams.Punctuation{{Name: "x"}} },
		"kafka.brokers":         func(c *streams.Config) { c.Kafka.Brokers = nil },
		"kafka.session_timeout": func(c *streams.Config) { c.Kafka.SessionTimeout = -time.Second },
		"ttl_sweep_interval":    func(c *streams.Config) { c.TTLSweepInterval = -time.Second },
		"transaction_timeout":   func(c *streams.Config) { c.TransactionTimeout = -time.Second },
		"retry_backoff_min":     func(c *streams.Config) { c.RetryBackoffMin = -time.Second },
		"retry_backoff_max":     func(c *streams.Config) { c.RetryBackoffMax = time.Millisecond },
		"shutdown_timeout":      func(c *streams.Config) { c.ShutdownTimeout = -time.Second },
	} {
		c := minimal()
		set(&c)
		_, err := streams.New(c, p)
		var fe *cfgerr.FieldError
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("%s: New = %v, want a field error keyed %s", key, err, key)
		}
	}
	if _, err := streams.New(minimal(), p); err != nil {
		t.Fatalf("minimal config rejected: %v", err)
	}
	if _, err := streams.New(minimal(), nil); err == nil {
		t.Fatal("nil processor accepted")
	}
}

// A leader move of an input partition must not move the consumer. A new
// leader that knows no end for the epoch the records were read in (kfake
// until the new leader has written; a broker after an unclean election)
// answers the epoch check with UNDEFINED_EPOCH_OFFSET; kgo's reset policy
// then restarted the partition from its first offset inside the open
// transaction, and a processor whose duplicate memory is bounded (mic:
// closed-session retention) reopened old sessions (chaos seed 856094729).
// The input never resets: every input record is counted exactly once.
func TestInputLeaderMoveDoesNotRewind(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake to move a partition's leader; ROOMFLOW_KAFKA_BROKERS is set")
	}
	reg := prometheus.NewRegistry()
	_, a, oracle := h.counting("toy-move", 200, 10, withRegisterer(reg))
	// The new leader knows no end for the epoch the records were read in
	// (what kfake answers while the new leader has written nothing).
	var undefined atomic.Int32
	h.k.Fake.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		h.k.Fake.KeepControl()
		req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			if rt.Topic != h.in {
				return nil, nil, false
			}
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		undefined.Add(1)
		return resp, nil, true
	})
	leader := h.k.Fake.LeaderFor(h.in, 0)
	if err := h.k.Fake.MoveTopicPartition(h.in, 0, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	// The consumer meets the move (NOT_LEADER, new metadata, the epoch
	// check) before anything is written under the new epoch.
	time.Sleep(2 * time.Second)
	more := h.inputs(50, 10, 200)
	for k, v := range more {
		oracle[k] = append(oracle[k], v...)
	}
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 250, time.Second, 30*time.Second)
	a.Stop(t)
	if undefined.Load() == 0 {
		t.Fatal("the consumer never checked the epoch of what it had read")
	}
	checkCounts(t, out, oracle)
	if n := metricSum(t, reg, "roomflow_process_records_in_total"); n != 250 {
		t.Fatalf("records_in %v, want 250: the input was read again from an earlier offset", n)
	}
}

// A committed position that is no longer in the log (retention outran a
// stopped group) stops the partition with an ERROR: the old reset policy
// jumped to the log start and carried on with state that never saw the
// skipped input.
func TestInputOutOfRangeStopsThePartition(t *testing.T) {
	h := newHarness(t, 1)
	_, a, _ := h.counting("toy-oor", 100, 10)
	a.Stop(t)

	h.inputs(100, 10, 100)
	adm := h.k.Admin(t)
	deleted, err := adm.DeleteRecords(context.Background(), kadm.Offsets{h.in: {0: {Topic: h.in, Partition: 0, At: 150}}})
	if err == nil {
		err = deleted.Error()
	}
	if err != nil {
		t.Fatalf("delete records below 150: %v", err)
	}
	logs := &testenv.SyncBuffer{}
	reg := prometheus.NewRegistry()
	b := rttest.Start(h.runtime("toy-oor", counter{out: h.out, dump: h.dump}, withRegisterer(reg), func(c *streams.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}))
	waitFor(t, "the partition to stop with an error", 30*time.Second, func() bool {
		return strings.Contains(logs.String(), "input partition stopped")
	})
	time.Sleep(time.Second) // what it would process, it processes by now
	b.Stop(t)
	if n := metricSum(t, reg, "roomflow_process_records_in_total"); n != 0 {
		t.Fatalf("records_in %v, want 0: the partition moved past input it never read", n)
	}
}

// A partition the group hands over while the runtime still holds a task for
// it (its revoke never arrived: kfake handed a restarted static member its
// old partitions without revoking them from their new owner, chaos seed
// 856094729) is restored afresh: the other owner's state writes count, not
// the task kept from before.
func TestAssignedAgainRestoresAfresh(t *testing.T) {
	h := newHarness(t, 1)
	rt, a, _ := h.counting("toy-again", 10, 1)
	// Meanwhile another owner counted k0 up to 500 (changelog value format
	// 1: version, 8 bytes expiry, value).
	v := append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0}, "500"...)
	rttest.Produce(t, h.k.Client(t), []*kgo.Record{{Topic: h.cl, Partition: 0, Key: []byte("k0"), Value: v}})
	rt.AssignForTest([]int32{0})
	time.Sleep(time.Second) // the loop takes the event after its next poll
	h.inputs(1, 1, 10)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 11, time.Second, 30*time.Second)
	a.Stop(t)
	if got := string(out[len(out)-1].Value); got != "k0|501|10" {
		t.Fatalf("after the hand-over k0 counted %q, want k0|501|10 (the state another owner wrote)", got)
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

// TestGroupChangesAreLogged: the partitions the group hands over and takes
// back are logged with the member and generation, the record of who owned
// what, when.
func TestGroupChangesAreLogged(t *testing.T) {
	h := newHarness(t, 1)
	logs := &testenv.SyncBuffer{}
	rt := h.runtime("toy-log", counter{out: h.out}, func(c *streams.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	r := rttest.Start(rt)
	waitFor(t, "the partition assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 1 })
	r.Stop(t)
	for _, want := range []string{
		`msg="partitions assigned" component=processor processor=toy partitions=[0] member_id=`,
		`msg="partitions revoked" component=processor processor=toy partitions=[0] member_id=`,
	} {
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
		c.CommitInterval = time.Minute
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

// TestStateGaugesFollowOwnership: an owned partition's state gauges exist
// from its assignment on (0 for an empty store), follow its commits, and
// go with the partition.
func TestStateGaugesFollowOwnership(t *testing.T) {
	h := newHarness(t, 1)
	reg := prometheus.NewRegistry()
	rt := h.runtime("toy-gauges", counter{out: h.out}, withRegisterer(reg))
	r := rttest.Start(rt)
	waitFor(t, "the partition assigned", 30*time.Second, func() bool { return len(rt.Assigned()) == 1 })
	if n := metricCount(t, reg, "roomflow_process_state_keys"); n != 1 {
		t.Fatalf("%d state_keys series for the owned partition, want 1 before any commit", n)
	}
	rttest.Produce(t, h.k.Client(t), []*kgo.Record{{Topic: h.in, Key: []byte("a"), Value: []byte("1")}})
	waitFor(t, "state keys a and seen:a", 30*time.Second, func() bool {
		return metric(reg, "roomflow_process_state_keys", "partition", "0") == 2 && metric(reg, "roomflow_process_state_bytes", "partition", "0") > 0
	})
	r.Stop(t)
	for _, name := range []string{"roomflow_process_state_keys", "roomflow_process_state_bytes"} {
		if n := metricCount(t, reg, name); n != 0 {
			t.Fatalf("%d %s series after the partition went, want 0", n, name)
		}
	}
}

// TestLagIsPublishedPerOwnedPartition: the consumer lag of each owned
// partition is published, 0 once its input is consumed, and goes with the
// partition.
func TestLagIsPublishedPerOwnedPartition(t *testing.T) {
	h := newHarness(t, 2)
	reg := prometheus.NewRegistry()
	h.inputs(20, 4, 0)
	r := rttest.Start(h.runtime("toy-lag", counter{out: h.out}, withRegisterer(reg)))
	rttest.ReadCommitted(t, h.k.Brokers, h.out, 20, 0, 30*time.Second)
	waitFor(t, "lag 0 on both partitions", 10*time.Second, func() bool {
		return metricCount(t, reg, "roomflow_process_consumer_lag_records") == 2 && metricSum(t, reg, "roomflow_process_consumer_lag_records") == 0
	})
	r.Stop(t)
	if n := metricCount(t, reg, "roomflow_process_consumer_lag_records"); n != 0 {
		t.Fatalf("%d lag series after the partitions went, want 0", n)
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

// TestRevokedPartitionIsDropped: a partition revoked from an instance (a
// second one joins) leaves its tasks, after the open transaction aborted:
// each instance ends up owning one of the two partitions.
func TestRevokedPartitionIsDropped(t *testing.T) {
	h := newHarness(t, 2)
	aRT := h.runtime("toy-revoke-a", counter{out: h.out})
	a := rttest.Start(aRT)
	waitFor(t, "A owns both partitions", 30*time.Second, func() bool { return len(aRT.Assigned()) == 2 })
	bRT := h.runtime("toy-revoke-b", counter{out: h.out})
	b := rttest.Start(bRT)
	waitFor(t, "one partition each", 30*time.Second, func() bool {
		return len(aRT.Assigned()) == 1 && len(bRT.Assigned()) == 1
	})
	b.Stop(t)
	a.Stop(t)
}
