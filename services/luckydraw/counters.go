package luckydraw

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/sqlbuild"
)

// Risk counters of a draw batch: the caps a draw checks, the capped
// counters locked in key order, and every counter's deltas written in one
// upsert.

// counter is a lucky_risk_counters row.
type counter struct {
	key, scope, scopeID, window string
	start, end                  int64
	payout, draws, hits         int64 // current values (before + this batch)
	dPayout, dDraws, dHits      int64 // this batch's deltas
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

func dayStart(ms int64) int64 { return ms - ms%dayMs }

func hourStart(ms int64) int64 { return ms - ms%hourMs }

func (b *batchTx) activityOn() bool {
	c := b.s.cfg
	return c.ActivityPeriodEndMs > c.ActivityPeriodStartMs && b.nowMs >= c.ActivityPeriodStartMs && b.nowMs < c.ActivityPeriodEndMs
}

func counterKey(app, scope, id, window string, start int64) string {
	return app + "|" + scope + "|" + id + "|" + window + "|" + strconv.FormatInt(start, 10)
}

// counterRows lists the risk counter rows a draw touches (UTC windows
// at the batch's time), in no particular order; in commit-reveal mode
// also the sender's nonce counter of the fairness day.
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
	if b.day.mode == fairness.ModeCommitReveal {
		start := b.day.startMs
		out = append(out, mk(nonceScope, strconv.FormatInt(r.sender, 10), nonceWindow, start, start+b.s.cfg.FairnessDayLength.Milliseconds()))
	}
	return out
}

// lockCounters locks the batch's capped risk counters and nonce counters
// (reqs[i] drawn under rules[i]) FOR UPDATE in key order, creating
// missing rows first: their totals decide the draws. An uncapped window's counter is only
// counted: writeCounters adds the batch's deltas to it without reading it.
func (b *batchTx) lockCounters(ctx context.Context, reqs []*drawReq, rules []*lucky.Rule) error {
	want := map[string]*counter{}
	var keys []string
	for i, r := range reqs {
		for _, c := range b.counterRows(r) {
			if (b.counterCap(rules[i], c.scope) > 0 || c.scope == nonceScope) && want[c.key] == nil {
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
