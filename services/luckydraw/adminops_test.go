package luckydraw_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// TestFundAmountIsBounded: `pools fund` adds its amount into BIGINT
// columns every draw then adds to. An amount that brings the platform pool
// to BIGINT's top was taken, and from then on every draw batch failed
// (the pool's inflow no longer fits: MySQL refuses the update), so every
// debited gift got an error instead of a draw or a recorded rejection.
// An amount over envelope.MaxPoolFundCoins is refused, nothing written.
func TestFundAmountIsBounded(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	before := e.count(t, `SELECT balance FROM lucky_pools WHERE scope_type = 'platform'`)
	if _, err := testAdmin(t, e.db).FundPool(ctx, app, "platform", "global", math.MaxInt64-before, nil); err == nil {
		t.Errorf("funding the platform pool to %d coins was accepted", int64(math.MaxInt64))
	}
	if after := e.count(t, `SELECT balance FROM lucky_pools WHERE scope_type = 'platform'`); after != before {
		t.Errorf("platform balance %d, want %d (the refused fund writes nothing)", after, before)
	}
	if r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("after-fund", 1)); err != nil || r.RejectReason != "" {
		t.Fatalf("draw after the fund: %v %v", r, err)
	}
	e.checkInvariants(t)
}

// TestRoomSwitchesAreByteExact: room ids that differ only in letter case
// are two rooms to the draws (docs/design.md, byte-exact ids), so pausing
// R1 beside r1 pauses both, and taking R1's pause off leaves r1's. On the
// case-insensitive lucky_switches.scope_id the second pause overwrote the
// first room's row (R1 drew on) and `default --room R1` deleted r1's. A
// room id ending in a space is refused.
func TestRoomSwitchesAreByteExact(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	a := testAdmin(t, e.db)
	on := true
	for _, room := range []string{"r1", "R1"} {
		if c, err := a.SetSwitch(ctx, app, luckydraw.SwitchRoomScopePaused, room, &on); err != nil || c.Old != "default" || c.New != "on" {
			t.Errorf("pause %s: %+v %v", room, c, err)
		}
	}
	draw := func(cmd, room string) string {
		t.Helper()
		req := drawReq(cmd, 1)
		req.Meta.RoomId = room
		r, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.RejectReason
	}
	for _, room := range []string{"r1", "R1"} {
		if r := draw("paused-"+room, room); r != luckydraw.RejectRoomPaused {
			t.Errorf("draw in paused room %s: reject reason %q, want %s", room, r, luckydraw.RejectRoomPaused)
		}
	}
	if _, err := a.SetSwitch(ctx, app, luckydraw.SwitchRoomScopePaused, "R1", nil); err != nil {
		t.Fatal(err)
	}
	if r := draw("still-paused", "r1"); r != luckydraw.RejectRoomPaused {
		t.Errorf("r1 after R1's pause was taken off: reject reason %q, want %s", r, luckydraw.RejectRoomPaused)
	}
	if r := draw("resumed", "R1"); r != "" {
		t.Errorf("R1 after its pause was taken off: reject reason %q", r)
	}
	if _, err := a.SetSwitch(ctx, app, luckydraw.SwitchRoomScopePaused, "r1 ", &on); err == nil {
		t.Error("a room id ending in a space was accepted")
	}
}

// TestDraftingTheDecidingVersionDoesNotFallBack: a version that has
// decided cannot go back to draft. A draft is not a candidate, so `rules
// status rose v2 draft` (meant to stop v2) made the older v1, still active
// within its first hours, decide and draw again: the fallback pausing and
// retiring never make (docs/design.md, "Which version draws"). It is
// refused, nothing written; a scheduled version can still be drafted.
func TestDraftingTheDecidingVersionDoesNotFallBack(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	// As `roomflow lucky` runs it: v1 stays active through the grace after
	// v2's publish, and until a restart or the next publish retires it.
	a, err := luckydraw.NewAdmin(e.db, luckydraw.AdminConfig{Operator: "test", ReplacedVersionGrace: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	v2 := rule("v2", 0)
	v2.EffectiveAtMs = time.Now().UnixMilli()
	if _, err := a.PublishRule(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetRuleStatus(ctx, "rose", "v2", "draft"); err == nil {
		t.Error("the deciding version went back to draft")
	}
	r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("after-draft", 1))
	if err != nil {
		t.Fatal(err)
	}
	if r.RejectReason == "" && r.RuleVersion != "v2" {
		t.Errorf("after `rules status rose v2 draft` the gift drew under %s (draw %s)", r.RuleVersion, r.DrawId)
	}
	v3 := rule("v3", 0)
	v3.EffectiveAtMs = time.Now().Add(time.Hour).UnixMilli()
	if _, err := a.PublishRule(ctx, v3); err != nil {
		t.Fatal(err)
	}
	if c, err := a.SetRuleStatus(ctx, "rose", "v3", "draft"); err != nil || c.Old != "active" || c.New != "draft" {
		t.Errorf("drafting the scheduled v3: %+v %v", c, err)
	}
}

// TestFundLogsTheBalanceItChanged: `pools fund`'s old value is the
// balance its upsert added to, so new = old + amount in the admin trail
// even while draws move the pool. Before, the old value came from a
// snapshot read: a draw's inflow committed between it and the upsert
// showed in the new value only ("balance 500 -> balance 650" for 100).
func TestFundLogsTheBalanceItChanged(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	floor := int64(0)
	if _, err := testAdmin(t, m.DB).FundPool(ctx, app, "room", "r9", 500, &floor); err != nil {
		t.Fatal(err)
	}
	// A draw's inflow to the pool, committed right before the upsert if
	// nothing holds the row (else once the fund commits).
	inflow := func() error {
		_, err := m.DB.Exec(`UPDATE lucky_pools SET balance = balance + 50, total_in = total_in + 50 WHERE scope_id = 'r9'`)
		return err
	}
	hooked := testenv.OpenHooked(t, m.DSN, testenv.SQLHooks{Statement: func(_ context.Context, q string) error {
		if strings.HasPrefix(q, "INSERT INTO lucky_pools") {
			done := make(chan error, 1)
			go func() { done <- inflow() }()
			select {
			case err := <-done:
				return err
			case <-time.After(300 * time.Millisecond):
			}
		}
		return nil
	}})
	a, err := luckydraw.NewAdmin(hooked, luckydraw.AdminConfig{Operator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.FundPool(ctx, app, "room", "r9", 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	var oldBal, newBal int64
	if _, err := fmt.Sscanf(c.Old, "balance %d", &oldBal); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(c.New, "balance %d", &newBal); err != nil {
		t.Fatal(err)
	}
	if newBal-oldBal != 100 {
		t.Errorf("pools fund of 100 logged %q -> %q", c.Old, c.New)
	}
}
