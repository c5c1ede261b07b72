package mic_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// goldenTotals is testdata/state-v1/totals.bin: a user's totals, version 1.
func goldenTotals() mic.Totals {
	day := mic.DayOf(1764547200000)
	return mic.Totals{SeatOccupiedMs: 7200000, MicOnlineMs: 7100000, SessionCount: 2,
		FirstMicAtMs: 1764460800000, LastMicAtMs: 1764550800000, Days: []mic.DayTotals{
			{Day: day - 1, SeatOccupiedMs: 3600000, MicOnlineMs: 3503000, SessionCount: 1, RoomCount: 1,
				FirstMicAtMs: 1764460800000, LastMicAtMs: 1764464400000},
			{Day: day, SeatOccupiedMs: 3600000, MicOnlineMs: 3597000, SessionCount: 1, RoomCount: 1,
				FirstMicAtMs: 1764547200000, LastMicAtMs: 1764550800000},
		}}
}

// TestTotalsStateVersion1: the totals value of testdata/state-v1 decodes to
// what it was written from, this release writes the same bytes, a newer
// version prefix is a VersionError, and the bootstrap marker round-trips.
func TestTotalsStateVersion1(t *testing.T) {
	want := goldenTotals()
	b := golden(t, "totals.bin")
	var got mic.Totals
	if err := mic.UnmarshalTotals(b, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v (error %v), want %+v", got, err, want)
	}
	if !bytes.Equal(want.AppendBinary(nil), b) {
		t.Error("this release writes other bytes than version 1")
	}
	if len(b) > 80 {
		t.Errorf("a user with two days takes %d bytes, want at most 80", len(b))
	}
	var ve *envelope.VersionError
	if err := mic.UnmarshalTotals(append([]byte{2}, b...), &got); !errors.As(err, &ve) || ve.Version != 2 {
		t.Errorf("version 2: %v, want a VersionError", err)
	}
	if err := mic.UnmarshalTotals(b[:len(b)-3], &got); !errors.Is(err, mic.ErrCorruptState) {
		t.Errorf("truncated: %v, want ErrCorruptState", err)
	}
	if d, err := mic.DecodeBootstrapMarker(mic.EncodeBootstrapMarker(20420)); err != nil || d != 20420 {
		t.Errorf("marker: %d, %v", d, err)
	}
	if mic.KeyKind(mic.TotalsKey("hyapp", 7)) != mic.KindTotals || mic.KeyKind(mic.KeyTotalsBootstrap) != mic.KindBootstrap {
		t.Error("KeyKind does not tell the totals kinds")
	}
}

func dailyDelta(day int64, seat, micMs, rooms int64) *userv1.MicDailyDelta {
	start := day * mic.DayMs
	return &userv1.MicDailyDelta{SeatOccupiedDeltaMs: seat, MicOnlineDeltaMs: micMs, SessionCountDelta: 1,
		RoomCountDelta: rooms, FirstMicAtMs: start + 1000, LastMicAtMs: start + 1000 + seat}
}

// TestTotalsAdd: sums, first/last by the sink's rules, days kept in order,
// a delta of a day out of the window (retention or before the bootstrap)
// is not counted and reported -1, and days out of the window are dropped.
func TestTotalsAdd(t *testing.T) {
	const d = int64(20400)
	w := mic.TotalsWindow{FirstDay: d - 1, RetentionMs: 3 * mic.DayMs, WatermarkMs: (d + 1) * mic.DayMs}
	var tot mic.Totals
	applied := tot.Add([]*userv1.MicDailyDelta{dailyDelta(d, 500, 400, 1)},
		&userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 500, MicOnlineDeltaMs: 400, SessionCountDelta: 1,
			FirstMicAtMs: d*mic.DayMs + 1000, LastMicAtMs: d*mic.DayMs + 1500}, w, nil)
	if !reflect.DeepEqual(applied, []int{0}) || tot.SessionCount != 1 || tot.FirstMicAtMs != d*mic.DayMs+1000 {
		t.Fatalf("first add: %v %+v", applied, tot)
	}
	// A session over midnight into d+1 and one of d-1 (inserted before d),
	// and one of d-2 (before the bootstrap's first day: gone).
	applied = tot.Add([]*userv1.MicDailyDelta{dailyDelta(d-2, 10, 0, 1), dailyDelta(d-1, 100, 0, 1), dailyDelta(d+1, 200, 200, 1)},
		&userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 310, SessionCountDelta: 1, FirstMicAtMs: (d-2)*mic.DayMs + 1000,
			LastMicAtMs: (d+1)*mic.DayMs + 1200}, w, applied)
	if !reflect.DeepEqual(applied, []int{-1, 0, 2}) {
		t.Fatalf("applied %v, want [-1 0 2]", applied)
	}
	if len(tot.Days) != 3 || tot.Days[0].Day != d-1 || tot.Days[1].Day != d || tot.Days[2].Day != d+1 ||
		tot.SeatOccupiedMs != 810 || tot.SessionCount != 2 || tot.FirstMicAtMs != (d-2)*mic.DayMs+1000 ||
		tot.LastMicAtMs != (d+1)*mic.DayMs+1200 {
		t.Fatalf("totals %+v", tot)
	}
	// The watermark moves on: d-1 and d fall out; a delta of d is gone.
	w.WatermarkMs = (d+1)*mic.DayMs + 3*mic.DayMs + 1
	applied = tot.Add([]*userv1.MicDailyDelta{dailyDelta(d, 1, 1, 0), dailyDelta(d+1, 1, 1, 0)}, nil, w, applied)
	if !reflect.DeepEqual(applied, []int{-1, 0}) || len(tot.Days) != 1 || tot.Days[0].SeatOccupiedMs != 201 || tot.SessionCount != 2 {
		t.Fatalf("after the window moved: %v %+v", applied, tot)
	}
	var back mic.Totals
	if err := mic.UnmarshalTotals(tot.AppendBinary(nil), &back); err != nil || !reflect.DeepEqual(back, tot) {
		t.Fatalf("round trip %+v, %v", back, err)
	}
}

// TestTotalsRooms: a day's rooms round-trip (copied and aliased), a day
// without kept rooms encodes as before, and Add keeps a day whose total is
// gone while its rooms are kept: until mic.day_room_retention, and past it
// while a session of that day or before is open (or the oldest open day is
// unknown).
func TestTotalsRooms(t *testing.T) {
	const d = int64(20400)
	tot := mic.Totals{SessionCount: 2, Days: []mic.DayTotals{
		{Day: d, SessionCount: 1, RoomCount: 2, RoomsKept: true, Rooms: mic.DayRooms{"room-1", "r2"}},
		{Day: d + 1, SessionCount: 1, RoomsKept: true},
	}}
	b := tot.AppendBinary(nil)
	for _, decode := range []func([]byte, *mic.Totals) error{mic.UnmarshalTotals, mic.UnmarshalTotalsAlias} {
		var back mic.Totals
		if err := decode(b, &back); err != nil || !reflect.DeepEqual(back, tot) {
			t.Fatalf("round trip %+v, %v; want %+v", back, err, tot)
		}
	}
	plain := mic.Totals{Days: []mic.DayTotals{{Day: d, SessionCount: 1}}}
	withFlag := plain
	withFlag.Days = []mic.DayTotals{{Day: d, SessionCount: 1, RoomsKept: true}}
	if n, m := len(plain.AppendBinary(nil)), len(withFlag.AppendBinary(nil)); m != n+1 {
		t.Fatalf("a day without rooms takes %d bytes, with its flag %d", n, m)
	}

	day := func(oldestOpen int64, wmAfterDayEnd time.Duration) int {
		w := mic.TotalsWindow{FirstDay: 0, RetentionMs: 36 * hourMs, WatermarkMs: (d+1)*mic.DayMs + wmAfterDayEnd.Milliseconds(),
			Rooms: mic.Retention{DayRooms: 48 * time.Hour}, OldestOpenDay: oldestOpen}
		x := mic.Totals{Days: []mic.DayTotals{{Day: d, RoomsKept: true, Rooms: mic.DayRooms{"r"}}, {Day: d - 5}}}
		x.Add(nil, nil, w, nil)
		return len(x.Days)
	}
	for _, c := range []struct {
		name       string
		oldestOpen int64
		after      time.Duration
		want       int
	}{
		{"total kept", math.MaxInt64, 30 * time.Hour, 1},
		{"total gone, rooms kept", math.MaxInt64, 40 * time.Hour, 1},
		{"both gone", math.MaxInt64, 49 * time.Hour, 0},
		{"both gone but a session of the day is open", d, 49 * time.Hour, 1},
		{"both gone, oldest open day unknown", math.MinInt64, 49 * time.Hour, 1},
	} {
		if got := day(c.oldestOpen, c.after); got != c.want {
			t.Errorf("%s: %d days kept, want %d", c.name, got, c.want)
		}
	}
}

const hourMs = int64(time.Hour / time.Millisecond)
