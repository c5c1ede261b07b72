package imoutbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// IM-7: room-service publishes each event itself right after its
// transaction and marks the row delivered. A simulated room-service does
// exactly that for most events, a few hundred ms after the commit (after
// the relay has put them on Kafka), while publish-im runs with the default
// im.fast_path_delay: none of those is sent by publish-im, every other
// event is sent once, in room order, and never before the delay.
func TestFastPathLeavesRoomServiceItsOwnPublish(t *testing.T) {
	e := newEnv(t, true)
	// roomflow's defaults: im.fast_path_delay 3s, outbox_worker.claim_grace 5s.
	e.cfg.FastPathDelay, e.cfg.ClaimGrace = 3*time.Second, 5*time.Second
	delay := e.cfg.FastPathDelay
	reg, stop := e.publisher(fastAndScan)

	const n, rooms = 200, 20
	var mu sync.Mutex
	produced := map[string]time.Time{}
	var selfPublished, ours []string
	var wg sync.WaitGroup
	for i := 0; i < n; i += 10 { // room-service commits, the relay ships: 10 events every 20 ms
		var evs []event
		for j := i; j < i+10; j++ {
			evs = append(evs, gift(fmt.Sprintf("rs-%03d", j), fmt.Sprintf("r%02d", j%rooms), int64(j/rooms+1)))
		}
		raws := e.insert(0, evs...)
		at := time.Now()
		e.produce(raws, evs)
		for j, ev := range evs {
			mu.Lock()
			produced[ev.ID] = at
			if (i+j)%5 == 0 { // its sync publish failed: the row stays pending for us
				ours = append(ours, ev.ID)
				mu.Unlock()
				continue
			}
			selfPublished = append(selfPublished, ev.ID)
			mu.Unlock()
			wg.Go(func() { // its sync publish succeeded: best-effort mark
				time.Sleep(200*time.Millisecond + time.Duration(j)*20*time.Millisecond)
				if _, err := e.db.Exec(`UPDATE room_outbox SET status = 'delivered' WHERE event_id = ?`, ev.ID); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	testenv.Eventually(t, 60*time.Second, "every event seen by the fast path and every row delivered", func() bool {
		seen := metric(t, reg, "roomflow_im_outbox_claims_total", map[string]string{"source": "fast", "result": "claimed"}) +
			metric(t, reg, "roomflow_im_outbox_claims_total", map[string]string{"source": "fast", "result": "done"}) +
			metric(t, reg, "roomflow_im_outbox_claims_total", map[string]string{"source": "fast", "result": "busy"})
		return seen == n && e.countStatus("delivered") == n
	})
	stop()

	requested := map[string]int{}
	for _, r := range e.fake.Requests() {
		requested[r.EventID]++
	}
	for _, id := range selfPublished {
		if requested[id] != 0 {
			t.Errorf("%s was published by room-service and again by publish-im (%d requests)", id, requested[id])
		}
	}
	acc := e.fake.AcceptedByEvent()
	for _, id := range ours {
		if acc[id] != 1 || requested[id] != 1 {
			t.Errorf("%s: accepted %d times, %d requests; want 1 and 1", id, acc[id], requested[id])
		}
	}
	for _, a := range e.fake.Accepted() {
		if early := delay - a.At.Sub(produced[a.EventID]); early > 0 {
			t.Errorf("%s sent %s before im.fast_path_delay ran out", a.EventID, early)
		}
	}
	e.checkRoomOrder()
	if got := metric(t, reg, "roomflow_im_outbox_claims_total", map[string]string{"source": "fast", "result": "done"}); got != float64(len(selfPublished)) {
		t.Errorf("fast path skipped %v rows as delivered, want %d", got, len(selfPublished))
	}
}

// The hold is bounded: with more events on the topic than it takes, the
// fast path stops polling while it is full (roomflow_im_fast_path_held_records
// never exceeds it) and still delivers everything.
func TestFastPathHoldIsBounded(t *testing.T) {
	e := newEnv(t, true)
	e.cfg.FastPathDelay = time.Second
	e.cfg.ClaimGrace = time.Hour // the fast path alone
	const n, limit = 2500, 1000  // limit: max(1000, 2 x 200/s x 1s)
	var evs []event
	for i := 0; i < n; i++ { // no-op events: no IM calls, so only the hold paces them
		evs = append(evs, event{ID: fmt.Sprintf("h-%04d", i), Type: "RoomHeatChanged", Room: fmt.Sprintf("r%d", i%50), Payload: &roomv1.RoomHeatChanged{Heat: int64(i)}})
	}
	raws := e.insert(0, evs...)
	e.produce(raws, evs)
	reg, stop := e.publisher(fastOnly)
	var peak float64
	testenv.Eventually(t, 60*time.Second, "every row delivered", func() bool {
		held := metric(t, reg, "roomflow_im_fast_path_held_records", nil)
		peak = max(peak, held)
		if held > limit {
			t.Fatalf("%v records held, limit %d", held, limit)
		}
		return e.countStatus("delivered") == n
	})
	stop()
	if peak < limit/2 {
		t.Fatalf("peak hold %v: the test never filled the hold", peak)
	}
}

// Records still held at shutdown are not done: their offsets stay
// uncommitted and their rows untouched (pending, no worker), so the next
// start delivers each exactly once.
func TestHeldRecordsAreNotCommitted(t *testing.T) {
	e := newEnv(t, true)
	e.cfg.FastPathDelay = time.Minute
	e.cfg.ClaimGrace = time.Hour
	var evs []event
	for i := 0; i < 40; i++ {
		evs = append(evs, gift(fmt.Sprintf("held-%02d", i), fmt.Sprintf("r%d", i%4), int64(i/4+1)))
	}
	raws := e.insert(0, evs...)
	e.produce(raws, evs)
	reg, stop := e.publisher(fastOnly)
	testenv.Eventually(t, 30*time.Second, "all records held", func() bool {
		return metric(t, reg, "roomflow_im_fast_path_held_records", nil) == float64(len(evs))
	})
	stop()
	offsets, err := e.k.Admin(t).FetchOffsets(context.Background(), e.cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.At > 0 {
			t.Errorf("partition %d committed at %d while its records were only held", o.Partition, o.At)
		}
	})
	if got := e.countStatus("pending"); got != len(evs) || len(e.fake.Requests()) != 0 {
		t.Fatalf("%d rows pending, %d IM requests after a stop with everything held", got, len(e.fake.Requests()))
	}
	e.cfg.FastPathDelay = 0
	_, stop2 := e.publisher(fastOnly)
	testenv.Eventually(t, 30*time.Second, "delivered after restart", func() bool { return e.countStatus("delivered") == len(evs) })
	stop2()
	for _, ev := range evs {
		if n := e.fake.AcceptedByEvent()[ev.ID]; n != 1 {
			t.Fatalf("%s accepted %d times", ev.ID, n)
		}
	}
	// Every result was recorded before the stop: none is reported missing.
	if strings.Contains(e.logs.String(), "results not all recorded") {
		t.Fatalf("a clean stop reported unrecorded results:\n%s", e.logs.String())
	}
}
