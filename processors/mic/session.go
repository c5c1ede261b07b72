package mic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// Status is a session's state in the machine.
type Status uint8

// Session statuses (user_mic_sessions.status).
const (
	StatusNone           Status = iota // no session
	StatusPendingPublish               // seat taken, publish not confirmed
	StatusPublishing                   // publish confirmed, mic online time runs
	StatusEnded                        // closed by down or by a timer
)

// String is the status as written to user_mic_sessions.status.
func (s Status) String() string {
	switch s {
	case StatusPendingPublish:
		return "pending_publish"
	case StatusPublishing:
		return "publishing"
	case StatusEnded:
		return "ended"
	}
	return "none"
}

// Open reports whether the session is pending_publish or publishing.
func (s Status) Open() bool { return s == StatusPendingPublish || s == StatusPublishing }

// recentIDs is how many applied event ids a session remembers as hashes.
// The ids of the open, publish and last events are also kept verbatim while
// the session is open; a closed tombstone keeps only the hashes.
const recentIDs = 4

// Session is the state of one mic session: everything the ledger snapshot
// needs except the identity (app_code, user_id, mic_session_id), which is in
// the state key. A closed session is kept as a compact tombstone (Tombstone)
// holding only what dedupe and "already closed" need.
type Session struct {
	RoomID                string
	FirstSeatNo           int32
	CurrentSeatNo         int32
	Status                Status
	SeatStartedAtMs       int64
	PublishingStartedAtMs int64 // 0: never published
	EndedAtMs             int64 // 0: open
	EndReason             string
	SeatOccupiedMs        int64
	MicOnlineMs           int64
	OpenedEventID         string
	PublishEventID        string
	ClosedEventID         string
	LastEventID           string
	LastRoomVersion       int64
	CreatedAtMs           int64
	UpdatedAtMs           int64
	Version               int64
	// Recent holds FNV-1a hashes of the last applied event ids (0 = empty),
	// a ring whose next slot is Version % recentIDs.
	Recent [recentIDs]uint64
}

// Seen reports whether the event id was applied to this session.
func (s *Session) Seen(eventID string) bool {
	if eventID == "" {
		return false
	}
	if eventID == s.OpenedEventID || eventID == s.PublishEventID || eventID == s.LastEventID || eventID == s.ClosedEventID {
		return true
	}
	h := HashID(eventID)
	for _, r := range s.Recent {
		if r == h {
			return true
		}
	}
	return false
}

// applied records an applied event: bumps the version, remembers the id.
func (s *Session) applied(eventID string, roomVersion, atMs int64) {
	s.Recent[s.Version%recentIDs] = HashID(eventID)
	s.Version++
	s.LastEventID = eventID
	if roomVersion > s.LastRoomVersion {
		s.LastRoomVersion = roomVersion
	}
	s.UpdatedAtMs = atMs
}

// Tombstone is the compact form a closed session keeps for
// mic.closed_session_retention: status, end time, version and the recent id
// hashes (enough to skip a late down and to drop duplicates).
func (s *Session) Tombstone() Session {
	return Session{Status: StatusEnded, EndedAtMs: s.EndedAtMs, Version: s.Version, Recent: s.Recent}
}

// Snapshot is the user_mic_sessions row for the ledger.
func (s *Session) Snapshot(id SessionID) *userv1.MicSession {
	return &userv1.MicSession{
		AppCode:               id.AppCode,
		MicSessionId:          id.MicSessionID,
		UserId:                id.UserID,
		RoomId:                s.RoomID,
		FirstSeatNo:           s.FirstSeatNo,
		CurrentSeatNo:         s.CurrentSeatNo,
		Status:                s.Status.String(),
		SeatStartedAtMs:       s.SeatStartedAtMs,
		PublishingStartedAtMs: s.PublishingStartedAtMs,
		EndedAtMs:             s.EndedAtMs,
		EndReason:             s.EndReason,
		SeatOccupiedMs:        s.SeatOccupiedMs,
		MicOnlineMs:           s.MicOnlineMs,
		OpenedEventId:         s.OpenedEventID,
		PublishEventId:        s.PublishEventID,
		ClosedEventId:         s.ClosedEventID,
		LastEventId:           s.LastEventID,
		LastRoomVersion:       s.LastRoomVersion,
		CreatedAtMs:           s.CreatedAtMs,
		UpdatedAtMs:           s.UpdatedAtMs,
		Version:               s.Version,
	}
}

// HashID is the 64-bit FNV-1a hash of an event id (never 0, which marks an
// empty ring slot). It is stable across processes: it is stored in state.
func HashID(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	if h == 0 {
		h = 1
	}
	return h
}

// SessionID names a session: sessions never merge across users or apps.
type SessionID struct {
	AppCode      string
	UserID       int64
	MicSessionID string
}

// State key layout (binary, stable: it is the changelog key):
//
//	session:   's' len(app) app user_id(8, big endian) mic_session_id
//	day rooms: 'd' len(app) app user_id(8) day(4, big endian days since epoch)
//	watermark: 'w' (one per partition)
const (
	keySession  = 's'
	keyDayRooms = 'd'
	// KeyWatermark is the state key of a partition's event-time watermark.
	KeyWatermark = "w"
)

// ErrBadKey is returned for a state key this package did not write.
var ErrBadKey = errors.New("mic: bad state key")

// Key is the state key of the session.
func (id SessionID) Key() string {
	return string(id.AppendKey(make([]byte, 0, 2+len(id.AppCode)+8+len(id.MicSessionID))))
}

// AppendKey appends the state key of the session to b.
func (id SessionID) AppendKey(b []byte) []byte {
	b = append(b, keySession, byte(len(id.AppCode)))
	b = append(b, id.AppCode...)
	b = binary.BigEndian.AppendUint64(b, uint64(id.UserID))
	return append(b, id.MicSessionID...)
}

// Key kinds returned by KeyKind.
const (
	KindSession   = keySession
	KindDayRooms  = keyDayRooms
	KindWatermark = 'w'
)

// KeyKind tells a session key ('s') from a day-rooms key ('d'), the
// watermark key ('w'), a user's totals ('t') and the totals bootstrap
// marker ('b'); 0 if none of them. It reads the first byte only, so a scan
// skips kinds it does not need without decoding them.
func KeyKind(key string) byte {
	if len(key) == 0 {
		return 0
	}
	switch key[0] {
	case keySession, keyDayRooms, KindWatermark, KindTotals, KindBootstrap:
		return key[0]
	}
	return 0
}

// ParseSessionKey inverts SessionID.Key.
func ParseSessionKey(key string) (SessionID, error) {
	if len(key) < 2 || key[0] != keySession {
		return SessionID{}, ErrBadKey
	}
	n := int(key[1])
	if len(key) < 2+n+8 {
		return SessionID{}, ErrBadKey
	}
	return SessionID{
		AppCode:      key[2 : 2+n],
		UserID:       int64(binary.BigEndian.Uint64([]byte(key[2+n : 2+n+8]))),
		MicSessionID: key[2+n+8:],
	}, nil
}

// DayRoomsKey is the state key of the rooms counted for a user on a UTC day.
func DayRoomsKey(appCode string, userID int64, day int64) string {
	return string(AppendDayRoomsKey(make([]byte, 0, 2+len(appCode)+12), appCode, userID, day))
}

// AppendDayRoomsKey appends DayRoomsKey(appCode, userID, day) to b.
func AppendDayRoomsKey(b []byte, appCode string, userID int64, day int64) []byte {
	b = append(b, keyDayRooms, byte(len(appCode)))
	b = append(b, appCode...)
	b = binary.BigEndian.AppendUint64(b, uint64(userID))
	return binary.BigEndian.AppendUint32(b, uint32(day))
}

// ParseDayRoomsKey returns the day (days since the epoch) of a day-rooms key.
func ParseDayRoomsKey(key string) (day int64, err error) {
	if len(key) < 2 || key[0] != keyDayRooms {
		return 0, ErrBadKey
	}
	n := int(key[1])
	if len(key) != 2+n+12 {
		return 0, ErrBadKey
	}
	return int64(binary.BigEndian.Uint32([]byte(key[2+n+8:]))), nil
}

// State value encoding: protobuf wire format written with protowire, so the
// changelog stays compact (varints, absent zero fields) and decodes without
// reflection. Field numbers are part of the changelog format: never reuse.
//
// Versions (the rule of schemas/envelope): version 1 is this encoding
// without a prefix; its first byte is a protobuf tag, at least 0x08, or the
// value is empty. A later version starts with its number as a byte 0x02 to
// 0x07, which no tag starts with (field number 0), so every value written
// so far stays version 1. A field added with a zero value that means what
// older writers meant needs no new version (readers skip unknown fields).
// This release writes and reads version 1 and refuses a newer one with a
// *envelope.VersionError.
const (
	stateVersion   = 1
	maxStatePrefix = 0x07 // highest version byte: 0x08 starts the tag of field 1
)

// stateBody returns the version 1 encoding of the state value b, or the
// error that it is written in a newer version, or corrupt.
func stateBody(format string, b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] > maxStatePrefix {
		return b, nil
	}
	if b[0] > stateVersion {
		return nil, &envelope.VersionError{Format: format, Version: int(b[0]), Newest: stateVersion}
	}
	return nil, fmt.Errorf("%w: leading byte %#x", ErrCorruptState, b[0])
}

const (
	fRoomID          = 1
	fFirstSeat       = 2
	fCurrentSeat     = 3
	fStatus          = 4
	fSeatStarted     = 5
	fPublishStarted  = 6
	fEnded           = 7
	fEndReason       = 8
	fSeatOccupied    = 9
	fMicOnline       = 10
	fOpenedEventID   = 11
	fPublishEventID  = 12
	fClosedEventID   = 13
	fLastEventID     = 14 // absent when it equals one named by fLastIs
	fLastRoomVersion = 15
	fCreatedAt       = 16 // absent when equal to seat started
	fUpdatedAt       = 17
	fVersion         = 18
	fLastIs          = 19 // 1 opened, 2 publish, 3 closed
	fRecent          = 20 // packed fixed64
)

// AppendBinary appends the state encoding of s to b.
func (s *Session) AppendBinary(b []byte) []byte {
	b = appendStr(b, fRoomID, s.RoomID)
	b = appendZigZag(b, fFirstSeat, int64(s.FirstSeatNo))
	b = appendZigZag(b, fCurrentSeat, int64(s.CurrentSeatNo))
	b = appendZigZag(b, fStatus, int64(s.Status))
	b = appendZigZag(b, fSeatStarted, s.SeatStartedAtMs)
	b = appendZigZag(b, fPublishStarted, s.PublishingStartedAtMs)
	b = appendZigZag(b, fEnded, s.EndedAtMs)
	b = appendStr(b, fEndReason, s.EndReason)
	b = appendZigZag(b, fSeatOccupied, s.SeatOccupiedMs)
	b = appendZigZag(b, fMicOnline, s.MicOnlineMs)
	b = appendStr(b, fOpenedEventID, s.OpenedEventID)
	b = appendStr(b, fPublishEventID, s.PublishEventID)
	b = appendStr(b, fClosedEventID, s.ClosedEventID)
	switch {
	case s.LastEventID == "":
	case s.LastEventID == s.OpenedEventID:
		b = appendZigZag(b, fLastIs, 1)
	case s.LastEventID == s.PublishEventID:
		b = appendZigZag(b, fLastIs, 2)
	case s.LastEventID == s.ClosedEventID:
		b = appendZigZag(b, fLastIs, 3)
	default:
		b = appendStr(b, fLastEventID, s.LastEventID)
	}
	b = appendZigZag(b, fLastRoomVersion, s.LastRoomVersion)
	if s.CreatedAtMs != s.SeatStartedAtMs { // written even when 0
		b = appendTag(b, fCreatedAt, protowire.VarintType)
		b = appendVarint(b, protowire.EncodeZigZag(s.CreatedAtMs))
	}
	b = appendZigZag(b, fUpdatedAt, s.UpdatedAtMs)
	b = appendZigZag(b, fVersion, s.Version)
	if s.Recent != [recentIDs]uint64{} {
		b = appendTag(b, fRecent, protowire.BytesType)
		b = appendVarint(b, uint64(8*recentIDs))
		for _, r := range s.Recent {
			b = binary.LittleEndian.AppendUint64(b, r)
		}
	}
	return b
}

// appendZigZag appends a sint64 field (state values encode their numbers
// zigzag); zero is absent.
func appendZigZag(b []byte, f protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, f, protowire.VarintType), protowire.EncodeZigZag(v))
}

// MarshalBinary is AppendBinary on a fresh slice.
func (s *Session) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil), nil }

// Format names of the state values in a *envelope.VersionError.
const (
	formatSession  = "mic session state"
	formatDayRooms = "mic day-room state"
)

// ErrCorruptState is returned when a state value cannot be decoded; the
// changelog is written only by this package, so it means corruption or a
// format this version does not know.
var ErrCorruptState = errors.New("mic: corrupt state value")

// UnmarshalBinary decodes a state value written by AppendBinary. Unknown
// fields are skipped (forward compatibility). Strings are copied out of b.
func (s *Session) UnmarshalBinary(b []byte) error { return s.unmarshal(b, false) }

// UnmarshalBinaryAlias is UnmarshalBinary with strings aliasing b instead
// of copies: b must never change afterwards (the runtime store's values
// never do). It saves the allocations of the hot path.
func (s *Session) UnmarshalBinaryAlias(b []byte) error { return s.unmarshal(b, true) }

func (s *Session) unmarshal(b []byte, alias bool) error {
	*s = Session{}
	b, err := stateBody(formatSession, b)
	if err != nil {
		return err
	}
	str := func(v []byte) string {
		if alias && len(v) > 0 {
			return unsafe.String(&v[0], len(v))
		}
		return string(v)
	}
	created := false
	lastIs := int64(0)
	for len(b) > 0 {
		f, t, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
		switch t {
		case protowire.VarintType:
			u, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
			}
			b = b[n:]
			v := protowire.DecodeZigZag(u)
			switch f {
			case fFirstSeat:
				s.FirstSeatNo = int32(v)
			case fCurrentSeat:
				s.CurrentSeatNo = int32(v)
			case fStatus:
				if v < 0 || v > int64(StatusEnded) {
					return fmt.Errorf("%w: status %d", ErrCorruptState, v)
				}
				s.Status = Status(v)
			case fSeatStarted:
				s.SeatStartedAtMs = v
			case fPublishStarted:
				s.PublishingStartedAtMs = v
			case fEnded:
				s.EndedAtMs = v
			case fSeatOccupied:
				s.SeatOccupiedMs = v
			case fMicOnline:
				s.MicOnlineMs = v
			case fLastRoomVersion:
				s.LastRoomVersion = v
			case fCreatedAt:
				s.CreatedAtMs, created = v, true
			case fUpdatedAt:
				s.UpdatedAtMs = v
			case fVersion:
				s.Version = v
			case fLastIs:
				lastIs = v
			}
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
			}
			b = b[n:]
			switch f {
			case fRoomID:
				s.RoomID = str(v)
			case fEndReason:
				s.EndReason = str(v)
			case fOpenedEventID:
				s.OpenedEventID = str(v)
			case fPublishEventID:
				s.PublishEventID = str(v)
			case fClosedEventID:
				s.ClosedEventID = str(v)
			case fLastEventID:
				s.LastEventID = str(v)
			case fRecent:
				for i := 0; i < recentIDs && len(v) >= 8; i++ {
					s.Recent[i] = binary.LittleEndian.Uint64(v)
					v = v[8:]
				}
			}
		default:
			n := protowire.ConsumeFieldValue(f, t, b)
			if n < 0 {
				return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	s.fillOmitted(created, lastIs)
	return nil
}

// fillOmitted sets the fields AppendBinary leaves out when they repeat
// another: created_at when it equals the seat start (created false), the
// last event id when it is the one lastIs names (1 opened, 2 publish, 3
// closed).
func (s *Session) fillOmitted(created bool, lastIs int64) {
	if !created {
		s.CreatedAtMs = s.SeatStartedAtMs
	}
	switch lastIs {
	case 1:
		s.LastEventID = s.OpenedEventID
	case 2:
		s.LastEventID = s.PublishEventID
	case 3:
		s.LastEventID = s.ClosedEventID
	}
}

// DayRooms is the set of rooms already counted in a user's room_count for
// one UTC day (usually one to a handful).
type DayRooms []string

// Has reports whether room was counted.
func (d DayRooms) Has(room string) bool {
	for _, r := range d {
		if r == room {
			return true
		}
	}
	return false
}

// AppendBinary appends the state encoding (repeated string field 1).
func (d DayRooms) AppendBinary(b []byte) []byte {
	for _, r := range d {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, r)
	}
	return b
}

// UnmarshalDayRooms decodes DayRooms.AppendBinary.
func UnmarshalDayRooms(b []byte) (DayRooms, error) {
	b, err := stateBody(formatDayRooms, b)
	if err != nil {
		return nil, err
	}
	var d DayRooms
	for len(b) > 0 {
		f, t, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
		if f == 1 && t == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
			}
			b = b[n:]
			d = append(d, string(v))
			continue
		}
		n = protowire.ConsumeFieldValue(f, t, b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return d, nil
}

// PeekTimer decodes only what the timers and the retention need from a
// session state value (status, seat and publishing start, end), skipping
// strings without copying them: the compensation scan runs it over every
// session of a partition.
func PeekTimer(b []byte) (Session, error) {
	var s Session
	b, err := stateBody(formatSession, b)
	if err != nil {
		return s, err
	}
	for len(b) > 0 {
		f, t, n := protowire.ConsumeTag(b)
		if n < 0 {
			return s, fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
		if f > fEnded {
			return s, nil // AppendBinary writes fields in order; the rest is not needed
		}
		if t != protowire.VarintType {
			n = protowire.ConsumeFieldValue(f, t, b)
			if n < 0 {
				return s, fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		u, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return s, fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
		v := protowire.DecodeZigZag(u)
		switch f {
		case fStatus:
			if v < 0 || v > int64(StatusEnded) {
				return s, fmt.Errorf("%w: status %d", ErrCorruptState, v)
			}
			s.Status = Status(v)
		case fSeatStarted:
			s.SeatStartedAtMs = v
		case fPublishStarted:
			s.PublishingStartedAtMs = v
		case fEnded:
			s.EndedAtMs = v
		}
	}
	return s, nil
}
