// Package rawledger writes the MySQL rows of the mic ledger with plain
// batched multi-row upserts: no dedupe reads, version guards or stored
// offsets, one transaction per batch. It is the database's limit for the
// rows the sink writes, the "raw" every sink figure is compared with
// (benchmarks/sink, benchmarks/e2e). Benchmarks only.
package rawledger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
)

// Placeholders is n rows of cols "?" each, for a multi-row VALUES list.
func Placeholders(n, cols int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	return strings.TrimSuffix(strings.Repeat(row+",", n), ",")
}

// The upserts of the fact tables, each with a %s for its VALUES rows.
const (
	SessionSQL     = "INSERT INTO user_mic_sessions (app_code, mic_session_id, user_id, room_id, first_seat_no, current_seat_no, status, seat_started_at_ms, publishing_started_at_ms, ended_at_ms, end_reason, seat_occupied_ms, mic_online_ms, opened_event_id, publish_event_id, closed_event_id, last_event_id, last_room_version, created_at_ms, updated_at_ms, snapshot_version) VALUES %s ON DUPLICATE KEY UPDATE current_seat_no = VALUES(current_seat_no), status = VALUES(status), publishing_started_at_ms = VALUES(publishing_started_at_ms), ended_at_ms = VALUES(ended_at_ms), end_reason = VALUES(end_reason), seat_occupied_ms = VALUES(seat_occupied_ms), mic_online_ms = VALUES(mic_online_ms), publish_event_id = VALUES(publish_event_id), closed_event_id = VALUES(closed_event_id), last_event_id = VALUES(last_event_id), updated_at_ms = VALUES(updated_at_ms), snapshot_version = VALUES(snapshot_version)"
	DailySQL       = "INSERT INTO user_mic_daily_stats (app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES %s ON DUPLICATE KEY UPDATE seat_occupied_ms = seat_occupied_ms + VALUES(seat_occupied_ms), mic_online_ms = mic_online_ms + VALUES(mic_online_ms), session_count = session_count + VALUES(session_count), room_count = room_count + VALUES(room_count), first_mic_at_ms = LEAST(first_mic_at_ms, VALUES(first_mic_at_ms)), last_mic_at_ms = GREATEST(last_mic_at_ms, VALUES(last_mic_at_ms)), updated_at_ms = VALUES(updated_at_ms)"
	LifetimeSQL    = "INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES %s ON DUPLICATE KEY UPDATE seat_occupied_ms = seat_occupied_ms + VALUES(seat_occupied_ms), mic_online_ms = mic_online_ms + VALUES(mic_online_ms), session_count = session_count + VALUES(session_count), first_mic_at_ms = LEAST(first_mic_at_ms, VALUES(first_mic_at_ms)), last_mic_at_ms = GREATEST(last_mic_at_ms, VALUES(last_mic_at_ms)), updated_at_ms = VALUES(updated_at_ms)"
	ConsumptionSQL = "INSERT INTO user_mic_event_consumption (app_code, event_id, event_type, mic_session_id, user_id, action, status, skip_reason, created_at_ms, consumed_at_ms, updated_at_ms) VALUES %s"
)

// Nullable is v, or NULL for 0 (the nullable *_at_ms columns).
func Nullable(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

// execChunked runs tmpl over n rows, 500 rows per statement.
func execChunked(ctx context.Context, tx *sql.Tx, tmpl string, cols, n int, row func(i int, a []any) []any) error {
	const chunk = 500
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		var args []any
		for i := lo; i < hi; i++ {
			args = row(i, args)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(tmpl, Placeholders(hi-lo, cols)), args...); err != nil {
			return err
		}
	}
	return nil
}

// Write writes ledger in transactions of batch entries: the session, daily
// and lifetime rows micledger.BuildFacts pre-aggregates per batch, and with
// consumption one user_mic_event_consumption row per entry (the ledger
// entries' event ids must then be new to the table). It returns MySQL's
// first error.
func Write(ctx context.Context, db *sql.DB, ledger []*userv1.MicLedgerEntry, batch int, consumption bool) error {
	for lo := 0; lo < len(ledger); lo += batch {
		part := ledger[lo:min(len(ledger), lo+batch)]
		f, err := micledger.BuildFacts(part)
		if err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if consumption {
			now := time.Now().UnixMilli()
			err = execChunked(ctx, tx, ConsumptionSQL, 11, len(part), func(i int, a []any) []any {
				e := part[i]
				return append(a, e.AppCode, e.EventId, e.EventType, e.MicSessionId, e.UserId, e.Action, e.Status, e.SkipReason, e.OccurredAtMs, now, now)
			})
		}
		if err == nil {
			err = execChunked(ctx, tx, SessionSQL, 21, len(f.Sessions), func(i int, a []any) []any {
				r := f.Sessions[i]
				return append(a, r.AppCode, r.MicSessionId, r.UserId, r.RoomId, r.FirstSeatNo, r.CurrentSeatNo, r.Status,
					r.SeatStartedAtMs, Nullable(r.PublishingStartedAtMs), Nullable(r.EndedAtMs), r.EndReason, r.SeatOccupiedMs,
					r.MicOnlineMs, r.OpenedEventId, r.PublishEventId, r.ClosedEventId, r.LastEventId, r.LastRoomVersion, r.CreatedAtMs, r.UpdatedAtMs, r.Version)
			})
		}
		if err == nil {
			err = execChunked(ctx, tx, DailySQL, 10, len(f.Daily), func(i int, a []any) []any {
				r := f.Daily[i]
				return append(a, r.AppCode, r.UserID, r.StatDate, r.SeatOccupiedMs, r.MicOnlineMs, r.SessionCount, r.RoomCount, r.FirstMicAtMs, r.LastMicAtMs, r.UpdatedAtMs)
			})
		}
		if err == nil {
			err = execChunked(ctx, tx, LifetimeSQL, 8, len(f.Lifetime), func(i int, a []any) []any {
				r := f.Lifetime[i]
				return append(a, r.AppCode, r.UserID, r.SeatOccupiedMs, r.MicOnlineMs, r.SessionCount, r.FirstMicAtMs, r.LastMicAtMs, r.UpdatedAtMs)
			})
		}
		if err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		if err != nil {
			return err
		}
	}
	return nil
}
