package streams_test

import (
	"log/slog"
	"slices"
	"strings"
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

// TestShutdownBoundedWhileJoinGroupHangs (issue 10, chaos finding 3): the
// group coordinator never answers the instance's JoinGroup (a rebalance
// waiting for a static member that is gone). Cancelling Run must still
// return within ShutdownTimeout: leaving the group waits for the join, so
// the close is abandoned after the bound instead of holding the process.
func TestShutdownBoundedWhileJoinGroupHangs(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake request control to hold a JoinGroup; ROOMFLOW_KAFKA_BROKERS is set")
	}
	held := h.k.HoldJoinGroups(t, h.grp)
	rt := h.runtime("join-a", counter{out: h.out, dump: h.dump}, func(c *streams.Config) { c.ShutdownTimeout = 2 * time.Second },
		// kgo waits for a JoinGroup answer up to the rebalance
		// timeout (plus 10s): kgo's default, as in production.
		withClientID("join-a-client", kgo.RebalanceTimeout(time.Minute)))
	run := rttest.Start(rt)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the instance never sent a JoinGroup")
	}
	run.Cancel()
	// Unfixed, Run waits for the JoinGroup answer (70s); 2s shutdown
	// plus a generous margin for a loaded machine.
	select {
	case err := <-run.Done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within the shutdown timeout while its JoinGroup was unanswered")
	}
}

// TestTxnOffsetCommitTimeoutAbortsAndRewinds (issue 10, chaos finding 1):
// the broker answers one TxnOffsetCommit with REQUEST_TIMED_OUT (its
// offsets append timed out), which kgo does not retry: End aborts the
// transaction and returns the error. The producer is still usable, so the
// runtime rewinds and goes on (counted as a commit_error abort) instead of
// stopping; the output stays exactly once.
func TestTxnOffsetCommitTimeoutAbortsAndRewinds(t *testing.T) {
	h := newHarness(t, 3)
	if h.k.Fake == nil {
		t.Skip("needs kfake faults to fail a TxnOffsetCommit; ROOMFLOW_KAFKA_BROKERS is set")
	}
	toy := counter{out: h.out, dump: h.dump}
	reg := prometheus.NewRegistry()
	oracle := h.inputs(300, 10, 0)
	fault := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.RequestTimedOut, Count: 1})
	run := rttest.Start(h.runtime("offsets-a", toy, withRegisterer(reg)))
	testenv.Eventually(t, 30*time.Second, "the TxnOffsetCommit to fail once", func() bool { return fault.Hits() == 1 })
	more := h.inputs(300, 10, 300)
	for k, v := range more {
		oracle[k] = append(oracle[k], v...)
	}
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 600, 500*time.Millisecond, 30*time.Second)
	select {
	case err := <-run.Done:
		t.Fatalf("Run stopped on one TxnOffsetCommit timeout: %v", err)
	default:
	}
	run.Stop(t)
	checkCounts(t, out, oracle)
	if n, _ := testenv.Metric(reg, "roomflow_process_txn_aborts_total", "cause", "commit_error"); n != 1 {
		t.Fatalf("commit_error aborts %v, want 1", n)
	}
}

// A stop while the runtime still waits for its topics (a rollout replacing
// a pod that is starting) is a stop on request: Run returns nil, as the
// Component contract asks, and the process exits 0.
func TestStopWhileCheckingTopicsReturnsNil(t *testing.T) {
	h := newHarness(t, 1)
	logs := &testenv.SyncBuffer{}
	rt := h.runtime("toy-early", counter{out: h.out, dump: h.dump}, func(c *streams.Config) {
		c.Input = h.in + ".absent" // checkTopics waits for it
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	testenv.RunUntil(t, rt.Run, 10*time.Second, "the runtime to wait for its topics", func() bool {
		return strings.Contains(logs.String(), "checking topics")
	})
}

// TestRepeatedCommitFailuresBackOffLonger: while consecutive commits fail
// (TxnOffsetCommit timeouts, each aborted and rewound), the back-off
// before the next attempt doubles from RetryBackoffMin; the record is
// still committed exactly once in the end.
func TestRepeatedCommitFailuresBackOffLonger(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake faults to fail a TxnOffsetCommit; ROOMFLOW_KAFKA_BROKERS is set")
	}
	h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.RequestTimedOut, Count: 3})
	logs := &testenv.SyncBuffer{}
	run := rttest.Start(h.runtime("offsets-backoff", counter{out: h.out}, func(c *streams.Config) {
		c.RetryBackoffMin, c.RetryBackoffMax = 20*time.Millisecond, time.Second
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}))
	h.inputs(1, 1, 0)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 500*time.Millisecond, 30*time.Second)
	run.Stop(t)
	checkCounts(t, out, map[string][]string{"k0": {"0"}})
	var backoffs []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "transaction commit failed and was aborted") {
			_, after, _ := strings.Cut(line, " backoff=")
			backoff, _, _ := strings.Cut(after, " ")
			backoffs = append(backoffs, backoff)
		}
	}
	if !slices.Equal(backoffs, []string{"20ms", "40ms", "80ms"}) {
		t.Fatalf("back-offs %v after 3 consecutive failed commits, want [20ms 40ms 80ms]", backoffs)
	}
}
