package simulate

import (
	"errors"
	"math"
	"testing"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// testRule pays 900,000 ppm analytically: 10% of draws win 9× the spend,
// 1% win a fixed 5,000 coins only while the pools hold 50,000.
func testRule() *lucky.Rule {
	return &lucky.Rule{GiftID: "rose", RuleVersion: "v1", GiftPrice: 100, PoolRatePPM: 900_000, TargetPayoutRatePPM: 900_000,
		PlatformWeightPPM: 200_000, RoomWeightPPM: 300_000, Status: "active", Tiers: []lucky.Tier{
			{TierID: "none", RewardType: "none", ProbabilityPPM: 900_000, Enabled: true},
			{TierID: "x9", RewardType: "multiplier", RewardValue: 9, ProbabilityPPM: 100_000, Enabled: true},
		}}
}

func testConfig() Config {
	return Config{Rules: []*lucky.Rule{testRule()}, Platform: Pool{Balance: 1e12}, Gift: Pool{Balance: 1e12}, Room: Pool{Balance: 1e12},
		LargeTierEnabled: true, Seed: 7, Traffic: Traffic{Rooms: 50, Users: 2000, RoomSkew: 1.1, UserSkew: 0.8,
			GiftMix: []GiftShare{{GiftID: "rose", GiftCount: 1, Weight: 3}, {GiftID: "rose", GiftCount: 10, Weight: 1}},
			Draws:   200_000, Hours: 48}}
}

// Without caps and with deep pools the simulated rate is the analytic one
// within its interval, nothing is removed and no pool reaches a floor.
func TestUncappedRateMatchesAnalytic(t *testing.T) {
	r, err := Run(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if r.Gifts[0].AnalyticPPM != 900_000 || r.CILowPPM > 900_000 || r.CIHighPPM < 900_000 || r.CIHighPPM-r.CILowPPM > 40_000 {
		t.Fatalf("analytic %v, simulated %v [%v, %v]", r.Gifts[0].AnalyticPPM, r.RatePPM, r.CILowPPM, r.CIHighPPM)
	}
	if hit := float64(r.Hits) / float64(r.Draws); math.Abs(hit-0.1) > 0.005 {
		t.Errorf("hit frequency %v, want about 0.1", hit)
	}
	if r.RemovedDraws != 0 || r.RoomsAtFloor != 0 || r.Pools[0].ReachedFloor {
		t.Errorf("removed %d, rooms at floor %d, platform %+v", r.RemovedDraws, r.RoomsAtFloor, r.Pools[0])
	}
	if r.UserDay.N == 0 || r.UserDay.P50 > r.UserDay.P99 || r.UserDay.P99 > r.UserDay.Max || r.RoomHour.N == 0 {
		t.Errorf("user-day %+v room-hour %+v", r.UserDay, r.RoomHour)
	}
	if len(r.RateSeries) != 1 || len(r.RateSeries[0].X) != 48 || len(r.BalanceSeries) != 3 {
		t.Errorf("series: %d rate, %d balance", len(r.RateSeries), len(r.BalanceSeries))
	}
	again, _ := Run(testConfig())
	if again.Payout != r.Payout || again.Hits != r.Hits {
		t.Error("one seed, two runs: they differ")
	}
}

// A user daily cap holds every user-day at or under it and shows as
// capped draws; shallow pools stop at their floor, reached in time, and
// pay less than the table.
func TestCapsAndFloorsBind(t *testing.T) {
	c := testConfig()
	rule := *testRule()
	rule.MaxUserDailyPayout = 5_000
	c.Rules = []*lucky.Rule{&rule}
	r, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if r.UserDay.Max > 5_000 || r.CapDraws == 0 || r.RatePPM >= 900_000 {
		t.Fatalf("capped: user-day max %d, capped draws %d, rate %v", r.UserDay.Max, r.CapDraws, r.RatePPM)
	}
	c = testConfig()
	c.Room, c.Gift = Pool{Balance: 2_000, ReserveFloor: 1_000}, Pool{Balance: 5_000, ReserveFloor: 500}
	if r, err = Run(c); err != nil {
		t.Fatal(err)
	}
	gift := r.Pools[1]
	if !gift.ReachedFloor || gift.Low < gift.ReserveFloor || r.FloorDraws == 0 || r.RoomsAtFloor == 0 || r.RatePPM >= 900_000 {
		t.Fatalf("floors: gift %+v, floor draws %d, rooms %d, rate %v", gift, r.FloorDraws, r.RoomsAtFloor, r.RatePPM)
	}
	if gift.Drawdown <= 0 || gift.FloorAtHours < 0 || gift.FloorAtHours > 48 {
		t.Fatalf("gift pool %+v", gift)
	}
}

// Each bad input is a FieldError naming its field.
func TestCheckNamesTheField(t *testing.T) {
	bad := *testRule()
	bad.Tiers = bad.Tiers[1:]
	for field, edit := range map[string]func(*Config){
		"rules":     func(c *Config) { c.Rules = []*lucky.Rule{&bad} },
		"rooms":     func(c *Config) { c.Traffic.Rooms = 0 },
		"users":     func(c *Config) { c.Traffic.Users = -1 },
		"room_skew": func(c *Config) { c.Traffic.RoomSkew = -1 },
		"hours":     func(c *Config) { c.Traffic.Hours = 0 },
		"draws":     func(c *Config) { c.Traffic.Rate = 5 },
		"rate":      func(c *Config) { c.Traffic.Draws, c.Traffic.Rate = 0, -3 },
		"gift_mix":  func(c *Config) { c.Traffic.GiftMix[1].GiftID = "tulip" },
	} {
		c := testConfig()
		edit(&c)
		var fe *FieldError
		if _, err := Run(c); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v", field, err)
		}
	}
	if _, err := ParseGiftMix("rose:0=1"); err == nil {
		t.Error("gift count 0 accepted")
	}
	if m, err := ParseGiftMix("rose, rose:10=2.5"); err != nil || len(m) != 2 || m[0] != (GiftShare{"rose", 1, 1}) || m[1] != (GiftShare{"rose", 10, 2.5}) {
		t.Errorf("gift mix %+v %v", m, err)
	}
}

// The Zipf picks follow their weights: rank 0 of 10 under s=1 takes
// 1/H(10) of the picks.
func TestAliasFollowsWeights(t *testing.T) {
	c := testConfig()
	e := newEngine(c)
	a := newAlias(zipfWeights(10, 1))
	n, hits := 200_000, 0
	for range n {
		if a.pick(e.traffic) == 0 {
			hits++
		}
	}
	want := 1 / 2.9289682539682538
	if got := float64(hits) / float64(n); math.Abs(got-want) > 0.005 {
		t.Errorf("rank 0: %v, want %v", got, want)
	}
}

// The cost of a simulated draw against the draw service's NewPlan + Draw
// alone, in one run (docs/simulator.md): both plan the same rule with the
// same caps.
func BenchmarkPlanDraw(b *testing.B) {
	rule := testRule()
	rule.MaxUserDailyPayout, rule.MaxRoomHourlyPayout = 1e9, 1e9
	in := luckydraw.DrawInput{Rule: rule, CoinSpent: 100, HeatValue: 100, ApplyInflow: true, LargeTierEnabled: true,
		Pools: [3]luckydraw.PoolState{{Balance: 1e9}, {Balance: 1e9}, {Balance: 1e9}},
		Risks: []luckydraw.RiskLimit{{Scope: "single", Window: "draw"}, {Scope: "user", Cap: 1e9}, {Scope: "room", Cap: 1e9}}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p, err := luckydraw.NewPlan(in)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Draw(rule, int64(i%lucky.PPM)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "draws/s")
}

func BenchmarkSimulatedDraw(b *testing.B) {
	c := testConfig()
	rule := testRule()
	rule.MaxUserDailyPayout, rule.MaxRoomHourlyPayout = 1e9, 1e9
	c.Rules = []*lucky.Rule{rule}
	c.Traffic.Draws = 1 << 40
	e := newEngine(c)
	b.ReportAllocs()
	for i := int64(0); b.Loop(); i++ {
		if err := e.step(i%(1<<20), i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "draws/s")
}
