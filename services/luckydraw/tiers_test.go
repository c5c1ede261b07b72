package luckydraw_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// tierState is how the draw of command cmd recorded tier in its
// candidate_tiers_json: "" (enabled) or its Disabled reason.
func (e *env) tierState(t *testing.T, cmd, tier string) string {
	t.Helper()
	var raw []byte
	if err := e.db.QueryRow(`SELECT candidate_tiers_json FROM lucky_draw_records WHERE command_id = ? AND reward_status <> 'rejected'`,
		cmd).Scan(&raw); err != nil {
		t.Fatalf("draw %s: %v", cmd, err)
	}
	var cs []luckydraw.Candidate
	if err := json.Unmarshal(raw, &cs); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.TierID == tier {
			return c.Disabled
		}
	}
	t.Fatalf("draw %s has no candidate %s", cmd, tier)
	return ""
}

// TestTierDisableWaitsForTheBatchThatSawIt: a draw batch held before its
// COMMIT read tier x10 enabled; `tier disable rose v1 x10` returns only
// after that batch commits, a draw queued behind it and every later draw
// record x10 disabled (none selects it), and lucky audit replays them
// all. Enabling it again acts the same way.
func TestTierDisableWaitsForTheBatchThatSawIt(t *testing.T) {
	h := newHeldCommit(t)
	e := startHooked(t, luckydraw.Config{DrawTimeout: 20 * time.Second}, 100_000, h.hooks())
	ctx := context.Background()
	a := testAdmin(t, e.db)
	first := h.draw(t, e, drawReq("held", 1))
	var returned atomic.Int64
	disabled := make(chan error, 1)
	go func() {
		c, err := a.SetTierEnabled(ctx, "rose", "v1", "x10", false)
		returned.Store(time.Now().UnixNano())
		if err == nil && (c.Old != "on" || c.New != "off" || c.Target != "rose/v1/x10") {
			err = fmt.Errorf("change %+v", c)
		}
		disabled <- err
	}()
	waitingFor(t, e, "UPDATE lucky_fence")
	queued := make(chan error, 1)
	go func() { _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("queued", 2)); queued <- err }()
	waitingFor(t, e, "(SELECT 'fence'")
	select {
	case err := <-disabled:
		t.Fatalf("the tier switch returned while a batch that read the tier enabled was uncommitted: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	h.free()
	for _, ch := range []<-chan error{first, disabled, queued} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if returned.Load() < h.committing.Load() {
		t.Fatal("the tier switch returned before the held batch committed")
	}
	if s := e.tierState(t, "held", "x10"); s != "" {
		t.Fatalf("the held draw recorded x10 %q, want enabled", s)
	}
	if s := e.tierState(t, "queued", "x10"); s != luckydraw.DisabledTier {
		t.Fatalf("the draw queued behind the switch recorded x10 %q", s)
	}
	for i := range 30 {
		cmd := fmt.Sprintf("after-%d", i)
		r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq(cmd, 3))
		if err != nil || r.Tier.GetTierId() == "x10" {
			t.Fatalf("%s after the disable: %v %v", cmd, r, err)
		}
		if s := e.tierState(t, cmd, "x10"); s != luckydraw.DisabledTier {
			t.Fatalf("%s recorded x10 %q", cmd, s)
		}
	}
	if _, err := a.SetTierEnabled(ctx, "rose", "v1", "x10", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("re-enabled", 4)); err != nil {
		t.Fatal(err)
	}
	if s := e.tierState(t, "re-enabled", "x10"); s != "" {
		t.Fatalf("after the enable x10 recorded %q", s)
	}
	res, err := luckydraw.Audit(ctx, e.db, "test-key", luckydraw.AuditQuery{SinceMs: 1})
	if err != nil || len(res) != 33 {
		t.Fatalf("audit: %d draws, %v", len(res), err)
	}
	for _, r := range res {
		if !r.OK {
			t.Fatalf("audit %s: %v", r.DrawID, r.Mismatches)
		}
	}
	e.checkInvariants(t)
}

// Tier switches that cannot act are refused with nothing written: the
// none tier off, a tier of a draft or retired version, unknown names.
func TestTierSwitchRefusals(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	a := testAdmin(t, e.db)
	draft := rule("v0", 0)
	draft.Status = "draft"
	if _, err := a.PublishRule(ctx, draft); err != nil {
		t.Fatal(err)
	}
	logged := e.count(t, `SELECT COUNT(*) FROM lucky_admin_log`)
	for _, tc := range []struct {
		version, tier string
		want          error
	}{
		{"v1", "none", luckydraw.ErrTierRefused},
		{"v0", "x1", luckydraw.ErrTierRefused},
		{"v9", "x1", lucky.ErrUnknownRule},
		{"v1", "x99", luckydraw.ErrUnknownTier},
	} {
		if _, err := a.SetTierEnabled(ctx, "rose", tc.version, tc.tier, false); !errors.Is(err, tc.want) {
			t.Errorf("disable %s/%s: %v, want %v", tc.version, tc.tier, err, tc.want)
		}
	}
	if _, err := a.SetRuleStatus(ctx, "rose", "v1", "retired"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetTierEnabled(ctx, "rose", "v1", "x1", false); !errors.Is(err, luckydraw.ErrTierRefused) {
		t.Errorf("disable a tier of a retired version: %v", err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_reward_tiers WHERE enabled = FALSE`); n != 0 {
		t.Fatalf("refused switches disabled %d tiers", n)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_admin_log`); n != logged+1 {
		t.Fatalf("refused switches wrote %d admin log rows", n-logged-1)
	}
}
