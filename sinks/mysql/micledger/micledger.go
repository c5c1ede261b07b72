// Package micledger is the MySQL sink's applier of the mic ledger
// (hyapp.user.mic-ledger.v1, userv1.MicLedgerEntry): each new entry gets a
// row in user_mic_event_consumption, and the facts of the consumed ones,
// pre-aggregated per row (BuildFacts), go to user_mic_sessions (upserted
// only by a higher snapshot_version), user_mic_daily_stats and
// user_mic_lifetime_stats (incremented; first_mic_at_ms MIN ignoring 0,
// last_mic_at_ms MAX).
//
// Consumption rows keep the event's time as created_at_ms (occurred_at_ms;
// the processing time only when the entry has none), so a replay into an
// empty database reproduces them; consumed_at_ms and updated_at_ms are the
// processing time. Daily and lifetime updated_at_ms are the newest event
// time that touched the row, for the same reason.
//
// The ledger is keyed by user_id, so two partitions never write the same
// consumption, session, daily or lifetime row (SharedRows is false).
package micledger

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// Config configures the applier (New): its topic and default app_code.
type Config = mysqlsink.ApplierConfig

// Applier applies the mic ledger topic; register it with
// mysqlsink.Register.
type Applier struct {
	mysqlsink.Input
}

// New returns the applier of cfg.Topic; it fails on a config that does
// not validate.
func New(cfg Config) (*Applier, error) {
	in, err := mysqlsink.NewInput(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{in}, nil
}

// SharedRows is false: partitions are keyed by user_id.
func (a *Applier) SharedRows() bool { return false }

// Decode parses and validates one ledger record (Decode).
func (a *Applier) Decode(rec *kgo.Record) (*userv1.MicLedgerEntry, error) {
	return Decode(rec.Value, a.DefaultAppCode())
}

// Consumption is user_mic_event_consumption.
var Consumption = mysqlsink.Consumption[*userv1.MicLedgerEntry]{
	Table: "user_mic_event_consumption",
	Key: func(e *userv1.MicLedgerEntry) mysqlsink.EventKey {
		return mysqlsink.EventKey{AppCode: e.AppCode, EventID: e.EventId}
	},
	Head: "INSERT INTO user_mic_event_consumption (app_code, event_id, event_type, mic_session_id, user_id, action, status, skip_reason, created_at_ms, consumed_at_ms, updated_at_ms) VALUES ",
	Row:  "(?,?,?,?,?,?,?,?,?,?,?)",
	Args: func(a []any, e *userv1.MicLedgerEntry, nowMs int64) []any {
		created := e.OccurredAtMs
		if created <= 0 {
			created = nowMs
		}
		return append(a, e.AppCode, e.EventId, e.EventType, e.MicSessionId, e.UserId, e.Action, e.Status, e.SkipReason, created, nowMs, nowMs)
	},
}

// Apply records the entries in user_mic_event_consumption and writes the
// facts of the new ones.
func (a *Applier) Apply(ctx context.Context, tx *mysqlsink.Tx, es []*userv1.MicLedgerEntry) (mysqlsink.Applied, error) {
	fresh, consumed, err := Consumption.Consume(ctx, tx, es)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	f, err := BuildFacts(fresh)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	if err := writeFacts(ctx, tx, f, factStatements); err != nil {
		return mysqlsink.Applied{}, err
	}
	return mysqlsink.Applied{Consumed: consumed, FactRows: map[string]int{
		"user_mic_sessions": len(f.Sessions), "user_mic_daily_stats": len(f.Daily), "user_mic_lifetime_stats": len(f.Lifetime),
	}}, nil
}

// WriteFacts writes f (BuildFacts of entries seen for the first time)
// into t's tables in tx with the sink's own statements: a rebuild fills
// fresh tables exactly as the sink fills FactTables.
func WriteFacts(ctx context.Context, tx *mysqlsink.Tx, f Facts, t Tables) error {
	if t == FactTables {
		return writeFacts(ctx, tx, f, factStatements)
	}
	return writeFacts(ctx, tx, f, t.statements())
}

func writeFacts(ctx context.Context, tx *mysqlsink.Tx, f Facts, st statements) error {
	if err := tx.ExecRows(ctx, st.sessionHead, st.sessionRow, st.sessionTail, len(f.Sessions), func(i int, a []any) []any {
		r := f.Sessions[i]
		return append(a, r.AppCode, r.MicSessionId, r.UserId, r.RoomId, r.FirstSeatNo, r.CurrentSeatNo, r.Status,
			r.SeatStartedAtMs, nullIfZero(r.PublishingStartedAtMs), nullIfZero(r.EndedAtMs), r.EndReason, r.SeatOccupiedMs,
			r.MicOnlineMs, r.OpenedEventId, r.PublishEventId, r.ClosedEventId, r.LastEventId,
			r.LastRoomVersion, r.CreatedAtMs, r.UpdatedAtMs, r.Version)
	}); err != nil {
		return fmt.Errorf("upsert user_mic_sessions: %w", err)
	}
	if err := tx.ExecRows(ctx, st.dailyHead, "(?,?,?,?,?,?,?,?,?,?)", st.dailyTail, len(f.Daily), func(i int, a []any) []any {
		r := f.Daily[i]
		return append(a, r.AppCode, r.UserID, r.StatDate, r.SeatOccupiedMs, r.MicOnlineMs, r.SessionCount, r.RoomCount, r.FirstMicAtMs, r.LastMicAtMs, r.UpdatedAtMs)
	}); err != nil {
		return fmt.Errorf("upsert user_mic_daily_stats: %w", err)
	}
	if err := tx.ExecRows(ctx, st.lifetimeHead, "(?,?,?,?,?,?,?,?)", st.lifetimeTail, len(f.Lifetime), func(i int, a []any) []any {
		r := f.Lifetime[i]
		return append(a, r.AppCode, r.UserID, r.SeatOccupiedMs, r.MicOnlineMs, r.SessionCount, r.FirstMicAtMs, r.LastMicAtMs, r.UpdatedAtMs)
	}); err != nil {
		return fmt.Errorf("upsert user_mic_lifetime_stats: %w", err)
	}
	return nil
}

func nullIfZero(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}
