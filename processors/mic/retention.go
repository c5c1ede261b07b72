package mic

import (
	"encoding/binary"
	"time"
)

// Retention: closed-session tombstones and day-room sets are dropped by
// event time, not wall-clock time. A partition's watermark is the latest
// occurred_at it has accepted; a tombstone goes once its end is older than
// the watermark by mic.closed_session_retention, a user-day's room set once
// the end of that day is older than the watermark by mic.day_room_retention
// and no open session of the partition started on or before that day.
// Measured in event time, an outage or a backlog never expires state that
// the events still to come need (a wall-clock TTL would: after a two-day
// stop, catching up would count rooms of the same day twice).

// MaxWatermarkLeadMs bounds how far a single event may push the watermark
// ahead of the wall clock (one hour), so an event with a corrupt future
// time cannot expire the partition's retained state.
const MaxWatermarkLeadMs = int64(time.Hour / time.Millisecond)

// AdvanceWatermark returns the watermark after accepting an event at
// occurredAtMs, at wall-clock nowMs.
func AdvanceWatermark(watermarkMs, occurredAtMs, nowMs int64) int64 {
	return max(watermarkMs, min(occurredAtMs, nowMs+MaxWatermarkLeadMs))
}

// EncodeWatermark is the state value of the watermark key.
func EncodeWatermark(ms int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(ms)) }

// DecodeWatermark inverts EncodeWatermark; a malformed value reads as 0.
func DecodeWatermark(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// Retention holds the event-time retention windows (config keys mic.*).
type Retention struct {
	ClosedSession time.Duration // mic.closed_session_retention
	DayRooms      time.Duration // mic.day_room_retention
}

// TombstoneExpired reports whether a closed session may be forgotten.
func (r Retention) TombstoneExpired(s *Session, watermarkMs int64) bool {
	return s.Status == StatusEnded && s.EndedAtMs+r.ClosedSession.Milliseconds() < watermarkMs
}

// DayRoomsExpired reports whether a user-day's room set may be forgotten,
// given the earliest start day of the partition's open sessions
// (oldestOpenDay; math.MaxInt64 when none is open).
func (r Retention) DayRoomsExpired(day, oldestOpenDay, watermarkMs int64) bool {
	return day < oldestOpenDay && (day+1)*DayMs+r.DayRooms.Milliseconds() < watermarkMs
}
