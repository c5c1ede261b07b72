package streams_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

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
	for _, tc := range []struct {
		key string
		set func(*streams.Config)
	}{
		{"name", func(c *streams.Config) { c.Name = "" }},
		{"input", func(c *streams.Config) { c.Input = "" }},
		{"group", func(c *streams.Config) { c.Group = "" }},
		{"dlq", func(c *streams.Config) { c.DLQ = "" }},
		{"commit_records", func(c *streams.Config) { c.CommitRecords = -1 }},
		{"commit_interval", func(c *streams.Config) { c.CommitInterval = -time.Second }},
		{"commit_interval", func(c *streams.Config) { c.CommitInterval = 30 * time.Second }}, // the default transaction timeout
		{"commit_interval", func(c *streams.Config) { c.CommitInterval = 16 * time.Second }}, // above half of it
		{"commit_interval", func(c *streams.Config) { c.CommitInterval, c.TransactionTimeout = 2*time.Second, time.Second }},
		{"changelog", func(c *streams.Config) { c.Changelog = "i" }},
		{"punctuations.x", func(c *streams.Config) { c.Punctuations = []streams.Punctuation{{Name: "x"}} }},
		{"kafka.brokers", func(c *streams.Config) { c.Kafka.Brokers = nil }},
		{"kafka.session_timeout", func(c *streams.Config) { c.Kafka.SessionTimeout = -time.Second }},
		{"ttl_sweep_interval", func(c *streams.Config) { c.TTLSweepInterval = -time.Second }},
		{"transaction_timeout", func(c *streams.Config) { c.TransactionTimeout = -time.Second }},
		{"transaction_timeout", func(c *streams.Config) { c.TransactionTimeout = kafkax.MaxTransactionTimeout + time.Millisecond }},
		{"retry_backoff_min", func(c *streams.Config) { c.RetryBackoffMin = -time.Second }},
		{"retry_backoff_max", func(c *streams.Config) { c.RetryBackoffMax = time.Millisecond }},
		{"shutdown_timeout", func(c *streams.Config) { c.ShutdownTimeout = -time.Second }},
	} {
		c := minimal()
		tc.set(&c)
		_, err := streams.New(c, p)
		var fe *cfgerr.FieldError
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Errorf("%s: New = %v, want a field error keyed %s", tc.key, err, tc.key)
		}
	}
	if _, err := streams.New(minimal(), p); err != nil {
		t.Fatalf("minimal config rejected: %v", err)
	}
	bounds := minimal()
	bounds.TransactionTimeout = kafkax.MaxTransactionTimeout
	bounds.CommitInterval = bounds.TransactionTimeout / 2
	if _, err := streams.New(bounds, p); err != nil {
		t.Fatalf("the bounds themselves rejected: %v", err)
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
