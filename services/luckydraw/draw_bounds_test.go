package luckydraw

import (
	"errors"
	"testing"
)

// Boundary tests found by mutation testing (issue 21, docs/reliability.md
// "Mutation testing"): each fails when the boundary it pins moves by one.

// TestNewPlanAtExactlyEachLimit: a tier whose reward equals a pool
// layer's capacity, the risk capacity or the large-tier minimum is at the
// limit, not over it: payable in the first two cases, large in the third;
// only caps that leave less than the reward are reported as rejecting it.
// The "big" tier of testRule pays 1000.
func TestNewPlanAtExactlyEachLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       DrawInput
		big      string // the big tier's Disabled
		rejected []string
	}{
		{"capacity exactly the reward", DrawInput{CoinSpent: 100, Pools: pools(1000), LargeTierEnabled: true}, "", nil},
		{"capacity 1 below the reward", DrawInput{CoinSpent: 100, Pools: pools(999), LargeTierEnabled: true}, DisabledPool, nil},
		{"a cap leaving exactly the reward", DrawInput{CoinSpent: 100, Pools: pools(10_000), LargeTierEnabled: true,
			Risks: []RiskLimit{{Scope: "user", Cap: 1700, Used: 700}}}, "", nil},
		{"only the cap leaving less rejects", DrawInput{CoinSpent: 100, Pools: pools(10_000), LargeTierEnabled: true,
			Risks: []RiskLimit{{Scope: "user", Cap: 1700, Used: 700}, {Scope: "room", Cap: 1000, Used: 1}}}, DisabledRisk, []string{"room"}},
		{"reward exactly the large-tier minimum", DrawInput{CoinSpent: 100, Pools: pools(10_000), LargeTierMinReward: 1000}, DisabledLarge, nil},
		{"reward 1 below the large-tier minimum", DrawInput{CoinSpent: 100, Pools: pools(10_000), LargeTierMinReward: 1001}, "", nil},
		{"no large-tier minimum: no tier is large", DrawInput{CoinSpent: 100, Pools: pools(10_000)}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Rule = testRule()
			p, err := NewPlan(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range p.Candidates {
				want := map[string]string{"off": DisabledTier, "water": DisabledWaterline, "big": tc.big}[c.TierID]
				if c.Disabled != want {
					t.Errorf("tier %s disabled %q, want %q", c.TierID, c.Disabled, want)
				}
			}
			var rej []string
			for _, l := range p.RiskRejected {
				rej = append(rej, l.Scope)
			}
			if len(rej) != len(tc.rejected) || len(rej) > 0 && rej[0] != tc.rejected[0] {
				t.Errorf("risk rejected %v, want %v", rej, tc.rejected)
			}
		})
	}
}

// TestNoneTierFirst: the none tier may be the rule's first tier; a second
// none tier after it is still refused.
func TestNoneTierFirst(t *testing.T) {
	r := testRule()
	r.Tiers[0], r.Tiers[1] = r.Tiers[1], r.Tiers[0]
	if err := CheckRule(r); err != nil {
		t.Fatalf("none tier first: %v", err)
	}
	p, err := NewPlan(DrawInput{Rule: r, CoinSpent: 100, Pools: pools(10_000), LargeTierEnabled: true})
	if err != nil || p.Candidates[0].ProbabilityPPM != 700_000 {
		t.Fatalf("none tier first: %v, candidates %+v", err, p.Candidates)
	}
	r.Tiers[2].RewardType = "none"
	if err := CheckRule(r); !errors.Is(err, ErrRuleInvalid) {
		t.Fatalf("none tiers at 0 and 2: %v", err)
	}
}

// TestOutcomeHit: a tier paying nothing is no hit, one coin is.
func TestOutcomeHit(t *testing.T) {
	if (Outcome{}).Hit() || !(Outcome{Tier: Candidate{RewardCoins: 1}}).Hit() {
		t.Fatal("Hit is not reward_coins > 0")
	}
}

// TestPlanDraw: Draw takes the tier Select picks for the random value and
// splits a paying tier's reward over the layers as SplitPayout does; a
// random value outside [0, 1,000,000) is an error.
func TestPlanDraw(t *testing.T) {
	r := testRule()
	p, err := NewPlan(DrawInput{Rule: r, CoinSpent: 100, Pools: pools(10_000), LargeTierEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	hits := 0
	for random := int64(0); random < 1_000_000; random += 12_345 {
		i, err := Select(p.Candidates, random)
		if err != nil {
			t.Fatal(err)
		}
		o, err := p.Draw(r, random)
		if err != nil {
			t.Fatalf("Draw(%d): %v", random, err)
		}
		if o.Tier != p.Candidates[i] {
			t.Fatalf("Draw(%d) tier %+v, want candidate %d %+v", random, o.Tier, i, p.Candidates[i])
		}
		var want [3]int64
		if o.Tier.RewardCoins > 0 {
			hits++
			if want, err = SplitPayout(o.Tier.RewardCoins, r); err != nil {
				t.Fatal(err)
			}
		}
		if o.LayerOut != want || o.LayerOut[0]+o.LayerOut[1]+o.LayerOut[2] != o.Tier.RewardCoins {
			t.Fatalf("Draw(%d) layers %v for %d coins, want %v", random, o.LayerOut, o.Tier.RewardCoins, want)
		}
	}
	if hits == 0 {
		t.Fatal("no paying tier drawn: the test checked no split")
	}
	if _, err := p.Draw(r, 1_000_000); !errors.Is(err, ErrBadTable) {
		t.Fatalf("Draw(1000000) = %v, want ErrBadTable", err)
	}
}
