package micproc_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/mictest"
)

var streamStart = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC).UnixMilli()

// checkAgainstOracles compares the committed outputs with (1) the entries
// the pure engine yields for the same stream — every input-event entry
// exactly once and byte-equal — and (2) the independent reference totals of
// mictest.Expect, with every session closed (the rest by timer).
func checkAgainstOracles(t *testing.T, o *outputs, stream mictest.Stream, pol mic.Policy) {
	t.Helper()
	want := expectedLedger(stream.Events)
	seen := map[string]int{}
	for _, l := range o.ledger {
		seen[l.EventId]++
		if l.EventType == mic.EventTypeMicSessionCompensated {
			continue // its occurred_at is the tick's time
		}
		w, ok := want[l.EventId]
		if !ok {
			t.Fatalf("unexpected ledger entry %v", l)
		}
		if !proto.Equal(l, w) && !(l.Status == mic.StatusSkipped && w.Status == mic.StatusConsumed) {
			t.Fatalf("ledger entry differs from the engine's:\n got %v\nwant %v", l, w)
		}
	}
	for id, w := range want {
		if seen[id] == 0 {
			t.Fatalf("missing ledger entry %v", w)
		}
	}
	for _, l := range o.ledger {
		if seen[l.EventId] > 1 && l.Status == mic.StatusConsumed && countConsumed(o, l.EventId) > 1 {
			t.Fatalf("event %s consumed %d times", l.EventId, countConsumed(o, l.EventId))
		}
	}
	derived := map[string]int{}
	for _, c := range o.closed {
		derived[c.EventId]++
	}
	for _, d := range o.daily {
		derived[d.EventId]++
	}
	for _, l := range o.lifetime {
		derived[l.EventId]++
	}
	for id, n := range derived {
		if n != 1 {
			t.Fatalf("derived event %s emitted %d times", id, n)
		}
	}
	if len(o.closed) != len(stream.Sessions) || len(o.lifetime) != len(stream.Sessions) {
		t.Fatalf("%d closed / %d lifetime events for %d sessions", len(o.closed), len(o.lifetime), len(stream.Sessions))
	}
	tl := o.tally()
	if tl.Err != nil {
		t.Fatal(tl.Err)
	}
	if d := mictest.Diff(tl.Totals, mictest.Expect(mictest.Close(stream.Sessions, pol))); d != "" {
		t.Fatalf("totals differ from the independent reference:\n%s", d)
	}
	for u, sum := range tl.SumDaily() {
		if l := tl.Lifetime[u]; l == nil || l.SeatMs != sum.SeatMs || l.OnlineMs != sum.OnlineMs || l.OnlineMs > l.SeatMs {
			t.Fatalf("user %v: daily sums %+v, lifetime %+v", u, sum, l)
		}
	}
}

func countConsumed(o *outputs, id string) int {
	n := 0
	for _, l := range o.ledger {
		if l.EventId == id && l.Status == mic.StatusConsumed {
			n++
		}
	}
	return n
}

// closeAllByTimer advances the clock past every max age until the ledger
// holds want entries (the timers close what the stream left open).
func closeAllByTimer(t *testing.T, e *env, want int) *outputs {
	t.Helper()
	for i := 0; i < 50; i++ {
		e.clock.Advance(30 * 24 * time.Hour)
		e.tick()
		o := e.read(want, 2*time.Second)
		if len(o.ledger) >= want {
			return e.collect(want, 20*time.Second)
		}
	}
	t.Fatalf("timers did not close every open session")
	return nil
}

func openCount(stream mictest.Stream) int {
	n := 0
	for _, s := range stream.Sessions {
		if s.EndMs == 0 {
			n++
		}
	}
	return n
}

// TestPropertyThroughProcessor: a random valid stream with duplicates,
// skips, cross-day and left-open sessions, through the processor and its
// timer on the in-memory driver (TestCrashRestartMidOpenSessions runs a
// stream through Kafka with crashes).
func TestPropertyThroughProcessor(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 7))
	stream := mictest.Generate(r, mictest.Gen{Users: 60, Sessions: 600, StartMs: streamStart, SpreadMs: 5 * 24 * hour,
		MaxLen: 40 * time.Hour, DupRate: 0.15, OpenRate: 0.1, Skips: true})
	e := newMemEnv(t, 3, time.UnixMilli(streamStart).Add(40*24*time.Hour))
	e.cfg.Settings.CompensationInterval = time.Second
	e.cfg.Settings.CompensationBatchSize = 25
	pol := e.cfg.Settings.Policy
	e.produce(stream.Events)
	n := countLedger(stream.Events)
	e.collect(n, 0)
	o := closeAllByTimer(t, e, n+openCount(stream))
	checkAgainstOracles(t, o, stream, pol)
	t.Logf("%d events, %d sessions (%d closed by timer), %d ledger entries, %d daily events",
		len(stream.Events), len(stream.Sessions), openCount(stream), len(o.ledger), len(o.daily))
}

// TestCrashRestartMidOpenSessions kills the processor (no clean shutdown,
// open transaction left behind) at random points while many sessions are
// open, restarts it each time (state restored from the changelog), and
// checks every output exactly once and the totals exact.
func TestCrashRestartMidOpenSessions(t *testing.T) {
	r := rand.New(rand.NewPCG(4242, 9))
	stream := mictest.Generate(r, mictest.Gen{Users: 80, Sessions: 1500, StartMs: streamStart, SpreadMs: 3 * 24 * hour,
		MaxLen: 30 * time.Hour, DupRate: 0.1, OpenRate: 0.05})
	e := newEnv(t, 3, time.UnixMilli(streamStart).Add(40*24*time.Hour))
	e.cfg.Runtime.CommitRecords = 200 // many transactions, so kills land between and inside them
	e.cfg.Settings.CompensationInterval = time.Second
	e.cfg.Settings.CompensationBatchSize = 40
	pol := e.cfg.Settings.Policy

	const crashes = 6
	chunk := len(stream.Events)/crashes + 1
	for i := 0; i < crashes; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, len(stream.Events))
		e.produce(stream.Events[lo:hi])
		run := e.start()
		run.waitAssigned(t, 3)
		time.Sleep(time.Duration(20+r.IntN(200)) * time.Millisecond)
		run.kill(t)
	}
	run := e.start()
	n := countLedger(stream.Events)
	e.collect(n, 90*time.Second)
	// Timer closes also survive a crash in the middle of the batches.
	e.clock.Advance(30 * 24 * time.Hour)
	time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond)
	run.kill(t)
	run = e.start()
	o := closeAllByTimer(t, e, n+openCount(stream))
	run.stop(t)
	checkAgainstOracles(t, o, stream, pol)
	t.Logf("%d events, %d sessions, %d crashes, %d ledger entries", len(stream.Events), len(stream.Sessions), crashes+1, len(o.ledger))
}
