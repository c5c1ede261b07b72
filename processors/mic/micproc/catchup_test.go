package micproc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/streams/rttest"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// timerCloseTxns reads the ledger's committed timer closes grouped by the
// transaction that wrote them, once the ledger holds wantLedger entries.
func timerCloseTxns(t *testing.T, e *env, wantLedger int, timeout time.Duration) [][]*userv1.MicLedgerEntry {
	t.Helper()
	var txns [][]*userv1.MicLedgerEntry
	for _, recs := range rttest.ReadTransactions(t, e.k.Brokers, e.cfg.Topics.Ledger, wantLedger, 500*time.Millisecond, timeout) {
		var closes []*userv1.MicLedgerEntry
		for _, r := range recs {
			l := &userv1.MicLedgerEntry{}
			if err := proto.Unmarshal(r.Value, l); err != nil {
				t.Fatalf("ledger@%d: %v", r.Offset, err)
			}
			if l.EventType == mic.EventTypeMicSessionCompensated {
				closes = append(closes, l)
			}
		}
		if len(closes) > 0 {
			txns = append(txns, closes)
		}
	}
	return txns
}

// TestCompensationCatchUp: 5,000 pending sessions of one partition are
// overdue at once (an outage of the room events, say). With a batch size of
// 100 and an interval of 10 minutes, MIC-10 closes them in batches back
// to back: the clock is advanced to one tick and then frozen, so no later
// tick can help. Every session must close within that one tick, exactly
// once, in many transactions of at most 100 timer closes each, all with the
// tick's time.
func TestCompensationCatchUp(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, 1, now) // one partition: the batch bound is per partition
	e.cfg.Settings.Policy.PendingPublishMaxAge = 2 * time.Minute
	e.cfg.Settings.CompensationInterval = 10 * time.Minute
	e.cfg.Settings.CompensationBatchSize = 100
	const n = 5000
	c := now.UnixMilli()
	evs := make([]mic.Event, 0, n)
	for u := int64(1); u <= n; u++ {
		s := &sess{u: u, room: fmt.Sprintf("r%d", u%50), id: fmt.Sprintf("ms-%d", u)}
		evs = append(evs, s.ev("up", c-time.Minute.Milliseconds()+u)) // distinct start times
	}
	e.produce(evs)
	r := e.start()
	e.collect(n, 60*time.Second)

	e.clock.Advance(10 * time.Minute) // the one tick: every session is 11 minutes old
	tick := c + 10*mins
	txns := timerCloseTxns(t, e, 2*n, 120*time.Second) // the ups' entries and the closes
	seen := map[string]bool{}
	total := 0
	for i, txn := range txns {
		if len(txn) > 100 {
			t.Fatalf("transaction %d holds %d timer closes, more than the batch size 100", i, len(txn))
		}
		for _, l := range txn {
			if seen[l.EventId] {
				t.Fatalf("session %s closed twice", l.MicSessionId)
			}
			seen[l.EventId] = true
			if l.OccurredAtMs != tick || l.Session.EndReason != mic.ReasonCompensatedPublishTimeout ||
				l.Session.EndedAtMs != l.Session.SeatStartedAtMs+2*mins {
				t.Fatalf("timer close %v, want at the tick %d", l, tick)
			}
		}
		total += len(txn)
	}
	if total != n {
		t.Fatalf("%d of %d overdue sessions closed within one tick (in %d transactions); the rest would wait for later intervals",
			total, n, len(txns))
	}
	if len(txns) < n/100 {
		t.Fatalf("%d transactions, want at least %d (one per batch)", len(txns), n/100)
	}
	// The oldest first: transaction boundaries follow the due order.
	for i := 1; i < len(txns); i++ {
		if txns[i][0].Session.SeatStartedAtMs < txns[i-1][len(txns[i-1])-1].Session.SeatStartedAtMs {
			t.Fatalf("transaction %d closes an older session than transaction %d", i, i-1)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the overdue and open gauges to drop to 0", func() bool {
		return metricSum(t, e, "roomflow_mic_overdue_sessions", nil) == 0 &&
			metricSum(t, e, "roomflow_mic_open_sessions", nil) == 0
	})
	if got := metricSum(t, e, "roomflow_mic_timer_closes_total", nil); got != n {
		t.Fatalf("timer closes metric %v, want %d", got, n)
	}
	r.stop(t)
}

// TestCompensationDisabled: with mic.compensation_enabled=false, overdue
// sessions are never closed by a timer, however many intervals pass; the
// retention punctuation still runs and its gauges show them open and
// overdue; a session's real down still closes it normally.
func TestCompensationDisabled(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, 1, now)
	e.cfg.Settings.DisableCompensation = true
	e.cfg.Settings.Policy.PendingPublishMaxAge = 2 * time.Minute
	e.cfg.Settings.Policy.PublishingSessionMaxAge = 10 * time.Minute
	e.cfg.Settings.CompensationInterval = 10 * time.Second
	c := now.UnixMilli()
	const n = 50
	ss := make([]*sess, n+1)
	var evs []mic.Event
	for u := int64(1); u <= n; u++ {
		ss[u] = &sess{u: u, room: "r", id: fmt.Sprintf("ms-%d", u)}
		evs = append(evs, ss[u].ev("up", c-30*sec))
		if u%2 == 0 {
			evs = append(evs, ss[u].ev("publish_confirmed", c-20*sec))
		}
	}
	e.produce(evs)
	r := e.start()
	e.collect(len(evs), 30*time.Second)

	// Far past both max ages, tick after tick.
	for i := range 5 {
		e.clock.Advance(time.Hour)
		testenv.Eventually(t, 30*time.Second, "the timer to run", func() bool {
			return metricSum(t, e, "roomflow_process_punctuations_total", map[string]string{"processor": "mic"}) >= float64(i+1)
		})
	}
	if comp := compensated(e.read(len(evs), 10*time.Second)); len(comp) != 0 {
		t.Fatalf("%d of %d overdue sessions closed by the timer while compensation is disabled (first: %v)", len(comp), n, comp[0])
	}
	if got := metricSum(t, e, "roomflow_process_punctuations_total", map[string]string{"name": "mic-retention"}); got < 5 {
		t.Fatalf("the retention punctuation ran %v times, want one per tick", got)
	}
	if got := metricSum(t, e, "roomflow_process_punctuations_total", map[string]string{"name": "mic-compensation"}); got != 0 {
		t.Fatalf("the compensation punctuation ran %v times while disabled", got)
	}
	if open, overdue := metricSum(t, e, "roomflow_mic_open_sessions", nil), metricSum(t, e, "roomflow_mic_overdue_sessions", nil); open != n || overdue != n {
		t.Fatalf("open %v and overdue %v sessions, want %d and %d", open, overdue, n, n)
	}
	// The real down of a session still closes it, with its own reason.
	e.produce([]mic.Event{ss[2].ev("down", c+5*hour, withReason("leave"))})
	o := e.collect(len(evs)+1, 30*time.Second)
	if len(o.closed) != 1 || o.closed[0].UserId != 2 || o.closed[0].EndReason != "leave" || o.closed[0].EndedAtMs != c+5*hour {
		t.Fatalf("closes %v, want user 2's real down", o.closed)
	}
	r.stop(t)
}

// TestCompensationCatchUpAbort: a batch's transaction aborts in the middle
// of a catch-up (a produce to the ledger fails, kfake fault): its closes are
// rolled back with the store, and the catch-up must notice and close those
// sessions again within the same tick, so every session still closes
// exactly once without a later tick.
func TestCompensationCatchUpAbort(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, 1, now)
	if e.k.Fake == nil {
		t.Skip("needs kfake fault injection (a failing produce); ROOMFLOW_KAFKA_BROKERS is set")
	}
	e.cfg.Settings.Policy.PendingPublishMaxAge = 2 * time.Minute
	e.cfg.Settings.CompensationInterval = 10 * time.Minute
	e.cfg.Settings.CompensationBatchSize = 100
	const n = 1000
	c := now.UnixMilli()
	evs := make([]mic.Event, 0, n)
	for u := int64(1); u <= n; u++ {
		s := &sess{u: u, room: "r", id: fmt.Sprintf("ms-%d", u)}
		evs = append(evs, s.ev("up", c-time.Minute.Milliseconds()+u))
	}
	e.produce(evs)
	r := e.start()
	e.collect(n, 60*time.Second)

	ledgerProduces := 0
	e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.cfg.Topics.Ledger, Err: kerr.InvalidRecord,
		When: func(kmsg.Request) bool { ledgerProduces++; return ledgerProduces == 4 }})
	e.clock.Advance(10 * time.Minute)
	txns := timerCloseTxns(t, e, 2*n, 120*time.Second)
	seen := map[string]bool{}
	for _, txn := range txns {
		for _, l := range txn {
			if seen[l.EventId] {
				t.Fatalf("session %s closed twice", l.MicSessionId)
			}
			seen[l.EventId] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("%d of %d sessions closed within the tick after an aborted batch", len(seen), n)
	}
	if got := metricSum(t, e, "roomflow_process_txn_aborts_total", map[string]string{"cause": "produce"}); got < 1 {
		t.Fatalf("no transaction aborted (aborts %v): the fault did not hit", got)
	}
	r.stop(t)
}
