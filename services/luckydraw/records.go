package luckydraw

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/hyapp/roomflow/internal/sqlbuild"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"google.golang.org/protobuf/proto"
)

// The batch's lucky_draw_records, lucky_outbox and lucky_draw_events
// rows: the stored
// outcomes a retry answers, and the multi-row inserts of new ones.

// giftPayload is what a command_id stands for: room-service's debit and
// the gift it paid for, as lucky_draw_records keeps them. A retry carries
// the same; request_id (tracing), device_id and client_seed (the sender's
// session) and rule_version (the version room-service last checked; the
// row keeps the one drawn) may differ without making it another command.
type giftPayload struct {
	billingReceiptID, roomID, giftID string
	sender, target                   int64
	giftCount                        int32
	coinSpent, heat                  int64
}

// differs names the request fields in which p is not q, nil for none.
func (p giftPayload) differs(q giftPayload) []string {
	var out []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"billing_receipt_id", p.billingReceiptID == q.billingReceiptID},
		{"meta.room_id", p.roomID == q.roomID},
		{"meta.sender_user_id", p.sender == q.sender},
		{"meta.target_user_id", p.target == q.target},
		{"gift_id", p.giftID == q.giftID},
		{"gift_count", p.giftCount == q.giftCount},
		{"coin_spent", p.coinSpent == q.coinSpent},
		{"heat_value", p.heat == q.heat},
	} {
		if !f.same {
			out = append(out, f.name)
		}
	}
	return out
}

// CommandConflictError: the request's command_id already stands for
// another debit or gift (its stored outcome's, or an earlier request's of
// the same batch); Fields name the request fields that differ. Nothing is
// drawn or recorded for it: Execute answers FailedPrecondition, and
// room-service refunds the debit.
type CommandConflictError struct {
	CommandID string
	Fields    []string
}

func (e *CommandConflictError) Error() string {
	return fmt.Sprintf("luckydraw: command_id %q already stands for another gift (differs in: %s)", e.CommandID, strings.Join(e.Fields, ", "))
}

// storedDraw is a stored outcome and the payload it was recorded for.
type storedDraw struct {
	res  drawResult
	paid giftPayload
}

// storedDraws reads the stored outcomes (draws and rejections) of the
// batch's command ids.
func (b *batchTx) storedDraws(ctx context.Context, reqs []*drawReq) (map[string]storedDraw, error) {
	args := []any{b.app}
	for _, r := range reqs {
		args = append(args, r.commandID)
	}
	rows, err := b.tx.QueryContext(ctx, `SELECT command_id, draw_id, rule_version, selected_tier_id, tier_type, reward_coins,
	reward_id, reward_status, credit_receipt_id, reject_reason, billing_receipt_id, room_id, sender_user_id, target_user_id,
	gift_id, gift_count, coin_spent, heat_value FROM lucky_draw_records WHERE app_code = ? AND command_id IN (`+
		sqlbuild.List(len(reqs))+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]storedDraw{}
	for rows.Next() {
		var cmd string
		var d storedDraw
		r, p := &d.res, &d.paid
		if err := rows.Scan(&cmd, &r.drawID, &r.ruleVersion, &r.tierID, &r.tierType, &r.rewardCoins, &r.rewardID,
			&r.rewardStatus, &r.creditReceiptID, &r.reject, &p.billingReceiptID, &p.roomID, &p.sender, &p.target,
			&p.giftID, &p.giftCount, &p.coinSpent, &p.heat); err != nil {
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
