package luckydraw

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/hyapp/roomflow/domain/lucky"
)

// Why a tier is out of a draw's candidate table (Candidate.Disabled).
const (
	DisabledTier      = "tier_disabled"    // tier.enabled = false
	DisabledLarge     = "large_tier_off"   // large tier while large_tier_enabled is off
	DisabledWaterline = "min_pool_balance" // tier.min_pool_balance > current_pool_balance
	DisabledPool      = "pool_capacity"    // reward > what a pool layer can pay
	DisabledRisk      = "risk_cap"         // reward > risk_capacity, the pools could pay it
)

// ErrRuleInvalid is a rule version that cannot be drawn on: it fails
// lucky.Rule.Validate, or it has not exactly one reward_type='none' tier
// (the tier that takes the probability of disabled tiers).
var ErrRuleInvalid = errors.New("luckydraw: rule invalid")

// PoolState is one lucky_pools row as locked by the draw.
type PoolState struct {
	ScopeType    string `json:"scope_type"`
	ScopeID      string `json:"scope_id"`
	Balance      int64  `json:"balance"`
	ReserveFloor int64  `json:"reserve_floor"`
}

// RiskLimit is one risk cap and what its current window has paid.
type RiskLimit struct {
	Scope   string `json:"scope"`    // single | user | device | room | anchor | activity
	ScopeID string `json:"scope_id"` // the user, device, room, anchor id; "" for single
	Window  string `json:"window"`   // draw | daily | hourly | period
	Cap     int64  `json:"cap"`      // 0: no cap
	Used    int64  `json:"used"`     // payout_coins of the window before this draw
}

// Remaining is what the cap still allows (never negative); math.MaxInt64
// when there is no cap.
func (l RiskLimit) Remaining() int64 {
	if l.Cap <= 0 {
		return math.MaxInt64
	}
	return max(l.Cap-l.Used, 0)
}

// DrawInput is everything one draw decides on.
type DrawInput struct {
	Rule      *lucky.Rule
	CoinSpent int64
	HeatValue int64
	// Pools are the platform, room and gift rows (layer order) before the
	// draw.
	Pools [3]PoolState
	// ApplyInflow: this draw adds the gift's inflow to the pools (false
	// when the stream sink claimed it first and already added it).
	ApplyInflow bool
	// Risks are the caps of this draw: max_single_payout and the windows'
	// counters. A cap of 0 is no cap.
	Risks []RiskLimit
	// LargeTierMinReward: in a rule that marks no tier large, a tier
	// paying at least this is large; 0: none is. A rule that marks tiers
	// (lucky.Tier.Large) decides alone.
	LargeTierMinReward int64
	LargeTierEnabled   bool
}

// Candidate is one row of a draw's filtered probability table, in the
// rule's tier order (tier_id order). ProbabilityPPM is after filtering: 0
// for a disabled tier, the none tier's base plus every disabled tier's.
type Candidate struct {
	TierID         string `json:"tier_id"`
	RewardType     string `json:"reward_type"`
	RewardCoins    int64  `json:"reward_coins"`
	BasePPM        int64  `json:"base_ppm"`
	ProbabilityPPM int64  `json:"probability_ppm"`
	Disabled       string `json:"disabled,omitempty"`
}

// Plan is a draw decided up to the random value: the inflow, capacities
// and the candidate table.
type Plan struct {
	Inflow             lucky.Inflow // computed from heat_value
	LayerIn            [3]int64     // added to each layer (zero unless ApplyInflow)
	Capacity           [3]int64     // balance + layer_in - reserve_floor
	RiskCapacity       int64        // min remaining over the caps; math.MaxInt64 without caps
	AvailablePayout    int64        // min(capacities, risk capacity)
	CurrentPoolBalance int64        // min over layers of balance + layer_in
	Candidates         []Candidate
	// RiskRejected lists the caps that removed a tier the pools could have
	// paid (one entry per scope), for LuckyRiskRejected events.
	RiskRejected []RiskLimit
}

// Outcome is a drawn tier and how its reward is debited from the layers.
type Outcome struct {
	Tier     Candidate
	LayerOut [3]int64 // platform, room, gift; sums to Tier.RewardCoins
}

// Hit reports a paying tier.
func (o Outcome) Hit() bool { return o.Tier.RewardCoins > 0 }

// RewardCoins is what tier t pays for a gift of coinSpent coins: fixed
// pays reward_value, multiplier reward_value * coin_spent (saturating at
// math.MaxInt64, which no pool can pay), none 0.
func RewardCoins(t lucky.Tier, coinSpent int64) int64 {
	switch t.RewardType {
	case "fixed":
		return t.RewardValue
	case "multiplier":
		if t.RewardValue <= 0 || coinSpent <= 0 {
			return 0
		}
		hi, lo := bits.Mul64(uint64(t.RewardValue), uint64(coinSpent))
		if hi != 0 || lo > math.MaxInt64 {
			return math.MaxInt64
		}
		return int64(lo)
	}
	return 0
}

// noneTier returns the index of r's single reward_type='none' tier, or
// ErrRuleInvalid.
func noneTier(r *lucky.Rule) (int, error) {
	idx := -1
	for i, t := range r.Tiers {
		if t.RewardType == "none" {
			if idx >= 0 {
				return 0, fmt.Errorf("%w: %s/%s has more than one none tier", ErrRuleInvalid, r.GiftID, r.RuleVersion)
			}
			idx = i
		}
	}
	if idx < 0 {
		return 0, fmt.Errorf("%w: %s/%s has no none tier", ErrRuleInvalid, r.GiftID, r.RuleVersion)
	}
	return idx, nil
}

// CheckRule is the draw's rule check: lucky.Rule.Validate plus exactly one
// none tier. Errors wrap ErrRuleInvalid.
func CheckRule(r *lucky.Rule) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrRuleInvalid, err)
	}
	_, err := noneTier(r)
	return err
}

// NewPlan applies the draw algorithm of LUCKY-4 and LUCKY-5 up to the random
// selection: inflow from heat_value, each layer's capacity, the risk
// capacity, the available payout, and the filtered candidate table (disabled
// tiers' probability moved to the none tier). The none tier itself is never
// disabled (it pays nothing). Errors: ErrRuleInvalid, or lucky's inflow
// errors (negative heat_value).
func NewPlan(in DrawInput) (*Plan, error) {
	p := &Plan{}
	if err := p.Reset(&in); err != nil {
		return nil, err
	}
	return p, nil
}

// Reset makes p the plan of in (NewPlan), reusing p's candidate and
// rejection slices: the rule simulator plans millions of draws in one
// Plan without allocating.
func (p *Plan) Reset(in *DrawInput) error {
	r := in.Rule
	none, err := noneTier(r)
	if err != nil {
		return err
	}
	inflow, err := lucky.ComputeInflow(in.HeatValue, r)
	if err != nil {
		return err
	}
	cands := p.Candidates[:0]
	if cap(cands) < len(r.Tiers) {
		cands = make([]Candidate, 0, len(r.Tiers))
	}
	*p = Plan{Inflow: inflow, RiskCapacity: math.MaxInt64, Candidates: cands, RiskRejected: p.RiskRejected[:0]}
	if in.ApplyInflow {
		p.LayerIn = [3]int64{inflow.PlatformIn, inflow.RoomIn, inflow.GiftIn}
	}
	poolCap := int64(math.MaxInt64)
	p.CurrentPoolBalance = math.MaxInt64
	for i, pool := range in.Pools {
		p.Capacity[i] = pool.Balance + p.LayerIn[i] - pool.ReserveFloor
		poolCap = min(poolCap, p.Capacity[i])
		p.CurrentPoolBalance = min(p.CurrentPoolBalance, pool.Balance+p.LayerIn[i])
	}
	for _, l := range in.Risks {
		p.RiskCapacity = min(p.RiskCapacity, l.Remaining())
	}
	p.AvailablePayout = min(poolCap, p.RiskCapacity)

	marked := MarksLargeTiers(r)
	var moved int64
	for i, t := range r.Tiers {
		c := Candidate{TierID: t.TierID, RewardType: t.RewardType, RewardCoins: RewardCoins(t, in.CoinSpent),
			BasePPM: t.ProbabilityPPM, ProbabilityPPM: t.ProbabilityPPM}
		if i != none {
			c.Disabled = p.disabled(in, t, c.RewardCoins, marked, poolCap)
		}
		if c.Disabled != "" {
			moved += c.ProbabilityPPM
			c.ProbabilityPPM = 0
		}
		p.Candidates = append(p.Candidates, c)
	}
	p.Candidates[none].ProbabilityPPM += moved
	return nil
}

// disabled is why tier t, paying reward, is out of the table ("": it is
// in), recording the caps that removed a tier the pools could pay (one
// entry per scope) in p.RiskRejected.
func (p *Plan) disabled(in *DrawInput, t lucky.Tier, reward int64, marked bool, poolCap int64) string {
	switch {
	case !t.Enabled:
		return DisabledTier
	case !in.LargeTierEnabled && isLarge(marked, t, reward, in.LargeTierMinReward):
		return DisabledLarge
	case t.MinPoolBalance > p.CurrentPoolBalance:
		return DisabledWaterline
	case reward > poolCap:
		return DisabledPool
	case reward > p.RiskCapacity:
		for _, l := range in.Risks {
			if l.Remaining() < reward && !slices.ContainsFunc(p.RiskRejected, func(x RiskLimit) bool { return x.Scope == l.Scope }) {
				p.RiskRejected = append(p.RiskRejected, l)
			}
		}
		return DisabledRisk
	}
	return ""
}

// ErrBadTable is a candidate table no random value can select from: its
// probabilities do not sum to 1,000,000, or a value is out of range.
var ErrBadTable = errors.New("luckydraw: candidate table does not select")

// Select returns the index of the first candidate whose cumulative
// probability exceeds random (in [0, 1,000,000)); disabled candidates have
// probability 0 and are never selected.
func Select(cands []Candidate, random int64) (int, error) {
	if random < 0 || random >= lucky.PPM {
		return 0, fmt.Errorf("%w: random value %d outside [0, 1000000)", ErrBadTable, random)
	}
	var cum, sum int64
	sel := -1
	for i, c := range cands {
		if c.ProbabilityPPM < 0 || c.ProbabilityPPM > lucky.PPM {
			return 0, fmt.Errorf("%w: tier %s probability %d", ErrBadTable, c.TierID, c.ProbabilityPPM)
		}
		sum += c.ProbabilityPPM
		cum += c.ProbabilityPPM
		if sel < 0 && cum > random {
			sel = i
		}
	}
	if sum != lucky.PPM || sel < 0 {
		return 0, fmt.Errorf("%w: probabilities sum to %d", ErrBadTable, sum)
	}
	return sel, nil
}

// SplitPayout debits reward across the layers with the rule's inflow
// weights, exactly as lucky.ComputeInflow splits an inflow: platform =
// floor(reward*platform_weight/1e6), room = floor(reward*room_weight/1e6),
// gift the remainder.
func SplitPayout(reward int64, r *lucky.Rule) ([3]int64, error) {
	in, err := lucky.ComputeInflow(reward, &lucky.Rule{GiftID: r.GiftID, RuleVersion: r.RuleVersion,
		PoolRatePPM: lucky.PPM, PlatformWeightPPM: r.PlatformWeightPPM, RoomWeightPPM: r.RoomWeightPPM})
	if err != nil {
		return [3]int64{}, err
	}
	return [3]int64{in.PlatformIn, in.RoomIn, in.GiftIn}, nil
}

// Draw selects with random (in [0, 1,000,000)) and splits the payout. A
// selected tier always fits: its reward is at most AvailablePayout, which
// is at most every layer's capacity, and every layer's share is at most
// the reward.
func (p *Plan) Draw(r *lucky.Rule, random int64) (Outcome, error) {
	i, err := Select(p.Candidates, random)
	if err != nil {
		return Outcome{}, err
	}
	o := Outcome{Tier: p.Candidates[i]}
	if o.Tier.RewardCoins > 0 {
		if o.LayerOut, err = SplitPayout(o.Tier.RewardCoins, r); err != nil {
			return Outcome{}, err
		}
	}
	return o, nil
}
