package mic_test

import (
	"math"
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
)

func TestWatermarkAndRetention(t *testing.T) {
	now := t0
	if got := mic.AdvanceWatermark(0, t0-hour, now); got != t0-hour {
		t.Fatalf("advance: %d", got)
	}
	if got := mic.AdvanceWatermark(t0, t0-hour, now); got != t0 {
		t.Fatalf("an older event moved the watermark back: %d", got)
	}
	if got := mic.AdvanceWatermark(t0, t0+10*365*24*hour, now); got != now+mic.MaxWatermarkLeadMs {
		t.Fatalf("a far-future event is capped at the wall clock + lead: %d", got)
	}
	if got := mic.DecodeWatermark(mic.EncodeWatermark(t0)); got != t0 {
		t.Fatalf("round trip %d", got)
	}
	if mic.DecodeWatermark([]byte{1, 2}) != 0 {
		t.Fatal("malformed watermark")
	}

	r := mic.Retention{ClosedSession: 7 * 24 * time.Hour, DayRooms: 48 * time.Hour}
	s := mic.Session{Status: mic.StatusEnded, EndedAtMs: t0}
	if r.TombstoneExpired(&s, t0+7*24*hour) || !r.TombstoneExpired(&s, t0+7*24*hour+1) {
		t.Fatal("tombstone retention boundary")
	}
	open := mic.Session{Status: mic.StatusPublishing, EndedAtMs: 0}
	if r.TombstoneExpired(&open, math.MaxInt64) {
		t.Fatal("an open session expired")
	}
	day := mic.DayOf(t0)
	end := (day + 1) * mic.DayMs
	if r.DayRoomsExpired(day, math.MaxInt64, end+48*hour) || !r.DayRoomsExpired(day, math.MaxInt64, end+48*hour+1) {
		t.Fatal("day rooms retention boundary")
	}
	if r.DayRoomsExpired(day, day, end+100*hour) {
		t.Fatal("day rooms dropped while a session that started that day is open")
	}
}
