package streams_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	const kills = 6
	for range kills {
		// Each instance is killed after at most n/(kills+1) records, so the
		// input left always outlasts the next kill point, whatever the
		// instances before it committed (a bound of 1,500 let six draws
		// pass the input's 6,000, and the last instance waited for good).
		ka := &rttest.KillAfter{Proc: counter{out: h.out}, N: 1 + rng.IntN(n/(kills+1))}
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
