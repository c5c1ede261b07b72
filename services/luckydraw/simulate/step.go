package simulate

import (
	"slices"

	"github.com/hyapp/roomflow/services/luckydraw"
)

// step makes draw i at nowMs: the traffic picks the gift, room and user;
// the draw service's own functions list the risk windows, the caps, plan
// (filter) and draw; the pools and windows in memory take the outcome.
func (e *engine) step(i, nowMs int64) error {
	m := e.mix.pick(e.traffic)
	share, gi := e.cfg.Traffic.GiftMix[m], e.giftOf[m]
	rule := e.cfg.Rules[gi]
	room, user := e.rooms.pick(e.traffic), e.users.pick(e.traffic)
	spend := rule.GiftPrice * int64(share.GiftCount)
	pools := [3]*poolState{&e.platform, &e.roomPool[room], &e.gifts[gi]}
	in := luckydraw.DrawInput{Rule: rule, CoinSpent: spend, HeatValue: spend, ApplyInflow: true,
		LargeTierMinReward: e.cfg.LargeTierMinReward, LargeTierEnabled: e.cfg.LargeTierEnabled}
	for l, p := range pools {
		in.Pools[l] = p.PoolState
	}
	// One device per user, one anchor (target) per room.
	e.ws = e.cfg.Caps.Windows(e.ws[:0], luckydraw.Party{Sender: e.userIDs[user], Device: e.userIDs[user],
		Room: e.roomIDs[room], Target: e.anchors[room]}, nowMs)
	var sl [5]*slot
	for k, w := range e.ws {
		s := e.slotOf(w.Scope, user, room)
		if s.start != w.Start {
			e.st.closeWindow(w.Scope, s)
			*s = slot{start: w.Start}
		}
		sl[k] = s
	}
	e.risks = e.cfg.Caps.AppendRiskLimits(e.risks[:0], rule, e.ws, func(k int) int64 { return sl[k].payout })
	in.Risks = e.risks
	if err := e.plan.Reset(&in); err != nil {
		return err
	}
	random, err := e.random()
	if err != nil {
		return err
	}
	o, err := e.plan.Draw(rule, random)
	if err != nil {
		return err
	}
	e.st.draw(e, i, nowMs, gi, spend, &in, o, pools)
	if e.cfg.Trace != nil {
		e.cfg.Trace(Trace{NowMs: nowMs, RoomID: e.roomIDs[room], DeviceID: e.userIDs[user], SenderID: int64(user + 1),
			TargetID: int64(e.cfg.Traffic.Users + 1 + room), GiftID: rule.GiftID, GiftCount: share.GiftCount, CoinSpent: spend,
			Random: random, Candidates: slices.Clone(e.plan.Candidates), TierID: o.Tier.TierID, RewardCoins: o.Tier.RewardCoins})
	}
	for l, p := range pools {
		p.add(e.plan.LayerIn[l] - o.LayerOut[l])
	}
	for k := range e.ws {
		sl[k].payout += o.Tier.RewardCoins
		sl[k].draws++
	}
	return nil
}

// slotOf is the in-memory running total of a window scope for this
// draw's user and room.
func (e *engine) slotOf(scope string, user, room int) *slot {
	switch scope {
	case "user":
		return &e.userDay[user]
	case "device":
		return &e.device[user]
	case "room":
		return &e.roomHour[room]
	case "anchor":
		return &e.anchor[room]
	}
	return &e.activity
}
