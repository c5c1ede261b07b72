package luckydraw

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/internal/sqlbuild"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/walletv1"
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
	app, drawID, commandID, requestID, billingReceiptID string
	roomID, deviceID, giftID, ruleVersion               string
	sender, target                                      int64
	giftCount                                           int32
	coinSpent, heat                                     int64
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
	dispatch               bool // wallet_credit_dispatch as the draw's transaction read it
}

// poolKey names a lucky_pools row within the batch's app_code.
type poolKey struct{ scopeType, scopeID string }

// counter is a lucky_risk_counters row.
type counter struct {
	key, scope, scopeID, window string
	start, end                  int64
	payout, draws, hits         int64 // current values (before + this batch)
	dPayout, dDraws, dHits      int64 // this batch's deltas
}

type poolRow struct {
	PoolState
	dIn, dOut, dVersion int64
}

// batchTx is the state of one batch transaction.
type batchTx struct {
	s     *Service
	tx    *sql.Tx
	app   string
	nowMs int64
	sw    *switchView                     // read after the fence
	tiers map[tierVersion]map[string]bool // tier enabled of the active versions, read after the fence
	pools map[poolKey]*poolRow
	ctrs  map[string]*counter
}

// runBatch runs reqs (one app_code) in one transaction, retrying
// deadlocks, lock wait timeouts, duplicate keys and lost connections until
// DrawTimeout ends. The results are in reqs' order. committing is called
// once, when the first attempt has written everything and is about to
// COMMIT (nil: not called).
func (s *Service) runBatch(reqs []*drawReq, committing func()) ([]drawResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrawTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		res, err := s.tryBatch(ctx, reqs, committing)
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

func (s *Service) tryBatch(ctx context.Context, reqs []*drawReq, committing func()) ([]drawResult, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	b := &batchTx{s: s, tx: tx, app: reqs[0].app, nowMs: s.cfg.Now().UnixMilli(), pools: map[poolKey]*poolRow{}, ctrs: map[string]*counter{}}
	res := make([]drawResult, len(reqs))

	// (0) the fence first: an operator change waits for this batch to
	// commit, and every read below sees the changes that returned before;
	// the switches, rule versions and tier flags come in its statement.
	rules, err := b.readFenced(ctx, reqs)
	if err != nil {
		return nil, err
	}
	b.nowMs = s.cfg.Now().UnixMilli() // after any wait at the fence
	// (1) idempotency: stored draws, and duplicates inside the batch.
	stored, err := b.storedDraws(ctx, reqs)
	if err != nil {
		return nil, err
	}
	type work struct {
		i    int
		rule *lucky.Rule
	}
	var todo []work
	var records [][]any       // the draws' and the rejections', one statement
	var outbox [][]any        // their lucky_outbox rows, one statement
	var rejected []*drawReq   // the rejections, whose inflow they claim
	first := map[string]int{} // command_id -> index of its first request
	dupOf := map[int]int{}    // a repeated command_id -> its first request
	for i, r := range reqs {
		if d, ok := stored[r.commandID]; ok {
			d.duplicate, d.dispatch = true, b.sw.global[SwitchWalletDispatch]
			res[i] = d
			continue
		}
		if j, ok := first[r.commandID]; ok {
			dupOf[i] = j // answered with j's result once drawn
			continue
		}
		first[r.commandID] = i
		reject := b.sw.reject(r.roomID)
		var rule *lucky.Rule
		if reject == "" {
			if rule, reject, err = s.resolveRule(ctx, rules, r.giftID, r.ruleVersion); err != nil {
				return nil, err
			}
		}
		if reject != "" {
			version := r.ruleVersion
			if version == "" {
				_, _, version = pickVersion(rules[r.giftID], "", b.nowMs, 0)
			}
			res[i] = drawResult{drawID: r.drawID, ruleVersion: version, reject: reject}
			records = append(records, b.rejectionRow(r, version, reject))
			ev, err := b.outboxEvent(r, LuckyDrawRejectedEventID(r.drawID), b.rejectionEvent(r, version, reject))
			if err != nil {
				return nil, err
			}
			outbox = append(outbox, ev)
			rejected = append(rejected, r)
			continue
		}
		todo = append(todo, work{i, rule})
	}
	// Claims before consumption rows, then pool rows, as the sink takes
	// them.
	streamedRejections, err := b.claimRejections(ctx, rejected)
	if err != nil {
		return nil, err
	}
	drawReqs := make([]*drawReq, len(todo))
	drawRules := make([]*lucky.Rule, len(todo))
	streamed := map[string]bool{}
	if len(todo) > 0 {
		for k, w := range todo {
			drawReqs[k], drawRules[k] = reqs[w.i], w.rule
		}
		// Tier enabled as of the fence, not as the loader cached it.
		drawRules = b.withLiveTiers(drawRules)
		// The inflow claims first: the sink takes claims before pool
		// rows too, so the two never wait for each other in opposite
		// orders.
		if streamed, err = b.claimInflow(ctx, drawReqs); err != nil {
			return nil, err
		}
	}
	reversed, err := b.takeBackInflow(ctx, streamedRejections)
	if err != nil {
		return nil, err
	}
	if len(todo) > 0 || len(reversed) > 0 {
		// (3)-(4) lock pools, then counters, each in key order.
		var keys []poolKey
		for _, r := range drawReqs {
			ks := poolKeys(r)
			keys = append(keys, ks[:]...)
		}
		for _, v := range reversed {
			ks := v.pools()
			keys = append(keys, ks[:]...)
		}
		if err := b.lockPools(ctx, keys); err != nil {
			return nil, err
		}
		b.reverseInflows(reversed)
		if err := b.lockCounters(ctx, drawReqs, drawRules); err != nil {
			return nil, err
		}
		// (5)-(6) draw in memory, in arrival order.
		for k, w := range todo {
			r := reqs[w.i]
			d, rec, ob, err := b.drawOne(r, drawRules[k], !streamed[r.drawID])
			if err != nil {
				return nil, err
			}
			res[w.i] = d
			records = append(records, rec)
			outbox = append(outbox, ob...)
		}
		// (7)-(10) write.
		if err := b.writePools(ctx); err != nil {
			return nil, err
		}
		if err := b.writeCounters(ctx); err != nil {
			return nil, err
		}
		if err := b.writeReversedDaily(ctx, reversed); err != nil {
			return nil, err
		}
	}
	if err := insertRows(ctx, tx, `INSERT INTO lucky_outbox (event_id, app_code, event_type, message_type,
	aggregate_id, kafka_key, payload, status, worker_id, lock_until_ms, next_retry_at_ms, created_at_ms, updated_at_ms) VALUES `, outbox); err != nil {
		return nil, err
	}
	if err := b.insertRecords(ctx, records); err != nil {
		return nil, err
	}
	if committing != nil {
		committing()
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	for i, j := range dupOf {
		res[i] = res[j]
		res[i].duplicate = true
	}
	s.pilot.record(b.app, b.sw.pilotRooms, reqs, res)
	return res, nil
}

// insertRecords inserts lucky_draw_records rows: draws (drawOne) and
// rejections (rejectionRow) alike.
func (b *batchTx) insertRecords(ctx context.Context, rows [][]any) error {
	return insertRows(ctx, b.tx, `INSERT INTO lucky_draw_records (draw_id, app_code, command_id, request_id,
	billing_receipt_id, room_id, sender_user_id, target_user_id, device_id, gift_id, gift_count, coin_spent, heat_value,
	rule_version, pool_in, platform_in, room_in, gift_in, inflow_applied_by, candidate_tiers_json, selected_tier_id,
	tier_type, reward_coins, platform_out, room_out, gift_out, random_value, random_digest, pool_snapshot_json,
	risk_snapshot_json, reward_id, reward_status, credit_receipt_id, created_at_ms, updated_at_ms, reject_reason) VALUES `, rows)
}

// outboxEvent is the lucky_outbox row of lucky event m of r's draw (or
// rejection), pending for the outbox worker to publish.
func (b *batchTx) outboxEvent(r *drawReq, id string, m proto.Message) ([]any, error) {
	payload, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return []any{id, r.app, "activity_event", string(m.ProtoReflect().Descriptor().Name()), r.drawID, r.giftID,
		payload, "pending", "", 0, b.nowMs, b.nowMs, b.nowMs}, nil
}

// storedDraws reads the stored outcomes (draws and rejections) of the
// batch's command ids.
func (b *batchTx) storedDraws(ctx context.Context, reqs []*drawReq) (map[string]drawResult, error) {
	args := []any{b.app}
	for _, r := range reqs {
		args = append(args, r.commandID)
	}
	rows, err := b.tx.QueryContext(ctx, `SELECT command_id, draw_id, rule_version, selected_tier_id, tier_type, reward_coins,
	reward_id, reward_status, credit_receipt_id, reject_reason FROM lucky_draw_records WHERE app_code = ? AND command_id IN (`+
		sqlbuild.List(len(reqs))+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]drawResult{}
	for rows.Next() {
		var cmd string
		var d drawResult
		if err := rows.Scan(&cmd, &d.drawID, &d.ruleVersion, &d.tierID, &d.tierType, &d.rewardCoins, &d.rewardID,
			&d.rewardStatus, &d.creditReceiptID, &d.reject); err != nil {
			return nil, err
		}
		out[cmd] = d
	}
	return out, rows.Err()
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func readRuleRows(ctx context.Context, q querier, gifts []any) (map[string][]ruleRow, error) {
	return scanRuleRows(q.QueryContext(ctx, `SELECT gift_id, rule_version, status, effective_at_ms, id FROM lucky_gift_rules
WHERE gift_id IN (`+sqlbuild.List(len(gifts))+`)`, gifts...))
}

// scanRuleRows reads a query of (gift_id, rule_version, status,
// effective_at_ms, id) by gift.
func scanRuleRows(rows *sql.Rows, err error) (map[string][]ruleRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]ruleRow{}
	for rows.Next() {
		var r ruleRow
		if err := rows.Scan(&r.gift, &r.version, &r.status, &r.effectiveAt, &r.id); err != nil {
			return nil, err
		}
		out[r.gift] = append(out[r.gift], r)
	}
	return out, rows.Err()
}

// resolveRule picks and loads a draw's rule version, or a reject reason.
func (s *Service) resolveRule(ctx context.Context, rules map[string][]ruleRow, gift, version string) (*lucky.Rule, string, error) {
	v, reject, _ := pickVersion(rules[gift], version, s.cfg.Now().UnixMilli(), s.cfg.ReplacedVersionGrace.Milliseconds())
	if reject != "" {
		return nil, reject, nil
	}
	r, err := s.rules.Get(ctx, gift, v)
	switch {
	case errors.Is(err, lucky.ErrInvalidRule):
		return nil, RejectRuleInvalid, nil
	case errors.Is(err, lucky.ErrUnknownRule):
		return nil, RejectRuleNotActive, nil
	case err != nil:
		return nil, "", err
	}
	if err := CheckRule(r); err != nil {
		return nil, RejectRuleInvalid, nil
	}
	return r, "", nil
}

func poolKeys(r *drawReq) [3]poolKey {
	return [3]poolKey{{"platform", "global"}, {"room", r.roomID}, {"gift", r.giftID}}
}

// lockPools locks the pool rows of keys (the batch's draws and reversals,
// repeats allowed) FOR UPDATE in primary-key order, creating missing rows
// empty first.
func (b *batchTx) lockPools(ctx context.Context, keys []poolKey) error {
	slices.SortFunc(keys, func(a, c poolKey) int {
		return strings.Compare(a.scopeType+"\x00"+a.scopeID, c.scopeType+"\x00"+c.scopeID)
	})
	keys = slices.Compact(keys)
	if err := b.selectPools(ctx, keys); err != nil {
		return err
	}
	var missing []poolKey
	for _, k := range keys {
		if b.pools[k] == nil {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var rows [][]any
	for _, k := range missing {
		rows = append(rows, []any{b.app, k.scopeType, k.scopeID, b.nowMs})
	}
	if err := insertRows(ctx, b.tx, `INSERT IGNORE INTO lucky_pools (app_code, scope_type, scope_id, updated_at_ms) VALUES `, rows); err != nil {
		return err
	}
	if err := b.selectPools(ctx, missing); err != nil {
		return err
	}
	for _, k := range missing {
		if b.pools[k] == nil {
			return fmt.Errorf("luckydraw: pool %s/%s missing after insert", k.scopeType, k.scopeID)
		}
	}
	return nil
}

func (b *batchTx) selectPools(ctx context.Context, keys []poolKey) error {
	args := []any{b.app}
	var cond []string
	for _, k := range keys {
		cond = append(cond, "(scope_type = ? AND scope_id = ?)")
		args = append(args, k.scopeType, k.scopeID)
	}
	rows, err := b.tx.QueryContext(ctx, `SELECT scope_type, scope_id, balance, reserve_floor FROM lucky_pools
WHERE app_code = ? AND (`+strings.Join(cond, " OR ")+`) ORDER BY scope_type, scope_id FOR UPDATE`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		p := &poolRow{}
		if err := rows.Scan(&p.ScopeType, &p.ScopeID, &p.Balance, &p.ReserveFloor); err != nil {
			return err
		}
		b.pools[poolKey{p.ScopeType, p.ScopeID}] = p
	}
	return rows.Err()
}

// riskLimits are a draw's caps: max_single_payout and one per capped
// risk counter row it touches (locked, with this batch's earlier draws
// applied). A window without a cap has no quota to check.
func (b *batchTx) riskLimits(r *drawReq, rule *lucky.Rule) []RiskLimit {
	limits := []RiskLimit{{Scope: "single", Window: "draw", Cap: rule.MaxSinglePayout}}
	for _, c := range b.counterRows(r) {
		if cap := b.counterCap(rule, c.scope); cap > 0 {
			c = b.ctrs[c.key]
			limits = append(limits, RiskLimit{Scope: c.scope, ScopeID: c.scopeID, Window: c.window, Cap: cap, Used: c.payout})
		}
	}
	return limits
}

// counterCap is the cap of a risk counter scope under rule: the rule row
// holds the user daily and room hourly caps, the config the others; 0 =
// no cap.
func (b *batchTx) counterCap(rule *lucky.Rule, scope string) int64 {
	cfg := b.s.cfg
	switch scope {
	case "user":
		return rule.MaxUserDailyPayout
	case "room":
		return rule.MaxRoomHourlyPayout
	case "device":
		return cfg.MaxDeviceDailyPayout
	case "anchor":
		return cfg.MaxAnchorDailyPayout
	case "activity":
		return cfg.ActivityPeriodPayout
	}
	return 0
}

const (
	hourMs = int64(time.Hour / time.Millisecond)
	dayMs  = 24 * hourMs
)

func dayStart(ms int64) int64  { return ms - ms%dayMs }
func hourStart(ms int64) int64 { return ms - ms%hourMs }

func (b *batchTx) activityOn() bool {
	c := b.s.cfg
	return c.ActivityPeriodEndMs > c.ActivityPeriodStartMs && b.nowMs >= c.ActivityPeriodStartMs && b.nowMs < c.ActivityPeriodEndMs
}

func counterKey(app, scope, id, window string, start int64) string {
	return app + "|" + scope + "|" + id + "|" + window + "|" + strconv.FormatInt(start, 10)
}

// counterRows lists the risk counter rows a draw touches (UTC windows
// at the batch's time), in no particular order.
func (b *batchTx) counterRows(r *drawReq) []*counter {
	day, hour := dayStart(b.nowMs), hourStart(b.nowMs)
	mk := func(scope, id, window string, start, end int64) *counter {
		return &counter{key: counterKey(b.app, scope, id, window, start), scope: scope, scopeID: id, window: window, start: start, end: end}
	}
	out := []*counter{mk("user", strconv.FormatInt(r.sender, 10), "daily", day, day+dayMs)}
	if r.deviceID != "" {
		out = append(out, mk("device", r.deviceID, "daily", day, day+dayMs))
	}
	out = append(out, mk("room", r.roomID, "hourly", hour, hour+hourMs))
	if r.target > 0 {
		out = append(out, mk("anchor", strconv.FormatInt(r.target, 10), "daily", day, day+dayMs))
	}
	if b.activityOn() {
		c := b.s.cfg
		out = append(out, mk("activity", "period", "period", c.ActivityPeriodStartMs, c.ActivityPeriodEndMs))
	}
	return out
}

// lockCounters locks the batch's capped risk counters (reqs[i] drawn
// under rules[i]) FOR UPDATE in key order, creating missing rows first:
// their totals decide the draws. An uncapped window's counter is only
// counted: writeCounters adds the batch's deltas to it without reading it.
func (b *batchTx) lockCounters(ctx context.Context, reqs []*drawReq, rules []*lucky.Rule) error {
	want := map[string]*counter{}
	var keys []string
	for i, r := range reqs {
		for _, c := range b.counterRows(r) {
			if b.counterCap(rules[i], c.scope) > 0 && want[c.key] == nil {
				want[c.key] = c
				keys = append(keys, c.key)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	if err := b.selectCounters(ctx, keys, want); err != nil {
		return err
	}
	var missing []string
	var rows [][]any
	for _, k := range keys {
		if b.ctrs[k] == nil {
			c := want[k]
			missing = append(missing, k)
			rows = append(rows, []any{k, b.app, c.scope, c.scopeID, c.window, c.start, c.end, b.nowMs})
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := insertRows(ctx, b.tx, `INSERT IGNORE INTO lucky_risk_counters (counter_key, app_code, scope_type, scope_id,
	window_type, window_start_ms, window_end_ms, updated_at_ms) VALUES `, rows); err != nil {
		return err
	}
	if err := b.selectCounters(ctx, missing, want); err != nil {
		return err
	}
	for _, k := range missing {
		if b.ctrs[k] == nil {
			return fmt.Errorf("luckydraw: risk counter %s missing after insert", k)
		}
	}
	return nil
}

func (b *batchTx) selectCounters(ctx context.Context, keys []string, want map[string]*counter) error {
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := b.tx.QueryContext(ctx, `SELECT counter_key, payout_coins, draw_count, hit_count FROM lucky_risk_counters
WHERE counter_key IN (`+sqlbuild.List(len(keys))+`) ORDER BY counter_key FOR UPDATE`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var payout, draws, hits int64
		if err := rows.Scan(&k, &payout, &draws, &hits); err != nil {
			return err
		}
		c := want[k]
		c.payout, c.draws, c.hits = payout, draws, hits
		b.ctrs[k] = c
	}
	return rows.Err()
}

// claimInflow claims each draw's inflow in lucky_pool_inflow_claims and
// returns the draws whose inflow the stream sink claimed first. The claims
// it did not insert are read with a locking read: the sink's claim may
// have been committed while the INSERT IGNORE waited for it, after this
// transaction's snapshot, which a plain SELECT would read (and the inflow
// would enter lucky_pools twice).
func (b *batchTx) claimInflow(ctx context.Context, reqs []*drawReq) (map[string]bool, error) {
	var rows [][]any
	args := []any{b.app}
	for _, r := range reqs {
		rows = append(rows, []any{b.app, r.drawID, "draw", b.nowMs})
		args = append(args, r.drawID)
	}
	res, err := b.tx.ExecContext(ctx, `INSERT IGNORE INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by, created_at_ms) VALUES `+
		sqlbuild.Rows(len(rows), 4), sqlbuild.Flatten(rows)...)
	if err != nil {
		return nil, err
	}
	streamed := map[string]bool{}
	if n, err := res.RowsAffected(); err != nil || n == int64(len(reqs)) {
		return streamed, err
	}
	q, err := b.tx.QueryContext(ctx, `SELECT draw_id FROM lucky_pool_inflow_claims WHERE app_code = ? AND claimed_by <> 'draw'
	AND draw_id IN (`+sqlbuild.List(len(reqs))+`) LOCK IN SHARE MODE`, args...)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	for q.Next() {
		var id string
		if err := q.Scan(&id); err != nil {
			return nil, err
		}
		streamed[id] = true
	}
	return streamed, q.Err()
}

// randomPPM is a uniform value in [0, 1,000,000) from crypto/rand
// (rand.Int rejects out-of-range samples: no modulo bias).
func randomPPM() (int64, error) {
	v, err := rand.Int(rand.Reader, big.NewInt(lucky.PPM))
	if err != nil {
		return 0, fmt.Errorf("luckydraw: random: %w", err)
	}
	return v.Int64(), nil
}

// drawOne draws r against the batch's in-memory rows and returns its
// result, its lucky_draw_records row and its lucky_outbox rows.
func (b *batchTx) drawOne(r *drawReq, rule *lucky.Rule, applyInflow bool) (drawResult, []any, [][]any, error) {
	dispatch := b.sw.global[SwitchWalletDispatch]
	keys := poolKeys(r)
	in := DrawInput{Rule: rule, CoinSpent: r.coinSpent, HeatValue: r.heat, ApplyInflow: applyInflow,
		Risks: b.riskLimits(r, rule), LargeTierMinReward: b.s.cfg.LargeTierMinReward, LargeTierEnabled: b.sw.global[SwitchLargeTier]}
	for i, k := range keys {
		in.Pools[i] = b.pools[k].PoolState
	}
	plan, err := NewPlan(in)
	if err != nil {
		return drawResult{}, nil, nil, err
	}
	random, err := randomPPM()
	if err != nil {
		return drawResult{}, nil, nil, err
	}
	o, err := plan.Draw(rule, random)
	if err != nil {
		return drawResult{}, nil, nil, err
	}
	reward := o.Tier.RewardCoins
	rewardID, status := "", "none"
	if reward > 0 {
		rewardID, status = RewardID(r.drawID), "pending"
	}
	appliedBy := "draw"
	if !applyInflow {
		appliedBy = "stream"
	}
	// Snapshots before the draw's writes.
	ps := PoolSnapshot{CurrentPoolBalance: plan.CurrentPoolBalance, AvailablePayout: plan.AvailablePayout, InflowAppliedBy: appliedBy}
	for i := range keys {
		ps.Layers = append(ps.Layers, PoolLayerSnapshot{PoolState: in.Pools[i], LayerIn: plan.LayerIn[i], Capacity: plan.Capacity[i]})
	}
	rs := RiskSnapshot{Limits: in.Risks, RiskCapacity: plan.RiskCapacity}
	if rs.RiskCapacity == math.MaxInt64 {
		rs.RiskCapacity = -1
	}
	for _, l := range plan.RiskRejected {
		rs.Rejected = append(rs.Rejected, l.Scope)
	}
	candJSON, err := json.Marshal(plan.Candidates)
	if err != nil {
		return drawResult{}, nil, nil, err
	}
	poolJSON, _ := json.Marshal(ps)
	riskJSON, _ := json.Marshal(rs)
	digest := Digest([]byte(b.s.cfg.AuditKey), DigestInput{DrawID: r.drawID, CommandID: r.commandID, AppCode: r.app,
		GiftID: r.giftID, RuleVersion: rule.RuleVersion, Candidates: plan.Candidates, RandomValue: random})

	// (7)-(8) in memory: pools and counters.
	var after [3]int64
	for i, k := range keys {
		p := b.pools[k]
		p.Balance += plan.LayerIn[i] - o.LayerOut[i]
		p.dIn += plan.LayerIn[i]
		p.dOut += o.LayerOut[i]
		p.dVersion++
		after[i] = p.Balance
	}
	for _, c := range b.counterRows(r) {
		if b.ctrs[c.key] == nil { // uncapped: counted, never read
			b.ctrs[c.key] = c
		}
		c = b.ctrs[c.key]
		c.payout += reward
		c.dPayout += reward
		c.draws++
		c.dDraws++
		if o.Hit() {
			c.hits++
			c.dHits++
		}
	}
	var poolIn int64
	if applyInflow {
		poolIn = plan.Inflow.PoolIn
	}
	rec := []any{r.drawID, r.app, r.commandID, r.requestID, r.billingReceiptID, r.roomID, r.sender, r.target, r.deviceID,
		r.giftID, r.giftCount, r.coinSpent, r.heat, rule.RuleVersion, plan.Inflow.PoolIn, plan.Inflow.PlatformIn,
		plan.Inflow.RoomIn, plan.Inflow.GiftIn, appliedBy, candJSON, o.Tier.TierID, o.Tier.RewardType, reward,
		o.LayerOut[0], o.LayerOut[1], o.LayerOut[2], random, digest, poolJSON, riskJSON, rewardID, status, "", b.nowMs, b.nowMs, ""}

	// (10) outbox.
	var ob [][]any
	event := func(id string, m proto.Message) error {
		row, err := b.outboxEvent(r, id, m)
		ob = append(ob, row)
		return err
	}
	if reward > 0 {
		payload, err := proto.Marshal(&walletv1.CreditLuckyRewardRequest{RewardId: rewardID, CommandId: r.commandID,
			DrawId: r.drawID, RoomId: r.roomID, UserId: r.sender, RewardCoins: reward, Reason: "lucky_gift_reward"})
		if err != nil {
			return drawResult{}, nil, nil, err
		}
		// The synchronous dispatch right after commit is claimed here, in
		// the draw's transaction (no commit of its own); the outbox worker
		// takes the row over once the claim lapses, as after a crash.
		due := b.nowMs + (2*b.s.cfg.WalletCreditTimeout + time.Second).Milliseconds()
		st, worker, lockUntil := "pending", "", int64(0)
		if dispatch && b.s.cfg.Dispatcher != nil {
			st, worker, lockUntil = "processing", b.s.cfg.Dispatcher.ClaimedBy(), due
		}
		ob = append(ob, []any{"RewardCredit:" + rewardID, r.app, "reward_credit", "CreditLuckyRewardRequest", r.drawID,
			r.giftID, payload, st, worker, lockUntil, due, b.nowMs, b.nowMs})
	}
	if err := event("LuckyGiftDrawn:"+r.drawID, &activityv1.LuckyGiftDrawn{EventId: "LuckyGiftDrawn:" + r.drawID,
		AppCode: r.app, DrawId: r.drawID, CommandId: r.commandID, RoomId: r.roomID, GiftId: r.giftID,
		RuleVersion: rule.RuleVersion, SenderUserId: r.sender, TargetUserId: r.target, TierId: o.Tier.TierID,
		TierType: o.Tier.RewardType, RewardCoins: reward, Hit: o.Hit(), CoinSpent: r.coinSpent, HeatValue: r.heat,
		PoolIn: poolIn, TargetPayoutRatePpm: rule.TargetPayoutRatePPM, DrawnAtMs: b.nowMs}); err != nil {
		return drawResult{}, nil, nil, err
	}
	for i, k := range keys {
		id := "LuckyPoolChanged:" + r.drawID + ":" + k.scopeType
		if err := event(id, &activityv1.LuckyPoolChanged{EventId: id, AppCode: r.app, DrawId: r.drawID, ScopeType: k.scopeType,
			ScopeId: k.scopeID, DeltaIn: plan.LayerIn[i], DeltaOut: o.LayerOut[i], Balance: after[i], GiftId: r.giftID,
			ChangedAtMs: b.nowMs}); err != nil {
			return drawResult{}, nil, nil, err
		}
	}
	for _, l := range plan.RiskRejected {
		id := "LuckyRiskRejected:" + r.drawID + ":" + l.Scope
		if err := event(id, &activityv1.LuckyRiskRejected{EventId: id, AppCode: r.app, DrawId: r.drawID, Scope: l.Scope,
			ScopeId: l.ScopeID, Threshold: l.Cap, Remaining: l.Remaining(), Reason: l.Window + " cap removed a payable tier",
			GiftId: r.giftID, AtMs: b.nowMs}); err != nil {
			return drawResult{}, nil, nil, err
		}
	}
	if reward > 0 && !dispatch {
		id := "LuckyRewardPending:" + rewardID + ":0"
		if err := event(id, &activityv1.LuckyRewardPending{EventId: id, AppCode: r.app, RewardId: rewardID, DrawId: r.drawID,
			UserId: r.sender, RewardCoins: reward, RetryReason: SwitchWalletDispatch + " off", GiftId: r.giftID,
			RoomId: r.roomID, AtMs: b.nowMs}); err != nil {
			return drawResult{}, nil, nil, err
		}
	}
	return drawResult{drawID: r.drawID, ruleVersion: rule.RuleVersion, tierID: o.Tier.TierID, tierType: o.Tier.RewardType,
		rewardCoins: reward, rewardID: rewardID, rewardStatus: status, dispatch: dispatch}, rec, ob, nil
}

// writePools applies the batch's pool deltas in one upsert (the rows
// exist and are locked).
func (b *batchTx) writePools(ctx context.Context) error {
	var rows [][]any
	for _, p := range b.pools {
		if p.dVersion > 0 {
			rows = append(rows, []any{b.app, p.ScopeType, p.ScopeID, p.dIn - p.dOut, p.dIn, p.dOut, p.dVersion, b.nowMs})
		}
	}
	return insertRows(ctx, b.tx, `INSERT INTO lucky_pools (app_code, scope_type, scope_id, balance, total_in, total_out,
	version, updated_at_ms) VALUES `, rows, ` ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance),
	total_in = total_in + VALUES(total_in), total_out = total_out + VALUES(total_out), version = version + VALUES(version),
	updated_at_ms = VALUES(updated_at_ms)`)
}

// writeCounters applies the batch's counter deltas in one upsert.
func (b *batchTx) writeCounters(ctx context.Context) error {
	var rows [][]any
	for _, c := range b.ctrs {
		if c.dDraws > 0 {
			rows = append(rows, []any{c.key, b.app, c.scope, c.scopeID, c.window, c.dPayout, c.dDraws, c.dHits, c.start, c.end, b.nowMs})
		}
	}
	return insertRows(ctx, b.tx, `INSERT INTO lucky_risk_counters (counter_key, app_code, scope_type, scope_id, window_type,
	payout_coins, draw_count, hit_count, window_start_ms, window_end_ms, updated_at_ms) VALUES `, rows,
		` ON DUPLICATE KEY UPDATE payout_coins = payout_coins + VALUES(payout_coins), draw_count = draw_count + VALUES(draw_count),
	hit_count = hit_count + VALUES(hit_count), updated_at_ms = VALUES(updated_at_ms)`)
}

// insertRows runs head + one (?, ...) group per row + tail; nothing for
// no rows.
func insertRows(ctx context.Context, tx *sql.Tx, head string, rows [][]any, tail ...string) error {
	if len(rows) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, head+sqlbuild.Rows(len(rows), len(rows[0]))+strings.Join(tail, ""), sqlbuild.Flatten(rows)...)
	return err
}
