package micproc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// waitPunctuations waits until the compensation punctuation committed at
// least n times in total.
func waitPunctuations(t *testing.T, e *env, n float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for metricSum(t, e, "roomflow_process_punctuations_total", map[string]string{"processor": "mic"}) < n {
		if time.Now().After(deadline) {
			t.Fatalf("compensation punctuation ran %v times, want %v",
				metricSum(t, e, "roomflow_process_punctuations_total", map[string]string{"processor": "mic"}), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func compensated(o *outputs) []*userv1.MicLedgerEntry {
	var out []*userv1.MicLedgerEntry
	for _, l := range o.ledger {
		if l.EventType == mic.EventTypeMicSessionCompensated {
			out = append(out, l)
		}
	}
	return out
}

// TestTimerCloses drives the compensation timer with a controllable clock
// and short max ages: nothing closes before the max age, pending sessions
// close at seat start + max age with no online time, at most batch_size per
// partition per run (the longest overdue first, the rest in the runs that
// follow at once),
// publishing sessions close at publish start + max window, a late down is
// skipped as session_already_closed, and once the tombstone's retention
// has passed in event time the session is unknown.
func TestTimerCloses(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, 1, now) // one partition: the batch limit is per partition
	e.cfg.Settings.Policy.PendingPublishMaxAge = 2 * time.Minute
	e.cfg.Settings.Policy.PublishingSessionMaxAge = time.Hour
	e.cfg.Settings.CompensationInterval = 10 * time.Second
	e.cfg.Settings.CompensationBatchSize = 2
	e.cfg.Settings.ClosedSessionRetention = 30 * time.Minute
	c := now.UnixMilli()

	var evs []mic.Event
	ss := map[int64]*sess{}
	for u := int64(1); u <= 5; u++ { // pending, opened 50s..10s ago
		ss[u] = &sess{u: u, room: "r", id: fmt.Sprintf("ms-%d", u)}
		evs = append(evs, ss[u].ev("up", c-60*sec+u*10*sec))
	}
	ss[6] = &sess{u: 6, room: "r", id: "ms-6"} // publishing
	evs = append(evs, ss[6].ev("up", c-30*sec), ss[6].ev("publish_confirmed", c-20*sec))
	ss[7] = &sess{u: 7, room: "r", id: "ms-7"} // closed normally
	evs = append(evs, ss[7].ev("up", c-30*sec), ss[7].ev("down", c-10*sec, withReason("leave")))
	e.produce(evs)
	r := e.start()
	e.collect(9, 30*time.Second)

	// First tick, 10 s later: nobody is due yet (the oldest is 60 s old).
	e.clock.Advance(10 * time.Second)
	waitPunctuations(t, e, 1)
	if o := e.collect(9, 10*time.Second); len(compensated(o)) != 0 {
		t.Fatalf("closed before the max age: %v", compensated(o))
	}
	if p := metricSum(t, e, "roomflow_mic_open_sessions", map[string]string{"status": "pending_publish"}); p != 5 {
		t.Fatalf("open pending sessions gauge %v, want 5", p)
	}
	if p := metricSum(t, e, "roomflow_mic_open_sessions", map[string]string{"status": "publishing"}); p != 1 {
		t.Fatalf("open publishing sessions gauge %v, want 1", p)
	}

	// Two minutes on, all five pending sessions are due: the one tick
	// closes them, oldest first, in batches of two back to back (2 + 2 + 1,
	// three runs of the punctuation, each its own transaction).
	e.clock.Advance(2 * time.Minute)
	o := e.collect(14, 10*time.Second)
	waitPunctuations(t, e, 4)
	if got := metricSum(t, e, "roomflow_mic_overdue_sessions", nil); got != 0 {
		t.Fatalf("overdue gauge %v after the catch-up, want 0", got)
	}
	comp := compensated(o)
	if len(comp) != 5 {
		t.Fatalf("%d timer closes, want 5", len(comp))
	}
	tick1 := now.Add(10*time.Second + 2*time.Minute).UnixMilli()
	for i, l := range comp {
		u := int64(i + 1) // oldest first
		s := l.Session
		up := c - 60*sec + u*10*sec
		wantAt := tick1 // every batch of the catch-up has the tick's time
		if l.UserId != u || l.EventId != "MicSessionCompensated:"+s.MicSessionId || l.Status != "consumed" ||
			l.Action != "compensate" || l.OccurredAtMs != wantAt || s.Status != "ended" ||
			s.EndReason != "compensated_publish_timeout" || s.EndedAtMs != up+2*mins || s.SeatOccupiedMs != 2*mins ||
			s.MicOnlineMs != 0 || s.ClosedEventId != l.EventId || l.Lifetime == nil || len(l.Daily) != 1 {
			t.Fatalf("timer close %d: %v", i, l)
		}
	}
	uo := o.forUser(3)
	if len(uo.closed) != 1 || uo.closed[0].EndReason != "compensated_publish_timeout" ||
		uo.closed[0].ClosedEventId != "MicSessionCompensated:ms-3" || len(uo.daily) != 1 || len(uo.lifetime) != 1 {
		t.Fatalf("derived events of a timer close: %v %v %v", uo.closed, uo.daily, uo.lifetime)
	}
	if got := metricSum(t, e, "roomflow_mic_timer_closes_total", map[string]string{"reason": "compensated_publish_timeout"}); got != 5 {
		t.Fatalf("timer closes metric %v", got)
	}

	// The real down arrives late: skipped, never counted twice.
	e.produce([]mic.Event{ss[1].ev("down", c+5*mins, withReason("leave"))})
	o = e.collect(15, 10*time.Second)
	if l := o.ledger[14]; l.UserId != 1 || l.Status != "skipped" || l.SkipReason != "session_already_closed" {
		t.Fatalf("late down: %v", l)
	}

	// The publishing session closes at publish start + 1 h.
	e.clock.Advance(time.Hour)
	waitPunctuations(t, e, 5)
	o = e.collect(16, 10*time.Second)
	l := o.ledger[15]
	if s := l.Session; l.UserId != 6 || s.EndReason != "compensated_publishing_max_window" ||
		s.EndedAtMs != c-20*sec+hour || s.MicOnlineMs != hour || s.SeatOccupiedMs != hour+10*sec {
		t.Fatalf("publishing timer close: %v", l)
	}
	if tl := o.tally(); tl.Err != nil || tl.Lifetime[mictestUser(6)].OnlineMs != hour {
		t.Fatalf("tally %v %+v", tl.Err, tl.Lifetime[mictestUser(6)])
	}

	// Once the partition's event time is more than closed_session_retention
	// past the close, a tick drops the tombstone: a very late down is then
	// an unknown session (still never counted).
	ss[8] = &sess{u: 8, room: "r2", id: "ms-8"}
	e.produce([]mic.Event{ss[8].ev("up", c+2*hour), ss[8].ev("down", c+2*hour+sec)})
	e.collect(18, 10*time.Second)
	e.clock.Advance(10 * time.Second)
	waitPunctuations(t, e, 6)
	if got := metricSum(t, e, "roomflow_mic_state_pruned_total", map[string]string{"kind": "closed_session"}); got != 7 {
		t.Fatalf("pruned tombstones %v, want the 7 closed before the watermark moved", got)
	}
	e.produce([]mic.Event{ss[2].ev("down", c+2*hour, withReason("leave"))})
	o = e.collect(19, 10*time.Second)
	if l := o.ledger[18]; l.UserId != 2 || l.SkipReason != "unknown_session" {
		t.Fatalf("down after retention: %v", l)
	}
	// A replay of that session's up is refused (it is older than the
	// retention behind the watermark), so it cannot open and count twice.
	e.produce([]mic.Event{evs[1]})
	o = e.collect(20, 10*time.Second)
	if l := o.ledger[19]; l.EventId != evs[1].EventID || l.Status != "skipped" || l.SkipReason != "stale_event" {
		t.Fatalf("replayed up after retention: %v", l)
	}
	if p := metricSum(t, e, "roomflow_mic_open_sessions", nil); p != 0 {
		t.Fatalf("open sessions gauge %v after every close", p)
	}
	r.stop(t)
}

// TestTimersWaitForBacklog: the mic processor is stopped for longer than
// both max ages while the real publish_confirmed and down events of 200
// open sessions pile up in its input. After the restart the first tick
// comes while that backlog is still unread (fetching the input is held,
// kfake fault): the timer must wait until the partition is consumed up to
// the last stable offset read at the tick, so every session closes with
// its real times and none as compensated.
func TestTimersWaitForBacklog(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, 4, now)
	if e.k.Fake == nil {
		t.Skip("needs kfake fault injection (holding the input's fetches); ROOMFLOW_KAFKA_BROKERS is set")
	}
	e.cfg.Settings.Policy.PendingPublishMaxAge = 2 * time.Minute
	e.cfg.Settings.Policy.PublishingSessionMaxAge = 10 * time.Minute
	e.cfg.Settings.CompensationInterval = 10 * time.Second
	e.cfg.Settings.CompensationBatchSize = 1000
	c := now.UnixMilli()
	const n = 200
	ss := make([]*sess, n+1)
	var ups, backlog []mic.Event
	for u := int64(1); u <= n; u++ {
		ss[u] = &sess{u: u, room: "r", id: fmt.Sprintf("ms-%d", u)}
		ups = append(ups, ss[u].ev("up", c-30*sec))
	}
	e.produce(ups)
	r := e.start()
	e.collect(n, 30*time.Second)
	r.stop(t)

	// While it is stopped: even users publish and leave after 90 s, odd
	// ones leave unpublished after 60 s, all within the max ages.
	for u := int64(1); u <= n; u++ {
		if u%2 == 0 {
			backlog = append(backlog, ss[u].ev("publish_confirmed", c-20*sec, withPub(c-20*sec)), ss[u].ev("down", c+60*sec, withReason("leave")))
		} else {
			backlog = append(backlog, ss[u].ev("down", c+30*sec, withReason("leave")))
		}
	}
	e.produce(backlog)
	e.clock.Advance(time.Hour)

	hold := e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: e.cfg.Runtime.Input,
		Err: kerr.NotLeaderForPartition, Count: -1})
	r = e.start()
	r.waitAssigned(t, 4)
	e.clock.Advance(10 * time.Second) // the first tick is due
	deadline := time.Now().Add(30 * time.Second)
	for metricSum(t, e, "roomflow_process_punctuations_deferred_total", map[string]string{"processor": "mic", "reason": "behind"}) < 4 &&
		metricSum(t, e, "roomflow_process_punctuations_total", map[string]string{"processor": "mic"}) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first tick neither ran nor was deferred")
		}
		time.Sleep(10 * time.Millisecond)
	}
	hold.Remove()
	want := n + len(backlog) // every event has one ledger entry
	o := e.read(want, 30*time.Second)
	r.stop(t)
	if comp := compensated(o); len(comp) != 0 {
		t.Fatalf("%d sessions closed by the timer while their real events waited in the partition (first: %v)", len(comp), comp[0])
	}
	if len(o.ledger) != want || len(o.closed) != n {
		t.Fatalf("%d ledger entries and %d closes, want %d and %d", len(o.ledger), len(o.closed), want, n)
	}
	for _, cl := range o.closed {
		up := c - 30*sec
		end, online := c+30*sec, int64(0)
		if cl.UserId%2 == 0 {
			end, online = c+60*sec, 80*sec
		}
		if cl.EndReason != "leave" || cl.EndedAtMs != end || cl.SeatOccupiedMs != end-up || cl.MicOnlineMs != online {
			t.Fatalf("user %d closed as %s at %d with seat %d online %d, want leave at %d with %d and %d",
				cl.UserId, cl.EndReason, cl.EndedAtMs, cl.SeatOccupiedMs, cl.MicOnlineMs, end, end-up, online)
		}
	}
	if got := metricSum(t, e, "roomflow_mic_timer_closes_total", nil); got != 0 {
		t.Fatalf("timer closes metric %v, want 0", got)
	}
}
