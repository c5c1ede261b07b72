package mic

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// Actions of RoomMicChanged.
const (
	ActionUp               = "up"
	ActionPublishConfirmed = "publish_confirmed"
	ActionChange           = "change"
	ActionDown             = "down"
	// ActionCompensate is the action recorded on the ledger for a timer close.
	ActionCompensate = "compensate"
)

// Event types read and written by the mic processor.
const (
	EventTypeRoomMicChanged        = "RoomMicChanged"
	EventTypeMicSessionCompensated = "MicSessionCompensated"
	EventTypeSessionClosed         = "UserMicSessionClosed"
	EventTypeDailyStatsUpdated     = "UserMicDailyStatsUpdated"
	EventTypeLifetimeStatsUpdated  = "UserMicLifetimeStatsUpdated"
	EventTypeMicLedgerEntry        = "MicLedgerEntry"
	EventTypeDailyTotals           = "UserMicDailyTotals"
	EventTypeLifetimeTotals        = "UserMicLifetimeTotals"
)

// Column limits of the MySQL contract (design.md); a longer value could not
// be stored by the sink, so the decoder rejects it.
const (
	MaxEventIDLen = 128
	MaxAppCodeLen = 32
	MaxRoomIDLen  = 64
	// MaxMicSessionIDLen is user_mic_sessions.mic_session_id (VARCHAR(128),
	// MIC-4): every id the table accepts is accepted.
	MaxMicSessionIDLen = 128
	// MaxDerivedEventIDLen bounds the event ids this package derives for
	// the ledger: the timer close's "MicSessionCompensated:{mic_session_id}"
	// is 150 bytes at the longest, which migration 0008 makes fit
	// user_mic_event_consumption.event_id and user_mic_sessions'
	// closed_event_id and last_event_id (VARCHAR(160)).
	MaxDerivedEventIDLen = 160
	MaxReasonLen         = 64
	// MaxTimeMs is the latest accepted timestamp (9999-12-31T23:59:59.999Z),
	// so every date formats as YYYY-MM-DD.
	MaxTimeMs = 253402300799999
)

// The longest timer-close event id fits MaxDerivedEventIDLen: this array
// type has a negative length, a compile error, if a limit above changes
// without the other.
type _ [MaxDerivedEventIDLen - len(EventTypeMicSessionCompensated) - 1 - MaxMicSessionIDLen]struct{}

// Event is one RoomMicChanged as the mic processor sees it: the envelope
// fields it uses and the decoded payload, flattened.
type Event struct {
	EventID      string
	EventType    string
	AppCode      string
	RoomID       string
	RoomVersion  int64
	OccurredAtMs int64

	UserID             int64
	SeatNo             int32
	PreviousSeatNo     int32
	Action             string
	MicSessionID       string
	PublishState       string
	Reason             string
	PublishDeadlineMs  int64
	PublishEventTimeMs int64
	RTCStoppedAtMs     int64
}

// DecodeError is a record the mic processor cannot take as an event at all:
// it goes to the dead letter topic with Reason, and the partition moves on.
// Events that decode but are incomplete (no mic_session_id, user_id 0) are
// not DecodeErrors: they are consumed as skipped ledger entries.
type DecodeError struct {
	Reason string // short stable code: bad_envelope, wrong_event_type, ...
	Err    error
}

func (e *DecodeError) Error() string {
	if e.Err == nil {
		return "mic: decode: " + e.Reason
	}
	return "mic: decode: " + e.Reason + ": " + e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// DecodeReasons are the Reason values of the DecodeErrors Decode returns
// (DLQ reasons of the mic processor; their metric series are created at 0).
var DecodeReasons = []string{"bad_envelope", "wrong_event_type", "bad_payload", "missing_event_id", "missing_app_code",
	"field_too_long", envelope.ReasonPaddedID, "bad_time", "bad_user_id"}

func decodeErr(reason string, format string, args ...any) error {
	return &DecodeError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ErrDecode matches every DecodeError with errors.Is.
var ErrDecode = errors.New("mic: undecodable event")

// Is reports whether target is ErrDecode.
func (e *DecodeError) Is(target error) bool { return target == ErrDecode }

// Decode parses a hyapp.user.mic-events.v1 record value: an EventEnvelope
// whose payload is a RoomMicChanged. An empty app_code is defaultAppCode
// (the configured app_code, the rule of every stage), so an event gets the
// same session, stats and ids whether room-service named the default or left
// it out. It fails with a *DecodeError when the bytes are not such an
// envelope, the event type differs, the event has no event_id (or no
// app_code and defaultAppCode is empty), a field exceeds its column, or a
// time is out of range. It never panics, whatever the input.
//
// The Event's strings alias value (no copies): value must stay unchanged
// while the Event is in use. Every output of the engine copies what it keeps.
func Decode(value []byte, defaultAppCode string) (Event, error) {
	return decode(value, defaultAppCode, false)
}

// DecodeTrusted is Decode for the records of hyapp.user.mic-events.v1,
// which only the room processor writes, copying an envelope and payload it
// read with the validating views: the envelope and payload are read with
// ParseTrusted (no second UTF-8 check of their strings, see
// schemas/envelope, "Trusted input"); everything else, the column limits
// and times of Validate included, is checked as by Decode.
func DecodeTrusted(value []byte, defaultAppCode string) (Event, error) {
	return decode(value, defaultAppCode, true)
}

func decode(value []byte, defaultAppCode string, trusted bool) (Event, error) {
	var env envelope.View
	var m envelope.MicChanged
	parse, parsePayload := env.Parse, m.Parse
	if trusted {
		parse, parsePayload = env.ParseTrusted, m.ParseTrusted
	}
	if err := parse(value); err != nil {
		return Event{}, &DecodeError{Reason: "bad_envelope", Err: err}
	}
	if string(env.EventType) != EventTypeRoomMicChanged {
		return Event{}, decodeErr("wrong_event_type", "event_type %q", clip(string(env.EventType)))
	}
	if err := parsePayload(env.Payload); err != nil {
		return Event{}, &DecodeError{Reason: "bad_payload", Err: err}
	}
	str := envelope.String
	ev := Event{
		EventID: str(env.EventID), EventType: EventTypeRoomMicChanged, AppCode: str(env.AppCode), RoomID: str(env.RoomID),
		RoomVersion: env.RoomVersion, OccurredAtMs: env.OccurredAtMs,
		UserID: m.UserID, SeatNo: m.SeatNo, PreviousSeatNo: m.PreviousSeatNo,
		Action: str(m.Action), MicSessionID: str(m.MicSessionID), PublishState: str(m.PublishState), Reason: str(m.Reason),
		PublishDeadlineMs: m.PublishDeadlineMs, PublishEventTimeMs: m.PublishEventTimeMs, RTCStoppedAtMs: m.RTCStoppedAtMs,
	}
	if ev.AppCode == "" {
		ev.AppCode = defaultAppCode
	}
	return ev, ev.Validate()
}

// Validate checks what Decode checks on the decoded fields; it is exported
// for producers (tests, load generators) that build Events directly.
func (ev *Event) Validate() error {
	switch {
	case ev.EventID == "":
		return decodeErr("missing_event_id", "empty event_id")
	case ev.AppCode == "":
		return decodeErr("missing_app_code", "empty app_code")
	case len(ev.EventID) > MaxEventIDLen:
		return decodeErr("field_too_long", "event_id of %d bytes", len(ev.EventID))
	case len(ev.AppCode) > MaxAppCodeLen:
		return decodeErr("field_too_long", "app_code of %d bytes", len(ev.AppCode))
	case len(ev.RoomID) > MaxRoomIDLen:
		return decodeErr("field_too_long", "room_id of %d bytes", len(ev.RoomID))
	case len(ev.MicSessionID) > MaxMicSessionIDLen:
		return decodeErr("field_too_long", "mic_session_id of %d bytes", len(ev.MicSessionID))
	case len(ev.Action) > 32:
		return decodeErr("field_too_long", "action of %d bytes", len(ev.Action))
	case len(ev.Reason) > MaxReasonLen:
		return decodeErr("field_too_long", "reason of %d bytes", len(ev.Reason))
	case ev.OccurredAtMs <= 0 || ev.OccurredAtMs > MaxTimeMs:
		return decodeErr("bad_time", "occurred_at_ms %d out of range", ev.OccurredAtMs)
	case ev.PublishEventTimeMs < 0 || ev.PublishEventTimeMs > MaxTimeMs:
		return decodeErr("bad_time", "publish_event_time_ms %d out of range", ev.PublishEventTimeMs)
	case ev.RTCStoppedAtMs < 0 || ev.RTCStoppedAtMs > MaxTimeMs:
		return decodeErr("bad_time", "rtc_stopped_at_ms %d out of range", ev.RTCStoppedAtMs)
	case ev.UserID < 0:
		return decodeErr("bad_user_id", "user_id %d", ev.UserID)
	}
	// Both key byte-exact MySQL columns that pad trailing spaces, and every
	// event id derived from a session ends in its id.
	for _, id := range [...][2]string{{"event_id", ev.EventID}, {"mic_session_id", ev.MicSessionID}} {
		if err := envelope.CheckID(id[0], id[1]); err != nil {
			return &DecodeError{Reason: envelope.ReasonPaddedID, Err: err}
		}
	}
	return nil
}

// Encode builds the envelope bytes of ev, as the room processor writes them
// to hyapp.user.mic-events.v1. Tests and load generators use it.
func (ev *Event) Encode() []byte {
	p, _ := proto.Marshal(&roomv1.RoomMicChanged{
		UserId:             ev.UserID,
		SeatNo:             ev.SeatNo,
		Action:             ev.Action,
		MicSessionId:       ev.MicSessionID,
		PublishState:       ev.PublishState,
		Reason:             ev.Reason,
		PublishDeadlineMs:  ev.PublishDeadlineMs,
		PublishEventTimeMs: ev.PublishEventTimeMs,
		PreviousSeatNo:     ev.PreviousSeatNo,
		RtcStoppedAtMs:     ev.RTCStoppedAtMs,
	})
	et := ev.EventType
	if et == "" {
		et = EventTypeRoomMicChanged
	}
	b, _ := proto.Marshal(&roomv1.EventEnvelope{
		EventId:      ev.EventID,
		EventType:    et,
		AppCode:      ev.AppCode,
		RoomId:       ev.RoomID,
		RoomVersion:  ev.RoomVersion,
		OccurredAtMs: ev.OccurredAtMs,
		Payload:      p,
	})
	return b
}

// clip bounds a value quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
