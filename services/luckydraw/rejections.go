package luckydraw

import (
	"cmp"
	"context"
	"database/sql"
	"maps"
	"slices"
	"time"

	"github.com/hyapp/roomflow/internal/sqlbuild"
	"github.com/hyapp/roomflow/schemas/activityv1"
)

// A rejected Execute (after room-service's debit) is recorded in the draw
// transaction: its lucky_draw_records row, its LuckyDrawRejected event and
// the claim that keeps the gift's inflow out of the pools.

// RewardRejected is the reward_status of a rejection row in
// lucky_draw_records: an Execute answered with a reject_reason (after
// room-service's debit) is recorded under its command_id and draw_id, so
// a retry answers it again and it can be refunded.
const RewardRejected = "rejected"

// rejectionRow is the lucky_draw_records row of r rejected for reason
// under version (the named or deciding one, "" if none): nothing drawn,
// no inflow, no audit material.
func (b *batchTx) rejectionRow(r *drawReq, version, reason string) []any {
	return []any{r.drawID, r.app, r.commandID, r.requestID, r.billingReceiptID, r.roomID, r.sender, r.target, r.deviceID,
		r.giftID, r.giftCount, r.coinSpent, r.heat, version, 0, 0, 0, 0, "none", "[]", "", "none", 0,
		0, 0, 0, 0, "", "{}", "{}", "", RewardRejected, "", b.nowMs, b.nowMs, reason, r.clientSeed, 0, b.day.mode}
}

// LuckyDrawRejectedEventID is the event id of a rejection's
// LuckyDrawRejected.
func LuckyDrawRejectedEventID(drawID string) string { return "LuckyDrawRejected:" + drawID }

// rejectionEvent is the LuckyDrawRejected of r rejected for reason under
// version: what room-service or finance refunds, by billing_receipt_id.
func (b *batchTx) rejectionEvent(r *drawReq, version, reason string) *activityv1.LuckyDrawRejected {
	return &activityv1.LuckyDrawRejected{EventId: LuckyDrawRejectedEventID(r.drawID), AppCode: r.app, DrawId: r.drawID,
		CommandId: r.commandID, BillingReceiptId: r.billingReceiptID, RoomId: r.roomID, SenderUserId: r.sender,
		TargetUserId: r.target, GiftId: r.giftID, GiftCount: r.giftCount, CoinSpent: r.coinSpent, Reason: reason,
		RuleVersion: version, CreatedAtMs: b.nowMs}
}

// ClaimedByRejection is the lucky_pool_inflow_claims.claimed_by of a
// rejected Execute: the gift's inflow enters no pool (its coins are
// refunded), and the sink's inflow applier adds nothing for it.
const ClaimedByRejection = "rejected"

// ClaimedByReversal is the lucky_pool_inflow_claims.claimed_by, and the
// lucky_pool_inflow_consumption.status, of a gift whose inflow the sink
// had claimed and added before its Execute was rejected: the rejection
// took that inflow back out of the pools and the daily facts
// (docs/reliability.md finding 8). The sink adds nothing for it after.
const ClaimedByReversal = "reversed"

// claimRejections claims the inflow of the rejected gifts, so the sink
// adds none of it to the pools, and returns (locked) the draw ids whose
// inflow the sink had claimed and added first, for takeBackInflow. That happens when room-service wrote the
// gift as a pending draw after an Execute timed out and its retry was
// rejected (a switch went off meanwhile): docs/reliability.md finding 8.
// The claims it did not insert are read with a locking read, as
// claimInflow does (the sink's claim may have committed after this
// transaction's snapshot).
func (b *batchTx) claimRejections(ctx context.Context, reqs []*drawReq) ([]any, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	rows := make([][]any, len(reqs))
	ids := make([]any, len(reqs))
	for i, r := range reqs {
		rows[i], ids[i] = []any{b.app, r.drawID, ClaimedByRejection, b.nowMs}, r.drawID
	}
	res, err := b.tx.ExecContext(ctx, `INSERT IGNORE INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by, created_at_ms) VALUES `+
		sqlbuild.Rows(len(rows), 4), sqlbuild.Flatten(rows)...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n == int64(len(reqs)) {
		return nil, err
	}
	q, err := b.tx.QueryContext(ctx, `SELECT draw_id FROM lucky_pool_inflow_claims WHERE app_code = ? AND claimed_by = 'stream'
	AND draw_id IN (`+sqlbuild.List(len(ids))+`) ORDER BY draw_id FOR UPDATE`, append([]any{b.app}, ids...)...)
	if err != nil {
		return nil, err
	}
	var streamed []any
	err = eachRow(q, func(rows *sql.Rows) error {
		var id string
		err := rows.Scan(&id)
		streamed = append(streamed, id)
		return err
	})
	if err != nil || len(streamed) == 0 {
		return nil, err
	}
	return streamed, nil
}

// inflowReversal is what the sink applied for a rejected gift's draw id
// (its lucky_pool_inflow_consumption row): the rejection subtracts it.
type inflowReversal struct {
	eventID, drawID, roomID, giftID string
	layerIn                         [3]int64 // platform, room, gift: poolKeys' order
	occurredAtMs                    int64
}

func (v inflowReversal) pools() [3]poolKey {
	return poolKeys(&drawReq{giftPayload: giftPayload{roomID: v.roomID, giftID: v.giftID}})
}

// takeBackInflow reads and locks the consumption rows the sink added for
// the streamed draw ids (claims locked by the caller) and marks them and
// their claims reversed; the caller subtracts them from the pools
// (reverseInflows) and the daily facts (writeReversedDaily). A draw id
// whose consumption row is gone (purged: purge.lucky_pool_inflow_consumption)
// cannot be taken back: its claim stays 'stream', logged, and roomflow
// verify reports it. The read goes through the (app_code, draw_id) index
// (migration 0012); its gap locks may briefly hold a sink's insert of a
// neighbouring draw id (a deadlock either side retries).
func (b *batchTx) takeBackInflow(ctx context.Context, drawIDs []any) ([]inflowReversal, error) {
	if len(drawIDs) == 0 {
		return nil, nil
	}
	q, err := b.tx.QueryContext(ctx, `SELECT event_id, draw_id, room_id, gift_id, platform_in, room_in, gift_in, occurred_at_ms
	FROM lucky_pool_inflow_consumption WHERE app_code = ? AND status = 'consumed' AND draw_id IN (`+sqlbuild.List(len(drawIDs))+`)
	ORDER BY draw_id FOR UPDATE`, append([]any{b.app}, drawIDs...)...)
	if err != nil {
		return nil, err
	}
	var out []inflowReversal
	var events, found []any
	err = eachRow(q, func(rows *sql.Rows) error {
		var v inflowReversal
		err := rows.Scan(&v.eventID, &v.drawID, &v.roomID, &v.giftID, &v.layerIn[0], &v.layerIn[1], &v.layerIn[2], &v.occurredAtMs)
		out, events, found = append(out, v), append(events, v.eventID), append(found, v.drawID)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(found) < len(drawIDs) {
		b.s.log.Warn("a rejection found its gift's inflow streamed but no consumption row to take back (purged?): the inflow stays in the pools",
			"streamed", len(drawIDs), "found", len(found))
	}
	if len(out) == 0 {
		return nil, nil
	}
	if _, err := b.tx.ExecContext(ctx, `UPDATE lucky_pool_inflow_claims SET claimed_by = '`+ClaimedByReversal+`' WHERE app_code = ? AND draw_id IN (`+
		sqlbuild.List(len(found))+`)`, append([]any{b.app}, found...)...); err != nil {
		return nil, err
	}
	_, err = b.tx.ExecContext(ctx, `UPDATE lucky_pool_inflow_consumption SET status = '`+ClaimedByReversal+`' WHERE app_code = ? AND event_id IN (`+
		sqlbuild.List(len(events))+`)`, append([]any{b.app}, events...)...)
	return out, err
}

// reverseInflows subtracts the taken-back inflows from the batch's locked
// pool rows (balance and total_in, version + 1 per row, as the sink
// added them), before any draw of the batch reads them. A pool may end
// below its reserve_floor when draws paid out of the refunded coins
// meanwhile: its draws then pay nothing from it until inflow or an
// operator's funding refills it (roomflow verify reports it meanwhile).
func (b *batchTx) reverseInflows(revs []inflowReversal) {
	for _, v := range revs {
		for i, k := range v.pools() {
			p := b.pools[k]
			p.Balance -= v.layerIn[i]
			p.dIn -= v.layerIn[i]
			p.dVersion++
		}
	}
}

// writeReversedDaily takes the reversed gifts out of
// lucky_pool_inflow_daily (inflow and gift_count of the UTC date of their
// occurred_at_ms, per scope), in primary-key order after the pools, the
// sink's lock order: a refunded gift counts in no daily fact, whichever
// came first. The rows exist: the sink wrote them with the claim.
func (b *batchTx) writeReversedDaily(revs []inflowReversal) {
	type dailyKey struct{ date, scopeType, scopeID string }
	sums := map[dailyKey][2]int64{}
	for _, v := range revs {
		date := time.UnixMilli(v.occurredAtMs).UTC().Format(time.DateOnly)
		for i, k := range v.pools() {
			dk := dailyKey{date, k.scopeType, k.scopeID}
			sums[dk] = [2]int64{sums[dk][0] - v.layerIn[i], sums[dk][1] - 1}
		}
	}
	keys := slices.SortedFunc(maps.Keys(sums), func(a, c dailyKey) int {
		return cmp.Or(cmp.Compare(a.date, c.date), cmp.Compare(a.scopeType, c.scopeType), cmp.Compare(a.scopeID, c.scopeID))
	})
	rows := make([][]any, len(keys))
	for i, k := range keys {
		rows[i] = []any{b.app, k.date, k.scopeType, k.scopeID, sums[k][0], sums[k][1], b.nowMs}
	}
	b.w.add(`INSERT INTO lucky_pool_inflow_daily (app_code, stat_date, scope_type, scope_id, inflow, gift_count,
	updated_at_ms) VALUES `, rows, ` ON DUPLICATE KEY UPDATE inflow = inflow + VALUES(inflow), gift_count = gift_count + VALUES(gift_count)`)
}

// eachRow calls scan for each row of rows and closes them.
func eachRow(rows *sql.Rows, scan func(*sql.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
