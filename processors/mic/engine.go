package mic

import (
	"time"

	"github.com/hyapp/roomflow/schemas/userv1"
)

// Ledger statuses and skip reasons (user_mic_event_consumption).
const (
	StatusConsumed = "consumed"
	StatusSkipped  = "skipped"

	SkipIncomplete     = "incomplete_mic_event"
	SkipUnknownSession = "unknown_session"
	SkipAlreadyClosed  = "session_already_closed"
	SkipStale          = "stale_event"
	SkipUnknownAction  = "unknown_action"
)

// Timer close end reasons (seed 001 "Open Session Compensation").
const (
	ReasonCompensatedPublishTimeout   = "compensated_publish_timeout"
	ReasonCompensatedPublishingWindow = "compensated_publishing_max_window"
)

// State is the keyed state the engine reads and writes; the stream adapter
// backs it with the runtime's changelog store, tests with a map. The engine
// never keeps a reference to a value it was given or gave.
type State interface {
	// Session returns the session stored under id.Key(), if any.
	Session(id SessionID) (Session, bool)
	// PutSession stores s under id.Key(); a closed s is a tombstone.
	PutSession(id SessionID, s Session)
	// DayRooms returns the rooms counted for the user on a UTC day.
	DayRooms(appCode string, userID int64, day int64) DayRooms
	// PutDayRooms stores the rooms counted for the user on a UTC day.
	PutDayRooms(appCode string, userID int64, day int64, rooms DayRooms)
}

// Policy holds the seed's timer windows (config keys mic.*).
type Policy struct {
	PendingPublishMaxAge    time.Duration // mic.pending_publish_max_age
	PublishingSessionMaxAge time.Duration // mic.publishing_session_max_age
}

// Outcome tells what Handle did with an event.
type Outcome uint8

// Outcomes.
const (
	OutcomeConsumed  Outcome = iota + 1 // applied; Ledger status consumed
	OutcomeSkipped                      // not applied; Ledger status skipped
	OutcomeDuplicate                    // already applied; nothing is emitted
)

func (o Outcome) String() string {
	switch o {
	case OutcomeConsumed:
		return StatusConsumed
	case OutcomeSkipped:
		return StatusSkipped
	case OutcomeDuplicate:
		return "duplicate"
	}
	return "unknown"
}

// Output is everything one event or timer close produces. Every record it
// names is keyed by user_id; the adapter emits them in the transaction of
// the input.
type Output struct {
	Outcome    Outcome
	SkipReason string
	// Ledger is the mic-ledger entry; nil only for OutcomeDuplicate.
	Ledger *userv1.MicLedgerEntry
	// Closed, Daily, Lifetime are set when the event closed the session.
	Closed   *userv1.UserMicSessionClosed
	Daily    []*userv1.UserMicDailyStatsUpdated
	Lifetime *userv1.UserMicLifetimeStatsUpdated

	// For metrics: status before and after (StatusNone when absent).
	Before, After Status
}

// Handle applies one decoded event to the state and returns what to emit.
// It is deterministic: the same state and event always give the same
// output, which makes replays after a crash exact.
func Handle(st State, ev *Event) Output {
	if ev.UserID == 0 || ev.MicSessionID == "" {
		return skip(ev, SkipIncomplete, StatusNone)
	}
	switch ev.Action {
	case ActionUp, ActionPublishConfirmed, ActionChange, ActionDown:
	default:
		return skip(ev, SkipUnknownAction, StatusNone)
	}
	id := SessionID{AppCode: ev.AppCode, UserID: ev.UserID, MicSessionID: ev.MicSessionID}
	s, ok := st.Session(id)
	if ok && s.Seen(ev.EventID) {
		return Output{Outcome: OutcomeDuplicate, Before: s.Status, After: s.Status}
	}
	before := s.Status
	switch {
	case !ok && ev.Action != ActionUp:
		return skip(ev, SkipUnknownSession, StatusNone)
	case ok && s.Status == StatusEnded:
		return skip(ev, SkipAlreadyClosed, before)
	case ok && ev.Action == ActionUp:
		// A second up of an open session (room-service re-emitting under a
		// new id): the first opening stands.
		return skip(ev, SkipStale, before)
	case ok && ev.RoomVersion > 0 && ev.RoomVersion < s.LastRoomVersion:
		return skip(ev, SkipStale, before)
	case ev.Action == ActionPublishConfirmed && s.Status == StatusPublishing:
		// Idempotent: the first confirmation fixed publishing_started_at.
		return skip(ev, SkipStale, before)
	}

	switch ev.Action {
	case ActionUp:
		s = Session{
			RoomID:          ev.RoomID,
			FirstSeatNo:     ev.SeatNo,
			CurrentSeatNo:   ev.SeatNo,
			Status:          StatusPendingPublish,
			SeatStartedAtMs: ev.OccurredAtMs,
			OpenedEventID:   ev.EventID,
			CreatedAtMs:     ev.OccurredAtMs,
		}
		s.applied(ev.EventID, ev.RoomVersion, ev.OccurredAtMs)
	case ActionPublishConfirmed:
		at := ev.PublishEventTimeMs
		if at == 0 {
			at = ev.OccurredAtMs
		}
		s.PublishingStartedAtMs = max(at, s.SeatStartedAtMs)
		s.PublishEventID = ev.EventID
		s.Status = StatusPublishing
		if ev.SeatNo != 0 {
			s.CurrentSeatNo = ev.SeatNo
		}
		s.applied(ev.EventID, ev.RoomVersion, ev.OccurredAtMs)
	case ActionChange:
		s.CurrentSeatNo = ev.SeatNo
		s.applied(ev.EventID, ev.RoomVersion, ev.OccurredAtMs)
	case ActionDown:
		end := ev.RTCStoppedAtMs
		if end == 0 {
			end = ev.OccurredAtMs
		}
		out := closeSession(st, id, &s, closing{
			endedAtMs:   end,
			reason:      ev.Reason,
			eventID:     ev.EventID,
			roomVersion: ev.RoomVersion,
			atMs:        ev.OccurredAtMs,
		})
		l := ledgerWithSession(ev, &s, id)
		l.Daily, l.Lifetime = out.daily, out.lifetime
		st.PutSession(id, s.Tombstone())
		return Output{Outcome: OutcomeConsumed, Ledger: l, Closed: out.Closed,
			Daily: out.Daily, Lifetime: out.Lifetime, Before: before, After: StatusEnded}
	}
	st.PutSession(id, s)
	l := ledgerWithSession(ev, &s, id)
	return Output{Outcome: OutcomeConsumed, Ledger: l, Before: before, After: s.Status}
}

// TooOld reports whether an event is too old to open a session: its time
// is more than the tombstone retention behind the partition's watermark,
// so a session it names may have closed and been forgotten. Opening it
// again could count it twice (a replayed up); the adapter skips such an up
// as stale_event with SkipTooOld.
func (r Retention) TooOld(ev *Event, watermarkMs int64) bool {
	return ev.Action == ActionUp && ev.UserID != 0 && ev.MicSessionID != "" &&
		ev.OccurredAtMs+r.ClosedSession.Milliseconds() < watermarkMs
}

// SkipTooOld is the Output of an up refused by Retention.TooOld.
func SkipTooOld(ev *Event) Output { return skip(ev, SkipStale, StatusNone) }

func skip(ev *Event, reason string, before Status) Output {
	return Output{Outcome: OutcomeSkipped, SkipReason: reason, Ledger: ledger(ev, StatusSkipped, reason),
		Before: before, After: before}
}

// ledgerWithSession is a consumed entry with the snapshot of s, both in
// one allocation (this is the hot path).
func ledgerWithSession(ev *Event, s *Session, id SessionID) *userv1.MicLedgerEntry {
	both := &struct {
		l userv1.MicLedgerEntry
		s userv1.MicSession
	}{}
	setLedger(&both.l, ev, StatusConsumed, "")
	s.snapshotInto(id, &both.s)
	both.l.Session = &both.s
	return &both.l
}

func ledger(ev *Event, status, reason string) *userv1.MicLedgerEntry {
	l := &userv1.MicLedgerEntry{}
	setLedger(l, ev, status, reason)
	return l
}

func setLedger(l *userv1.MicLedgerEntry, ev *Event, status, reason string) {
	*l = userv1.MicLedgerEntry{
		EventId:      ev.EventID,
		AppCode:      ev.AppCode,
		EventType:    ev.EventType,
		UserId:       ev.UserID,
		MicSessionId: ev.MicSessionID,
		Action:       ev.Action,
		RoomId:       ev.RoomID,
		Status:       status,
		SkipReason:   reason,
		OccurredAtMs: ev.OccurredAtMs,
	}
}

// Due reports whether an open session is due for a timer close at wall-clock
// nowMs, and the end time and reason the close will have. The close depends
// only on the session: ended_at = start + max age, never on nowMs.
func (p Policy) Due(s *Session, nowMs int64) (endedAtMs int64, reason string, due bool) {
	switch s.Status {
	case StatusPendingPublish:
		age := p.PendingPublishMaxAge.Milliseconds()
		if nowMs-s.SeatStartedAtMs > age {
			return s.SeatStartedAtMs + age, ReasonCompensatedPublishTimeout, true
		}
	case StatusPublishing:
		age := p.PublishingSessionMaxAge.Milliseconds()
		if nowMs-s.PublishingStartedAtMs > age {
			return s.PublishingStartedAtMs + age, ReasonCompensatedPublishingWindow, true
		}
	}
	return 0, "", false
}

// DueAtMs is the wall-clock time after which the open session becomes due
// (Due is true for nowMs > DueAtMs); 0 for a closed session.
func (p Policy) DueAtMs(s *Session) int64 {
	switch s.Status {
	case StatusPendingPublish:
		return s.SeatStartedAtMs + p.PendingPublishMaxAge.Milliseconds()
	case StatusPublishing:
		return s.PublishingStartedAtMs + p.PublishingSessionMaxAge.Milliseconds()
	}
	return 0
}

// CompensatedEventID is the ledger event id of a timer close.
func CompensatedEventID(micSessionID string) string {
	return EventTypeMicSessionCompensated + ":" + micSessionID
}

// Compensate closes the open session id by timer if it is due at nowMs
// (wall clock), per seed 001: a pending_publish session ends at
// seat_started_at + pending max age with no mic online time; a publishing
// one ends at publishing_started_at + publishing max age. The ledger entry
// has event_id MicSessionCompensated:{mic_session_id}. ok is false when the
// session is absent, closed or not due. updated_at_ms is nowMs.
func Compensate(st State, p Policy, id SessionID, nowMs int64) (Output, bool) {
	s, ok := st.Session(id)
	if !ok || !s.Status.Open() {
		return Output{}, false
	}
	end, reason, due := p.Due(&s, nowMs)
	if !due {
		return Output{}, false
	}
	before := s.Status
	evID := CompensatedEventID(id.MicSessionID)
	out := closeSession(st, id, &s, closing{endedAtMs: end, reason: reason, eventID: evID, atMs: nowMs})
	l := &userv1.MicLedgerEntry{
		EventId:      evID,
		AppCode:      id.AppCode,
		EventType:    EventTypeMicSessionCompensated,
		UserId:       id.UserID,
		MicSessionId: id.MicSessionID,
		Action:       ActionCompensate,
		RoomId:       s.RoomID,
		Status:       StatusConsumed,
		OccurredAtMs: nowMs,
		Session:      s.Snapshot(id),
		Daily:        out.daily,
		Lifetime:     out.lifetime,
	}
	st.PutSession(id, s.Tombstone())
	return Output{Outcome: OutcomeConsumed, Ledger: l, Closed: out.Closed, Daily: out.Daily,
		Lifetime: out.Lifetime, Before: before, After: StatusEnded}, true
}

type closing struct {
	endedAtMs   int64
	reason      string
	eventID     string
	roomVersion int64
	atMs        int64 // updated_at_ms of the rows
}

type closed struct {
	Closed   *userv1.UserMicSessionClosed
	Daily    []*userv1.UserMicDailyStatsUpdated
	Lifetime *userv1.UserMicLifetimeStatsUpdated
	daily    []*userv1.MicDailyDelta
	lifetime *userv1.MicLifetimeDelta
}

// closeSession ends s (in place) and computes the day split, the room
// counts (updating the day-rooms state) and the derived events.
func closeSession(st State, id SessionID, s *Session, c closing) closed {
	end, pub := clampWindow(s.SeatStartedAtMs, s.PublishingStartedAtMs, c.endedAtMs)
	s.EndedAtMs = end
	s.EndReason = c.reason
	s.SeatOccupiedMs = end - s.SeatStartedAtMs
	if s.PublishingStartedAtMs > 0 {
		s.MicOnlineMs = end - pub
	}
	s.Status = StatusEnded
	s.ClosedEventID = c.eventID
	s.applied(c.eventID, c.roomVersion, c.atMs)

	var out closed
	for _, sl := range SplitDays(s.SeatStartedAtMs, s.PublishingStartedAtMs, end) {
		rooms := st.DayRooms(id.AppCode, id.UserID, sl.Day)
		roomDelta := int64(0)
		if !rooms.Has(s.RoomID) {
			roomDelta = 1
			st.PutDayRooms(id.AppCode, id.UserID, sl.Day, append(rooms[:len(rooms):len(rooms)], s.RoomID))
		}
		out.daily = append(out.daily, &userv1.MicDailyDelta{
			StatDate:            sl.Date,
			SeatOccupiedDeltaMs: sl.SeatOccupiedMs,
			MicOnlineDeltaMs:    sl.MicOnlineMs,
			SessionCountDelta:   1,
			RoomCountDelta:      roomDelta,
			FirstMicAtMs:        sl.FirstMicAtMs,
			LastMicAtMs:         sl.LastMicAtMs,
		})
		out.Daily = append(out.Daily, &userv1.UserMicDailyStatsUpdated{
			EventId:             EventTypeDailyStatsUpdated + ":" + id.MicSessionID + ":" + sl.Date,
			AppCode:             id.AppCode,
			UserId:              id.UserID,
			StatDate:            sl.Date,
			SeatOccupiedDeltaMs: sl.SeatOccupiedMs,
			MicOnlineDeltaMs:    sl.MicOnlineMs,
			SessionCountDelta:   1,
			RoomCountDelta:      roomDelta,
			UpdatedAtMs:         c.atMs,
			MicSessionId:        id.MicSessionID,
			FirstMicAtMs:        sl.FirstMicAtMs,
			LastMicAtMs:         sl.LastMicAtMs,
		})
	}
	out.lifetime = &userv1.MicLifetimeDelta{
		SeatOccupiedDeltaMs: s.SeatOccupiedMs,
		MicOnlineDeltaMs:    s.MicOnlineMs,
		SessionCountDelta:   1,
		FirstMicAtMs:        s.SeatStartedAtMs,
		LastMicAtMs:         end,
	}
	out.Lifetime = &userv1.UserMicLifetimeStatsUpdated{
		EventId:             EventTypeLifetimeStatsUpdated + ":" + id.MicSessionID,
		AppCode:             id.AppCode,
		UserId:              id.UserID,
		SeatOccupiedDeltaMs: s.SeatOccupiedMs,
		MicOnlineDeltaMs:    s.MicOnlineMs,
		SessionCountDelta:   1,
		UpdatedAtMs:         c.atMs,
		MicSessionId:        id.MicSessionID,
		FirstMicAtMs:        s.SeatStartedAtMs,
		LastMicAtMs:         end,
	}
	out.Closed = &userv1.UserMicSessionClosed{
		EventId:               EventTypeSessionClosed + ":" + id.MicSessionID,
		AppCode:               id.AppCode,
		UserId:                id.UserID,
		RoomId:                s.RoomID,
		MicSessionId:          id.MicSessionID,
		SeatOccupiedMs:        s.SeatOccupiedMs,
		MicOnlineMs:           s.MicOnlineMs,
		SeatStartedAtMs:       s.SeatStartedAtMs,
		EndedAtMs:             end,
		EndReason:             s.EndReason,
		ClosedEventId:         c.eventID,
		PublishingStartedAtMs: s.PublishingStartedAtMs,
	}
	return out
}
