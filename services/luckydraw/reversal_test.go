package luckydraw_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
)

// Finding 8 (docs/reliability.md): a gift written as a pending lucky draw
// reaches the sink's inflow applier before its Execute is answered; when
// that Execute is then rejected (a switch went off), the refunded gift's
// inflow must leave the pools and the daily facts. These tests run the
// real sink applier (mysqlsink.Store with luckyinflow) against the draw
// service on one MariaDB database.

// inflowStream applies LuckyPoolInflow records through the sink's Store,
// on one partition, as `roomflow sink` does.
type inflowStream struct {
	st   *mysqlsink.Store
	tp   mysqlsink.TP
	gen  map[mysqlsink.TP]int64
	next int64
}

func newInflowStream(t *testing.T, db *sql.DB) *inflowStream {
	t.Helper()
	a, err := luckyinflow.New(luckyinflow.Config{Topic: "inflow", DefaultAppCode: app})
	if err != nil {
		t.Fatal(err)
	}
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "g", Appliers: []mysqlsink.Registration{mysqlsink.Register(a)}}, db)
	if err != nil {
		t.Fatal(err)
	}
	tp := mysqlsink.TP{Topic: "inflow", Partition: 0}
	c, err := st.Claim(context.Background(), "o", []mysqlsink.TP{tp}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &inflowStream{st: st, tp: tp, gen: map[mysqlsink.TP]int64{tp: c[tp].Generation}}
}

// apply applies in as the partition's next record, retrying what the sink
// retries (a duplicate claim key, a deadlock).
func (s *inflowStream) apply(t *testing.T, in *activityv1.LuckyPoolInflow) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		_, err := s.st.Apply(context.Background(), "o", s.gen, []mysqlsink.Record{{TP: s.tp, Offset: s.next, Item: in}}, time.Now().UnixMilli())
		if err == nil {
			s.next++
			return
		}
		if !mysqlerr.Retryable(err) || attempt == 20 {
			t.Fatalf("sink apply %s: %v", in.EventId, err)
		}
	}
}

// giftInflow is the inflow of the lucky gift of command cmd (drawReq's
// room and gift, rule v1: heat 100 -> 50 = 10 + 15 + 25), as the room
// processor streams it; n numbers the gift event.
func giftInflow(cmd string, n int) *activityv1.LuckyPoolInflow {
	return &activityv1.LuckyPoolInflow{EventId: fmt.Sprintf("LuckyPoolInflow:g%d", n), AppCode: app, SourceEventId: fmt.Sprintf("g%d", n),
		RoomId: "r1", GiftId: "rose", RuleVersion: "v1", DrawId: luckydraw.DrawID(app, cmd),
		PoolIn: 50, PlatformIn: 10, RoomIn: 15, GiftIn: 25, OccurredAtMs: time.Now().UnixMilli()}
}

// poolState is what a gift's inflow touches: lucky_pools (balance,
// total_in, per scope) and lucky_pool_inflow_daily (inflow, gift_count;
// rows at zero left out).
func poolState(t *testing.T, e *env) string {
	t.Helper()
	pools, daily := map[string]string{}, map[string]string{}
	for q, into := range map[string]map[string]string{
		`SELECT CONCAT(scope_type, '/', scope_id), CONCAT(balance, ' ', total_in) FROM lucky_pools`: pools,
		`SELECT CONCAT(stat_date, ' ', scope_type, '/', scope_id), CONCAT(inflow, ' ', gift_count) FROM lucky_pool_inflow_daily
		WHERE inflow <> 0 OR gift_count <> 0`: daily,
	} {
		rows, err := e.db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			into[k] = v
		}
		rows.Close()
	}
	return fmt.Sprint("pools ", pools, " daily ", daily)
}

// inflowMarks returns draw id -> claimed_by / consumption status.
func inflowMarks(t *testing.T, e *env) map[string]string {
	t.Helper()
	rows, err := e.db.Query(`SELECT c.draw_id, c.claimed_by, COALESCE(GROUP_CONCAT(s.status ORDER BY s.status), '') FROM lucky_pool_inflow_claims c
	LEFT JOIN lucky_pool_inflow_consumption s ON s.app_code = c.app_code AND s.draw_id = c.draw_id GROUP BY c.draw_id, c.claimed_by`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, by, st string
		if err := rows.Scan(&id, &by, &st); err != nil {
			t.Fatal(err)
		}
		out[id] = by + "/" + st
	}
	return out
}

// startRejecting is start with the draw service owning the pools and the
// global switch off: every Execute is a recorded rejection.
func startRejecting(t *testing.T) *env {
	t.Helper()
	e := start(t, luckydraw.Config{DrawTimeout: 20 * time.Second}, 100_000)
	ctx := context.Background()
	if err := luckydraw.RecordOwnership(ctx, e.db, "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	off := false
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchGlobal, "", &off); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) mustReject(t *testing.T, cmd string) {
	t.Helper()
	resp, err := e.client.ExecuteLuckyGiftDraw(context.Background(), drawReq(cmd, 1))
	if err != nil || resp.RejectReason != luckydraw.RejectGlobalDisabled {
		t.Fatalf("Execute %s: %v, %v; want the rejection %s", cmd, resp, err, luckydraw.RejectGlobalDisabled)
	}
}

// The sink claims and adds the gift's inflow first, then its Execute is
// rejected: the rejection takes the inflow back, so the pools and the
// daily facts are what they were without the gift; claim and consumption
// row read 'reversed'. A retried Execute, a replay of the gift and a
// second gift event naming the draw change nothing.
func TestRejectionTakesBackStreamedInflow(t *testing.T) {
	e := startRejecting(t)
	sink := newInflowStream(t, e.db)
	before := poolState(t, e)

	in := giftInflow("late", 1)
	sink.apply(t, in)
	if poolState(t, e) == before {
		t.Fatal("the sink added nothing: the test needs the streamed inflow in the pools")
	}
	e.mustReject(t, "late")
	if got := poolState(t, e); got != before {
		t.Fatalf("after the rejection:\n got %s\nwant %s (the refunded gift's inflow taken back)", got, before)
	}
	want := map[string]string{in.DrawId: luckydraw.ClaimedByReversal + "/" + luckyinflow.StatusReversed}
	if got := inflowMarks(t, e); !maps.Equal(got, want) {
		t.Fatalf("claims/consumption %v, want %v", got, want)
	}

	e.mustReject(t, "late") // the stored rejection: nothing taken back twice
	sink.apply(t, in)       // a replay
	again := giftInflow("late", 2)
	sink.apply(t, again) // another gift event naming the draw
	if got := poolState(t, e); got != before {
		t.Fatalf("after a retry and replays:\n got %s\nwant %s", got, before)
	}
	// the second gift event: status rejected
	want[in.DrawId] = luckydraw.ClaimedByReversal + "/" + luckyinflow.StatusRejected + "," + luckyinflow.StatusReversed
	if got := inflowMarks(t, e); !maps.Equal(got, want) {
		t.Fatalf("claims/consumption %v, want %v", got, want)
	}
	e.checkInvariants(t)
}

// The rejection claims the inflow first, then the gift reaches the sink:
// the sink adds nothing, to the pools or to the daily facts.
func TestRejectionBeforeStreamAddsNothing(t *testing.T) {
	e := startRejecting(t)
	sink := newInflowStream(t, e.db)
	before := poolState(t, e)
	e.mustReject(t, "early")
	in := giftInflow("early", 1)
	sink.apply(t, in)
	if got := poolState(t, e); got != before {
		t.Fatalf("after the gift:\n got %s\nwant %s", got, before)
	}
	want := map[string]string{in.DrawId: luckydraw.ClaimedByRejection + "/" + luckyinflow.StatusRejected}
	if got := inflowMarks(t, e); !maps.Equal(got, want) {
		t.Fatalf("claims/consumption %v, want %v", got, want)
	}
	e.checkInvariants(t)
}

// Rejections racing the sink over the same gifts: each gift ends in one of
// the two consistent states (rejected first, or streamed and reversed),
// and the pools and daily facts hold none of the refunded inflow.
func TestRejectionRacingTheSink(t *testing.T) {
	e := startRejecting(t)
	sink := newInflowStream(t, e.db)
	before := poolState(t, e)
	const n = 40
	for i := range n {
		// Each gift's two sides start together; which one claims first
		// varies from gift to gift.
		cmd := fmt.Sprint("race-", i)
		var wg sync.WaitGroup
		wg.Go(func() { sink.apply(t, giftInflow(cmd, i)) })
		wg.Go(func() { e.mustReject(t, cmd) })
		wg.Wait()
	}
	if got := poolState(t, e); got != before {
		t.Fatalf("after the race:\n got %s\nwant %s", got, before)
	}
	ends := map[string]int{}
	for id, m := range inflowMarks(t, e) {
		switch m {
		case luckydraw.ClaimedByRejection + "/" + luckyinflow.StatusRejected, luckydraw.ClaimedByReversal + "/" + luckyinflow.StatusReversed:
			ends[m]++
		default:
			t.Errorf("draw %s ended %s", id, m)
		}
	}
	if ends[luckydraw.ClaimedByRejection+"/"+luckyinflow.StatusRejected]+ends[luckydraw.ClaimedByReversal+"/"+luckyinflow.StatusReversed] != n {
		t.Fatalf("ends %v, want %d gifts", ends, n)
	}
	t.Logf("ends: %v", ends)
	e.checkInvariants(t)
}
