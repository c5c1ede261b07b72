package simulate

import (
	"math"
	"slices"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// Result is what a run measured.
type Result struct {
	Draws, Hits, Spend, Payout int64
	Hours                      float64
	// RatePPM is Payout ÷ Spend; CILowPPM-CIHighPPM its 95% interval
	// (ratio estimator, normal approximation over the draws).
	RatePPM, CILowPPM, CIHighPPM float64
	Gifts                        []GiftResult
	// UserDay and RoomHour are the payouts of the user-days and
	// room-hours that drew at least once.
	UserDay, RoomHour Quantiles
	// FloorDraws, CapDraws: draws whose table lost a tier to a pool floor
	// (reserve_floor or a tier's min_pool_balance) or to a risk cap;
	// RemovedDraws: to either.
	FloorDraws, CapDraws, RemovedDraws int64
	// Pools: the platform pool, each gift's, and the hottest room's
	// (room-0); RoomsAtFloor: how many rooms had a tier removed by their
	// floor.
	Pools        []PoolResult
	RoomsAtFloor int
	// MaxRoomDrawdown is the largest drawdown of any room pool, in RoomMax.
	MaxRoomDrawdown int64
	RoomMax         string
	// RateSeries: per gift, the payout rate (ppm) of each time bucket;
	// BalanceSeries: the Pools' balances at each bucket's end. X in hours.
	RateSeries, BalanceSeries []Series
}

// Series is a named line of a chart: Y against X (hours).
type Series struct {
	Name string
	X, Y []float64
}

func (s *Series) add(x, y float64) {
	s.X, s.Y = append(s.X, x), append(s.Y, y)
}

// GiftResult is one rule's part.
type GiftResult struct {
	GiftID, RuleVersion string
	// AnalyticPPM is lucky.Rule.AnalyticPayoutPPM; AnalyticErr says why
	// there is none (a fixed tier with gift_price 0).
	AnalyticPPM          float64
	AnalyticErr          string
	TargetPPM            int64
	Draws, Spend, Payout int64
}

// Quantiles are p50, p99 and max (nearest rank) of N values.
type Quantiles struct {
	N             int
	P50, P99, Max int64
}

// PoolResult is one pool over the run.
type PoolResult struct {
	ScopeType, ScopeID string
	Start, End, Low    int64
	ReserveFloor       int64
	Drawdown           int64 // largest fall from a running peak
	FloorAtHours       float64
	ReachedFloor       bool
}

type stats struct {
	n, hits, spend, payout  int64
	sx, sy, sxx, syy, sxy   float64
	floor, capped, removed  int64
	userDay, roomHour       []int64
	gDraws, gSpend, gPayout []int64
	buckets                 int
	draws                   int64     // of the run
	bSpend, bPayout         [][]int64 // [bucket][gift]
	bBalance                [][]int64 // [bucket][pool]
	cur                     int
}

func newStats(c Config) stats {
	g := len(c.Rules)
	b := max(c.Buckets, 1)
	s := stats{gDraws: make([]int64, g), gSpend: make([]int64, g), gPayout: make([]int64, g), buckets: b, cur: -1,
		draws: max(c.Traffic.draws(), 1)}
	for range b {
		s.bSpend, s.bPayout = append(s.bSpend, make([]int64, g)), append(s.bPayout, make([]int64, g))
	}
	return s
}

// closeWindow records a window that ended (or the run did).
func (s *stats) closeWindow(scope string, w *slot) {
	if w.draws == 0 {
		return
	}
	switch scope {
	case "user":
		s.userDay = append(s.userDay, w.payout)
	case "room":
		s.roomHour = append(s.roomHour, w.payout)
	}
}

// draw records draw i of gift gi, before the pools take it.
func (s *stats) draw(e *engine, i, nowMs int64, gi int, spend int64, in *luckydraw.DrawInput, o luckydraw.Outcome, pools [3]*poolState) {
	reward := o.Tier.RewardCoins
	s.n++
	s.spend += spend
	s.payout += reward
	x, y := float64(spend), float64(reward)
	s.sx, s.sy, s.sxx, s.syy, s.sxy = s.sx+x, s.sy+y, s.sxx+x*x, s.syy+y*y, s.sxy+x*y
	if reward > 0 {
		s.hits++
	}
	s.gDraws[gi]++
	s.gSpend[gi] += spend
	s.gPayout[gi] += reward
	b := int(i * int64(s.buckets) / s.draws)
	for s.cur < b {
		if s.cur >= 0 {
			s.bBalance = append(s.bBalance, e.balances())
		}
		s.cur++
	}
	s.bSpend[b][gi] += spend
	s.bPayout[b][gi] += reward
	var floor, capped bool
	for j, c := range e.plan.Candidates {
		switch c.Disabled {
		case luckydraw.DisabledWaterline:
			floor = true
			for l, p := range pools {
				if in.Pools[l].Balance+e.plan.LayerIn[l] < in.Rule.Tiers[j].MinPoolBalance {
					p.reached(nowMs)
				}
			}
		case luckydraw.DisabledPool:
			floor = true
			for l, p := range pools {
				if e.plan.Capacity[l] < c.RewardCoins {
					p.reached(nowMs)
				}
			}
		case luckydraw.DisabledRisk:
			capped = true
		}
	}
	s.floor += b2i(floor)
	s.capped += b2i(capped)
	s.removed += b2i(floor || capped)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (p *poolState) reached(nowMs int64) {
	if p.floorAtMs < 0 {
		p.floorAtMs = nowMs
	}
}

// balances are the reported pools' balances now.
func (e *engine) balances() []int64 {
	out := []int64{e.platform.Balance}
	for _, g := range e.gifts {
		out = append(out, g.Balance)
	}
	return append(out, e.roomPool[0].Balance)
}

func quantiles(v []int64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	slices.Sort(v)
	at := func(q float64) int64 {
		return v[min(max(int(math.Ceil(q*float64(len(v)))), 1), len(v))-1]
	}
	return Quantiles{N: len(v), P50: at(0.5), P99: at(0.99), Max: v[len(v)-1]}
}

// ratioCI is the 95% interval of Σy ÷ Σx over n draws (delta method).
func (s *stats) ratioCI() (lo, hi float64) {
	if s.n < 2 || s.sx == 0 {
		return math.NaN(), math.NaN()
	}
	n := float64(s.n)
	r := s.sy / s.sx
	v := (s.syy - 2*r*s.sxy + r*r*s.sxx) / (n - 1)
	half := 1.96 * math.Sqrt(max(v, 0)/n) / (s.sx / n)
	return (r - half) * lucky.PPM, (r + half) * lucky.PPM
}
