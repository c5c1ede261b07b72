package micledger

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// Consumption statuses of user_mic_event_consumption.
const (
	StatusConsumed = "consumed"
	StatusSkipped  = "skipped"
)

// Column widths of the tables the applier writes (schemas/mysql/migrations).
const (
	maxEventID = 128
	// maxDerivedEventID is the consumption row's event_id and the session's
	// closed_event_id and last_event_id (VARCHAR(160) since migration
	// 0008): a timer close's "MicSessionCompensated:{mic_session_id}" is
	// up to 150 bytes for MIC-4's 128-byte mic_session_id.
	maxDerivedEventID = 160
	maxEventType      = 64
	maxSessionID      = 128
	maxAction         = 32
	maxStatus         = 32
	maxSkipReason     = 128
	maxRoomID         = 64
	maxEndReason      = 64
)

// Decode parses and validates one mic-ledger record value; errors are
// *mysqlsink.InvalidRecordError. Every string must fit its column, and
// every summed delta its amount bound (schemas/envelope), so that a bad
// record fails here, not as a wrapped sum or a MySQL error that would stall
// the whole batch. An empty app_code is defaultAppCode
// (mysqlsink.CheckEventKey).
func Decode(value []byte, defaultAppCode string) (*userv1.MicLedgerEntry, error) {
	var e userv1.MicLedgerEntry
	if err := proto.Unmarshal(value, &e); err != nil {
		return nil, mysqlsink.Invalid("decode", "%v", err)
	}
	k, err := mysqlsink.CheckEventKey(e.EventId, e.AppCode, defaultAppCode)
	if err != nil {
		return nil, err
	}
	e.AppCode = k.AppCode
	switch e.Status {
	case StatusConsumed, StatusSkipped:
	default:
		return nil, mysqlsink.Invalid("bad_status", "event_id %s: status %q", e.EventId, e.Status)
	}
	if err := mysqlsink.CheckColumns(
		mysqlsink.Column{Name: "app_code", Value: e.AppCode, Max: mysqlsink.MaxAppCode},
		mysqlsink.Column{Name: "event_id", Value: e.EventId, Max: maxDerivedEventID},
		mysqlsink.Column{Name: "event_type", Value: e.EventType, Max: maxEventType},
		mysqlsink.Column{Name: "mic_session_id", Value: e.MicSessionId, Max: maxSessionID, ID: true},
		mysqlsink.Column{Name: "action", Value: e.Action, Max: maxAction},
		mysqlsink.Column{Name: "skip_reason", Value: e.SkipReason, Max: maxSkipReason},
	); err != nil {
		return nil, err
	}
	if s := e.Session; s != nil {
		if s.MicSessionId == "" {
			return nil, mysqlsink.Invalid("bad_session", "event_id %s: snapshot without mic_session_id", e.EventId)
		}
		if s.AppCode != "" && s.AppCode != e.AppCode {
			return nil, mysqlsink.Invalid("bad_session", "event_id %s: snapshot app_code %q differs", e.EventId, s.AppCode)
		}
		if err := mysqlsink.CheckColumns(
			mysqlsink.Column{Name: "session.mic_session_id", Value: s.MicSessionId, Max: maxSessionID, ID: true},
			mysqlsink.Column{Name: "session.room_id", Value: s.RoomId, Max: maxRoomID},
			mysqlsink.Column{Name: "session.status", Value: s.Status, Max: maxStatus},
			mysqlsink.Column{Name: "session.end_reason", Value: s.EndReason, Max: maxEndReason},
			mysqlsink.Column{Name: "session.opened_event_id", Value: s.OpenedEventId, Max: maxEventID},
			mysqlsink.Column{Name: "session.publish_event_id", Value: s.PublishEventId, Max: maxEventID},
			mysqlsink.Column{Name: "session.closed_event_id", Value: s.ClosedEventId, Max: maxDerivedEventID},
			mysqlsink.Column{Name: "session.last_event_id", Value: s.LastEventId, Max: maxDerivedEventID},
		); err != nil {
			return nil, err
		}
	}
	for _, d := range e.Daily {
		if _, err := time.Parse(time.DateOnly, d.StatDate); err != nil {
			return nil, mysqlsink.Invalid("bad_stat_date", "event_id %s: stat_date %q", e.EventId, d.StatDate)
		}
		if err := mysqlsink.CheckAmounts(e.EventId,
			mysqlsink.Amount{Name: "daily.seat_occupied_delta_ms", Value: d.SeatOccupiedDeltaMs, Max: envelope.MaxMicDayMs},
			mysqlsink.Amount{Name: "daily.mic_online_delta_ms", Value: d.MicOnlineDeltaMs, Max: envelope.MaxMicDayMs},
			mysqlsink.Amount{Name: "daily.session_count_delta", Value: d.SessionCountDelta, Max: envelope.MaxMicCountDelta},
			mysqlsink.Amount{Name: "daily.room_count_delta", Value: d.RoomCountDelta, Max: envelope.MaxMicCountDelta},
		); err != nil {
			return nil, err
		}
	}
	if l := e.Lifetime; l != nil {
		if err := mysqlsink.CheckAmounts(e.EventId,
			mysqlsink.Amount{Name: "lifetime.seat_occupied_delta_ms", Value: l.SeatOccupiedDeltaMs, Max: envelope.MaxMicSessionMs},
			mysqlsink.Amount{Name: "lifetime.mic_online_delta_ms", Value: l.MicOnlineDeltaMs, Max: envelope.MaxMicSessionMs},
			mysqlsink.Amount{Name: "lifetime.session_count_delta", Value: l.SessionCountDelta, Max: envelope.MaxMicCountDelta},
		); err != nil {
			return nil, err
		}
	}
	return &e, nil
}
