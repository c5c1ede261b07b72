package luckydraw

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/mysqlerr"

	"github.com/hyapp/roomflow/domain/lucky"
)

// DrawID is the draw id of (app_code, command_id): "LD-" and the first 32
// hex digits of sha256(app + "\x00" + commandID). Room-service (and
// loadgen) compute it before the draw answers, for RoomGiftSent.draw_id.
func DrawID(app, commandID string) string {
	h := sha256.Sum256([]byte(app + "\x00" + commandID))
	return "LD-" + hex.EncodeToString(h[:16])
}

// RewardID is the wallet credit id of a draw: the same on every retry, so
// the wallet answers a repeated credit with the same receipt.
func RewardID(drawID string) string { return "LR-" + drawID }

// Reject reasons of ExecuteLuckyGiftDraw and CheckLuckyGift (nothing
// drawn; Execute records the rejection).
const (
	RejectGlobalDisabled = "global_disabled"
	RejectRoomPaused     = "room_paused"
	RejectNoActiveRule   = "no_active_rule"
	RejectRuleNotActive  = "rule_not_active"
	RejectRuleInvalid    = "rule_invalid"
)

// drawReq is one validated draw request.
type drawReq struct {
	giftPayload
	app, drawID, commandID, requestID string
	deviceID, ruleVersion, clientSeed string
	nonce                             int64 // commit-reveal: assigned in the draw transaction
	// invalid: a field other than the key fields failed its check; the
	// batch records the request as a rejection RejectInvalidRequest.
	invalid *FieldError
}

// drawResult is a draw's answer: a new or stored draw, or a reject.
type drawResult struct {
	drawID, ruleVersion    string
	tierID, tierType       string
	rewardCoins            int64
	rewardID, rewardStatus string // status: none | pending | granted | failed
	creditReceiptID        string
	reject                 string
	duplicate              bool
	conflict               *CommandConflictError // not this command's payload: nothing drawn or recorded
	dispatch               bool                  // wallet_credit_dispatch as the draw's transaction read it
	credit                 *batchCredits         // the synchronous credit of a pending reward (nil: none)
}

// batchTx is the state of one batch transaction.
type batchTx struct {
	s     *Service
	tx    *sql.Tx
	app   string
	nowMs int64
	sw    *switchView                     // read after the fence
	day   *fairDay                        // the randomness of the batch's day, as of nowMs
	tiers map[tierVersion]map[string]bool // tier enabled of the active versions, read after the fence
	pools map[poolKey]*poolRow
	ctrs  map[string]*counter
	w     writes // the writes after the locking reads, sent by insertOutcomes
	// locked lets the next batch start (runBatch); nil in tests' batches
	locked func()
}

// signalLocked lets the next batch start its reads: from here on this
// batch only writes rows it has locked or inserts, so the next one's reads
// (fence, rules, stored draws, inflow claims) overlap its writes and it
// waits only at its pool locks.
func (b *batchTx) signalLocked() {
	if b.locked != nil {
		b.locked()
	}
}

// runBatch runs reqs (one app_code) in one transaction, retrying
// deadlocks, lock wait timeouts, duplicate keys and lost connections until
// DrawTimeout ends. The results are in reqs' order. locked is called when
// an attempt holds its pool locks (or, taking none, is about to COMMIT):
// the next batch may start its reads (nil: not called; it may be called
// more than once).
func (s *Service) runBatch(reqs []*drawReq, locked func()) ([]drawResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrawTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		res, err := s.tryBatch(ctx, reqs, locked)
		if err == nil {
			return res, nil
		}
		if !mysqlerr.Retryable(err) || ctx.Err() != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (draw_timeout %s, attempt %d): %w", ErrDrawTimeout, s.cfg.DrawTimeout, attempt, err)
			}
			return nil, err
		}
		s.m.retries.WithLabelValues(mysqlerr.Reason(err)).Inc()
		s.log.Debug("draw batch retried", "attempt", attempt, "draws", len(reqs), "error", err)
		select {
		case <-time.After(deadlockJitter.Jitter(time.Duration(attempt) * time.Millisecond)):
		case <-ctx.Done():
		}
	}
}

// deadlockJitter spreads the retries of draw batches that failed together
// (a deadlock between two batches, a lock wait timeout) over the upper half
// of each wait, so they do not collide again in step.
var deadlockJitter = backoff.MustNew(backoff.Config{JitterFraction: 0.5})

// ErrDrawTimeout is a draw transaction that did not commit within
// DrawTimeout (rolled back or, after a lost commit answer, unknown: a
// retry with the same command_id returns the draw if it committed).
var ErrDrawTimeout = errors.New("luckydraw: draw timed out")

// tryBatch is one attempt of runBatch: one transaction, in named steps.
func (s *Service) tryBatch(ctx context.Context, reqs []*drawReq, locked func()) ([]drawResult, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	b := &batchTx{s: s, tx: tx, app: reqs[0].app, nowMs: s.cfg.Now().UnixMilli(), pools: map[poolKey]*poolRow{}, ctrs: map[string]*counter{}, locked: locked}
	// (0) the fence first: an operator change waits for this batch to
	// commit, and every read below sees the changes that returned before;
	// the switches, rule versions and tier flags come in its statement.
	rules, err := b.readFenced(ctx, reqs)
	if err != nil {
		return nil, err
	}
	b.nowMs = s.cfg.Now().UnixMilli() // after any wait at the fence
	if b.day, err = s.fair.dayOf(ctx, tx, b.app, b.nowMs); err != nil {
		return nil, err
	}
	// (1) idempotency: stored draws, and duplicates inside the batch.
	stored, err := b.storedDraws(ctx, reqs)
	if err != nil {
		return nil, err
	}
	p, err := b.sortRequests(ctx, reqs, stored, rules)
	if err != nil {
		return nil, err
	}
	if err := b.drawAndReject(ctx, p); err != nil {
		return nil, err
	}
	if err := b.insertOutcomes(ctx, p); err != nil {
		return nil, err
	}
	b.signalLocked() // a batch of rejections alone locks no pool row
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	for i, j := range p.dupOf {
		p.res[i] = p.res[j]
		p.res[i].duplicate = true
	}
	s.pilot.record(b.app, b.sw.pilotRooms, reqs, p.res)
	return p.res, nil
}

// batchPlan is what a batch decided from its reads after the fence: each
// request's answer so far, the draws to make and the rejections recorded,
// and the rows both insert.
type batchPlan struct {
	res      []drawResult
	draws    []*drawReq    // to draw, in arrival order
	rules    []*lucky.Rule // draws[k]'s rule version
	at       []int         // draws[k]'s index in the batch
	rejected []*drawReq    // recorded rejections, whose inflow they claim
	dupOf    map[int]int   // a repeated command_id -> its first request
	records  [][]any       // the draws' and the rejections' rows, one statement
	outbox   [][]any       // their lucky_outbox rows, one statement
	events   [][]any       // the draws' lucky_draw_events rows (format draw_events), one statement
}

// sortRequests answers each request with its stored outcome, or as a
// repeat of an earlier request of the batch, or records its rejection (an
// invalid field, a switch, its rule versions); the others are to draw. A request whose
// command_id stands for another payload (stored, or earlier in the batch)
// is answered with a CommandConflictError instead: the one comparison
// every repeat meets, whether it finds the row at once, after its batch
// hit the unique key and was retried, or after a lost COMMIT answer.
func (b *batchTx) sortRequests(ctx context.Context, reqs []*drawReq, stored map[string]storedDraw, rules map[string][]ruleRow) (*batchPlan, error) {
	p := &batchPlan{res: make([]drawResult, len(reqs)), dupOf: map[int]int{}}
	first := map[string]int{} // command_id -> index of its first request
	for i, r := range reqs {
		if d, ok := stored[r.commandID]; ok {
			if !p.conflicts(i, r, d.paid) {
				d.res.duplicate, d.res.dispatch = true, b.sw.global[SwitchWalletDispatch]
				p.res[i] = d.res
			}
			continue
		}
		if j, ok := first[r.commandID]; ok {
			if !p.conflicts(i, r, reqs[j].giftPayload) {
				p.dupOf[i] = j // answered with j's result once drawn
			}
			continue
		}
		first[r.commandID] = i
		reject := RejectInvalidRequest // whatever the switches say: it cannot be drawn
		if r.invalid == nil {
			reject = b.sw.reject(r.roomID)
		}
		if reject == "" && b.day.notCommitted() {
			reject = RejectFairnessNotCommitted
		}
		var rule *lucky.Rule
		if reject == "" {
			var err error
			if rule, reject, err = b.s.resolveRule(ctx, rules, r.giftID, r.ruleVersion, b.nowMs); err != nil {
				return nil, err
			}
		}
		if reject != "" {
			if err := b.reject(p, i, r, rules, reject); err != nil {
				return nil, err
			}
			continue
		}
		p.draws, p.rules, p.at = append(p.draws, r), append(p.rules, rule), append(p.at, i)
	}
	return p, nil
}

// conflicts answers request i, r, with a CommandConflictError when its
// payload is not paid, the one its command_id stands for.
func (p *batchPlan) conflicts(i int, r *drawReq, paid giftPayload) bool {
	fields := r.differs(paid)
	if fields != nil {
		p.res[i] = drawResult{drawID: r.drawID, conflict: &CommandConflictError{CommandID: r.commandID, Fields: fields}}
	}
	return fields != nil
}

// reject records request i, r, rejected for reason: its answer, its row
// and its LuckyDrawRejected, under the named (else the deciding) version.
func (b *batchTx) reject(p *batchPlan, i int, r *drawReq, rules map[string][]ruleRow, reason string) error {
	version := r.ruleVersion
	if version == "" {
		_, _, version = pickVersion(rules[r.giftID], "", b.nowMs, 0)
	}
	p.res[i] = drawResult{drawID: r.drawID, ruleVersion: version, reject: reason}
	p.records = append(p.records, b.rejectionRow(r, version, reason))
	ev, err := b.outboxEvent(r, LuckyDrawRejectedEventID(r.drawID), b.rejectionEvent(r, version, reason))
	if err != nil {
		return err
	}
	p.outbox = append(p.outbox, ev)
	p.rejected = append(p.rejected, r)
	return nil
}

// drawAndReject claims the inflow of the batch's rejections and draws
// (claims before consumption rows, then pool rows, as the sink takes
// them), takes back the inflow the sink had streamed for a rejection, and
// draws, in arrival order, against the locked rows.
func (b *batchTx) drawAndReject(ctx context.Context, p *batchPlan) error {
	streamedRejections, err := b.claimRejections(ctx, p.rejected)
	if err != nil {
		return err
	}
	// Tier enabled as of the fence, not as the loader cached it.
	p.rules = b.withLiveTiers(p.rules)
	streamed := map[string]bool{}
	if len(p.draws) > 0 {
		// The inflow claims first: the sink takes claims before pool
		// rows too, so the two never wait for each other in opposite
		// orders.
		if streamed, err = b.claimInflow(ctx, p.draws); err != nil {
			return err
		}
	}
	reversed, err := b.takeBackInflow(ctx, streamedRejections)
	if err != nil || len(p.draws) == 0 && len(reversed) == 0 {
		return err
	}
	if err := b.lockRows(ctx, p, reversed); err != nil {
		return err
	}
	b.signalLocked()
	// (5)-(6) draw in memory, in arrival order.
	for k, r := range p.draws {
		d, err := b.drawOne(r, p.rules[k], !streamed[r.drawID])
		if err != nil {
			return err
		}
		p.res[p.at[k]] = d.result
		p.records = append(p.records, d.record)
		p.outbox = append(p.outbox, d.outbox...)
		if d.events != nil {
			p.events = append(p.events, d.events)
		}
	}
	// (7)-(10) write.
	b.writePools()
	b.writeCounters()
	b.writeReversedDaily(reversed)
	return nil
}

// lockRows ((3)-(4)) locks the pool rows of the draws and reversals, then
// the draws' capped counters, each in key order, and takes the reversed
// inflows out of the locked pools.
func (b *batchTx) lockRows(ctx context.Context, p *batchPlan, reversed []inflowReversal) error {
	var keys []poolKey
	for _, r := range p.draws {
		ks := poolKeys(r)
		keys = append(keys, ks[:]...)
	}
	for _, v := range reversed {
		ks := v.pools()
		keys = append(keys, ks[:]...)
	}
	if err := b.lockPools(ctx, keys); err != nil {
		return err
	}
	b.reverseInflows(reversed)
	return b.lockCounters(ctx, p.draws, p.rules)
}

// insertOutcomes queues the batch's lucky_outbox rows, its
// lucky_draw_events rows, then its lucky_draw_records rows, one statement
// each, and sends every queued write (writes.exec).
func (b *batchTx) insertOutcomes(ctx context.Context, p *batchPlan) error {
	b.w.add(`INSERT INTO lucky_outbox (event_id, app_code, event_type, message_type,
	aggregate_id, kafka_key, payload, status, worker_id, lock_until_ms, next_retry_at_ms, created_at_ms, updated_at_ms) VALUES `, p.outbox)
	b.w.add(`INSERT INTO lucky_draw_events (draw_id, app_code, events, event_count, message_types,
	status, next_retry_at_ms, created_at_ms, updated_at_ms) VALUES `, p.events)
	b.insertRecords(p.records)
	return b.w.exec(ctx, b.tx, &b.s.writeMode)
}
