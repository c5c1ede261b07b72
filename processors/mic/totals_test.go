package mic_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

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
