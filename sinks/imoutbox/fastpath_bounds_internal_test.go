package imoutbox

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFastPathBounds pins the fast path's sizing to what newFastPath's
// comment promises, at and past each clamp.
func TestFastPathBounds(t *testing.T) {
	for _, tc := range []struct {
		rate                    int
		lockTTL, delay          time.Duration
		poll, inflight, maxHeld int
	}{
		{150, time.Minute, 2 * time.Second, 1000, 3000, 1000},       // held: 600 → at least 1000
		{200, 3 * time.Minute, 10 * time.Second, 1000, 10000, 4000}, // in flight: 12,000 → at most 10,000
		{30, 10 * time.Second, time.Second, 100, 100, 1000},         // in flight exactly 100
		{1, 10 * time.Second, 0, 100, 100, 1000},                    // in flight: 3 → at least 100
		{150, 20 * time.Second, 5 * time.Second, 1000, 1000, 1500},
	} {
		poll, inflight, held := fastPathBounds(tc.rate, tc.lockTTL, tc.delay)
		if poll != tc.poll || inflight != tc.inflight || held != tc.maxHeld {
			t.Errorf("fastPathBounds(%d, %s, %s) = %d, %d, %d; want %d, %d, %d", tc.rate, tc.lockTTL, tc.delay, poll, inflight, held, tc.poll, tc.inflight, tc.maxHeld)
		}
	}
}

// TestGiveUpLowersTheShare: a revoke of the fast path's own topic lowers
// the IM budget by those partitions; one of another topic, or a fast path
// without a share (one replica), changes nothing.
func TestGiveUpLowersTheShare(t *testing.T) {
	var rate float64
	s := newShare(120, time.Second, func(r float64) { rate = r })
	s.assign([]int32{0, 1, 2}, 12)
	f := &FastPath{svc: &Service{log: slog.New(slog.DiscardHandler)}, topic: "rooms", share: s}
	f.giveUp(map[string][]int32{"other": {0, 1}})
	if rate != 30 {
		t.Fatalf("after another topic's revoke: rate %v, want 30", rate)
	}
	f.giveUp(map[string][]int32{"rooms": {2}, "other": {0}})
	if rate != 20 {
		t.Fatalf("after revoking 1 of 3: rate %v, want 20", rate)
	}
	(&FastPath{svc: f.svc, topic: "rooms"}).giveUp(map[string][]int32{"rooms": {0}}) // no share: must not panic
}

// TestDrainWaitsForQueuedPolls: drain returns true at once when no poll waits for its results,
// true when the last one is recorded within the timeout, and false after
// the timeout while one still waits.
func TestDrainWaitsForQueuedPolls(t *testing.T) {
	f := &FastPath{}
	f.idle = sync.NewCond(&f.mu)
	start := time.Now()
	if !f.drain(time.Minute) || time.Since(start) > 5*time.Second {
		t.Fatalf("empty queue: drain false or slow (%s)", time.Since(start))
	}
	f.queue = []*pollBatch{{}}
	if f.drain(50 * time.Millisecond) {
		t.Fatal("a poll still queued: drain true")
	}
	time.AfterFunc(50*time.Millisecond, func() {
		f.mu.Lock()
		f.queue = nil
		f.idle.Broadcast()
		f.mu.Unlock()
	})
	if !f.drain(time.Minute) {
		t.Fatal("the poll recorded within the timeout: drain false")
	}
}

// TestOnAssignedSharesByTheTopicsPartitionCount: an assignment takes the
// share of the partitions gained out of the topic's partition count read
// from the cluster (4 here: 1 of 4 is a quarter of the budget); a topic
// whose count cannot be read is tried 3 times, each failure logged, and
// the count known before stays.
func TestOnAssignedSharesByTheTopicsPartitionCount(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(4))
	cl := k.Client(t)
	var logs testenv.SyncBuffer
	var rate float64
	f := &FastPath{svc: &Service{log: slog.New(slog.NewTextHandler(&logs, nil))}, topic: k.Config.Topics.RoomEvents,
		share: newShare(120, time.Second, func(r float64) { rate = r }), owned: map[int32]*partition{}}
	f.onAssigned(context.Background(), cl, map[string][]int32{f.topic: {0}})
	if rate != 30 {
		t.Fatalf("1 of 4 partitions: rate %v, want 30", rate)
	}
	f.topic = "no-such-topic"
	f.onAssigned(context.Background(), cl, map[string][]int32{f.topic: {0}})
	if n := strings.Count(logs.String(), "partition count of the room events topic unknown"); n != 3 {
		t.Fatalf("%d failed lookups logged, want 3:\n%s", n, logs.String())
	}
	if rate != 30 {
		t.Fatalf("after a failed lookup: rate %v, want 30 (the count known before)", rate)
	}
}

// TestDropHeldKeepsOtherPartitions: a revoke drops exactly the held
// records of the revoked partitions; the other partitions' records stay
// held, in their polls and order, and the held count follows.
func TestDropHeldKeepsOtherPartitions(t *testing.T) {
	f := &FastPath{svc: &Service{m: newMetrics(nil)}, heldIn: make(chan struct{}, 1), heldOut: make(chan struct{}, 1)}
	rec := func(p int32, off int64) *kgo.Record { return &kgo.Record{Topic: "rooms", Partition: p, Offset: off} }
	f.hold([]*kgo.Record{rec(0, 1), rec(1, 1), rec(0, 2)})
	f.hold([]*kgo.Record{rec(1, 2)})
	f.hold([]*kgo.Record{rec(0, 3), rec(2, 1)})
	f.dropHeld(map[string][]int32{"rooms": {1}, "other": {0}})
	var got []string
	for _, h := range f.held {
		var poll []string
		for _, r := range h.recs {
			poll = append(poll, fmt.Sprintf("%d:%d", r.Partition, r.Offset))
		}
		got = append(got, strings.Join(poll, " "))
	}
	if want := []string{"0:1 0:2", "0:3 2:1"}; !slices.Equal(got, want) || f.heldN != 4 {
		t.Fatalf("held polls %q (%d records), want %q (4)", got, f.heldN, want)
	}
}
