package luckydraw

import (
	"context"

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
		0, 0, 0, 0, "", "{}", "{}", "", RewardRejected, "", b.nowMs, b.nowMs, reason}
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

// claimRejections claims the inflow of the rejected gifts, so the sink
// adds none of it to the pools. A claim the stream took first is left as
// it is: that inflow stays in the pools and roomflow verify reports it.
// That happens when room-service wrote the gift as a pending draw after an
// Execute timed out and its retry was rejected (a switch went off
// meanwhile): docs/reliability.md finding 8, open.
func (b *batchTx) claimRejections(ctx context.Context, reqs []*drawReq) error {
	if len(reqs) == 0 {
		return nil
	}
	rows := make([][]any, len(reqs))
	for i, r := range reqs {
		rows[i] = []any{b.app, r.drawID, ClaimedByRejection, b.nowMs}
	}
	_, err := b.tx.ExecContext(ctx, `INSERT IGNORE INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by, created_at_ms) VALUES `+
		sqlbuild.Rows(len(rows), 4), sqlbuild.Flatten(rows)...)
	return err
}
