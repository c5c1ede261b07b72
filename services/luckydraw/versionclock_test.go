package luckydraw_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/services/luckydraw"
)

// TestRuleVersionPickedAtTheBatchTime: a draw's rule version is the one
// effective at its batch's time, the created_at_ms it is recorded under.
// The version used to be picked at a later clock reading, so a version
// becoming effective between the two drew under a created_at_ms before
// its effective_at_ms.
func TestRuleVersionPickedAtTheBatchTime(t *testing.T) {
	base := time.Now().Add(time.Minute).Truncate(time.Second)
	var reads atomic.Int64
	clock := func() time.Time { return base.Add(time.Duration(reads.Add(1)-1) * time.Millisecond) } // 1ms on per reading
	e := start(t, luckydraw.Config{Now: clock}, 100_000)
	ctx := context.Background()
	if r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("warm", 1)); err != nil || r.RejectReason != "" {
		t.Fatalf("warm: %v %v", r, err)
	}
	// The next batch reads the clock at next (its start) and next+1 (after
	// the fence: its nowMs); v2 becomes effective a millisecond after that.
	next := reads.Load()
	v2 := rule("v2", 0)
	v2.EffectiveAtMs = base.Add(time.Duration(next+2) * time.Millisecond).UnixMilli()
	if _, err := testAdmin(t, e.db).PublishRule(ctx, v2); err != nil {
		t.Fatal(err)
	}
	r, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq("edge", 2))
	if err != nil || r.RejectReason != "" {
		t.Fatalf("edge: %v %v", r, err)
	}
	var created int64
	if err := e.db.QueryRow(`SELECT created_at_ms FROM lucky_draw_records WHERE command_id = 'edge'`).Scan(&created); err != nil {
		t.Fatal(err)
	}
	want := "v1"
	if created >= v2.EffectiveAtMs {
		want = "v2"
	}
	if r.RuleVersion != want {
		t.Fatalf("drawn under %s at created_at_ms %d, v2 effective at %d: want %s", r.RuleVersion, created, v2.EffectiveAtMs, want)
	}
}
