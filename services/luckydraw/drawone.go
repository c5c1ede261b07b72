package luckydraw

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math"
	"math/big"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/walletv1"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"google.golang.org/protobuf/proto"
)

// One draw of a batch, in memory against the batch's locked rows.

// randomPPM is a uniform value in [0, 1,000,000) from crypto/rand
// (rand.Int rejects out-of-range samples: no modulo bias).
func randomPPM() (int64, error) {
	v, err := rand.Int(rand.Reader, big.NewInt(lucky.PPM))
	if err != nil {
		return 0, fmt.Errorf("luckydraw: random: %w", err)
	}
	return v.Int64(), nil
}

// drawn is one draw's outcome: its answer, its lucky_draw_records row,
// its lucky_outbox rows and, in format draw_events, its
// lucky_draw_events row (nil in format rows).
type drawn struct {
	result drawResult
	record []any
	outbox [][]any
	events []any
}

// drawCalc is a draw in the making: its request and rule, its plan
// against the batch's locked rows, the random value and what it selected.
type drawCalc struct {
	r         *drawReq
	rule      *lucky.Rule
	keys      [3]poolKey
	in        DrawInput
	plan      *Plan
	random    int64
	o         Outcome
	reward    int64
	rewardID  string
	status    string   // reward_status: none | pending
	appliedBy string   // inflow_applied_by: draw | stream
	after     [3]int64 // the pools' balances after the draw
}

// drawOne draws r against the batch's in-memory rows and returns its
// result, its lucky_draw_records row and its lucky_outbox rows.
func (b *batchTx) drawOne(r *drawReq, rule *lucky.Rule, applyInflow bool) (drawn, error) {
	c, err := b.selectTier(r, rule, applyInflow)
	if err != nil {
		return drawn{}, err
	}
	rec, err := b.drawRecord(c) // its snapshots are of the rows before the draw's writes
	if err != nil {
		return drawn{}, err
	}
	b.applyDraw(c)
	ob, ev, err := b.drawEvents(c)
	if err != nil {
		return drawn{}, err
	}
	return drawn{result: drawResult{drawID: r.drawID, ruleVersion: rule.RuleVersion, tierID: c.o.Tier.TierID,
		tierType: c.o.Tier.RewardType, rewardCoins: c.reward, rewardID: c.rewardID, rewardStatus: c.status,
		dispatch: b.sw.global[SwitchWalletDispatch]}, record: rec, outbox: ob, events: ev}, nil
}

// selectTier plans r's draw under rule against the batch's pools and
// counters and selects a tier with a fresh random value.
func (b *batchTx) selectTier(r *drawReq, rule *lucky.Rule, applyInflow bool) (*drawCalc, error) {
	c := &drawCalc{r: r, rule: rule, keys: poolKeys(r), status: "none", appliedBy: "draw"}
	c.in = DrawInput{Rule: rule, CoinSpent: r.coinSpent, HeatValue: r.heat, ApplyInflow: applyInflow,
		Risks: b.riskLimits(r, rule), LargeTierMinReward: b.s.cfg.LargeTierMinReward, LargeTierEnabled: b.sw.global[SwitchLargeTier]}
	for i, k := range c.keys {
		c.in.Pools[i] = b.pools[k].PoolState
	}
	var err error
	if c.plan, err = NewPlan(c.in); err != nil {
		return nil, err
	}
	if c.random, err = b.random(r); err != nil {
		return nil, err
	}
	if b.s.cfg.Random != nil { // tests only: its value replaces the random source's
		if c.random, err = b.s.cfg.Random(); err != nil {
			return nil, err
		}
	}
	if c.o, err = c.plan.Draw(rule, c.random); err != nil {
		return nil, err
	}
	c.reward = c.o.Tier.RewardCoins
	if c.reward > 0 {
		c.rewardID, c.status = RewardID(r.drawID), "pending"
	}
	if !applyInflow {
		c.appliedBy = "stream"
	}
	return c, nil
}

// drawRecord is c's lucky_draw_records row, with its audit material: the
// candidate table, the pool and risk snapshots and the digest.
func (b *batchTx) drawRecord(c *drawCalc) ([]any, error) {
	r, plan, o := c.r, c.plan, c.o
	ps := PoolSnapshot{CurrentPoolBalance: plan.CurrentPoolBalance, AvailablePayout: plan.AvailablePayout, InflowAppliedBy: c.appliedBy}
	for i := range c.keys {
		ps.Layers = append(ps.Layers, PoolLayerSnapshot{PoolState: c.in.Pools[i], LayerIn: plan.LayerIn[i], Capacity: plan.Capacity[i]})
	}
	rs := RiskSnapshot{Limits: c.in.Risks, RiskCapacity: plan.RiskCapacity}
	if rs.RiskCapacity == math.MaxInt64 {
		rs.RiskCapacity = -1
	}
	for _, l := range plan.RiskRejected {
		rs.Rejected = append(rs.Rejected, l.Scope)
	}
	candJSON, err := json.Marshal(plan.Candidates)
	if err != nil {
		return nil, err
	}
	poolJSON, _ := json.Marshal(ps)
	riskJSON, _ := json.Marshal(rs)
	digest := Digest([]byte(b.s.cfg.AuditKey), DigestInput{DrawID: r.drawID, CommandID: r.commandID, AppCode: r.app,
		GiftID: r.giftID, RuleVersion: c.rule.RuleVersion, Candidates: plan.Candidates, RandomValue: c.random})
	return []any{r.drawID, r.app, r.commandID, r.requestID, r.billingReceiptID, r.roomID, r.sender, r.target, r.deviceID,
		r.giftID, r.giftCount, r.coinSpent, r.heat, c.rule.RuleVersion, plan.Inflow.PoolIn, plan.Inflow.PlatformIn,
		plan.Inflow.RoomIn, plan.Inflow.GiftIn, c.appliedBy, candJSON, o.Tier.TierID, o.Tier.RewardType, c.reward,
		o.LayerOut[0], o.LayerOut[1], o.LayerOut[2], c.random, digest, poolJSON, riskJSON, c.rewardID, c.status, "", b.nowMs, b.nowMs, "",
		r.clientSeed, r.nonce, b.day.mode}, nil
}

// applyDraw applies c to the batch's pools and counters in memory
// ((7)-(8): written once per batch) and records the pools' balances after
// it.
func (b *batchTx) applyDraw(c *drawCalc) {
	for i, k := range c.keys {
		p := b.pools[k]
		p.Balance += c.plan.LayerIn[i] - c.o.LayerOut[i]
		p.dIn += c.plan.LayerIn[i]
		p.dOut += c.o.LayerOut[i]
		p.dVersion++
		c.after[i] = p.Balance
	}
	for _, ctr := range b.counterRows(c.r) {
		if b.ctrs[ctr.key] == nil { // uncapped: counted, never read
			b.ctrs[ctr.key] = ctr
		}
		ctr = b.ctrs[ctr.key]
		ctr.payout += c.reward
		ctr.dPayout += c.reward
		ctr.draws++
		ctr.dDraws++
		if c.o.Hit() {
			ctr.hits++
			ctr.dHits++
		}
	}
}

// drawEvents are c's outbox rows ((10)): its reward credit, then
// LuckyGiftDrawn, a LuckyPoolChanged per pool, a LuckyRiskRejected per
// cap that removed a payable tier, and LuckyRewardPending when the
// dispatch switch is off. The events are lucky_outbox rows in format rows;
// in format draw_events they are the draw's one lucky_draw_events row (the
// reward credit, with its retry state, stays a lucky_outbox row).
func (b *batchTx) drawEvents(c *drawCalc) (ob [][]any, packedRow []any, _ error) {
	r, rule, plan, o := c.r, c.rule, c.plan, c.o
	dispatch := b.sw.global[SwitchWalletDispatch]
	var packed []luckyoutbox.Event
	event := func(id string, m proto.Message) error {
		if b.s.cfg.OutboxFormat == luckyoutbox.FormatDrawEvents {
			payload, err := proto.Marshal(m)
			packed = append(packed, luckyoutbox.Event{MessageType: messageType(m), EventID: id, Key: r.giftID, Payload: payload})
			return err
		}
		row, err := b.outboxEvent(r, id, m)
		ob = append(ob, row)
		return err
	}
	if c.reward > 0 {
		row, err := b.rewardCreditRow(c, dispatch)
		if err != nil {
			return nil, nil, err
		}
		ob = append(ob, row)
	}
	var poolIn int64
	if c.in.ApplyInflow {
		poolIn = plan.Inflow.PoolIn
	}
	if err := event("LuckyGiftDrawn:"+r.drawID, &activityv1.LuckyGiftDrawn{EventId: "LuckyGiftDrawn:" + r.drawID,
		AppCode: r.app, DrawId: r.drawID, CommandId: r.commandID, RoomId: r.roomID, GiftId: r.giftID,
		RuleVersion: rule.RuleVersion, SenderUserId: r.sender, TargetUserId: r.target, TierId: o.Tier.TierID,
		TierType: o.Tier.RewardType, RewardCoins: c.reward, Hit: o.Hit(), CoinSpent: r.coinSpent, HeatValue: r.heat,
		PoolIn: poolIn, TargetPayoutRatePpm: rule.TargetPayoutRatePPM, DrawnAtMs: b.nowMs}); err != nil {
		return nil, nil, err
	}
	for i, k := range c.keys {
		id := "LuckyPoolChanged:" + r.drawID + ":" + k.scopeType
		if err := event(id, &activityv1.LuckyPoolChanged{EventId: id, AppCode: r.app, DrawId: r.drawID, ScopeType: k.scopeType,
			ScopeId: k.scopeID, DeltaIn: plan.LayerIn[i], DeltaOut: o.LayerOut[i], Balance: c.after[i], GiftId: r.giftID,
			ChangedAtMs: b.nowMs}); err != nil {
			return nil, nil, err
		}
	}
	for _, l := range plan.RiskRejected {
		id := "LuckyRiskRejected:" + r.drawID + ":" + l.Scope
		if err := event(id, &activityv1.LuckyRiskRejected{EventId: id, AppCode: r.app, DrawId: r.drawID, Scope: l.Scope,
			ScopeId: l.ScopeID, Threshold: l.Cap, Remaining: l.Remaining(), Reason: l.Window + " cap removed a payable tier",
			GiftId: r.giftID, AtMs: b.nowMs}); err != nil {
			return nil, nil, err
		}
	}
	if c.reward > 0 && !dispatch {
		id := "LuckyRewardPending:" + c.rewardID + ":0"
		if err := event(id, &activityv1.LuckyRewardPending{EventId: id, AppCode: r.app, RewardId: c.rewardID, DrawId: r.drawID,
			UserId: r.sender, RewardCoins: c.reward, RetryReason: SwitchWalletDispatch + " off", GiftId: r.giftID,
			RoomId: r.roomID, AtMs: b.nowMs}); err != nil {
			return nil, nil, err
		}
	}
	return ob, b.drawEventsRow(r, packed), nil
}

// rewardCreditRow is the reward_credit row of c's payout. The synchronous
// dispatch right after commit is claimed here, in the draw's transaction
// (no commit of its own); the outbox worker takes the row over once the
// claim lapses, as after a crash.
func (b *batchTx) rewardCreditRow(c *drawCalc, dispatch bool) ([]any, error) {
	r := c.r
	payload, err := proto.Marshal(&walletv1.CreditLuckyRewardRequest{RewardId: c.rewardID, CommandId: r.commandID,
		DrawId: r.drawID, RoomId: r.roomID, UserId: r.sender, RewardCoins: c.reward, Reason: "lucky_gift_reward"})
	if err != nil {
		return nil, err
	}
	due := b.nowMs + b.s.creditBound().Milliseconds()
	st, worker, lockUntil := "pending", "", int64(0)
	if dispatch && b.s.cfg.Dispatcher != nil {
		st, worker, lockUntil = "processing", b.s.cfg.Dispatcher.ClaimedBy(), due
	}
	return []any{"RewardCredit:" + c.rewardID, r.app, "reward_credit", "CreditLuckyRewardRequest", r.drawID,
		r.giftID, payload, st, worker, lockUntil, due, b.nowMs, b.nowMs}, nil
}
