package imoutbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

// TestFastPathRowChangedAroundItsClaim (issue 33 item 7): the fast path
// reads an event's room_outbox row and claims it in one transaction (a
// locking read, then an update that re-checks nothing). Another worker's
// scan claim or room-service's delivered mark lands before the read, and
// the fast path leaves the row alone, or waits for the claim (the scan
// skips the locked row, the mark waits for it); it never lands between the
// read and the claim, where the claim would overwrite it and the event
// would be sent a second time. Each change is injected once, just before
// the fast path's statement named in at, on a connection of its own.
func TestFastPathRowChangedAroundItsClaim(t *testing.T) {
	const (
		read  = "WHERE event_id IN (" // ClaimEvents' locking read (the scan's reads by id)
		claim = "SET status = 'delivering'"
	)
	delivered, claimedByW2 := rowState{Status: "delivered"}, rowState{Status: "delivering", WorkerID: "w2"}
	for _, tc := range []struct {
		name       string
		at         string
		change     func(t *testing.T, e *env, id string) (landed bool)
		wantLanded bool
		want       rowState // what the change leaves when it lands
	}{
		{"delivered mark before the read", read, markDeliveredNoWait, true, delivered},
		{"scan claim before the read", read, scanClaim, true, claimedByW2},
		{"delivered mark between the read and the claim", claim, markDeliveredNoWait, false, delivered},
		{"scan claim between the read and the claim", claim, scanClaim, false, claimedByW2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, true)
			ev := gift("raced", "room-1", 1)
			raws := e.insert(time.Minute, ev) // old enough for the scan's grace
			var once sync.Once
			injected, landed := false, false
			db := testenv.OpenHooked(t, e.m.DSN, testenv.SQLHooks{Statement: func(_ context.Context, q string) error {
				if strings.Contains(q, "room_outbox") && strings.Contains(q, tc.at) {
					once.Do(func() { injected, landed = true, tc.change(t, e, ev.ID) })
				}
				return nil
			}})
			reg := prometheus.NewRegistry()
			p, err := imoutbox.NewPublisher(e.publisherConfig(fastOnly, reg), db)
			if err != nil {
				t.Fatal(err)
			}
			imoutbox.FastPathOnly(p)
			stop := e.run(p)
			e.produce(raws, []event{ev})
			testenv.Eventually(t, 20*time.Second, "the fast path claimed its poll and recorded it", func() bool {
				var n float64
				for _, result := range []string{"claimed", "done", "busy"} {
					n += metric(t, reg, "roomflow_im_outbox_claims_total", map[string]string{"source": "fast", "result": result})
				}
				return n == 1 && imoutbox.QueuedPolls(p) == 0
			})
			stop()
			if !injected {
				t.Fatalf("no statement with %q was intercepted: the test exercised nothing", tc.at)
			}
			if landed != tc.wantLanded {
				t.Errorf("the change landed = %v, want %v (a change between the read and the claim must wait for the claim)", landed, tc.wantLanded)
			}
			sent, r := e.fake.AcceptedByEvent()[ev.ID], e.row(ev.ID)
			switch {
			case landed && (sent != 0 || r.Status != tc.want.Status || r.WorkerID != tc.want.WorkerID):
				t.Fatalf("after the change landed the fast path sent the event %d times and left %+v, want no send and %+v", sent, r, tc.want)
			case !landed && (sent != 1 || r.Status != "delivered"):
				t.Fatalf("the claim held the change off, yet the fast path sent the event %d times and left %+v, want once and delivered", sent, r)
			}
		})
	}
}

// markDeliveredNoWait is room-service's mark after its own publish, failing
// at once where a claim holds the row (lock wait timeout 0) instead of
// waiting for it; it reports whether the mark landed. The publisher under
// test runs no scan, so this and scanClaim are the only other writers.
func markDeliveredNoWait(t *testing.T, e *env, id string) bool {
	_, err := e.db.Exec(`SET STATEMENT innodb_lock_wait_timeout = 0 FOR UPDATE room_outbox SET status = 'delivered' WHERE event_id = ?`, id)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1205 { // ER_LOCK_WAIT_TIMEOUT
		return false
	}
	if err != nil {
		t.Error(err)
	}
	return err == nil
}

// scanClaim is another worker's compensation scan; it reports whether the
// scan claimed the row.
func scanClaim(t *testing.T, e *env, _ string) bool {
	rows, err := imoutbox.NewRepo(e.db).ClaimPending(context.Background(), "w2", 10, 0, time.Minute)
	if err != nil {
		t.Error(err)
	}
	return len(rows) == 1
}
