package luckydraw_test

import (
	"context"
	"math"
	"testing"

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
