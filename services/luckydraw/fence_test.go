package luckydraw_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// heldCommit is a SQLHooks.Commit that holds the draw transactions'
// commits while hold is set: it signals at, then waits for release.
type heldCommit struct {
	hold    atomic.Bool
	at      chan struct{}
	release chan struct{}
	once    sync.Once
	// committing is the UnixNano at which the held COMMIT was sent: the
	// server releases the batch's locks when it commits, which can be
	// before this client hears the answer, so that is what a change
	// waiting on the fence can be compared with.
	committing atomic.Int64
}

// newHeldCommit returns a heldCommit released at the latest when t ends
// (a failed test must not hang on the held batch).
func newHeldCommit(t *testing.T) *heldCommit {
	h := &heldCommit{at: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(h.free)
	return h
}

// reached waits for a draw transaction to reach its held commit.
func (h *heldCommit) reached(t *testing.T) {
	t.Helper()
	select {
	case <-h.at:
	case <-time.After(10 * time.Second):
		t.Fatal("no draw transaction reached its commit")
	}
}

// free lets the held commit go on.
func (h *heldCommit) free() { h.once.Do(func() { close(h.release) }) }

// draw sends req to e with its commit held and returns once it waits
// there; the channel gets the call's error after free.
func (h *heldCommit) draw(t *testing.T, e *env, req *activityv1.ExecuteLuckyGiftDrawRequest) <-chan error {
	t.Helper()
	h.hold.Store(true)
	done := make(chan error, 1)
	go func() { _, err := e.client.ExecuteLuckyGiftDraw(context.Background(), req); done <- err }()
	h.reached(t)
	return done
}

func (h *heldCommit) hooks() testenv.SQLHooks {
	return testenv.SQLHooks{Commit: func(stmts []string, commit func() error) error {
		if !slices.ContainsFunc(stmts, func(q string) bool { return strings.Contains(q, "INSERT INTO lucky_draw_records") }) ||
			!h.hold.CompareAndSwap(true, false) {
			return commit()
		}
		h.at <- struct{}{}
		<-h.release
		h.committing.Store(time.Now().UnixNano())
		return commit()
	}}
}

// waitingFor waits until a statement starting with prefix runs (the
// statements it is used for wait for the fence).
func waitingFor(t *testing.T, e *env, prefix string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, prefix+" waiting", func() bool {
		return e.count(t, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE ?`, prefix+"%") > 0
	})
}

// TestSwitchWaitsForTheBatchThatSawTheOldState: a draw batch held before
// its COMMIT holds the fence; `switch global_lucky_gift_enabled off`
// returns only after that batch commits, and a draw queued meanwhile
// answers global_disabled.
func TestSwitchWaitsForTheBatchThatSawTheOldState(t *testing.T) {
	h := newHeldCommit(t)
	e := startHooked(t, luckydraw.Config{DrawTimeout: 20 * time.Second}, 100_000, h.hooks())
	ctx := context.Background()
	h.hold.Store(true)
	first := make(chan error, 1)
	go func() {
		r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("held", 1))
		if err == nil && (r.RejectReason != "" || r.RuleVersion != "v1") {
			err = fmt.Errorf("the held draw answered %v", r)
		}
		first <- err
	}()
	h.reached(t)
	off := false
	var switched atomic.Int64
	switchErr := make(chan error, 1)
	go func() {
		_, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchGlobal, "", &off)
		switched.Store(time.Now().UnixNano())
		switchErr <- err
	}()
	select {
	case err := <-switchErr:
		t.Fatalf("the switch returned while a batch that read the old state was uncommitted: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	waitingFor(t, e, "UPDATE lucky_fence")
	queued := make(chan string, 1)
	go func() {
		r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("queued", 2))
		if err != nil {
			queued <- err.Error()
			return
		}
		queued <- r.RejectReason
	}()
	waitingFor(t, e, "(SELECT 'fence'")
	select {
	case err := <-switchErr:
		t.Fatalf("the switch returned while a batch that read the old state was uncommitted: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	h.free()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-switchErr; err != nil {
		t.Fatal(err)
	}
	if switched.Load() < h.committing.Load() {
		t.Fatal("the switch returned before the held batch committed")
	}
	if r := <-queued; r != luckydraw.RejectGlobalDisabled {
		t.Fatalf("the draw queued behind the switch answered %q, want global_disabled", r)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE command_id = 'held' AND reward_status <> 'rejected'`); n != 1 {
		t.Fatalf("%d draws of the held command", n)
	}
	e.checkInvariants(t)
}

// TestOperatorWaitIsBounded: a batch held longer than the operator's
// --wait makes the change give up after it, naming the connection of the
// held batch, with nothing changed.
func TestOperatorWaitIsBounded(t *testing.T) {
	h := newHeldCommit(t)
	e := startHooked(t, luckydraw.Config{DrawTimeout: 20 * time.Second}, 100_000, h.hooks())
	ctx := context.Background()
	first := h.draw(t, e, drawReq("held", 1))
	held := e.count(t, `SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX t
JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id WHERE p.DB = DATABASE()`)
	fence := e.count(t, `SELECT version FROM lucky_fence`)
	a, err := luckydraw.NewAdmin(e.db, luckydraw.AdminConfig{Operator: "test", Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	off := false
	t0 := time.Now()
	_, err = a.SetSwitch(ctx, app, luckydraw.SwitchGlobal, "", &off)
	if took := time.Since(t0); took < time.Second || took > 3*time.Second {
		t.Errorf("gave up after %s, want about --wait 1s", took)
	}
	if !errors.Is(err, luckydraw.ErrFenceWait) || !strings.Contains(err.Error(), fmt.Sprintf("connection %d ", held)) {
		t.Fatalf("want ErrFenceWait naming connection %d: %v", held, err)
	}
	h.free()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_switches`); n != 0 {
		t.Fatalf("a change that gave up wrote %d switch rows", n)
	}
	if n := e.count(t, `SELECT version FROM lucky_fence`); n != fence {
		t.Fatalf("fence version %d after a change that gave up, was %d", n, fence)
	}
}

// TestFirstOverrideUnderContinuousDraws: while draws run back to back
// (new rooms among them: new pool rows), a switch override that inserts
// its row returns in under a second: draws read plainly after the fence,
// so no gap lock makes an insert wait.
func TestFirstOverrideUnderContinuousDraws(t *testing.T) {
	e := start(t, luckydraw.Config{DrawTimeout: 2 * time.Second}, 1_000_000)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var drawn atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				req := drawReq(fmt.Sprintf("w%d-%d", w, i), int64(w+1))
				req.Meta.RoomId = fmt.Sprintf("room-%d-%d", w, i%20)
				if _, err := e.client.ExecuteLuckyGiftDraw(ctx, req); err == nil {
					drawn.Add(1)
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	testenv.Eventually(t, 10*time.Second, "draws running", func() bool { return drawn.Load() > 20 })
	off, on := false, true
	a := testAdmin(t, e.db)
	for _, c := range []struct {
		name, room string
		v          *bool
	}{
		{luckydraw.SwitchLargeTier, "", &off},
		{luckydraw.SwitchRoomScopePaused, "room-never-seen", &on},
		{luckydraw.SwitchRoomScopePaused, "room-1-3", &on},
	} {
		before := drawn.Load()
		t0 := time.Now()
		if _, err := a.SetSwitch(context.Background(), app, c.name, c.room, c.v); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took >= time.Second {
			t.Errorf("first override of %s %s took %s under continuous draws", c.name, c.room, took)
		}
		testenv.Eventually(t, 10*time.Second, "draws going on", func() bool { return drawn.Load() > before+10 })
	}
}

// TestOneOutcomePerCommandAcrossReplicas: the same command on two
// replicas (two Services on one database) with a switch flip between the
// calls ends with one outcome, which both calls answer: a draw stays a
// draw after the switch goes off, a rejection stays a rejection after it
// comes back on.
func TestOneOutcomePerCommandAcrossReplicas(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	other, err := luckydraw.New(luckydraw.Config{AppCode: app, AuditKey: "test-key", SwitchCacheTTL: time.Nanosecond}, e.db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := testAdmin(t, e.db)
	off := false
	flip := func(v *bool) {
		t.Helper()
		if _, err := a.SetSwitch(ctx, app, luckydraw.SwitchGlobal, "", v); err != nil {
			t.Fatal(err)
		}
	}
	outcome := func(cmd string) string {
		t.Helper()
		var status, reason string
		var n int64
		if err := e.db.QueryRow(`SELECT MIN(reward_status), MIN(reject_reason), COUNT(*) FROM lucky_draw_records WHERE command_id = ?`, cmd).Scan(&status, &reason, &n); err != nil || n != 1 {
			t.Fatalf("%s: %d outcomes stored (%v)", cmd, n, err)
		}
		return status + reason
	}

	drawn, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("twice-1", 1))
	if err != nil || drawn.RejectReason != "" {
		t.Fatalf("first call: %v %v", drawn, err)
	}
	flip(&off)
	again, err := other.ExecuteLuckyGiftDraw(ctx, drawReq("twice-1", 1))
	if err != nil || again.RejectReason != "" || again.DrawId != drawn.DrawId || again.Tier.GetTierId() != drawn.Tier.GetTierId() {
		t.Fatalf("the other replica after the switch went off answered %v (%v), want the stored draw %v", again, err, drawn)
	}
	if o := outcome("twice-1"); strings.HasPrefix(o, "rejected") {
		t.Fatalf("stored outcome %s", o)
	}

	first, err := other.ExecuteLuckyGiftDraw(ctx, drawReq("twice-2", 1))
	if err != nil || first.RejectReason != luckydraw.RejectGlobalDisabled {
		t.Fatalf("first call with the switch off: %v %v", first, err)
	}
	flip(nil)
	second, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("twice-2", 1))
	if err != nil || second.RejectReason != luckydraw.RejectGlobalDisabled || second.DrawId != first.DrawId {
		t.Fatalf("the other replica after the switch came back answered %v (%v), want the stored rejection", second, err)
	}
	if o := outcome("twice-2"); o != "rejectedglobal_disabled" {
		t.Fatalf("stored outcome %s", o)
	}
	// Both replicas at once, the switch flipping meanwhile: one outcome.
	var wg sync.WaitGroup
	answers := make([]string, 2)
	for i, call := range []func(context.Context, *activityv1.ExecuteLuckyGiftDrawRequest) (*activityv1.ExecuteLuckyGiftDrawResponse, error){
		func(ctx context.Context, r *activityv1.ExecuteLuckyGiftDrawRequest) (*activityv1.ExecuteLuckyGiftDrawResponse, error) {
			return e.client.ExecuteLuckyGiftDraw(ctx, r)
		},
		other.ExecuteLuckyGiftDraw,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := call(ctx, drawReq("twice-3", 1))
			if err != nil {
				answers[i] = err.Error()
				return
			}
			answers[i] = r.RejectReason + "/" + r.Tier.GetTierId()
		}()
	}
	flip(&off)
	wg.Wait()
	if answers[0] != answers[1] {
		t.Fatalf("two answers for one command: %q and %q", answers[0], answers[1])
	}
	outcome("twice-3")
	e.checkInvariants(t)
}

// TestFundingDoesNotTakeTheFence: funding a pool (and re-driving failed
// rewards) changes rows a draw batch locks itself or never reads, so it
// neither waits for a held batch nor stalls the draws behind it; it is
// still in the admin trail.
func TestFundingDoesNotTakeTheFence(t *testing.T) {
	h := newHeldCommit(t)
	e := startHooked(t, luckydraw.Config{DrawTimeout: 20 * time.Second}, 100_000, h.hooks())
	ctx := context.Background()
	first := h.draw(t, e, drawReq("held", 1))
	fence := e.count(t, `SELECT version FROM lucky_fence`)
	a, err := luckydraw.NewAdmin(e.db, luckydraw.AdminConfig{Operator: "test", Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	floor := int64(0)
	if _, err := a.FundPool(ctx, app, "room", "r-not-drawing", 500, &floor); err != nil {
		t.Fatalf("funding a pool the held batch does not lock: %v", err)
	}
	if _, err := a.RetryFailedRewards(ctx, app); err != nil {
		t.Fatalf("rewards retry: %v", err)
	}
	if n := e.count(t, `SELECT version FROM lucky_fence`); n != fence {
		t.Fatalf("fence version %d after funding, was %d", n, fence)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_admin_log WHERE target IN ('room/r-not-drawing', 'failed rewards')`); n != 2 {
		t.Fatalf("%d admin log rows for the fund and the retry, want 2", n)
	}
	h.free()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
