package lucky

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func rule(pool, platform, room int64) *Rule {
	return &Rule{GiftID: "g1", RuleVersion: "v1", PoolRatePPM: pool, PlatformWeightPPM: platform, RoomWeightPPM: room,
		Status: "active", Tiers: []Tier{{TierID: "none", RewardType: "none", ProbabilityPPM: PPM, Enabled: true}}}
}

func TestComputeInflowTable(t *testing.T) {
	const max = math.MaxInt64
	for _, tc := range []struct {
		name                 string
		heat                 int64
		pool, platform, room int64
		want                 Inflow
		err                  error
	}{
		{"LUCKY-4 worked example: 5% pool, 20/30 split", 10000, 50000, 200000, 300000, Inflow{500, 100, 150, 250}, nil},
		{"floors pool_in", 999, 10000, 0, 0, Inflow{9, 0, 0, 9}, nil}, // 9.99 -> 9
		{"floors each layer, gift takes remainder", 7, PPM, 333333, 333333, Inflow{7, 2, 2, 3}, nil},
		{"rounding never gives a negative gift layer", 1, PPM, 500000, 500000, Inflow{1, 0, 0, 1}, nil},
		{"exact halves", 2, PPM, 500000, 500000, Inflow{2, 1, 1, 0}, nil},
		{"zero heat", 0, 50000, 200000, 300000, Inflow{}, nil},
		{"zero pool rate", 123456, 0, 200000, 300000, Inflow{}, nil},
		{"zero weights: all to gift", 1000, 100000, 0, 0, Inflow{100, 0, 0, 100}, nil},
		{"all to platform", 1000, 100000, PPM, 0, Inflow{100, 100, 0, 0}, nil},
		{"below one coin", 19, 50000, 0, 0, Inflow{0, 0, 0, 0}, nil}, // 0.95
		{"max int64 heat, full rate", max, PPM, 0, 0, Inflow{max, 0, 0, max}, nil},
		{"max int64 heat, 1 ppm", max, 1, 0, 0, Inflow{max / PPM, 0, 0, max / PPM}, nil},
		{"max int64 heat, split", max, 999999, 500000, 499999, Inflow{9223362813482738952, 4611681406741369476, 4611672183378555993, 9223362813483}, nil}, // checked with Python big ints,
		{"negative heat", -1, 50000, 0, 0, Inflow{}, ErrNegativeHeat},
		{"pool rate above 1e6 overflows at max heat", max, 2 * PPM, 0, 0, Inflow{}, ErrOverflow},
		{"weights above 1e6 overflow the pool", 1000, PPM, 600000, 600000, Inflow{}, ErrOverflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ComputeInflow(tc.heat, rule(tc.pool, tc.platform, tc.room))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

// floorPPM is the oracle: floor(x * ppm / 1e6) in arbitrary precision.
func floorPPM(x, ppm int64) *big.Int {
	p := new(big.Int).Mul(big.NewInt(x), big.NewInt(ppm))
	return p.Quo(p, big.NewInt(PPM)) // non-negative: Quo == floor
}

// TestComputeInflowProperty: for random heats (up to MaxInt64) and valid
// rules, the layers sum to pool_in, none is negative, and every term
// equals the arbitrary-precision formula.
func TestComputeInflowProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 2026))
	for i := range 200000 {
		var heat int64
		switch i % 4 {
		case 0:
			heat = rng.Int64N(1_000_000)
		case 1:
			heat = rng.Int64()
		case 2:
			heat = math.MaxInt64 - rng.Int64N(1000)
		default:
			heat = rng.Int64N(1 << 40)
		}
		platform := rng.Int64N(PPM + 1)
		r := rule(rng.Int64N(PPM+1), platform, rng.Int64N(PPM-platform+1))
		if i%10 == 0 {
			r.PoolRatePPM = PPM
		}
		got, err := ComputeInflow(heat, r)
		if err != nil {
			t.Fatalf("heat %d rule %+v: %v", heat, r, err)
		}
		if got.PlatformIn+got.RoomIn+got.GiftIn != got.PoolIn || got.PoolIn < 0 || got.PlatformIn < 0 || got.RoomIn < 0 || got.GiftIn < 0 {
			t.Fatalf("heat %d rule %+v: %+v does not add up", heat, r, got)
		}
		pool := floorPPM(heat, r.PoolRatePPM)
		if pool.Int64() != got.PoolIn || floorPPM(got.PoolIn, r.PlatformWeightPPM).Int64() != got.PlatformIn ||
			floorPPM(got.PoolIn, r.RoomWeightPPM).Int64() != got.RoomIn || got.PoolIn > heat {
			t.Fatalf("heat %d rule %+v: %+v differs from the exact formula (pool %s)", heat, r, got, pool)
		}
	}
}

func validRule() *Rule {
	return &Rule{GiftID: "g1", RuleVersion: "v1", GiftPrice: 100, PoolRatePPM: 50000, TargetPayoutRatePPM: 950000,
		PlatformWeightPPM: 200000, RoomWeightPPM: 300000, MaxSinglePayout: 1000, Status: "active",
		Tiers: []Tier{
			{TierID: "none", RewardType: "none", ProbabilityPPM: 900000, Enabled: true},
			{TierID: "small_1x", RewardType: "multiplier", RewardValue: 1, ProbabilityPPM: 90000, Enabled: true},
			{TierID: "medium_5x", RewardType: "multiplier", RewardValue: 5, ProbabilityPPM: 10000, MinPoolBalance: 500, Enabled: false},
		}}
}

func TestValidate(t *testing.T) {
	if err := validRule().Validate(); err != nil {
		t.Fatalf("valid rule rejected: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(r *Rule)
		field string
	}{
		{"pool rate above 1e6", func(r *Rule) { r.PoolRatePPM = PPM + 1 }, "pool_rate_ppm"},
		{"negative pool rate", func(r *Rule) { r.PoolRatePPM = -1 }, "pool_rate_ppm"},
		{"weights sum above 1e6", func(r *Rule) { r.PlatformWeightPPM, r.RoomWeightPPM = 600000, 400001 }, "platform_weight_ppm+room_weight_ppm"},
		{"negative room weight", func(r *Rule) { r.RoomWeightPPM = -5 }, "room_weight_ppm"},
		{"tiers sum below 1e6", func(r *Rule) { r.Tiers[0].ProbabilityPPM-- }, "tiers.probability_ppm"},
		{"tiers sum above 1e6", func(r *Rule) { r.Tiers[1].ProbabilityPPM++ }, "tiers.probability_ppm"},
		{"no tiers", func(r *Rule) { r.Tiers = nil }, "tiers"},
		{"duplicate tier", func(r *Rule) { r.Tiers[2].TierID = "small_1x" }, "tiers[small_1x].tier_id"},
		{"unknown reward type", func(r *Rule) { r.Tiers[1].RewardType = "jackpot" }, "tiers[small_1x].reward_type"},
		{"tier probability out of range", func(r *Rule) { r.Tiers[0].ProbabilityPPM = -10000; r.Tiers[1].ProbabilityPPM = 100000 }, "tiers[none].probability_ppm"},
		{"unknown status", func(r *Rule) { r.Status = "live" }, "status"},
		{"negative cap", func(r *Rule) { r.MaxSinglePayout = -1 }, "max_single_payout"},
		{"empty version", func(r *Rule) { r.RuleVersion = "" }, "rule_version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := validRule()
			tc.edit(r)
			err := r.Validate()
			if !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("not rejected: %v", err)
			}
			var re *RuleError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.field+":") {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
		})
	}
}
