package mic

import (
	"time"
	"unsafe"

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

// Timer close end reasons (MIC-10's open session compensation).
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

// Policy holds MIC-10's timer windows (config keys mic.*).
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

	// snap is the session after the event (in the Scratch) when Ledger
	// carries no snapshot message: AppendLedger encodes it from there.
	snap   *Session
	snapID SessionID
}

// Scratch is reusable memory for the messages of an Output, so a stream
// adapter handling millions of events does not allocate them per event. The
// Output of Scratch.Handle or Scratch.Compensate points into the scratch:
// it is valid until the next call on the same Scratch. Its Ledger has no
// Session snapshot message: AppendLedger encodes the snapshot straight
// from the session state. The zero value is ready to use; a Scratch is not
// safe for concurrent use.
type Scratch struct {
	ledger        userv1.MicLedgerEntry
	closed        userv1.UserMicSessionClosed
	lifetime      userv1.UserMicLifetimeStatsUpdated
	lifetimeDelta userv1.MicLifetimeDelta
	daily         []userv1.UserMicDailyStatsUpdated
	dailyDelta    []userv1.MicDailyDelta
	dailyPtrs     []*userv1.UserMicDailyStatsUpdated
	deltaPtrs     []*userv1.MicDailyDelta
	ids           []byte // the derived event ids of the Output (derivedID)
	snap          Session
}

// Handle applies one decoded event to the state and returns what to emit.
// It is deterministic: the same state and event always give the same
// output, which makes replays after a crash exact. The Output is freshly
// allocated; Scratch.Handle is the same without allocations.
func Handle(st State, ev *Event) Output { return (*Scratch)(nil).Handle(st, ev) }

// Handle is the package's Handle with the Output's messages in sc (a nil
// sc allocates them).
func (sc *Scratch) Handle(st State, ev *Event) Output {
	if ev.UserID == 0 || ev.MicSessionID == "" {
		return sc.skip(ev, SkipIncomplete, StatusNone)
	}
	switch ev.Action {
	case ActionUp, ActionPublishConfirmed, ActionChange, ActionDown:
	default:
		return sc.skip(ev, SkipUnknownAction, StatusNone)
	}
	id := SessionID{AppCode: ev.AppCode, UserID: ev.UserID, MicSessionID: ev.MicSessionID}
	s, ok := st.Session(id)
	if ok && s.Seen(ev.EventID) {
		return Output{Outcome: OutcomeDuplicate, Before: s.Status, After: s.Status}
	}
	before := s.Status
	switch {
	case !ok && ev.Action != ActionUp:
		return sc.skip(ev, SkipUnknownSession, StatusNone)
	case ok && s.Status == StatusEnded:
		return sc.skip(ev, SkipAlreadyClosed, before)
	case ok && ev.Action == ActionUp:
		// A second up of an open session (room-service re-emitting under a
		// new id): the first opening stands.
		return sc.skip(ev, SkipStale, before)
	case ok && ev.RoomVersion > 0 && ev.RoomVersion < s.LastRoomVersion:
		return sc.skip(ev, SkipStale, before)
	case ev.Action == ActionPublishConfirmed && s.Status == StatusPublishing:
		// Idempotent: the first confirmation fixed publishing_started_at.
		return sc.skip(ev, SkipStale, before)
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
		out := sc.closeSession(st, id, &s, closing{
			endedAtMs:   end,
			reason:      ev.Reason,
			eventID:     ev.EventID,
			roomVersion: ev.RoomVersion,
			atMs:        ev.OccurredAtMs,
		})
		l, snap := sc.ledgerWithSession(ev, &s, id)
		l.Daily, l.Lifetime = out.daily, out.lifetime
		st.PutSession(id, s.Tombstone())
		return Output{Outcome: OutcomeConsumed, Ledger: l, Closed: out.Closed,
			Daily: out.Daily, Lifetime: out.Lifetime, Before: before, After: StatusEnded, snap: snap, snapID: id}
	}
	st.PutSession(id, s)
	l, snap := sc.ledgerWithSession(ev, &s, id)
	return Output{Outcome: OutcomeConsumed, Ledger: l, Before: before, After: s.Status, snap: snap, snapID: id}
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
func SkipTooOld(ev *Event) Output { return (*Scratch)(nil).SkipTooOld(ev) }

// SkipTooOld is the package's SkipTooOld with the Output in sc.
func (sc *Scratch) SkipTooOld(ev *Event) Output { return sc.skip(ev, SkipStale, StatusNone) }

func (sc *Scratch) skip(ev *Event, reason string, before Status) Output {
	l := sc.ledgerEntry()
	setLedger(l, ev, StatusSkipped, reason)
	return Output{Outcome: OutcomeSkipped, SkipReason: reason, Ledger: l, Before: before, After: before}
}

// ledgerEntry and the other getters return the scratch's message, or a
// new one when sc is nil.
func (sc *Scratch) ledgerEntry() *userv1.MicLedgerEntry {
	if sc == nil {
		return &userv1.MicLedgerEntry{}
	}
	return &sc.ledger
}

// snapshot is the ledger's session snapshot of s: a new message without a
// Scratch; with one, none (nil) but a copy of s in the Scratch, which
// AppendLedger encodes directly.
func (sc *Scratch) snapshot(s *Session, id SessionID) (*userv1.MicSession, *Session) {
	if sc == nil {
		return s.Snapshot(id), nil
	}
	sc.snap = *s
	return nil, &sc.snap
}

func (sc *Scratch) closedEvent() *userv1.UserMicSessionClosed {
	if sc == nil {
		return &userv1.UserMicSessionClosed{}
	}
	return &sc.closed
}

func (sc *Scratch) lifetimeEvent() (*userv1.UserMicLifetimeStatsUpdated, *userv1.MicLifetimeDelta) {
	if sc == nil {
		return &userv1.UserMicLifetimeStatsUpdated{}, &userv1.MicLifetimeDelta{}
	}
	return &sc.lifetime, &sc.lifetimeDelta
}

// dailyEvents returns n daily events and deltas (and slices of pointers to
// them, length n).
func (sc *Scratch) dailyEvents(n int) ([]*userv1.UserMicDailyStatsUpdated, []*userv1.MicDailyDelta) {
	var ev []userv1.UserMicDailyStatsUpdated
	var dl []userv1.MicDailyDelta
	var evp []*userv1.UserMicDailyStatsUpdated
	var dlp []*userv1.MicDailyDelta
	if sc == nil {
		ev, dl = make([]userv1.UserMicDailyStatsUpdated, n), make([]userv1.MicDailyDelta, n)
		evp, dlp = make([]*userv1.UserMicDailyStatsUpdated, n), make([]*userv1.MicDailyDelta, n)
	} else {
		if cap(sc.daily) < n {
			sc.daily, sc.dailyDelta = make([]userv1.UserMicDailyStatsUpdated, n), make([]userv1.MicDailyDelta, n)
			sc.dailyPtrs, sc.deltaPtrs = make([]*userv1.UserMicDailyStatsUpdated, n), make([]*userv1.MicDailyDelta, n)
		}
		ev, dl, evp, dlp = sc.daily[:n], sc.dailyDelta[:n], sc.dailyPtrs[:n], sc.deltaPtrs[:n]
	}
	for i := range n {
		evp[i], dlp[i] = &ev[i], &dl[i]
	}
	return evp, dlp
}

// ledgerWithSession is a consumed entry with the snapshot of s (see
// snapshot).
func (sc *Scratch) ledgerWithSession(ev *Event, s *Session, id SessionID) (*userv1.MicLedgerEntry, *Session) {
	l := sc.ledgerEntry()
	setLedger(l, ev, StatusConsumed, "")
	var snap *Session
	l.Session, snap = sc.snapshot(s, id)
	return l, snap
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
// (wall clock), per MIC-10: a pending_publish session ends at
// seat_started_at + pending max age with no mic online time; a publishing
// one ends at publishing_started_at + publishing max age. The ledger entry
// has event_id MicSessionCompensated:{mic_session_id}. ok is false when the
// session is absent, closed or not due. updated_at_ms is nowMs.
func Compensate(st State, p Policy, id SessionID, nowMs int64) (Output, bool) {
	return (*Scratch)(nil).Compensate(st, p, id, nowMs)
}

// Compensate is the package's Compensate with the Output's messages in sc.
func (sc *Scratch) Compensate(st State, p Policy, id SessionID, nowMs int64) (Output, bool) {
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
	out := sc.closeSession(st, id, &s, closing{endedAtMs: end, reason: reason, eventID: evID, atMs: nowMs})
	l := sc.ledgerEntry()
	m, snap := sc.snapshot(&s, id)
	*l = userv1.MicLedgerEntry{
		EventId:      evID,
		AppCode:      id.AppCode,
		EventType:    EventTypeMicSessionCompensated,
		UserId:       id.UserID,
		MicSessionId: id.MicSessionID,
		Action:       ActionCompensate,
		RoomId:       s.RoomID,
		Status:       StatusConsumed,
		OccurredAtMs: nowMs,
		Session:      m,
		Daily:        out.daily,
		Lifetime:     out.lifetime,
	}
	st.PutSession(id, s.Tombstone())
	return Output{Outcome: OutcomeConsumed, Ledger: l, Closed: out.Closed, Daily: out.Daily,
		Lifetime: out.Lifetime, Before: before, After: StatusEnded, snap: snap, snapID: id}, true
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

// derivedID is the event id "{eventType}:{micSessionID}" or, with a date,
// "{eventType}:{micSessionID}:{date}" of a derived event. With a Scratch
// it lives in sc.ids (valid as long as the Output), not in a new string.
func (sc *Scratch) derivedID(eventType, micSessionID, date string) string {
	if sc == nil {
		if date == "" {
			return eventType + ":" + micSessionID
		}
		return eventType + ":" + micSessionID + ":" + date
	}
	at := len(sc.ids)
	sc.ids = append(append(append(sc.ids, eventType...), ':'), micSessionID...)
	if date != "" {
		sc.ids = append(append(sc.ids, ':'), date...)
	}
	// A grown sc.ids leaves the ids before it in the old array, unchanged.
	return unsafe.String(&sc.ids[at], len(sc.ids)-at)
}

// closeSession ends s (in place) and computes the day split, the room
// counts (updating the day-rooms state) and the derived events.
func (sc *Scratch) closeSession(st State, id SessionID, s *Session, c closing) closed {
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
	if sc != nil {
		sc.ids = sc.ids[:0]
	}
	slices := SplitDays(s.SeatStartedAtMs, s.PublishingStartedAtMs, end)
	out.Daily, out.daily = sc.dailyEvents(len(slices))
	for i, sl := range slices {
		rooms := st.DayRooms(id.AppCode, id.UserID, sl.Day)
		roomDelta := int64(0)
		if !rooms.Has(s.RoomID) {
			roomDelta = 1
			st.PutDayRooms(id.AppCode, id.UserID, sl.Day, append(rooms[:len(rooms):len(rooms)], s.RoomID))
		}
		*out.daily[i] = userv1.MicDailyDelta{
			StatDate:            sl.Date,
			SeatOccupiedDeltaMs: sl.SeatOccupiedMs,
			MicOnlineDeltaMs:    sl.MicOnlineMs,
			SessionCountDelta:   1,
			RoomCountDelta:      roomDelta,
			FirstMicAtMs:        sl.FirstMicAtMs,
			LastMicAtMs:         sl.LastMicAtMs,
		}
		*out.Daily[i] = userv1.UserMicDailyStatsUpdated{
			EventId:             sc.derivedID(EventTypeDailyStatsUpdated, id.MicSessionID, sl.Date),
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
		}
	}
	out.Lifetime, out.lifetime = sc.lifetimeEvent()
	*out.lifetime = userv1.MicLifetimeDelta{
		SeatOccupiedDeltaMs: s.SeatOccupiedMs,
		MicOnlineDeltaMs:    s.MicOnlineMs,
		SessionCountDelta:   1,
		FirstMicAtMs:        s.SeatStartedAtMs,
		LastMicAtMs:         end,
	}
	*out.Lifetime = userv1.UserMicLifetimeStatsUpdated{
		EventId:             sc.derivedID(EventTypeLifetimeStatsUpdated, id.MicSessionID, ""),
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
	out.Closed = sc.closedEvent()
	*out.Closed = userv1.UserMicSessionClosed{
		EventId:               sc.derivedID(EventTypeSessionClosed, id.MicSessionID, ""),
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
