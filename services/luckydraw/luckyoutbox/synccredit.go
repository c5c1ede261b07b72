package luckyoutbox

import (
	"context"
	"time"
)

// The synchronous credit: the draw service's Dispatcher, crediting one
// committed draw batch's rewards right after its commit (package doc,
// "Synchronous credit").

// ClaimedBy is the worker id the draw transaction claims the rewards of
// its synchronous dispatch for (the draw service's Dispatcher).
func (w *Worker) ClaimedBy() string { return w.cfg.WorkerID }

// CreditOutcome is one reward's answer from CreditRewards: Status
// "granted" with the wallet's receipt (the grant committed), "pending"
// (the worker retries) or "failed"; or Err when the outcome is not known
// (the reward is left to the worker).
type CreditOutcome struct {
	Status, CreditReceiptID string
	Err                     error
}

// CreditRewards is the synchronous credit of one committed draw batch's
// rewards (the draw service's Dispatcher) of appCode ("" =
// Config.AppCode), one outcome per rewardIDs entry. It takes each
// reward's reward_credit row if the draw claimed it for this worker
// (ClaimedBy) and the claim holds, or claims it if it is pending, calls
// the wallet Concurrency at a time and records every outcome before it
// returns. A row it cannot claim (the worker holds it, it is done or
// failed) or a dispatch switched off answers the draw's current
// reward_status and receipt; an unknown reward's Err wraps
// ErrUnknownReward.
//
// One batch is one group: one statement reads the claims, and the grants
// commit in one transaction, so a credit costs a fraction of a commit.
// While every one of the creditGroupsInFlight turns is taken (a slow
// wallet), the batches that ask meanwhile join one waiting group per app,
// up to Concurrency rewards (one wave of wallet calls), which the next
// turn runs: the wallet calls in flight stay at most
// creditGroupsInFlight x Concurrency, and a slow wallet's queue is
// credited a wave at a time rather than a batch at a time. Each step has its own bound (the claim and the records
// settleTimeout, each wallet call WalletCreditTimeout) on a context
// detached from ctx: a caller gone keeps nothing half done. ctx bounds
// the caller's wait, and, for the batch that started a waiting group, the
// group's wait for its turn.
func (w *Worker) CreditRewards(ctx context.Context, appCode string, rewardIDs []string) []CreditOutcome {
	if appCode == "" {
		appCode = w.cfg.AppCode
	}
	select {
	case w.groups <- struct{}{}: // a turn free: this batch is the group
		defer func() { <-w.groups }()
		return w.creditGroup(ctx, appCode, rewardIDs)
	default:
	}
	g, at, lead := w.joinWaiting(appCode, rewardIDs)
	if lead {
		w.runWaiting(ctx, appCode, g)
	}
	select {
	case <-g.done:
		return g.out[at : at+len(rewardIDs)]
	case <-ctx.Done():
		out := make([]CreditOutcome, len(rewardIDs))
		for i := range out {
			out[i].Err = ctx.Err()
		}
		return out
	}
}

// waitingGroup is the rewards of the batches that asked while every turn
// was taken, run as one group by the next turn.
type waitingGroup struct {
	ids  []string
	out  []CreditOutcome // one per ids entry, set before done closes
	done chan struct{}
}

// joinWaiting adds ids to appCode's waiting group, starting one (lead)
// when there is none or it would pass Concurrency (a group of one wave of
// wallet calls, which the draws' leases cover); at is the index of ids'
// first outcome in the group.
func (w *Worker) joinWaiting(appCode string, ids []string) (g *waitingGroup, at int, lead bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g = w.waiting[appCode]
	if g == nil || len(g.ids)+len(ids) > w.cfg.Concurrency {
		g, lead = &waitingGroup{done: make(chan struct{})}, true
		w.waiting[appCode] = g
	}
	at = len(g.ids)
	g.ids = append(g.ids, ids...)
	return g, at, lead
}

// runWaiting waits, within ctx, for a turn for g, closes g to joiners and
// runs it; a wait that ends first answers ctx's error for every reward
// (the draw's claims lapse and the worker credits them).
func (w *Worker) runWaiting(ctx context.Context, appCode string, g *waitingGroup) {
	defer close(g.done)
	closeJoins := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.waiting[appCode] == g {
			delete(w.waiting, appCode)
		}
	}
	select {
	case w.groups <- struct{}{}:
		defer func() { <-w.groups }()
		closeJoins()
		g.out = w.creditGroup(ctx, appCode, g.ids)
	case <-ctx.Done():
		closeJoins()
		g.out = make([]CreditOutcome, len(g.ids))
		for i := range g.out {
			g.out[i].Err = ctx.Err()
		}
	}
}

// creditGroup is one turn's group: the switch, the claims, the wallet
// calls and their records.
func (w *Worker) creditGroup(ctx context.Context, appCode string, rewardIDs []string) []CreditOutcome {
	w.m.creditGroup.Observe(float64(len(rewardIDs)))
	out := make([]CreditOutcome, len(rewardIDs))
	ids := make([]string, len(rewardIDs))
	for i, r := range rewardIDs {
		ids[i] = RewardCreditEventID(r)
	}
	steps := context.WithoutCancel(ctx)
	answerStored := func(i int) {
		sctx, cancel := context.WithTimeout(steps, settleTimeout)
		defer cancel()
		out[i].Status, out[i].CreditReceiptID, out[i].Err = rewardStatus(sctx, w.db, ids[i])
	}
	// The switch is read once the group's turn has come: a group that
	// waited for one never calls the wallet after the switch went off.
	if !w.dispatchEnabled(ctx, appCode) {
		w.m.paused.Add(float64(len(ids)))
		for i := range ids {
			answerStored(i)
		}
		return out
	}
	now := w.cfg.Now().UnixMilli()
	// A draw's claim is used only while its lease covers the group's
	// wallet calls and their recording: once it lapses the outbox worker
	// may take the row, and two calls for one reward would be in flight.
	holdUntil := now + (w.cfg.callTime(len(ids)) + recordAllowance).Milliseconds()
	cctx, cancel := context.WithTimeout(steps, settleTimeout)
	claimed, err := claimRewards(cctx, w.db, w.cfg.WorkerID, ids, now, holdUntil, now+w.cfg.LockTTL.Milliseconds())
	cancel()
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	w.m.claimed.WithLabelValues(EventTypeRewardCredit, "sync").Add(float64(len(claimed)))
	results := w.creditRows(steps, claimed, "sync")
	for i, id := range ids {
		if r, ok := results[id]; ok {
			out[i] = CreditOutcome{r.status, r.receipt, r.err}
		} else {
			answerStored(i)
		}
	}
	return out
}

// creditGroupsInFlight bounds the synchronous credit groups running at
// once: a group waits for the wallet (milliseconds), so the next batch's
// hits start their group meanwhile instead of queueing behind it.
const creditGroupsInFlight = 4

// recordAllowance is the lease a synchronous credit group keeps, beyond
// its wallet calls, for recording their outcomes (a transaction of
// milliseconds). A draw's claim with less left is left to lapse.
const recordAllowance = 500 * time.Millisecond
