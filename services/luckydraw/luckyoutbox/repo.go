package luckyoutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/internal/sqlbuild"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Values of lucky_outbox.event_type and .status, and of
// lucky_draw_records.reward_status (LUCKY-3's tables).
const (
	EventTypeRewardCredit  = "reward_credit"
	EventTypeActivityEvent = "activity_event"

	StatusPending    = "pending"
	StatusProcessing = "processing"
	StatusDone       = "done"
	StatusFailed     = "failed"

	RewardNone    = "none"
	RewardPending = "pending"
	RewardGranted = "granted"
	RewardFailed  = "failed"
)

// RewardCreditEventID is the event_id of reward rewardID's reward_credit
// row, written by the draw transaction.
func RewardCreditEventID(rewardID string) string { return "RewardCredit:" + rewardID }

// ErrUnknownReward is wrapped by Credit's error when no reward_credit row
// (or no draw record) exists for the reward.
var ErrUnknownReward = errors.New("luckyoutbox: unknown reward")

// rc is the isolation of every statement that locks lucky_outbox rows (as
// in sinks/imoutbox): under READ COMMITTED a claim locks only the rows it
// takes, and SKIP LOCKED skips the ones another worker is taking.
var rc = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// row is a claimed lucky_outbox row.
type row struct {
	EventID     string
	AppCode     string
	EventType   string
	MessageType string
	AggregateID string // the draw_id
	KafkaKey    string
	Payload     []byte
	RetryCount  int
	// Packed is the draw_id of the lucky_draw_events row this event was
	// carried in ("" for a lucky_outbox row): that row's state is its.
	Packed string
	// Lease is the lock_until_ms of this worker's claim of the row: a
	// claim of the same worker id with another lease is not this one (the
	// poller's takeover of a draw's lapsed claim, or the other way round).
	Lease int64
}

const rowCols = `event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, retry_count`

func scanRows(rows *sql.Rows) ([]row, error) {
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.EventID, &r.AppCode, &r.EventType, &r.MessageType, &r.AggregateID, &r.KafkaKey, &r.Payload, &r.RetryCount); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// inTx runs fn in a READ COMMITTED transaction (mysqlerr.InTx: retried
// whole on a deadlock, a lock wait timeout or a lost connection, up to
// txAttempts times). fn must be safe to run again (every caller re-reads
// what it decides on inside the transaction).
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	return mysqlerr.InTx(ctx, db, rc, txAttempts, fn)
}

// txAttempts bounds inTx's retries.
const txAttempts = 5

// claim takes up to limit due rows of each table for worker until
// lockUntil in one short transaction (claimFrom): lucky_outbox rows and
// lucky_draw_events rows.
func claim(ctx context.Context, db *sql.DB, worker string, limit int, now, lockUntil int64) ([]row, []drawRow, error) {
	var out []row
	var draws []drawRow
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		var err error
		out, err = claimFrom(ctx, tx, outboxTable, scanRows, func(r row) string { return r.EventID }, worker, limit, now, lockUntil)
		if err != nil {
			return err
		}
		for i := range out {
			out[i].Lease = lockUntil
		}
		draws, err = claimFrom(ctx, tx, drawEventsTable, scanDrawRows, func(d drawRow) string { return d.DrawID }, worker, limit, now, lockUntil)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("luckyoutbox: claim: %w", err)
	}
	return out, draws, nil
}

// claimFrom takes up to limit due rows of t inside tx: pending rows whose
// next_retry_at_ms has come (oldest due first, by the (status,
// next_retry_at_ms) index), then processing rows whose lock has expired
// (a crashed or stalled worker), each read FOR UPDATE SKIP LOCKED so
// concurrent workers never take the same row.
func claimFrom[T any](ctx context.Context, tx *sql.Tx, t table, scan func(*sql.Rows) ([]T, error), key func(T) string,
	worker string, limit int, now, lockUntil int64) ([]T, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+t.cols+` FROM `+t.name+`
			WHERE status = 'pending' AND next_retry_at_ms <= ? ORDER BY next_retry_at_ms LIMIT ? FOR UPDATE SKIP LOCKED`, now, limit)
	if err != nil {
		return nil, err
	}
	out, err := scan(rows)
	if err != nil {
		return nil, err
	}
	if len(out) < limit {
		rows, err := tx.QueryContext(ctx, `SELECT `+t.cols+` FROM `+t.name+`
				WHERE status = 'processing' AND lock_until_ms < ? LIMIT ? FOR UPDATE SKIP LOCKED`, now, limit-len(out))
		if err != nil {
			return nil, err
		}
		expired, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, expired...)
	}
	if len(out) == 0 {
		return nil, nil
	}
	ids := make([]string, len(out))
	for i, r := range out {
		ids[i] = key(r)
	}
	_, err = tx.ExecContext(ctx, `UPDATE `+t.name+` SET status = 'processing', worker_id = ?, lock_until_ms = ?, updated_at_ms = ?
			WHERE `+t.key+` IN (`+sqlbuild.List(len(ids))+`)`, append([]any{worker, lockUntil, now}, sqlbuild.Args(ids)...)...)
	return out, err
}

// claimRewards returns the reward_credit rows among eventIDs worker may
// credit now (the synchronous credit right after the draw): those the
// draw transaction already claimed for worker whose claim holds until at
// least holdUntil (lock_until_ms = next_retry_at_ms marks the draw's
// claim: a worker's poll never moves next_retry_at_ms with its lease, so
// a row this process's own worker holds is not taken twice), read without
// a write, and the pending ones, which it claims until lockUntil with one
// conditional UPDATE whether they are due or not. A row another worker
// holds, done, failed or absent is not among them; nor is a draw's claim
// lapsing before holdUntil, which the outbox worker takes once it lapses.
func claimRewards(ctx context.Context, db *sql.DB, worker string, eventIDs []string, now, holdUntil, lockUntil int64) ([]row, error) {
	if len(eventIDs) == 0 {
		return nil, nil
	}
	var taken []row
	var pending []string
	err := func() error {
		rows, err := db.QueryContext(ctx, `SELECT `+rowCols+`, status, worker_id, lock_until_ms, next_retry_at_ms FROM lucky_outbox
			WHERE event_id IN (`+sqlbuild.List(len(eventIDs))+`) AND event_type = 'reward_credit'`, sqlbuild.Args(eventIDs)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r row
			var status, holder string
			var until, due int64
			if err := rows.Scan(&r.EventID, &r.AppCode, &r.EventType, &r.MessageType, &r.AggregateID, &r.KafkaKey, &r.Payload, &r.RetryCount,
				&status, &holder, &until, &due); err != nil {
				return err
			}
			switch {
			case status == StatusProcessing && holder == worker && until >= holdUntil && until == due:
				r.Lease = until
				taken = append(taken, r)
			case status == StatusPending:
				pending = append(pending, r.EventID)
			}
		}
		return rows.Err()
	}()
	if err != nil || len(pending) == 0 {
		if err != nil {
			err = fmt.Errorf("luckyoutbox: read rewards: %w", err)
		}
		return taken, err
	}
	// One conditional UPDATE per row, in one transaction: RowsAffected
	// says exactly which rows this call took (a row this process's own
	// worker claimed meanwhile, maybe with the same lease, is not).
	var got []row
	err = inTx(ctx, db, func(tx *sql.Tx) error {
		got = got[:0]
		var mine []string
		for _, id := range pending {
			res, err := tx.ExecContext(ctx, `UPDATE lucky_outbox SET status = 'processing', worker_id = ?, lock_until_ms = ?, updated_at_ms = ?
				WHERE event_id = ? AND status = 'pending'`, worker, lockUntil, now, id)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				mine = append(mine, id)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+rowCols+` FROM lucky_outbox WHERE event_id IN (`+sqlbuild.List(len(mine))+`)`, sqlbuild.Args(mine)...)
		if err != nil {
			return err
		}
		if got, err = scanRows(rows); err != nil {
			return err
		}
		for i := range got {
			got[i].Lease = lockUntil
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("luckyoutbox: claim rewards: %w", err)
	}
	return append(taken, got...), nil
}

// rewardStatus is the draw's reward_status and credit_receipt_id of the
// reward_credit row eventID.
func rewardStatus(ctx context.Context, db *sql.DB, eventID string) (status, receipt string, err error) {
	err = db.QueryRowContext(ctx, `SELECT d.reward_status, d.credit_receipt_id FROM lucky_outbox o
		JOIN lucky_draw_records d ON d.draw_id = o.aggregate_id WHERE o.event_id = ?`, eventID).Scan(&status, &receipt)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", fmt.Errorf("%w: %s", ErrUnknownReward, eventID)
	}
	if err != nil {
		return "", "", fmt.Errorf("luckyoutbox: reward status of %s: %w", eventID, err)
	}
	return status, receipt, nil
}

// release hands rows claimed by worker back untouched (no attempt
// counted), due again at nextRetry.
func release(ctx context.Context, db *sql.DB, worker string, ids []string, now, nextRetry int64) error {
	if len(ids) == 0 {
		return nil
	}
	args := append([]any{nextRetry, now}, sqlbuild.Args(ids)...)
	if _, err := db.ExecContext(ctx, `UPDATE lucky_outbox SET status = 'pending', worker_id = '', lock_until_ms = 0, next_retry_at_ms = ?, updated_at_ms = ?
		WHERE event_id IN (`+sqlbuild.List(len(ids))+`) AND status = 'processing' AND worker_id = ?`, append(args, worker)...); err != nil {
		return fmt.Errorf("luckyoutbox: release: %w", err)
	}
	return nil
}

// markDone sets rows of t done in one statement: a produce is a fact
// whoever holds the claim.
func markDone(ctx context.Context, db *sql.DB, t table, ids []string, now int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, `UPDATE `+t.name+` SET status = 'done', worker_id = '', lock_until_ms = 0, last_error = NULL, updated_at_ms = ?
		WHERE `+t.key+` IN (`+sqlbuild.List(len(ids))+`) AND status <> 'done'`, append([]any{now}, sqlbuild.Args(ids)...)...); err != nil {
		return fmt.Errorf("luckyoutbox: mark done: %w", err)
	}
	return nil
}

// retry is one failed row to put back (or, Failed, to give up on).
type retry struct {
	Key       string // event_id, or draw_id in lucky_draw_events
	Attempt   int    // the new retry_count
	NextRetry int64
	Error     string
	Failed    bool // failed for good (an undecodable row), not pending
}

// markRetry puts failed rows of t back to pending (failed when
// Failed) with their new retry_count, next_retry_at_ms and last_error, in
// one transaction; rows no longer processing under worker (taken over, or
// done) stay as they are.
func markRetry(ctx context.Context, db *sql.DB, t table, worker string, rs []retry, now int64) error {
	if len(rs) == 0 {
		return nil
	}
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		for _, r := range rs {
			status := StatusPending
			if r.Failed {
				status = StatusFailed
			}
			if _, err := tx.ExecContext(ctx, `UPDATE `+t.name+` SET status = ?, retry_count = ?, next_retry_at_ms = ?, last_error = ?,
				worker_id = '', lock_until_ms = 0, updated_at_ms = ? WHERE `+t.key+` = ? AND status = 'processing' AND worker_id = ?`,
				status, r.Attempt, r.NextRetry, shortError(r.Error), now, r.Key, worker); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("luckyoutbox: mark retry: %w", err)
	}
	return nil
}

// draw is what a reward's events need of its draw record.
type draw struct {
	RewardStatus string
	Receipt      string
	GiftID       string
	RoomID       string
}

// lockDraw reads drawID's record FOR UPDATE inside tx.
func lockDraw(ctx context.Context, tx *sql.Tx, drawID string) (draw, error) {
	ds, err := lockDraws(ctx, tx, []string{drawID})
	if err != nil {
		return draw{}, err
	}
	d, ok := ds[drawID]
	if !ok {
		return d, fmt.Errorf("%w: no draw record %s", ErrUnknownReward, drawID)
	}
	return d, nil
}

// lockDraws reads the records of drawIDs FOR UPDATE inside tx, in key
// order; absent ones are missing from the map.
func lockDraws(ctx context.Context, tx *sql.Tx, drawIDs []string) (map[string]draw, error) {
	rows, err := tx.QueryContext(ctx, `SELECT draw_id, reward_status, credit_receipt_id, gift_id, room_id FROM lucky_draw_records
		WHERE draw_id IN (`+sqlbuild.List(len(drawIDs))+`) ORDER BY draw_id FOR UPDATE`, sqlbuild.Args(drawIDs)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]draw, len(drawIDs))
	for rows.Next() {
		var id string
		var d draw
		if err := rows.Scan(&id, &d.RewardStatus, &d.Receipt, &d.GiftID, &d.RoomID); err != nil {
			return nil, err
		}
		out[id] = d
	}
	return out, rows.Err()
}

// event is an activity_event row to insert.
type event struct {
	EventID     string
	AppCode     string
	MessageType string
	DrawID      string
	KafkaKey    string
	Payload     []byte
}

// insertEvent writes an activity_event row, due now (insertEvents).
func insertEvent(ctx context.Context, tx *sql.Tx, e event, now int64) error {
	return insertEvents(ctx, tx, []event{e}, now)
}

// insertEvents writes activity_event rows, due now, in one statement. An
// event_id already present is left as it is (the event was written
// before: consumers dedupe by event_id anyway).
func insertEvents(ctx context.Context, tx *sql.Tx, es []event, now int64) error {
	if len(es) == 0 {
		return nil
	}
	args := make([]any, 0, 9*len(es))
	for _, e := range es {
		args = append(args, e.EventID, e.AppCode, e.MessageType, e.DrawID, e.KafkaKey, e.Payload, now, now, now)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO lucky_outbox
		(event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, status, retry_count, next_retry_at_ms, created_at_ms, updated_at_ms)
		VALUES `+strings.TrimSuffix(strings.Repeat("(?, ?, 'activity_event', ?, ?, ?, ?, 'pending', 0, ?, ?, ?),", len(es)), ",")+`
		ON DUPLICATE KEY UPDATE event_id = event_id`, args...)
	return err
}

// RetryFailedTx re-drives up to limit failed rewards of appCode ("" =
// every app) in tx, for `roomflow lucky rewards retry` (luckydraw.Admin
// runs it behind the fence, with its lucky_admin_log row): their
// reward_credit rows go back to pending with retry_count 0, due now, and
// their draws' reward_status from failed to pending. It returns how many
// it re-drove (fewer than limit: none is left). A running worker (or the
// next start of one) then credits them; the wallet's idempotency by
// reward_id makes a reward that was in fact credited come back with its
// first receipt.
//
// LuckyRewardPending event ids ("LuckyRewardPending:{reward_id}:{attempt}")
// restart at attempt 1 after a re-drive; attempts already published are not
// published again (consumers would drop them as duplicates anyway), the
// final LuckyRewardGranted is.
func RetryFailedTx(ctx context.Context, tx *sql.Tx, appCode string, limit int, nowMs int64) (int, error) {
	q := `SELECT event_id, aggregate_id FROM lucky_outbox WHERE event_type = 'reward_credit' AND status = 'failed'`
	args := []any{}
	if appCode != "" {
		q += ` AND app_code = ?`
		args = append(args, appCode)
	}
	rows, err := tx.QueryContext(ctx, q+` LIMIT ? FOR UPDATE`, append(args, limit)...)
	if err != nil {
		return 0, err
	}
	var ids, draws []string
	for rows.Next() {
		var id, d string
		if err := rows.Scan(&id, &d); err != nil {
			rows.Close()
			return 0, err
		}
		ids, draws = append(ids, id), append(draws, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE lucky_outbox SET status = 'pending', retry_count = 0, next_retry_at_ms = ?, worker_id = '', lock_until_ms = 0, updated_at_ms = ?
		WHERE event_id IN (`+sqlbuild.List(len(ids))+`)`, append([]any{nowMs, nowMs}, sqlbuild.Args(ids)...)...); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE lucky_draw_records SET reward_status = 'pending', updated_at_ms = ?
		WHERE draw_id IN (`+sqlbuild.List(len(draws))+`) AND reward_status = 'failed'`, append([]any{nowMs}, sqlbuild.Args(draws)...)...); err != nil {
		return 0, err
	}
	return len(ids), nil
}

// backlogCounts counts rows not done by event_type and status, a
// lucky_draw_events row as its events (activity_event).
func backlogCounts(ctx context.Context, db *sql.DB) (map[[2]string]float64, error) {
	rows, err := db.QueryContext(ctx, `SELECT event_type, status, COUNT(*) FROM lucky_outbox
		WHERE status IN ('pending', 'processing', 'failed') GROUP BY event_type, status
		UNION ALL SELECT 'activity_event', status, SUM(event_count) FROM lucky_draw_events
		WHERE status IN ('pending', 'processing', 'failed') GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("luckyoutbox: backlog: %w", err)
	}
	defer rows.Close()
	out := map[[2]string]float64{}
	for rows.Next() {
		var t, s string
		var n float64
		if err := rows.Scan(&t, &s, &n); err != nil {
			return nil, fmt.Errorf("luckyoutbox: backlog: %w", err)
		}
		out[[2]string{t, s}] += n
	}
	return out, rows.Err()
}

// shortError keeps last_error short: the first line, at most 200 bytes.
func shortError(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return envelope.Clip(s, 200)
}
