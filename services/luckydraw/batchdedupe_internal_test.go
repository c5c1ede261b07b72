package luckydraw

import (
	"context"
	"slices"
	"testing"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
)

// TestConflictingRequestInOneBatch: three requests of one command_id in
// one batch: the first draws, an exact repeat answers its draw, and one
// with another billing_receipt_id and amount (a second debit) is refused
// with the fields that differ, nothing drawn or recorded for it. It used
// to be answered with the first's draw.
func TestConflictingRequestInOneBatch(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	a, err := NewAdmin(m.DB, AdminConfig{Operator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishRule(ctx, lucky.Rule{GiftID: "rose", RuleVersion: "v1", GiftPrice: 100, PoolRatePPM: 500000,
		TargetPayoutRatePPM: 500000, PlatformWeightPPM: 200000, RoomWeightPPM: 300000, Status: "active", Tiers: []lucky.Tier{
			{TierID: "none", RewardType: "none", ProbabilityPPM: 500000, Enabled: true},
			{TierID: "x1", RewardType: "multiplier", RewardValue: 1, ProbabilityPPM: 500000, Enabled: true},
		}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{"platform", "global"}, {"room", "r1"}, {"gift", "rose"}} {
		if _, err := a.FundPool(ctx, "hy", p[0], p[1], 100_000, nil); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(Config{AppCode: "hy", AuditKey: "k"}, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	req := func(bill string, coins int64) *drawReq {
		r, err := s.validateDraw(&activityv1.ExecuteLuckyGiftDrawRequest{Meta: &activityv1.LuckyGiftMeta{CommandId: "cmd", RoomId: "r1",
			SenderUserId: 1}, GiftId: "rose", GiftCount: 1, CoinSpent: coins, HeatValue: coins, BillingReceiptId: bill})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	res, err := s.runBatch([]*drawReq{req("bill-1", 100), req("bill-2", 9000), req("bill-1", 100)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := res[0]; d.conflict != nil || d.duplicate || d.tierID == "" {
		t.Fatalf("first: %+v, want a new draw", d)
	}
	if c := res[1].conflict; c == nil || !slices.Equal(c.Fields, []string{"billing_receipt_id", "coin_spent", "heat_value"}) {
		t.Fatalf("second debit under the command: %+v, want refused for billing_receipt_id, coin_spent, heat_value", res[1])
	}
	if d := res[2]; d.conflict != nil || !d.duplicate || d.drawID != res[0].drawID || d.tierID != res[0].tierID {
		t.Fatalf("exact repeat: %+v, want the first's draw %+v", d, res[0])
	}
	var n, coins int64
	if err := m.DB.QueryRow(`SELECT COUNT(*), SUM(coin_spent) FROM lucky_draw_records`).Scan(&n, &coins); err != nil || n != 1 || coins != 100 {
		t.Fatalf("%d records of %d coins (%v), want the first's alone", n, coins, err)
	}
}
