package luckydraw

import (
	"errors"
	"math"
	"testing"

	"github.com/hyapp/roomflow/domain/lucky"
)

func testRule() *lucky.Rule {
	return &lucky.Rule{GiftID: "rose", RuleVersion: "v1", GiftPrice: 100, PoolRatePPM: 500000, TargetPayoutRatePPM: 900000,
		PlatformWeightPPM: 200000, RoomWeightPPM: 300000, MaxSinglePayout: 0, Status: "active",
		Tiers: []lucky.Tier{
			{TierID: "big", RewardType: "fixed", RewardValue: 1000, ProbabilityPPM: 100000, Enabled: true},
			{TierID: "none", RewardType: "none", ProbabilityPPM: 600000, Enabled: true},
			{TierID: "off", RewardType: "fixed", RewardValue: 1, ProbabilityPPM: 50000, Enabled: false},
			{TierID: "x2", RewardType: "multiplier", RewardValue: 2, ProbabilityPPM: 200000, Enabled: true},
			{TierID: "water", RewardType: "fixed", RewardValue: 5, ProbabilityPPM: 50000, MinPoolBalance: 1_000_000, Enabled: true},
		}}
}

func pools(b int64) [3]PoolState {
	return [3]PoolState{{"platform", "global", b, 0}, {"room", "r1", b, 0}, {"gift", "rose", b, 0}}
}

func TestNewPlanFiltersMoveProbabilityToNone(t *testing.T) {
	type want struct {
		disabled map[string]string
		nonePPM  int64
		avail    int64
		rejected []string
	}
	for _, tc := range []struct {
		name string
		in   DrawInput
		want want
	}{
		{"rich pools: only the switched-off and waterline tiers go",
			DrawInput{CoinSpent: 100, HeatValue: 100, Pools: pools(100_000), ApplyInflow: true, LargeTierEnabled: true},
			want{map[string]string{"off": DisabledTier, "water": DisabledWaterline}, 700000, 100_000 + 10, nil}},
		{"low water: big tier over the room layer's capacity",
			DrawInput{CoinSpent: 100, HeatValue: 100, Pools: [3]PoolState{{"platform", "global", 10_000, 0}, {"room", "r1", 900, 0}, {"gift", "rose", 10_000, 0}},
				ApplyInflow: true, LargeTierEnabled: true},
			want{map[string]string{"off": DisabledTier, "water": DisabledWaterline, "big": DisabledPool}, 800000, 915, nil}},
		{"reserve floor counts: capacity = balance + in - floor",
			DrawInput{CoinSpent: 100, HeatValue: 0, Pools: [3]PoolState{{"platform", "global", 10_000, 9_900}, {"room", "r1", 10_000, 0}, {"gift", "rose", 10_000, 0}},
				LargeTierEnabled: true},
			want{map[string]string{"off": DisabledTier, "water": DisabledWaterline, "big": DisabledPool, "x2": DisabledPool}, 1_000_000, 100, nil}},
		{"user daily cap removes the payable big tier",
			DrawInput{CoinSpent: 100, HeatValue: 100, Pools: pools(100_000), ApplyInflow: true, LargeTierEnabled: true,
				Risks: []RiskLimit{{Scope: "single", Window: "draw"}, {Scope: "user", ScopeID: "7", Window: "daily", Cap: 1500, Used: 700}}},
			want{map[string]string{"off": DisabledTier, "water": DisabledWaterline, "big": DisabledRisk}, 800000, 800, []string{"user"}}},
		{"large tier switched off",
			DrawInput{CoinSpent: 100, HeatValue: 100, Pools: pools(100_000), ApplyInflow: true, LargeTierMinReward: 500},
			want{map[string]string{"off": DisabledTier, "water": DisabledWaterline, "big": DisabledLarge}, 800000, 100_010, nil}},
		{"pool below its floor: every paying tier out",
			DrawInput{CoinSpent: 100, Pools: [3]PoolState{{"platform", "global", 5, 10}, {"room", "r1", 0, 0}, {"gift", "rose", 0, 0}}, LargeTierEnabled: true},
			want{map[string]string{"off": DisabledTier, "water": DisabledWaterline, "big": DisabledPool, "x2": DisabledPool}, 1_000_000, -5, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Rule = testRule()
			p, err := NewPlan(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for _, c := range p.Candidates {
				sum += c.ProbabilityPPM
				if c.Disabled != tc.want.disabled[c.TierID] {
					t.Errorf("tier %s disabled %q, want %q", c.TierID, c.Disabled, tc.want.disabled[c.TierID])
				}
				if c.Disabled != "" && c.ProbabilityPPM != 0 {
					t.Errorf("disabled tier %s keeps %d ppm", c.TierID, c.ProbabilityPPM)
				}
				if c.TierID == "none" && c.ProbabilityPPM != tc.want.nonePPM {
					t.Errorf("none has %d ppm, want %d", c.ProbabilityPPM, tc.want.nonePPM)
				}
			}
			if sum != lucky.PPM {
				t.Errorf("table sums to %d", sum)
			}
			if p.AvailablePayout != tc.want.avail {
				t.Errorf("available payout %d, want %d", p.AvailablePayout, tc.want.avail)
			}
			var rej []string
			for _, l := range p.RiskRejected {
				rej = append(rej, l.Scope)
			}
			if len(rej) != len(tc.want.rejected) || (len(rej) > 0 && rej[0] != tc.want.rejected[0]) {
				t.Errorf("risk rejected %v, want %v", rej, tc.want.rejected)
			}
			// Every random value selects a tier the pools and caps can pay.
			for r := int64(0); r < lucky.PPM; r += 997 {
				o, err := p.Draw(tc.in.Rule, r)
				if err != nil {
					t.Fatal(err)
				}
				if o.Tier.Disabled != "" || o.Tier.RewardCoins > max(p.AvailablePayout, 0) {
					t.Fatalf("random %d selected %+v (available %d)", r, o.Tier, p.AvailablePayout)
				}
				if o.LayerOut[0]+o.LayerOut[1]+o.LayerOut[2] != o.Tier.RewardCoins {
					t.Fatalf("split %v of %d", o.LayerOut, o.Tier.RewardCoins)
				}
				for i := range 3 {
					if o.LayerOut[i] > p.Capacity[i] && o.LayerOut[i] > 0 {
						t.Fatalf("layer %d pays %d over capacity %d", i, o.LayerOut[i], p.Capacity[i])
					}
				}
			}
		})
	}
}

func TestInflowLayersAndCurrentBalance(t *testing.T) {
	p, err := NewPlan(DrawInput{Rule: testRule(), CoinSpent: 100, HeatValue: 1000, Pools: [3]PoolState{{"platform", "global", 100, 0}, {"room", "r1", 50, 20}, {"gift", "rose", 70, 0}}, ApplyInflow: true})
	if err != nil {
		t.Fatal(err)
	}
	// pool_in 500: platform 100, room 150, gift 250.
	if p.Inflow != (lucky.Inflow{PoolIn: 500, PlatformIn: 100, RoomIn: 150, GiftIn: 250}) || p.LayerIn != [3]int64{100, 150, 250} {
		t.Fatalf("inflow %+v layers %v", p.Inflow, p.LayerIn)
	}
	if p.Capacity != [3]int64{200, 180, 320} || p.CurrentPoolBalance != 200 || p.AvailablePayout != 180 || p.RiskCapacity != math.MaxInt64 {
		t.Fatalf("capacity %v current %d available %d risk %d", p.Capacity, p.CurrentPoolBalance, p.AvailablePayout, p.RiskCapacity)
	}
	// Inflow claimed by the stream: computed, not added.
	p, _ = NewPlan(DrawInput{Rule: testRule(), HeatValue: 1000, Pools: pools(10)})
	if p.Inflow.PoolIn != 500 || p.LayerIn != [3]int64{} || p.Capacity != [3]int64{10, 10, 10} {
		t.Fatalf("stream-applied inflow: %+v %v %v", p.Inflow, p.LayerIn, p.Capacity)
	}
}

func TestRuleNeedsExactlyOneNoneTier(t *testing.T) {
	r := testRule()
	r.Tiers[1].RewardType = "fixed"
	if _, err := NewPlan(DrawInput{Rule: r}); !errors.Is(err, ErrRuleInvalid) {
		t.Fatalf("no none tier: %v", err)
	}
	r = testRule()
	r.Tiers[2].RewardType = "none"
	if err := CheckRule(r); !errors.Is(err, ErrRuleInvalid) {
		t.Fatalf("two none tiers: %v", err)
	}
	r = testRule()
	r.Tiers[0].ProbabilityPPM++
	if err := CheckRule(r); !errors.Is(err, ErrRuleInvalid) || !errors.Is(err, lucky.ErrInvalidRule) {
		t.Fatalf("probabilities summing to 1000001: %v", err)
	}
	if err := CheckRule(testRule()); err != nil {
		t.Fatal(err)
	}
}

func TestSelectCumulative(t *testing.T) {
	c := []Candidate{{TierID: "a", ProbabilityPPM: 100}, {TierID: "off", ProbabilityPPM: 0, Disabled: DisabledPool}, {TierID: "b", ProbabilityPPM: 999_900}}
	for _, tc := range []struct {
		r    int64
		want string
	}{{0, "a"}, {99, "a"}, {100, "b"}, {999_999, "b"}} {
		i, err := Select(c, tc.r)
		if err != nil || c[i].TierID != tc.want {
			t.Errorf("random %d: %d %v, want %s", tc.r, i, err, tc.want)
		}
	}
	for _, r := range []int64{-1, lucky.PPM} {
		if _, err := Select(c, r); !errors.Is(err, ErrBadTable) {
			t.Errorf("random %d: %v", r, err)
		}
	}
	c[2].ProbabilityPPM--
	if _, err := Select(c, 5); !errors.Is(err, ErrBadTable) {
		t.Errorf("short table: %v", err)
	}
}

func TestRewardCoinsAndSplit(t *testing.T) {
	for _, tc := range []struct {
		t     lucky.Tier
		spent int64
		want  int64
	}{
		{lucky.Tier{RewardType: "fixed", RewardValue: 77}, 1000, 77},
		{lucky.Tier{RewardType: "multiplier", RewardValue: 5}, 1000, 5000},
		{lucky.Tier{RewardType: "multiplier", RewardValue: math.MaxInt64 / 2}, 3, math.MaxInt64},
		{lucky.Tier{RewardType: "multiplier", RewardValue: 1 << 40}, 1 << 30, math.MaxInt64},
		{lucky.Tier{RewardType: "none", RewardValue: 9}, 1000, 0},
	} {
		if got := RewardCoins(tc.t, tc.spent); got != tc.want {
			t.Errorf("%+v x %d = %d, want %d", tc.t, tc.spent, got, tc.want)
		}
	}
	s, err := SplitPayout(1001, testRule())
	if err != nil || s != [3]int64{200, 300, 501} {
		t.Fatalf("split %v %v", s, err)
	}
}

func TestRiskRemaining(t *testing.T) {
	if (RiskLimit{}).Remaining() != math.MaxInt64 || (RiskLimit{Cap: 10, Used: 25}).Remaining() != 0 || (RiskLimit{Cap: 10, Used: 4}).Remaining() != 6 {
		t.Fatal("remaining")
	}
}

func TestDigestCanonical(t *testing.T) {
	in := DigestInput{DrawID: "LD-1", CommandID: "c", AppCode: "a", GiftID: "g", RuleVersion: "v",
		Candidates: []Candidate{{TierID: "none", RewardType: "none", BasePPM: lucky.PPM, ProbabilityPPM: lucky.PPM}}, RandomValue: 5}
	d := Digest([]byte("k"), in)
	if len(d) != 64 || Digest([]byte("k"), in) != d {
		t.Fatal("digest not stable")
	}
	for name, mut := range map[string]func(*DigestInput){
		"key order of fields": func(x *DigestInput) { x.CommandID, x.AppCode = x.AppCode, x.CommandID },
		"random":              func(x *DigestInput) { x.RandomValue++ },
		"boundary":            func(x *DigestInput) { x.DrawID, x.CommandID = "LD-1c", "" },
		"table": func(x *DigestInput) {
			x.Candidates = []Candidate{{TierID: "none", RewardType: "none", BasePPM: lucky.PPM, ProbabilityPPM: lucky.PPM, Disabled: "x"}}
		},
	} {
		x := in
		mut(&x)
		if Digest([]byte("k"), x) == d {
			t.Errorf("%s: same digest", name)
		}
	}
	if Digest([]byte("other"), in) == d {
		t.Error("key not used")
	}
}

func TestDrawIDDeterministic(t *testing.T) {
	a := DrawID("app", "cmd-1")
	if a != DrawID("app", "cmd-1") || a == DrawID("ap", "pcmd-1") || a == DrawID("app", "cmd-2") || len(a) != 35 {
		t.Fatalf("draw id %q", a)
	}
}
