package luckydraw_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// Which tiers large_tier_enabled off disables: a rule that marks tiers
// large by its marks alone (lucky.large_tier_min_reward ignored), a rule
// that marks none by the minimum (0: none).
func TestLargeTiersByTheRule(t *testing.T) {
	pools := [3]luckydraw.PoolState{{Balance: 1 << 40}, {Balance: 1 << 40}, {Balance: 1 << 40}}
	marked := rule("v1", 0)
	marked.Tiers[1].Large = true // x1 pays 100, x10 pays 1000
	for _, tc := range []struct {
		name     string
		r        lucky.Rule
		min      int64
		enabled  bool
		disabled []string // x1's and x10's Disabled
	}{
		{"unmarked, no minimum", rule("v1", 0), 0, false, []string{"", ""}},
		{"unmarked, minimum 1000", rule("v1", 0), 1000, false, []string{"", luckydraw.DisabledLarge}},
		{"unmarked, minimum 100", rule("v1", 0), 100, false, []string{luckydraw.DisabledLarge, luckydraw.DisabledLarge}},
		{"marked x1, no minimum", marked, 0, false, []string{luckydraw.DisabledLarge, ""}},
		{"marked x1, the minimum ignored", marked, 1000, false, []string{luckydraw.DisabledLarge, ""}},
		{"marked x1, switch on", marked, 100, true, []string{"", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := luckydraw.NewPlan(luckydraw.DrawInput{Rule: &tc.r, CoinSpent: 100, Pools: pools,
				LargeTierMinReward: tc.min, LargeTierEnabled: tc.enabled})
			if err != nil {
				t.Fatal(err)
			}
			if got := []string{p.Candidates[1].Disabled, p.Candidates[2].Disabled}; got[0] != tc.disabled[0] || got[1] != tc.disabled[1] {
				t.Fatalf("x1, x10 disabled %q, want %q", got, tc.disabled)
			}
		})
	}
}

// The operator side of large tiers: rules publish warns on an active
// version that marks none, large is immutable content, `switch
// large_tier_enabled off` counts the marked tiers it disables (and warns
// on none), draws honour the marks, and roomflow_lucky_large_tiers counts
// them per gift.
func TestLargeTierOperations(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	a := testAdmin(t, e.db)
	off := false
	c, err := a.SetSwitch(ctx, app, luckydraw.SwitchLargeTier, "", &off)
	if err != nil || !strings.Contains(c.Note, "disables 0 enabled tiers") || c.Warning == "" {
		t.Fatalf("large off with no marked tier: %+v %v", c, err)
	}
	if g := e.gauges(t, "roomflow_lucky_large_tiers", "gift_id"); len(g) != 1 || g["rose"] != 0 {
		t.Fatalf("roomflow_lucky_large_tiers %v, want rose 0", g)
	}
	v2 := rule("v2", 0)
	v2.EffectiveAtMs = 1 // after v1's 0: v2 decides, v1 is retired
	v2.Tiers[2].Large = true
	cs, err := a.PublishRule(ctx, v2)
	if err != nil || cs[0].Warning != "" {
		t.Fatalf("publish a marking version: %+v %v", cs, err)
	}
	unmarked := rule("v3", 0)
	unmarked.GiftID = "tulip"
	if cs, err := a.PublishRule(ctx, unmarked); err != nil || !strings.Contains(cs[0].Warning, "marks no tier large") {
		t.Fatalf("publish an active version that marks none: %+v %v", cs, err)
	}
	v2.Tiers[2].Large = false
	if _, err := a.PublishRule(ctx, v2); !errors.Is(err, luckydraw.ErrRuleImmutable) {
		t.Fatalf("republishing v2 without its large mark: %v", err)
	}
	c, err = a.SetSwitch(ctx, app, luckydraw.SwitchLargeTier, "", &off)
	if err != nil || !strings.Contains(c.Note, "disables 1 enabled tiers") || c.Warning != "" {
		t.Fatalf("large off with x10 marked: %+v %v", c, err)
	}
	if g := e.gauges(t, "roomflow_lucky_large_tiers", "gift_id"); len(g) != 2 || g["rose"] != 1 || g["tulip"] != 0 {
		t.Fatalf("roomflow_lucky_large_tiers %v, want rose 1, tulip 0", g)
	}
	for _, cmd := range []string{"l1", "l2", "l3"} {
		if _, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq(cmd, 1)); err != nil {
			t.Fatal(err)
		}
		if s := e.tierState(t, cmd, "x10"); s != luckydraw.DisabledLarge {
			t.Fatalf("%s: x10 %q with large_tier_enabled off", cmd, s)
		}
		if s := e.tierState(t, cmd, "x1"); s != "" {
			t.Fatalf("%s: unmarked x1 %q", cmd, s)
		}
	}
}

// gauges reads the service's series of metric name (gauges and
// counters) by the value of label.
func (e *env) gauges(t *testing.T, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
