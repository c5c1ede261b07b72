package luckydraw_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// TestDrawCreatesMissingPools: a draw in a room without a lucky_pools row
// (the platform and gift rows exist) creates the room's row in its own
// transaction and adds the room's share of the inflow to it.
func TestDrawCreatesMissingPools(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	req := drawReq("new-room", 1)
	req.Meta.RoomId = "r-new"
	if _, err := e.client.ExecuteLuckyGiftDraw(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	roomIn := e.count(t, `SELECT room_in FROM lucky_draw_records WHERE command_id = 'new-room'`)
	var balance, in, out, version int64
	if err := e.db.QueryRow(`SELECT balance, total_in, total_out, version FROM lucky_pools WHERE scope_type = 'room' AND scope_id = 'r-new'`).
		Scan(&balance, &in, &out, &version); err != nil {
		t.Fatalf("room pool of r-new: %v", err)
	}
	if roomIn == 0 || balance != roomIn || in != roomIn || out != 0 || version != 1 {
		t.Fatalf("new room pool: balance %d, total_in %d, total_out %d, version %d; want the room inflow %d, 0 out, version 1",
			balance, in, out, version, roomIn)
	}
	e.checkInvariants(t)
}

// TestPoolChangedCarriesTheBalanceAfterTheDraw: a draw's three
// LuckyPoolChanged events carry each layer's inflow, outflow and balance
// after the draw, the lucky_pools row's balance once it committed. Draws
// in turn until one hits, which has both inflow and outflow on every layer.
func TestPoolChangedCarriesTheBalanceAfterTheDraw(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	layers := []struct{ scope, id, in, out string }{
		{"platform", "global", "platform_in", "platform_out"},
		{"room", "r1", "room_in", "room_out"},
		{"gift", "rose", "gift_in", "gift_out"},
	}
	for i := 0; ; i++ {
		resp, err := e.client.ExecuteLuckyGiftDraw(context.Background(), drawReq(fmt.Sprint("p", i), 1))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			var payload []byte
			if err := e.db.QueryRow(`SELECT payload FROM lucky_outbox WHERE event_id = ?`,
				"LuckyPoolChanged:"+resp.DrawId+":"+l.scope).Scan(&payload); err != nil {
				t.Fatalf("%s event of draw %d: %v", l.scope, i, err)
			}
			var ev activityv1.LuckyPoolChanged
			if err := proto.Unmarshal(payload, &ev); err != nil {
				t.Fatal(err)
			}
			in := e.count(t, `SELECT `+l.in+` FROM lucky_draw_records WHERE draw_id = ?`, resp.DrawId)
			out := e.count(t, `SELECT `+l.out+` FROM lucky_draw_records WHERE draw_id = ?`, resp.DrawId)
			balance := e.count(t, `SELECT balance FROM lucky_pools WHERE scope_type = ? AND scope_id = ?`, l.scope, l.id)
			if ev.DeltaIn != in || ev.DeltaOut != out || ev.Balance != balance || ev.ScopeId != l.id {
				t.Fatalf("draw %d (hit %v), %s event: in %d, out %d, balance %d, scope %s; want %d, %d, %d (the pool row), %s",
					i, resp.Hit, l.scope, ev.DeltaIn, ev.DeltaOut, ev.Balance, ev.ScopeId, in, out, balance, l.id)
			}
			if resp.Hit && (in == 0 || out == 0) {
				t.Fatalf("hit %d on %s: in %d, out %d; the test needs both", i, l.scope, in, out)
			}
		}
		if resp.Hit {
			return
		}
		if i == 50 {
			t.Fatal("no hit in 50 draws at 60%")
		}
	}
}

// TestRiskSnapshotCapacity: risk_snapshot_json's risk_capacity is what the
// caps still allowed before the draw, and -1 when no cap applies (rule v1
// caps nothing).
func TestRiskSnapshotCapacity(t *testing.T) {
	// v1, replaced by "capped", draws by name within the grace.
	grace := luckydraw.MaxReplacedVersionGrace
	e := start(t, luckydraw.Config{ReplacedVersionGrace: grace}, 100_000)
	ctx := context.Background()
	admin, err := luckydraw.NewAdmin(e.db, luckydraw.AdminConfig{Operator: "test", ReplacedVersionGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	capped := rule("capped", 1500)
	capped.EffectiveAtMs = time.Now().UnixMilli() // replaces v1 now: its grace starts
	if _, err := admin.PublishRule(ctx, capped); err != nil {
		t.Fatal(err)
	}
	capacity := func(cmd string) int64 {
		t.Helper()
		var raw []byte
		if err := e.db.QueryRow(`SELECT risk_snapshot_json FROM lucky_draw_records WHERE command_id = ?`, cmd).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var rs luckydraw.RiskSnapshot
		if err := json.Unmarshal(raw, &rs); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		return rs.RiskCapacity
	}
	uncapped := drawReq("uncapped", 7)
	uncapped.RuleVersion = "v1"
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, uncapped); err != nil {
		t.Fatal(err)
	}
	if c := capacity("uncapped"); c != -1 {
		t.Fatalf("uncapped draw: risk_capacity %d, want -1", c)
	}
	var paid int64
	for i := range 3 {
		cmd := fmt.Sprint("capped", i)
		req := drawReq(cmd, 8)
		req.RuleVersion = "capped"
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if c := capacity(cmd); c != 1500-paid {
			t.Fatalf("capped draw %d: risk_capacity %d, want the user cap 1500 less %d paid", i, c, paid)
		}
		paid += resp.Tier.RewardCoins
	}
}

// TestDrawErrorsAreTimeoutsOnlyAfterTheDeadline: an error the draw
// transaction cannot retry fails the draw at once (Internal, nothing
// written), unless draw_timeout has passed by then: whatever its
// statement's error, such a draw timed out (ErrDrawTimeout: Unavailable,
// retry with the same command_id).
func TestDrawErrorsAreTimeoutsOnlyAfterTheDeadline(t *testing.T) {
	const (
		noFault = iota
		failNow
		failAfterDeadline
	)
	var mode atomic.Int32
	e := startHooked(t, luckydraw.Config{DrawTimeout: 200 * time.Millisecond}, 100_000, testenv.SQLHooks{
		Statement: func(ctx context.Context, q string) error {
			if !strings.Contains(q, "INSERT INTO lucky_draw_records") {
				return nil
			}
			switch mode.Load() {
			case failNow:
				return errors.New("injected: record insert refused")
			case failAfterDeadline:
				<-ctx.Done()
				return errors.New("injected: record insert refused after the deadline")
			}
			return nil
		}})
	ctx := context.Background()
	mode.Store(failNow)
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("e1", 1)); status.Code(err) != codes.Internal {
		t.Fatalf("a non-retryable error before the deadline: %v, want Internal", err)
	}
	mode.Store(failAfterDeadline)
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("e1", 1)); status.Code(err) != codes.Unavailable {
		t.Fatalf("an error after the deadline: %v, want Unavailable (a draw timeout)", err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records`); n != 0 {
		t.Fatalf("failed draws wrote %d records", n)
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_draw_retries_total"); v != 0 {
		t.Fatalf("%v retries of errors that are not transient", v)
	}
	mode.Store(noFault)
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("e1", 1)); err != nil {
		t.Fatal(err)
	}
	e.checkInvariants(t)
}

// TestDeadlockReadingNewCountersIsRetried: a deadlock on the locking read
// of the risk counter rows the draw has just inserted rolls the draw back
// and retries it, which then draws once.
func TestDeadlockReadingNewCountersIsRetried(t *testing.T) {
	var inserted, injected atomic.Bool
	e := startHooked(t, luckydraw.Config{}, 100_000, testenv.SQLHooks{
		Statement: func(_ context.Context, q string) error {
			switch {
			case strings.HasPrefix(q, "INSERT IGNORE INTO lucky_risk_counters"):
				inserted.Store(true)
			case strings.HasPrefix(q, "SELECT counter_key") && inserted.Load() && injected.CompareAndSwap(false, true):
				return &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction (injected)"}
			}
			return nil
		}})
	ctx := context.Background()
	if _, err := testAdmin(t, e.db).PublishRule(ctx, rule("capped", 1500)); err != nil {
		t.Fatal(err)
	}
	req := drawReq("d1", 1)
	req.RuleVersion = "capped" // a capped user window: its counter row is created and read in the draw
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, req); err != nil {
		t.Fatal(err)
	}
	if !injected.Load() {
		t.Fatal("no read of new counters to fail")
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_draw_retries_total", "reason", "deadlock"); v != 1 {
		t.Fatalf("%v deadlock retries, want 1", v)
	}
	if n := e.count(t, `SELECT draw_count FROM lucky_risk_counters WHERE scope_type = 'user' AND scope_id = '1'`); n != 1 {
		t.Fatalf("user counter counts %d draws", n)
	}
	e.checkInvariants(t)
}

// TestNextBatchStartsWhileOneCommits: the next batch of an app_code
// begins while the one before it is committing (PipelineDepth 2), not
// after: a batch held in its COMMIT until another transaction begins
// must not wait.
func TestNextBatchStartsWhileOneCommits(t *testing.T) {
	atCommit, begun := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	var beginOnce sync.Once
	e := startHooked(t, luckydraw.Config{DrawTimeout: 10 * time.Second}, 100_000, testenv.SQLHooks{
		Statement: func(_ context.Context, q string) error {
			if q == "BEGIN" && held.Load() {
				beginOnce.Do(func() { close(begun) })
			}
			return nil
		},
		Commit: func(_ []string, commit func() error) error {
			if held.CompareAndSwap(false, true) {
				close(atCommit)
				select {
				case <-begun:
				case <-time.After(5 * time.Second):
					t.Error("the next batch did not begin while the first one was committing")
				}
			}
			return commit()
		}})
	twoDrawsOverlap(t, e, atCommit, "its commit")
}

// twoDrawsOverlap draws once, and again once the first draw's batch
// reached the hooked point (at, named where); both must land.
func twoDrawsOverlap(t *testing.T, e *env, at <-chan struct{}, where string) {
	t.Helper()
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("b1", 1))
		first <- err
	}()
	select {
	case <-at:
	case <-time.After(10 * time.Second):
		t.Fatalf("the first draw did not reach %s", where)
	}
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("b2", 2)); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records`); n != 2 {
		t.Fatalf("%d records of 2 draws", n)
	}
	e.checkInvariants(t)
}

// TestNextBatchStartsWhileOneWrites: the next batch of an app_code begins
// (BEGIN, its reads) as soon as the one before it holds its pool locks, not
// only at its COMMIT: a batch held in its writes until another transaction
// begins must not wait, and both draws land.
func TestNextBatchStartsWhileOneWrites(t *testing.T) {
	atWrites, begun := make(chan struct{}), make(chan struct{})
	var held, holding atomic.Bool
	var beginOnce sync.Once
	e := startHooked(t, luckydraw.Config{DrawTimeout: 10 * time.Second}, 100_000, testenv.SQLHooks{
		Statement: func(_ context.Context, q string) error {
			switch {
			case q == "BEGIN" && holding.Load():
				beginOnce.Do(func() { close(begun) })
			case strings.Contains(q, "INSERT INTO lucky_draw_records") && held.CompareAndSwap(false, true):
				holding.Store(true)
				close(atWrites)
				select {
				case <-begun:
				case <-time.After(5 * time.Second):
					t.Error("the next batch did not begin while the first one wrote")
				}
			}
			return nil
		}})
	twoDrawsOverlap(t, e, atWrites, "its writes")
}

// TestPoolUpdateAtomicOnLateFailure (LUCKY-7, LUCKY-16's atomic pool
// update): a failure inside MySQL after the pool rows were updated (a
// trigger refusing the draw record, the batch's last write) rolls the
// three pools back with everything else: no balance, total or version
// moves, no record, event, counter or claim is left, and the retry draws
// against the pools as they were.
func TestPoolUpdateAtomicOnLateFailure(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("warm", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(`CREATE TRIGGER fail_late BEFORE INSERT ON lucky_draw_records FOR EACH ROW
		BEGIN IF NEW.command_id = 'late' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected late failure'; END IF; END`); err != nil {
		t.Fatal(err)
	}
	pools := func() string {
		var s string
		if err := e.db.QueryRow(`SELECT GROUP_CONCAT(CONCAT_WS(' ', scope_type, scope_id, balance, total_in, total_out, version)
			ORDER BY scope_type, scope_id SEPARATOR '; ') FROM lucky_pools`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	tables := `SELECT (SELECT COUNT(*) FROM lucky_draw_records) + (SELECT COUNT(*) FROM lucky_outbox) +
		(SELECT COUNT(*) FROM lucky_pool_inflow_claims) + (SELECT COALESCE(SUM(draw_count), 0) FROM lucky_risk_counters)`
	before, rows := pools(), e.count(t, tables)
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("late", 2)); status.Code(err) != codes.Internal {
		t.Fatalf("draw refused by the trigger answered %v, want Internal", err)
	}
	if after := pools(); after != before {
		t.Fatalf("pools moved by a rolled back draw:\n before %s\n after  %s", before, after)
	}
	if n := e.count(t, tables); n != rows {
		t.Fatalf("the rolled back draw left rows: %d, want %d", n, rows)
	}
	if _, err := e.db.Exec(`DROP TRIGGER fail_late`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("late", 2)); err != nil {
		t.Fatalf("retry: %v", err)
	}
	e.checkInvariants(t)
}
