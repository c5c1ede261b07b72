package luckyinflow_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
)

const app = "hyapp"

// inflowSink applies inflow records through a real Store (the engine's
// transaction, fence and offsets) on one partition of the topic "inflow".
type inflowSink struct {
	db   *sql.DB
	st   *mysqlsink.Store
	tp   mysqlsink.TP
	gen  map[mysqlsink.TP]int64
	next int64 // offset of the next record
}

func newInflowSink(t *testing.T, db *sql.DB) *inflowSink {
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
	return &inflowSink{db: db, st: st, tp: tp, gen: map[mysqlsink.TP]int64{tp: c[tp].Generation}}
}

// apply applies ins as the next records of the partition (a replay is the
// same inflows at new offsets, as a producer retry or upstream replay
// delivers them).
func (s *inflowSink) apply(ctx context.Context, ins ...*activityv1.LuckyPoolInflow) error {
	recs := make([]mysqlsink.Record, len(ins))
	for i, in := range ins {
		recs[i] = mysqlsink.Record{TP: s.tp, Offset: s.next + int64(i), Item: in}
	}
	if _, err := s.st.Apply(ctx, "o", s.gen, recs, 1000); err != nil {
		return err
	}
	s.next += int64(len(ins))
	return nil
}

func (s *inflowSink) mustApply(t *testing.T, ins ...*activityv1.LuckyPoolInflow) {
	t.Helper()
	if err := s.apply(context.Background(), ins...); err != nil {
		t.Fatal(err)
	}
}

// inflow is gift event n of room r with a draw id (or none), adding
// 1, 10 and 100 times n to the platform, room and gift layers.
func inflow(n int64, room, drawID string) *activityv1.LuckyPoolInflow {
	return &activityv1.LuckyPoolInflow{
		EventId: fmt.Sprintf("LuckyPoolInflow:e%d", n), AppCode: app, SourceEventId: fmt.Sprintf("e%d", n),
		RoomId: room, GiftId: "rose", RuleVersion: "v1", DrawId: drawID,
		PlatformIn: n, RoomIn: 10 * n, GiftIn: 100 * n, PoolIn: 111 * n,
		// Two UTC days: n odd on 2026-03-01, n even on 2026-03-02.
		OccurredAtMs: time.Date(2026, 3, 2-int(n%2), 23, 0, 0, 0, time.UTC).UnixMilli(),
	}
}

// pools returns balance/total_in per "scope/id".
func pools(t *testing.T, db *sql.DB) map[string][2]int64 {
	t.Helper()
	rows, err := db.Query("SELECT scope_type, scope_id, balance, total_in FROM lucky_pools WHERE app_code = ?", app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var st, id string
		var b, in int64
		if err := rows.Scan(&st, &id, &b, &in); err != nil {
			t.Fatal(err)
		}
		out[st+"/"+id] = [2]int64{b, in}
	}
	return out
}

// wantPools are the balances (= total_in) the inflows add.
func wantPools(t *testing.T, ins ...*activityv1.LuckyPoolInflow) map[string][2]int64 {
	t.Helper()
	rows, err := luckyinflow.BuildPools(ins)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int64{}
	for _, r := range rows {
		out[r.ScopeType+"/"+r.ScopeID] = [2]int64{r.In, r.In}
	}
	return out
}

func checkPools(t *testing.T, db *sql.DB, added ...*activityv1.LuckyPoolInflow) {
	t.Helper()
	got, want := pools(t, db), wantPools(t, added...)
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("lucky_pools %s = %v, want %v (all %v)", k, got[k], w, got)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && g != [2]int64{} {
			t.Fatalf("lucky_pools %s = %v, want nothing added", k, g)
		}
	}
}

// statuses returns the consumption status per event_id.
func statuses(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query("SELECT event_id, status, draw_id FROM lucky_pool_inflow_consumption")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, st, draw string
		if err := rows.Scan(&id, &st, &draw); err != nil {
			t.Fatal(err)
		}
		out[id] = st + "|" + draw
	}
	return out
}

func claims(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query("SELECT draw_id, claimed_by FROM lucky_pool_inflow_claims WHERE app_code = ?", app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, by string
		if err := rows.Scan(&id, &by); err != nil {
			t.Fatal(err)
		}
		out[id] = by
	}
	return out
}

// checkDaily asserts lucky_pool_inflow_daily holds exactly the layer sums
// and gift counts of all (every inflow applied, whoever added it to the
// pools), summed per scope and UTC date computed here.
func checkDaily(t *testing.T, db *sql.DB, all ...*activityv1.LuckyPoolInflow) {
	t.Helper()
	want := map[string][2]int64{}
	for _, in := range all {
		d := time.UnixMilli(in.OccurredAtMs).UTC().Format(time.DateOnly)
		for _, l := range []struct {
			k string
			v int64
		}{{"platform/global", in.PlatformIn}, {"room/" + in.RoomId, in.RoomIn}, {"gift/" + in.GiftId, in.GiftIn}} {
			w := want[d+" "+l.k]
			want[d+" "+l.k] = [2]int64{w[0] + l.v, w[1] + 1}
		}
	}
	rows, err := db.Query("SELECT DATE_FORMAT(stat_date, '%Y-%m-%d'), scope_type, scope_id, inflow, gift_count FROM lucky_pool_inflow_daily WHERE app_code = ?", app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string][2]int64{}
	for rows.Next() {
		var d, st, id string
		var in, n int64
		if err := rows.Scan(&d, &st, &id, &in, &n); err != nil {
			t.Fatal(err)
		}
		got[d+" "+st+"/"+id] = [2]int64{in, n}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lucky_pool_inflow_daily:\n got %v\nwant %v", got, want)
	}
}

func own(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.Exec("INSERT INTO lucky_pool_owner (id, owner, instance_id, owned_at_ms) VALUES (1, 'lucky', 'test', 1)"); err != nil {
		t.Fatal(err)
	}
}

// drawClaims is what the draw transaction does: INSERT IGNORE of its
// claim; it adds the inflow only when it inserted the row.
func drawClaims(t *testing.T, db *sql.DB, drawID string) bool {
	t.Helper()
	res, err := db.Exec("INSERT IGNORE INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by, created_at_ms) VALUES (?, ?, 'draw', 1)", app, drawID)
	if err != nil {
		t.Fatal(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestNotOwnedAddsAllAndClaims: with no draw service (no owner row), every
// inflow is added as before; those with a draw id claim it for the stream.
func TestNotOwnedAddsAllAndClaims(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newInflowSink(t, m.DB)
	ins := []*activityv1.LuckyPoolInflow{inflow(1, "r1", "d1"), inflow(2, "r1", ""), inflow(3, "r2", "d3"), inflow(4, "r2", "d4")}
	s.mustApply(t, ins...)
	checkPools(t, m.DB, ins...)
	checkDaily(t, m.DB, ins...)
	if got, want := claims(t, m.DB), map[string]string{"d1": "stream", "d3": "stream", "d4": "stream"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claims %v, want %v", got, want)
	}
	for id, st := range statuses(t, m.DB) {
		if !strings.HasPrefix(st, "consumed|") {
			t.Fatalf("%s status %s, want consumed", id, st)
		}
	}
	if got := statuses(t, m.DB)["LuckyPoolInflow:e3"]; got != "consumed|d3" {
		t.Fatalf("e3 consumption %q: the row records the draw id", got)
	}
}

// TestOwnedDrawClaimedFirst: the draw service owns the pools and the draw
// committed its claim before the gift event arrived: nothing is added to
// the pools, not for the drawn gift and not for a gift without a draw id,
// and the daily facts still count both.
func TestOwnedDrawClaimedFirst(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newInflowSink(t, m.DB)
	own(t, m.DB)
	if !drawClaims(t, m.DB, "d1") {
		t.Fatal("draw claim: want a new row")
	}
	ins := []*activityv1.LuckyPoolInflow{inflow(1, "r1", "d1"), inflow(2, "r1", "")}
	s.mustApply(t, ins...)
	checkPools(t, m.DB)
	checkDaily(t, m.DB, ins...)
	want := map[string]string{"LuckyPoolInflow:e1": "drawn|d1", "LuckyPoolInflow:e2": "no_draw|"}
	if got := statuses(t, m.DB); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	if got := claims(t, m.DB); got["d1"] != "draw" || len(got) != 1 {
		t.Fatalf("claims %v: the draw's claim stays the only one", got)
	}
}

// TestRejectedGiftAddsNothing: the draw service rejected the gift's
// Execute after the debit and claimed its inflow 'rejected': the refunded
// gift adds nothing to the pools nor to the daily facts, and a replay
// changes nothing; the other gift of the batch counts as before.
func TestRejectedGiftAddsNothing(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newInflowSink(t, m.DB)
	own(t, m.DB)
	if _, err := m.DB.Exec("INSERT INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by, created_at_ms) VALUES (?, 'd7', 'rejected', 1)", app); err != nil {
		t.Fatal(err)
	}
	rejected, drawn := inflow(7, "r1", "d7"), inflow(8, "r1", "d8")
	s.mustApply(t, rejected, drawn)
	s.mustApply(t, rejected, drawn)
	checkPools(t, m.DB, drawn)
	checkDaily(t, m.DB, drawn)
	want := map[string]string{"LuckyPoolInflow:e7": "rejected|d7", "LuckyPoolInflow:e8": "consumed|d8"}
	if got := statuses(t, m.DB); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
}

// TestGiftBeforeDraw: the gift event lands before its draw commits (a draw
// timing out after the debit, LUCKY-10): the sink claims and adds it, and
// the draw that commits later inserts no claim, so it adds nothing: the
// inflow is in the pools once.
func TestGiftBeforeDraw(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newInflowSink(t, m.DB)
	own(t, m.DB)
	in := inflow(5, "r1", "d5")
	s.mustApply(t, in)
	if drawClaims(t, m.DB, "d5") {
		t.Fatal("the draw inserted a claim the sink already holds: it would add the inflow twice")
	}
	checkPools(t, m.DB, in)
	if got := claims(t, m.DB)["d5"]; got != "stream" {
		t.Fatalf("claim of d5 by %q, want stream", got)
	}
	// The replay changes nothing either.
	s.mustApply(t, in)
	checkPools(t, m.DB, in)
	checkDaily(t, m.DB, in)
}

// TestDrawClaimInFlight: the draw's claim is inserted but not committed
// when the sink's batch reaches the same draw: the sink's locking read of
// the claims waits for the draw's commit and then sees its claim, so the
// sink adds nothing. (Had the sink's read come before the draw's insert,
// the sink's claim INSERT would wait instead and fail with a retryable
// duplicate key: the whole batch is retried and takes this path.)
func TestDrawClaimInFlight(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newInflowSink(t, m.DB)
	ctx := context.Background()
	draw, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer draw.Rollback()
	if _, err := draw.Exec("INSERT IGNORE INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by) VALUES (?, 'd7', 'draw')", app); err != nil {
		t.Fatal(err)
	}
	in := inflow(7, "r1", "d7")
	done := make(chan error, 1)
	go func() { done <- s.apply(ctx, in) }()
	select {
	case err := <-done:
		t.Fatalf("the sink's batch finished (%v) while the draw's claim was uncommitted", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := draw.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkPools(t, m.DB)
	checkDaily(t, m.DB, in)
	if got := statuses(t, m.DB)["LuckyPoolInflow:e7"]; got != "drawn|d7" {
		t.Fatalf("status %q, want drawn", got)
	}
}

// TestOwnershipChangeInFlight: gifts without a draw id applied before the
// draw service took ownership were added; those after are not; replays of
// both, after the change, change nothing (each gift's inflow is in the
// pools at most once, the ones before exactly once).
func TestOwnershipChangeInFlight(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newInflowSink(t, m.DB)
	before := []*activityv1.LuckyPoolInflow{inflow(1, "r1", ""), inflow(2, "r2", ""), inflow(3, "r1", "d3")}
	s.mustApply(t, before...)
	own(t, m.DB)
	// d4's draw commits its claim; d6's gift lands before its draw.
	if !drawClaims(t, m.DB, "d4") {
		t.Fatal("draw claim d4")
	}
	after := []*activityv1.LuckyPoolInflow{inflow(4, "r1", "d4"), inflow(5, "r2", ""), inflow(6, "r2", "d6")}
	s.mustApply(t, slices.Concat(before, after)...) // in flight: old ones redelivered with the new
	if drawClaims(t, m.DB, "d6") || drawClaims(t, m.DB, "d3") {
		t.Fatal("a draw claimed a gift the stream already added")
	}
	added := append(slices.Clone(before), inflow(6, "r2", "d6"))
	checkPools(t, m.DB, added...)
	s.mustApply(t, slices.Concat(after, before)...)
	checkPools(t, m.DB, added...)
	checkDaily(t, m.DB, slices.Concat(before, after)...)
	want := map[string]string{
		"LuckyPoolInflow:e1": "consumed|", "LuckyPoolInflow:e2": "consumed|", "LuckyPoolInflow:e3": "consumed|d3",
		"LuckyPoolInflow:e4": "drawn|d4", "LuckyPoolInflow:e5": "no_draw|", "LuckyPoolInflow:e6": "consumed|d6",
	}
	if got := statuses(t, m.DB); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses\n got %v\nwant %v", got, want)
	}
}

// TestReplayChangesNothing: a second delivery of a whole mixed history
// (owned, drawn, duplicates of a draw id in one batch) leaves every table
// as it was, and the daily rows sum to the inflow of the distinct gifts.
func TestReplayChangesNothing(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newInflowSink(t, m.DB)
	var ins []*activityv1.LuckyPoolInflow
	for n := range int64(40) {
		draw := ""
		if n%4 != 0 {
			draw = fmt.Sprintf("d%d", n)
		}
		ins = append(ins, inflow(n+1, fmt.Sprintf("r%d", n%3), draw))
	}
	dup := inflow(99, "r0", "d1") // another gift event naming d1's draw
	s.mustApply(t, ins[:20]...)
	own(t, m.DB)
	drawClaims(t, m.DB, "d25")
	s.mustApply(t, append(slices.Clone(ins[20:]), dup)...)
	snapshot := func() string {
		return fmt.Sprint(pools(t, m.DB), statuses(t, m.DB), claims(t, m.DB))
	}
	first := snapshot()
	checkDaily(t, m.DB, append(slices.Clone(ins), dup)...)
	if got := statuses(t, m.DB)["LuckyPoolInflow:e99"]; got != "duplicate_draw|d1" {
		t.Fatalf("second gift of draw d1: %q", got)
	}
	s.mustApply(t, ins...)
	s.mustApply(t, dup)
	if got := snapshot(); got != first {
		t.Fatalf("replay changed the tables:\n%s\n%s", first, got)
	}
	checkDaily(t, m.DB, append(slices.Clone(ins), dup)...)
	// The pools hold the gifts added: all before ownership, and after it
	// those with a draw id the draw did not claim.
	var added []*activityv1.LuckyPoolInflow
	for i, in := range ins {
		if i < 20 || (in.DrawId != "" && in.DrawId != "d25") {
			added = append(added, in)
		}
	}
	checkPools(t, m.DB, added...)
}

func TestDecide(t *testing.T) {
	in := func(id, draw string) *activityv1.LuckyPoolInflow {
		return &activityv1.LuckyPoolInflow{EventId: id, AppCode: app, DrawId: draw}
	}
	for _, tc := range []struct {
		name   string
		owned  bool
		claims map[luckyinflow.DrawKey]string
		fresh  []*activityv1.LuckyPoolInflow
		want   []string
	}{
		{"not owned", false, nil, []*activityv1.LuckyPoolInflow{in("a", ""), in("b", "d")}, []string{"consumed", "consumed"}},
		{"owned", true, nil, []*activityv1.LuckyPoolInflow{in("a", ""), in("b", "d")}, []string{"no_draw", "consumed"}},
		{"drawn", true, map[luckyinflow.DrawKey]string{{app, "d"}: "draw"}, []*activityv1.LuckyPoolInflow{in("b", "d")}, []string{"drawn"}},
		{"drawn, not owned", false, map[luckyinflow.DrawKey]string{{app, "d"}: "draw"}, []*activityv1.LuckyPoolInflow{in("b", "d")}, []string{"drawn"}},
		{"claimed by another gift", false, map[luckyinflow.DrawKey]string{{app, "d"}: "stream"}, []*activityv1.LuckyPoolInflow{in("b", "d")}, []string{"duplicate_draw"}},
		{"two gifts of one draw in a batch", false, nil, []*activityv1.LuckyPoolInflow{in("b", "d"), in("c", "d")}, []string{"consumed", "duplicate_draw"}},
		{"rejected", true, map[luckyinflow.DrawKey]string{{app, "d"}: "rejected"}, []*activityv1.LuckyPoolInflow{in("b", "d")}, []string{"rejected"}},
		{"reversed by its rejection", true, map[luckyinflow.DrawKey]string{{app, "d"}: "reversed"}, []*activityv1.LuckyPoolInflow{in("b", "d")}, []string{"rejected"}},
		{"other app's claim", true, map[luckyinflow.DrawKey]string{{"other", "d"}: "draw"}, []*activityv1.LuckyPoolInflow{in("b", "d")}, []string{"consumed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := luckyinflow.Decide(tc.fresh, tc.owned, tc.claims); !slices.Equal(got, tc.want) {
				t.Fatalf("Decide = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecodeOccurredAt(t *testing.T) {
	for _, ms := range []int64{-1 << 62, 1 << 62} {
		in := inflow(1, "r", "")
		in.OccurredAtMs = ms
		b, _ := proto.Marshal(in)
		_, err := luckyinflow.Decode(b, app)
		var ie *mysqlsink.InvalidRecordError
		if !errors.As(err, &ie) || ie.Reason != "bad_occurred_at" {
			t.Fatalf("occurred_at_ms %d: %v, want bad_occurred_at", ms, err)
		}
	}
}
