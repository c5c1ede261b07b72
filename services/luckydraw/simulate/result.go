package simulate

import (
	"github.com/hyapp/roomflow/domain/lucky"
)

// result closes the open windows and sums the run up.
func (e *engine) result(n, spanMs int64) *Result {
	s := &e.st
	for s.cur < s.buckets {
		s.bBalance = append(s.bBalance, e.balances())
		s.cur++
	}
	for i := range e.userDay {
		s.closeWindow("user", &e.userDay[i])
	}
	for i := range e.roomHour {
		s.closeWindow("room", &e.roomHour[i])
	}
	hours := float64(spanMs) / float64(hourMs)
	r := &Result{Draws: n, Hits: s.hits, Spend: s.spend, Payout: s.payout, Hours: hours,
		UserDay: quantiles(s.userDay), RoomHour: quantiles(s.roomHour),
		FloorDraws: s.floor, CapDraws: s.capped, RemovedDraws: s.removed}
	if s.spend > 0 {
		r.RatePPM = float64(s.payout) * lucky.PPM / float64(s.spend)
	}
	r.CILowPPM, r.CIHighPPM = s.ratioCI()
	for gi, rule := range e.cfg.Rules {
		g := GiftResult{GiftID: rule.GiftID, RuleVersion: rule.RuleVersion, TargetPPM: rule.TargetPayoutRatePPM,
			Draws: s.gDraws[gi], Spend: s.gSpend[gi], Payout: s.gPayout[gi]}
		var err error
		if g.AnalyticPPM, err = rule.AnalyticPayoutPPM(); err != nil {
			g.AnalyticErr = err.Error()
		}
		r.Gifts = append(r.Gifts, g)
	}
	reported := append(append([]*poolState{&e.platform}, ptrs(e.gifts)...), &e.roomPool[0])
	for _, p := range reported {
		r.Pools = append(r.Pools, p.result(e.cfg.StartMs))
	}
	for i := range e.roomPool {
		p := &e.roomPool[i]
		if p.floorAtMs >= 0 {
			r.RoomsAtFloor++
		}
		if p.drawdown > r.MaxRoomDrawdown || r.RoomMax == "" {
			r.MaxRoomDrawdown, r.RoomMax = p.drawdown, p.ScopeID
		}
	}
	e.series(r, hours)
	return r
}

func ptrs(ps []poolState) []*poolState {
	out := make([]*poolState, len(ps))
	for i := range ps {
		out[i] = &ps[i]
	}
	return out
}

func (p *poolState) result(startMs int64) PoolResult {
	r := PoolResult{ScopeType: p.ScopeType, ScopeID: p.ScopeID, Start: p.start, End: p.Balance, Low: p.low,
		ReserveFloor: p.ReserveFloor, Drawdown: p.drawdown, ReachedFloor: p.floorAtMs >= 0}
	if r.ReachedFloor {
		r.FloorAtHours = float64(p.floorAtMs-startMs) / float64(hourMs)
	}
	return r
}

// series are the charts' data: each gift's payout rate per bucket and the
// reported pools' balances at each bucket's end.
func (e *engine) series(r *Result, hours float64) {
	s := &e.st
	width := hours / float64(s.buckets)
	for gi, rule := range e.cfg.Rules {
		rs := Series{Name: rule.GiftID + " payout ppm"}
		for b := range s.buckets {
			if sp := s.bSpend[b][gi]; sp > 0 {
				rs.add(width*(float64(b)+0.5), float64(s.bPayout[b][gi])*lucky.PPM/float64(sp))
			}
		}
		r.RateSeries = append(r.RateSeries, rs)
	}
	for pi, p := range r.Pools {
		bs := Series{Name: p.ScopeType + " " + p.ScopeID}
		for b, bal := range s.bBalance {
			bs.add(width*float64(b+1), float64(bal[pi]))
		}
		r.BalanceSeries = append(r.BalanceSeries, bs)
	}
}
