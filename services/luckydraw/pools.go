package luckydraw

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hyapp/roomflow/internal/sqlbuild"
)

// Pool rows of a draw batch: the inflow claims that decide who adds a
// gift's inflow, the pool rows locked in key order, and their deltas
// written in one upsert.

// PlatformScopeID is the scope_id of an app's platform pool, the one row
// of scope_type platform every draw reads.
const PlatformScopeID = "global"

// poolKey names a lucky_pools row within the batch's app_code.
type poolKey struct{ scopeType, scopeID string }

// poolRow is a locked lucky_pools row and the batch's deltas to it.
type poolRow struct {
	PoolState
	dIn, dOut, dVersion int64
}

func poolKeys(r *drawReq) [3]poolKey {
	return [3]poolKey{{"platform", PlatformScopeID}, {"room", r.roomID}, {"gift", r.giftID}}
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

// writePools queues the batch's pool deltas as one upsert (the rows
// exist and are locked).
func (b *batchTx) writePools() {
	var rows [][]any
	for _, p := range b.pools {
		if p.dVersion > 0 {
			rows = append(rows, []any{b.app, p.ScopeType, p.ScopeID, p.dIn - p.dOut, p.dIn, p.dOut, p.dVersion, b.nowMs})
		}
	}
	b.w.add(`INSERT INTO lucky_pools (app_code, scope_type, scope_id, balance, total_in, total_out,
	version, updated_at_ms) VALUES `, rows, ` ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance),
	total_in = total_in + VALUES(total_in), total_out = total_out + VALUES(total_out), version = version + VALUES(version),
	updated_at_ms = VALUES(updated_at_ms)`)
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
