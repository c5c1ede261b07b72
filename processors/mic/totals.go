package mic

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hyapp/roomflow/schemas/userv1"
)

// Totals are a user's current mic totals as the state holds them (issue 35,
// the compacted totals topics): the lifetime sums and the sums of each UTC
// day still kept. One state key per user holds both, because a key of its
// own per day would double the store's per-key overhead, the bulk of the
// cost (docs/performance.md). They equal user_mic_lifetime_stats and
// user_mic_daily_stats: the same sums, first by least non-zero, last by
// greatest (sinks/mysql/micledger).
type Totals struct {
	SeatOccupiedMs, MicOnlineMs, SessionCount int64
	FirstMicAtMs, LastMicAtMs                 int64
	Days                                      []DayTotals // ascending by Day
}

// DayTotals are one UTC day's sums and, once the processor keeps them
// here (RoomsKept), the rooms counted in its room_count: with totals on,
// the day-room sets live in the user's totals value instead of day-room
// keys of their own, so a close reads and writes one key and its
// changelog gets one record, not two (issue 35's cost). A day the
// bootstrap wrote from MySQL has no rooms yet: its rooms are in its
// day-room key, if any.
type DayTotals struct {
	Day                                                  int64 // days since the epoch
	SeatOccupiedMs, MicOnlineMs, SessionCount, RoomCount int64
	FirstMicAtMs, LastMicAtMs                            int64 // within the day
	RoomsKept                                            bool
	Rooms                                                DayRooms
}

// State keys of the totals (new kinds; older releases ignore them):
//
//	user totals:      't' len(app) app user_id(varint: a key of 11 bytes for
//	                  app "hyapp", which with its value fits a 64-byte allocation)
//	totals bootstrap: 'b' (one per partition; `roomflow totals bootstrap`)
const (
	KindTotals    = 't'
	KindBootstrap = 'b'
	// KeyTotalsBootstrap marks a partition whose totals were bootstrapped
	// from the MySQL facts; its value is EncodeBootstrapMarker's. Until it
	// exists the processor neither keeps nor publishes totals.
	KeyTotalsBootstrap = "b"
)

// TotalsKey is the state key of a user's totals.
func TotalsKey(appCode string, userID int64) string {
	return string(AppendTotalsKey(make([]byte, 0, 2+len(appCode)+binary.MaxVarintLen64), appCode, userID))
}

// AppendTotalsKey appends TotalsKey(appCode, userID) to b.
func AppendTotalsKey(b []byte, appCode string, userID int64) []byte {
	b = append(b, KindTotals, byte(len(appCode)))
	b = append(b, appCode...)
	return binary.AppendUvarint(b, uint64(userID))
}

// EncodeBootstrapMarker is the value of KeyTotalsBootstrap: the first UTC
// day the bootstrap wrote daily totals for (days before it have no total:
// they are gone, never counted again from 0).
func EncodeBootstrapMarker(firstDay int64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), protowire.EncodeZigZag(firstDay))
}

// DecodeBootstrapMarker inverts EncodeBootstrapMarker.
func DecodeBootstrapMarker(b []byte) (firstDay int64, err error) {
	b, err = stateBody(formatBootstrap, b)
	if err != nil {
		return 0, err
	}
	err = eachVarint(b, func(f protowire.Number, v uint64) {
		if f == 1 {
			firstDay = protowire.DecodeZigZag(v)
		}
	})
	return firstDay, err
}

// Field numbers of the totals value (version 1 of the state rule: protobuf
// wire, unprefixed). A day is one bytes field of positional varints: day,
// seat, mic, sessions, rooms, first and last as offsets from the day's start
// plus one (0: none), so a day costs about 25 bytes; then, for a day whose
// rooms are kept here, flags (dayRoomsKept) and each room id as a varint
// length and its bytes.
const (
	tSeat     = 1
	tMic      = 2
	tSessions = 3
	tFirst    = 4
	tLast     = 5
	tDay      = 6
)

// dayRoomsKept is the day's flag: its rooms follow.
const dayRoomsKept = 1

const (
	formatTotals    = "mic totals state"
	formatBootstrap = "mic totals bootstrap marker"
)

// AppendBinary appends the state encoding of t to b.
func (t *Totals) AppendBinary(b []byte) []byte {
	b = appendInt(b, tSeat, t.SeatOccupiedMs)
	b = appendInt(b, tMic, t.MicOnlineMs)
	b = appendInt(b, tSessions, t.SessionCount)
	b = appendInt(b, tFirst, t.FirstMicAtMs)
	b = appendInt(b, tLast, t.LastMicAtMs)
	for i := range t.Days {
		d := &t.Days[i]
		var at int
		b, at = beginMsg(b, tDay)
		start := d.Day * DayMs
		for _, v := range [...]uint64{uint64(d.Day), uint64(d.SeatOccupiedMs), uint64(d.MicOnlineMs),
			uint64(d.SessionCount), uint64(d.RoomCount), dayOffset(d.FirstMicAtMs, start), dayOffset(d.LastMicAtMs, start)} {
			b = appendVarint(b, v)
		}
		if d.RoomsKept {
			b = appendVarint(b, dayRoomsKept)
			for _, r := range d.Rooms {
				b = protowire.AppendString(b, r)
			}
		}
		b = endMsg(b, at)
	}
	return b
}

func dayOffset(ms, start int64) uint64 {
	if ms == 0 {
		return 0
	}
	return uint64(ms-start) + 1
}

func dayTime(off uint64, start int64) int64 {
	if off == 0 {
		return 0
	}
	return start + int64(off-1)
}

// UnmarshalTotals decodes Totals.AppendBinary into t (its Days and their
// Rooms reused). Unknown fields are skipped; a newer version is a
// *envelope.VersionError.
func UnmarshalTotals(b []byte, t *Totals) error { return unmarshalTotals(b, t, false) }

// UnmarshalTotalsAlias is UnmarshalTotals with the room ids pointing into
// b, which must never change (a state store's value).
func UnmarshalTotalsAlias(b []byte, t *Totals) error { return unmarshalTotals(b, t, true) }

func unmarshalTotals(b []byte, t *Totals, alias bool) error {
	*t = Totals{Days: t.Days[:0]}
	b, err := stateBody(formatTotals, b)
	if err != nil {
		return err
	}
	for len(b) > 0 {
		f, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && f <= tLast:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
			}
			b = b[n:]
			switch f {
			case tSeat:
				t.SeatOccupiedMs = int64(v)
			case tMic:
				t.MicOnlineMs = int64(v)
			case tSessions:
				t.SessionCount = int64(v)
			case tFirst:
				t.FirstMicAtMs = int64(v)
			case tLast:
				t.LastMicAtMs = int64(v)
			}
		case typ == protowire.BytesType && f == tDay:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
			}
			b = b[n:]
			t.Days = slices.Grow(t.Days, 1)[:len(t.Days)+1]
			if err := decodeDay(v, &t.Days[len(t.Days)-1], alias); err != nil {
				return err
			}
		default:
			n = protowire.ConsumeFieldValue(f, typ, b)
			if n < 0 {
				return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
}

// decodeDay decodes one day's bytes into d (its Rooms reused).
func decodeDay(b []byte, d *DayTotals, alias bool) error {
	var x [8]uint64 // the seven sums and times, then the flags
	for i := range x {
		if len(b) == 0 {
			break // trailing zeros may be left out by a later writer
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return fmt.Errorf("%w: day totals: %v", ErrCorruptState, protowire.ParseError(n))
		}
		x[i], b = v, b[n:]
	}
	*d = DayTotals{Day: int64(x[0]), SeatOccupiedMs: int64(x[1]), MicOnlineMs: int64(x[2]),
		SessionCount: int64(x[3]), RoomCount: int64(x[4]), RoomsKept: x[7]&dayRoomsKept != 0, Rooms: d.Rooms[:0]}
	d.FirstMicAtMs, d.LastMicAtMs = dayTime(x[5], d.Day*DayMs), dayTime(x[6], d.Day*DayMs)
	for d.RoomsKept && len(b) > 0 {
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("%w: day rooms: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
		if alias && len(v) > 0 {
			d.Rooms = append(d.Rooms, unsafe.String(&v[0], len(v)))
		} else {
			d.Rooms = append(d.Rooms, string(v))
		}
	}
	if !d.RoomsKept {
		d.Rooms = nil
	}
	return nil
}

// eachVarint calls fn for each varint field of a protobuf message b.
func eachVarint(b []byte, fn func(protowire.Number, uint64)) error {
	for len(b) > 0 {
		f, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(m))
			}
			fn(f, v)
			b = b[m:]
			continue
		}
		if n = protowire.ConsumeFieldValue(f, typ, b); n < 0 {
			return fmt.Errorf("%w: %v", ErrCorruptState, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// TotalsWindow tells which UTC days still have a daily total: those from
// the bootstrap's first day on whose end is at most mic.day_totals_retention
// behind the partition's event-time watermark (like the day-room sets).
// A day's rooms follow Retention.DayRoomsExpired instead, so a day
// without a total may still keep its rooms.
type TotalsWindow struct {
	FirstDay    int64 // the bootstrap marker's
	RetentionMs int64
	WatermarkMs int64
	Rooms       Retention // DayRooms: mic.day_room_retention
	// OldestOpenDay is the partition's earliest start day of an open
	// session at its last scan; math.MinInt64 when unknown (no rooms
	// expire).
	OldestOpenDay int64
}

// Kept reports whether day still has its daily total.
func (w TotalsWindow) Kept(day int64) bool {
	return day >= w.FirstDay && (day+1)*DayMs+w.RetentionMs >= w.WatermarkMs
}

// keep reports whether t keeps day d: while it has its total, or its
// rooms are kept and not expired.
func (w TotalsWindow) keep(d *DayTotals) bool {
	return w.Kept(d.Day) || d.RoomsKept && !w.Rooms.DayRoomsExpired(d.Day, w.OldestOpenDay, w.WatermarkMs)
}

// DayAt returns t's entry of day, inserted empty (in day order) when absent.
// The pointer is valid until t.Days changes.
func (t *Totals) DayAt(day int64) *DayTotals {
	i, _ := t.dayIndex(day)
	return &t.Days[i]
}

// Day returns t's entry of day, or nil.
func (t *Totals) Day(day int64) *DayTotals {
	if i, found := t.search(day); found {
		return &t.Days[i]
	}
	return nil
}

func (t *Totals) search(day int64) (int, bool) {
	return slices.BinarySearchFunc(t.Days, day, func(x DayTotals, day int64) int { return cmp.Compare(x.Day, day) })
}

// dayIndex returns the index of day in t.Days, inserting it when absent.
func (t *Totals) dayIndex(day int64) (i int, inserted bool) {
	i, found := t.search(day)
	if !found {
		t.Days = slices.Insert(t.Days, i, DayTotals{Day: day})
	}
	return i, !found
}

// Add adds one close's deltas to t: the lifetime always, each day only
// while w keeps its total (a day whose total is gone is never counted
// again from 0). Days w no longer keeps are dropped from t first. applied
// lists, for each of daily, the index in t.Days of its updated total, or
// -1 for a delta of a day whose total is gone.
func (t *Totals) Add(daily []*userv1.MicDailyDelta, life *userv1.MicLifetimeDelta, w TotalsWindow, applied []int) []int {
	t.Days = slices.DeleteFunc(t.Days, func(d DayTotals) bool { return !w.keep(&d) })
	if life != nil {
		t.SeatOccupiedMs += life.SeatOccupiedDeltaMs
		t.MicOnlineMs += life.MicOnlineDeltaMs
		t.SessionCount += life.SessionCountDelta
		t.FirstMicAtMs = firstMin(t.FirstMicAtMs, life.FirstMicAtMs)
		t.LastMicAtMs = max(t.LastMicAtMs, life.LastMicAtMs)
	}
	applied = applied[:0]
	for _, d := range daily {
		day := DayOf(d.FirstMicAtMs) // clamped into the day by the split
		if !w.Kept(day) {
			applied = append(applied, -1)
			continue
		}
		i, inserted := t.dayIndex(day)
		if inserted {
			for j := range applied { // indexes after i moved up
				if applied[j] >= i {
					applied[j]++
				}
			}
		}
		x := &t.Days[i]
		x.SeatOccupiedMs += d.SeatOccupiedDeltaMs
		x.MicOnlineMs += d.MicOnlineDeltaMs
		x.SessionCount += d.SessionCountDelta
		x.RoomCount += d.RoomCountDelta
		x.FirstMicAtMs = firstMin(x.FirstMicAtMs, d.FirstMicAtMs)
		x.LastMicAtMs = max(x.LastMicAtMs, d.LastMicAtMs)
		applied = append(applied, i)
	}
	return applied
}

// firstMin is the sink's rule for first_mic_at_ms: 0 means none.
func firstMin(a, b int64) int64 {
	switch {
	case b == 0:
		return a
	case a == 0:
		return b
	}
	return min(a, b)
}
