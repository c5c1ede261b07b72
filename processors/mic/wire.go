package mic

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hyapp/roomflow/schemas/userv1"
)

// Hand-written protobuf encoders of the output messages (the input is read
// by schemas/envelope's views): the wire format of
// schemas/proto/hyapp/{room,user}/v1 exactly (field numbers, proto3
// zero-omission, two's-complement varints for int32/int64), without
// reflection — the generated code spent most of the
// processor's time here. Tests check every encoder against proto.Unmarshal
// of the generated types.
//
// Strings are written without UTF-8 validation: every string comes from a
// decoded input event, which Decode validated, or from this package.

func appendStr(b []byte, f protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = appendTag(b, f, protowire.BytesType)
	return append(appendVarint(b, uint64(len(v))), v...)
}

func appendInt(b []byte, f protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, f, protowire.VarintType), uint64(v))
}

// appendTag is protowire.AppendTag inlined: a constant one-byte tag (fields
// below 16) folds into one byte append.
func appendTag(b []byte, f protowire.Number, t protowire.Type) []byte {
	return appendVarint(b, uint64(f)<<3|uint64(t))
}

// appendVarint is protowire.AppendVarint, inlined for one-byte values
// (lengths, counts, seats).
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

// beginMsg starts a length-delimited sub-message; endMsg completes it.
func beginMsg(b []byte, f protowire.Number) ([]byte, int) {
	b = appendTag(b, f, protowire.BytesType)
	return append(b, 0), len(b) // one length byte, widened by endMsg when needed
}

func endMsg(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	w := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, w-1)...)
	copy(b[at+w:], b[at+1:at+1+n])
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}

// AppendLedgerEntry appends the wire form of e (hyapp.user.v1.MicLedgerEntry).
//
// Compatibility (the rule of schemas/envelope): the ledger evolves by
// protobuf's rules only: fields are added, never renumbered, retyped or
// reused, and a new field's zero value means what older writers meant, so
// the sink of either release reads the other's entries (it skips unknown
// fields). A change an older sink must not silently ignore gets a new
// event_type instead, which the older sink refuses to the DLQ.
// testdata/state-v1/ledger.bin pins today's bytes.
func AppendLedgerEntry(b []byte, e *userv1.MicLedgerEntry) []byte {
	b = appendLedgerHead(b, e)
	if s := e.Session; s != nil {
		var at int
		b, at = beginMsg(b, 11)
		b = endMsg(appendSession(b, s), at)
	}
	return appendLedgerDeltas(b, e)
}

// AppendLedger appends the wire form of out's ledger entry, the bytes
// AppendLedgerEntry writes for the entry with its session snapshot. A
// Scratch's outputs carry no snapshot message: the snapshot is encoded
// straight from the session state (no intermediate userv1.MicSession).
func AppendLedger(b []byte, out *Output) []byte {
	e := out.Ledger
	if e.Session != nil || out.snap == nil {
		return AppendLedgerEntry(b, e)
	}
	b = appendLedgerHead(b, e)
	b, at := beginMsg(b, 11)
	b = endMsg(out.snap.appendSnapshot(b, out.snapID), at)
	return appendLedgerDeltas(b, e)
}

// appendLedgerHead appends the ledger entry's fields 1 to 10.
func appendLedgerHead(b []byte, e *userv1.MicLedgerEntry) []byte {
	b = appendStr(b, 1, e.EventId)
	b = appendStr(b, 2, e.AppCode)
	b = appendStr(b, 3, e.EventType)
	b = appendInt(b, 4, e.UserId)
	b = appendStr(b, 5, e.MicSessionId)
	b = appendStr(b, 6, e.Action)
	b = appendStr(b, 7, e.RoomId)
	b = appendStr(b, 8, e.Status)
	b = appendStr(b, 9, e.SkipReason)
	return appendInt(b, 10, e.OccurredAtMs)
}

// appendLedgerDeltas appends the ledger entry's fields 12 and 13.
func appendLedgerDeltas(b []byte, e *userv1.MicLedgerEntry) []byte {
	var at int
	for _, d := range e.Daily {
		b, at = beginMsg(b, 12)
		b = appendStr(b, 1, d.StatDate)
		b = appendInt(b, 2, d.SeatOccupiedDeltaMs)
		b = appendInt(b, 3, d.MicOnlineDeltaMs)
		b = appendInt(b, 4, d.SessionCountDelta)
		b = appendInt(b, 5, d.RoomCountDelta)
		b = appendInt(b, 6, d.FirstMicAtMs)
		b = endMsg(appendInt(b, 7, d.LastMicAtMs), at)
	}
	if l := e.Lifetime; l != nil {
		b, at = beginMsg(b, 13)
		b = appendInt(b, 1, l.SeatOccupiedDeltaMs)
		b = appendInt(b, 2, l.MicOnlineDeltaMs)
		b = appendInt(b, 3, l.SessionCountDelta)
		b = appendInt(b, 4, l.FirstMicAtMs)
		b = endMsg(appendInt(b, 5, l.LastMicAtMs), at)
	}
	return b
}

// appendSnapshot appends the wire form of s's snapshot as the session id's
// hyapp.user.v1.MicSession: appendSession of Snapshot(id), field by field.
func (s *Session) appendSnapshot(b []byte, id SessionID) []byte {
	b = appendStr(b, 1, id.AppCode)
	b = appendStr(b, 2, id.MicSessionID)
	b = appendInt(b, 3, id.UserID)
	b = appendStr(b, 4, s.RoomID)
	b = appendInt(b, 5, int64(s.FirstSeatNo))
	b = appendInt(b, 6, int64(s.CurrentSeatNo))
	b = appendStr(b, 7, s.Status.String())
	b = appendInt(b, 8, s.SeatStartedAtMs)
	b = appendInt(b, 9, s.PublishingStartedAtMs)
	b = appendInt(b, 10, s.EndedAtMs)
	b = appendStr(b, 11, s.EndReason)
	b = appendInt(b, 12, s.SeatOccupiedMs)
	b = appendInt(b, 13, s.MicOnlineMs)
	b = appendStr(b, 14, s.OpenedEventID)
	b = appendStr(b, 15, s.PublishEventID)
	b = appendStr(b, 16, s.ClosedEventID)
	b = appendStr(b, 17, s.LastEventID)
	b = appendInt(b, 18, s.LastRoomVersion)
	b = appendInt(b, 19, s.CreatedAtMs)
	b = appendInt(b, 20, s.UpdatedAtMs)
	return appendInt(b, 21, s.Version)
}

func appendSession(b []byte, s *userv1.MicSession) []byte {
	b = appendStr(b, 1, s.AppCode)
	b = appendStr(b, 2, s.MicSessionId)
	b = appendInt(b, 3, s.UserId)
	b = appendStr(b, 4, s.RoomId)
	b = appendInt(b, 5, int64(s.FirstSeatNo))
	b = appendInt(b, 6, int64(s.CurrentSeatNo))
	b = appendStr(b, 7, s.Status)
	b = appendInt(b, 8, s.SeatStartedAtMs)
	b = appendInt(b, 9, s.PublishingStartedAtMs)
	b = appendInt(b, 10, s.EndedAtMs)
	b = appendStr(b, 11, s.EndReason)
	b = appendInt(b, 12, s.SeatOccupiedMs)
	b = appendInt(b, 13, s.MicOnlineMs)
	b = appendStr(b, 14, s.OpenedEventId)
	b = appendStr(b, 15, s.PublishEventId)
	b = appendStr(b, 16, s.ClosedEventId)
	b = appendStr(b, 17, s.LastEventId)
	b = appendInt(b, 18, s.LastRoomVersion)
	b = appendInt(b, 19, s.CreatedAtMs)
	b = appendInt(b, 20, s.UpdatedAtMs)
	return appendInt(b, 21, s.Version)
}

// AppendSessionClosed appends the wire form of UserMicSessionClosed.
func AppendSessionClosed(b []byte, c *userv1.UserMicSessionClosed) []byte {
	b = appendStr(b, 1, c.EventId)
	b = appendStr(b, 2, c.AppCode)
	b = appendInt(b, 3, c.UserId)
	b = appendStr(b, 4, c.RoomId)
	b = appendStr(b, 5, c.MicSessionId)
	b = appendInt(b, 6, c.SeatOccupiedMs)
	b = appendInt(b, 7, c.MicOnlineMs)
	b = appendInt(b, 8, c.SeatStartedAtMs)
	b = appendInt(b, 9, c.EndedAtMs)
	b = appendStr(b, 10, c.EndReason)
	b = appendStr(b, 11, c.ClosedEventId)
	return appendInt(b, 12, c.PublishingStartedAtMs)
}

// AppendDailyStatsUpdated appends the wire form of UserMicDailyStatsUpdated.
func AppendDailyStatsUpdated(b []byte, d *userv1.UserMicDailyStatsUpdated) []byte {
	b = appendStr(b, 1, d.EventId)
	b = appendStr(b, 2, d.AppCode)
	b = appendInt(b, 3, d.UserId)
	b = appendStr(b, 4, d.StatDate)
	b = appendInt(b, 5, d.SeatOccupiedDeltaMs)
	b = appendInt(b, 6, d.MicOnlineDeltaMs)
	b = appendInt(b, 7, d.SessionCountDelta)
	b = appendInt(b, 8, d.RoomCountDelta)
	b = appendInt(b, 9, d.UpdatedAtMs)
	b = appendStr(b, 10, d.MicSessionId)
	b = appendInt(b, 11, d.FirstMicAtMs)
	return appendInt(b, 12, d.LastMicAtMs)
}

// AppendLifetimeStatsUpdated appends the wire form of UserMicLifetimeStatsUpdated.
func AppendLifetimeStatsUpdated(b []byte, l *userv1.UserMicLifetimeStatsUpdated) []byte {
	b = appendStr(b, 1, l.EventId)
	b = appendStr(b, 2, l.AppCode)
	b = appendInt(b, 3, l.UserId)
	b = appendInt(b, 4, l.SeatOccupiedDeltaMs)
	b = appendInt(b, 5, l.MicOnlineDeltaMs)
	b = appendInt(b, 6, l.SessionCountDelta)
	b = appendInt(b, 7, l.UpdatedAtMs)
	b = appendStr(b, 8, l.MicSessionId)
	b = appendInt(b, 9, l.FirstMicAtMs)
	return appendInt(b, 10, l.LastMicAtMs)
}

// AppendDailyTotals appends the wire form of UserMicDailyTotals.
func AppendDailyTotals(b []byte, d *userv1.UserMicDailyTotals) []byte {
	b = appendStr(b, 1, d.EventId)
	b = appendStr(b, 2, d.AppCode)
	b = appendInt(b, 3, d.UserId)
	b = appendStr(b, 4, d.StatDate)
	b = appendInt(b, 5, d.SeatOccupiedMs)
	b = appendInt(b, 6, d.MicOnlineMs)
	b = appendInt(b, 7, d.SessionCount)
	b = appendInt(b, 8, d.RoomCount)
	b = appendInt(b, 9, d.FirstMicAtMs)
	b = appendInt(b, 10, d.LastMicAtMs)
	b = appendInt(b, 11, d.UpdatedAtMs)
	return appendStr(b, 12, d.MicSessionId)
}

// AppendLifetimeTotals appends the wire form of UserMicLifetimeTotals.
func AppendLifetimeTotals(b []byte, l *userv1.UserMicLifetimeTotals) []byte {
	b = appendStr(b, 1, l.EventId)
	b = appendStr(b, 2, l.AppCode)
	b = appendInt(b, 3, l.UserId)
	b = appendInt(b, 4, l.SeatOccupiedMs)
	b = appendInt(b, 5, l.MicOnlineMs)
	b = appendInt(b, 6, l.SessionCount)
	b = appendInt(b, 7, l.FirstMicAtMs)
	b = appendInt(b, 8, l.LastMicAtMs)
	b = appendInt(b, 9, l.UpdatedAtMs)
	return appendStr(b, 10, l.MicSessionId)
}
