package luckydraw

import (
	"context"
	"fmt"
	"slices"
	"strconv"

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

// riskLimits are a draw's caps (Caps.AppendRiskLimits) against the
// batch's locked counter rows, with its earlier draws applied.
func (b *batchTx) riskLimits(r *drawReq, rule *lucky.Rule) []RiskLimit {
	ws := b.windows(r)
	return b.s.cfg.caps().AppendRiskLimits(nil, rule, ws, func(i int) int64 {
		return b.ctrs[counterKey(b.app, ws[i].Scope, ws[i].ScopeID, ws[i].Window, ws[i].Start)].payout
	})
}

// counterCap is the cap of a risk counter scope under rule (Caps.Cap).
func (b *batchTx) counterCap(rule *lucky.Rule, scope string) int64 {
	return b.s.cfg.caps().Cap(rule, scope)
}

func counterKey(app, scope, id, window string, start int64) string {
	return app + "|" + scope + "|" + id + "|" + window + "|" + strconv.FormatInt(start, 10)
}

// windows are the risk counter windows r touches at the batch's time.
func (b *batchTx) windows(r *drawReq) []Window {
	p := Party{Sender: strconv.FormatInt(r.sender, 10), Device: r.deviceID, Room: r.roomID}
	if r.target > 0 {
		p.Target = strconv.FormatInt(r.target, 10)
	}
	return b.s.cfg.caps().Windows(nil, p, b.nowMs)
}

// counterRows lists the risk counter rows a draw touches, in the order of
// its windows.
func (b *batchTx) counterRows(r *drawReq) []*counter {
	ws := b.windows(r)
	out := make([]*counter, len(ws))
	for i, w := range ws {
		out[i] = &counter{key: counterKey(b.app, w.Scope, w.ScopeID, w.Window, w.Start), scope: w.Scope, scopeID: w.ScopeID,
			window: w.Window, start: w.Start, end: w.End}
	}
	// In commit-reveal mode also the sender's nonce counter of the fairness day.
	if b.day.mode == fairness.ModeCommitReveal {
		id, start := strconv.FormatInt(r.sender, 10), b.day.startMs
		out = append(out, &counter{key: counterKey(b.app, nonceScope, id, nonceWindow, start), scope: nonceScope, scopeID: id,
			window: nonceWindow, start: start, end: start + b.s.cfg.FairnessDayLength.Milliseconds()})
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

// writeCounters queues the batch's counter deltas as one upsert.
func (b *batchTx) writeCounters() {
	var rows [][]any
	for _, c := range b.ctrs {
		if c.dDraws > 0 {
			rows = append(rows, []any{c.key, b.app, c.scope, c.scopeID, c.window, c.dPayout, c.dDraws, c.dHits, c.start, c.end, b.nowMs})
		}
	}
	b.w.add(`INSERT INTO lucky_risk_counters (counter_key, app_code, scope_type, scope_id, window_type,
	payout_coins, draw_count, hit_count, window_start_ms, window_end_ms, updated_at_ms) VALUES `, rows,
		` ON DUPLICATE KEY UPDATE payout_coins = payout_coins + VALUES(payout_coins), draw_count = draw_count + VALUES(draw_count),
	hit_count = hit_count + VALUES(hit_count), updated_at_ms = VALUES(updated_at_ms)`)
}
