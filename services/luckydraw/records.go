package luckydraw

import (
	"context"
	"database/sql"
	"strings"

	"github.com/hyapp/roomflow/internal/sqlbuild"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"google.golang.org/protobuf/proto"
)

// The batch's lucky_draw_records, lucky_outbox and lucky_draw_events
// rows: the stored
// outcomes a retry answers, and the multi-row inserts of new ones.

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

// insertRecords queues the lucky_draw_records rows: draws (drawOne) and
// rejections (rejectionRow) alike.
func (b *batchTx) insertRecords(rows [][]any) {
	b.w.add(`INSERT INTO lucky_draw_records (draw_id, app_code, command_id, request_id,
	billing_receipt_id, room_id, sender_user_id, target_user_id, device_id, gift_id, gift_count, coin_spent, heat_value,
	rule_version, pool_in, platform_in, room_in, gift_in, inflow_applied_by, candidate_tiers_json, selected_tier_id,
	tier_type, reward_coins, platform_out, room_out, gift_out, random_value, random_digest, pool_snapshot_json,
	risk_snapshot_json, reward_id, reward_status, credit_receipt_id, created_at_ms, updated_at_ms, reject_reason, client_seed, nonce, fairness_mode) VALUES `, rows)
}

// outboxEvent is the lucky_outbox row of lucky event m of r's draw (or
// rejection), pending for the outbox worker to publish.
func (b *batchTx) outboxEvent(r *drawReq, id string, m proto.Message) ([]any, error) {
	payload, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return []any{id, r.app, "activity_event", messageType(m), r.drawID, r.giftID,
		payload, "pending", "", 0, b.nowMs, b.nowMs, b.nowMs}, nil
}

// messageType is m's message_type: its message name.
func messageType(m proto.Message) string { return string(m.ProtoReflect().Descriptor().Name()) }

// drawEventsRow is the lucky_draw_events row of r's draw carrying events,
// pending for the outbox worker (nil for none: format rows).
func (b *batchTx) drawEventsRow(r *drawReq, events []luckyoutbox.Event) []any {
	if len(events) == 0 {
		return nil
	}
	return []any{r.drawID, r.app, luckyoutbox.EncodeEvents(events), len(events), luckyoutbox.MessageTypes(events),
		"pending", b.nowMs, b.nowMs, b.nowMs}
}

// insertRows runs rowsQuery at once; nothing for no rows.
func insertRows(ctx context.Context, tx *sql.Tx, head string, rows [][]any, tail ...string) error {
	if len(rows) == 0 {
		return nil
	}
	q, args := rowsQuery(head, rows, tail...)
	_, err := tx.ExecContext(ctx, q, args...)
	return err
}

// rowsQuery is head + one (?, ...) group per row (at least one) + tail,
// and its arguments.
func rowsQuery(head string, rows [][]any, tail ...string) (string, []any) {
	return head + sqlbuild.Rows(len(rows), len(rows[0])) + strings.Join(tail, ""), sqlbuild.Flatten(rows)
}
