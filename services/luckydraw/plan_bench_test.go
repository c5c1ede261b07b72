package luckydraw_test

import (
	"testing"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// BenchmarkNewPlanDraw is the planning and selection of one draw, as the
// draw transaction runs them between its reads and writes: a three-tier
// rule under three caps, one of them removing the big tier.
func BenchmarkNewPlanDraw(b *testing.B) {
	r := rule("v1", 500)
	in := luckydraw.DrawInput{Rule: &r, CoinSpent: 100, HeatValue: 100, ApplyInflow: true, LargeTierEnabled: true,
		Pools: [3]luckydraw.PoolState{{Balance: 1e9}, {Balance: 1e9}, {Balance: 1e9}},
		Risks: []luckydraw.RiskLimit{{Scope: "single", Window: "draw"}, {Scope: "user", Window: "daily", Cap: 500}, {Scope: "room", Window: "hourly", Cap: 1e9}}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p, err := luckydraw.NewPlan(in)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Draw(&r, int64(i%lucky.PPM)); err != nil {
			b.Fatal(err)
		}
	}
}
