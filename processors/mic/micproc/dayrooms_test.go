package micproc_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/mictest"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// With totals on, a user's day-room sets live in the totals value, not in
// day-room keys (one key and one changelog record per close, not two).
// These tests hold the room counts to what the day-room keys give.

// runChunks feeds stream to a one-partition driver in chunks of 80 events,
// the clock at each chunk's latest event, the timer after each chunk (it
// prunes, records the oldest open day, closes what is due); the marker is
// written before chunk markAt (-1: never).
func runChunks(t *testing.T, stream mictest.Stream, markAt int) (*outputs, *env) {
	t.Helper()
	e := newMemEnv(t, 1, time.UnixMilli(streamStart))
	e.cfg.Settings.DayTotalsRetention = 36 * time.Hour // the least: days outlive their totals for their rooms
	e.cfg.Settings.DayRoomRetention = 48 * time.Hour
	now := streamStart
	for i, chunk := range slices.Collect(slices.Chunk(stream.Events, 80)) {
		if i == markAt {
			e.markAll(1)
		}
		for _, ev := range chunk {
			now = max(now, ev.OccurredAtMs)
		}
		e.clock.Advance(time.Duration(now-e.clock.Now().UnixMilli()) * time.Millisecond)
		e.produce(chunk)
		e.tick()
	}
	return e.read(0, 0), e
}

// TestDayRoomsInTotalsSameCounts: one stream over eight days through the
// day-room keys alone (no marker), through the totals from the start, and
// switched to the totals halfway (the bootstrap's marker after history:
// the day-room keys of the days before still count): every ledger entry
// and daily delta is the same, room counts included, while the totals
// drop the days both windows let go.
func TestDayRoomsInTotalsSameCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 35))
	stream := mictest.Generate(r, mictest.Gen{Users: 6, Sessions: 700, StartMs: streamStart, SpreadMs: 8 * 24 * hour,
		MaxLen: 20 * time.Hour, DupRate: 0.05, OpenRate: 0.05})
	slices.SortStableFunc(stream.Events, func(a, b mic.Event) int { return int(a.OccurredAtMs - b.OccurredAtMs) })
	chunks := (len(stream.Events) + 79) / 80
	keys, keyEnv := runChunks(t, stream, -1)
	for _, run := range []struct {
		name   string
		markAt int
	}{{"totals from the start", 0}, {"totals from halfway", chunks / 2}} {
		got, e := runChunks(t, stream, run.markAt)
		if len(got.ledger) != len(keys.ledger) || len(got.daily) != len(keys.daily) {
			t.Fatalf("%s: %d ledger entries, %d daily deltas; day-room keys gave %d, %d",
				run.name, len(got.ledger), len(got.daily), len(keys.ledger), len(keys.daily))
		}
		for i := range keys.ledger {
			if !proto.Equal(got.ledger[i], keys.ledger[i]) {
				t.Fatalf("%s: ledger entry %d\n got %v\nwant %v", run.name, i, got.ledger[i], keys.ledger[i])
			}
		}
		for i := range keys.daily {
			if !proto.Equal(got.daily[i], keys.daily[i]) {
				t.Fatalf("%s: daily delta %d\n got %v\nwant %v", run.name, i, got.daily[i], keys.daily[i])
			}
		}
		kept, dayKeys := storedDays(t, e.driver().Store(0))
		if run.markAt == 0 && dayKeys != 0 {
			t.Errorf("%s: %d day-room keys written", run.name, dayKeys)
		}
		if _, all := storedDays(t, keyEnv.driver().Store(0)); kept == 0 || kept >= distinctUserDays(keys) || all == 0 {
			t.Errorf("%s: totals keep %d user-days of %d closed (the day-room keys %d): none kept, or none dropped",
				run.name, kept, distinctUserDays(keys), all)
		}
		if n := metricSum(t, e, "roomflow_mic_state_pruned_total", map[string]string{"kind": "day_rooms"}); run.markAt == 0 && n == 0 {
			t.Errorf("%s: no room set counted as pruned", run.name)
		}
	}
	rooms := 0
	for _, d := range keys.daily {
		rooms += int(d.RoomCountDelta)
	}
	if rooms == 0 || rooms == len(keys.daily) {
		t.Fatalf("%d rooms counted in %d daily deltas: the stream does not test the room sets", rooms, len(keys.daily))
	}
}

// storedDays counts the days with rooms in the store's totals values and
// its day-room keys.
func storedDays(t *testing.T, s *streams.Store) (totalsDays, dayKeys int) {
	t.Helper()
	var tot mic.Totals
	s.Range(func(key string, v []byte) bool {
		switch mic.KeyKind(key) {
		case mic.KindDayRooms:
			dayKeys++
		case mic.KindTotals:
			if err := mic.UnmarshalTotals(v, &tot); err != nil {
				t.Fatal(err)
			}
			for _, d := range tot.Days {
				if d.RoomsKept {
					totalsDays++
				}
			}
		}
		return true
	})
	return totalsDays, dayKeys
}

func distinctUserDays(o *outputs) int {
	seen := map[string]bool{}
	for _, d := range o.daily {
		seen[d.AppCode+":"+string(rune(d.UserId))+":"+d.StatDate] = true
	}
	return len(seen)
}

// TestDayRoomsFromKeysAndTotals: with totals on, a day the bootstrap wrote
// (no rooms in the totals value) starts from its day-room key; with totals
// turned off on a marked partition, the rooms a totals value kept still
// count, and new ones go to the day-room key.
func TestDayRoomsFromKeysAndTotals(t *testing.T) {
	day := mic.DayOf(base)
	for _, on := range []bool{true, false} {
		e := newMemEnv(t, 1, matrixClock)
		e.cfg.Settings.DisableTotals = !on
		e.markAll(1)
		d := e.driver()
		known := mic.DayTotals{Day: day, SessionCount: 1, SeatOccupiedMs: mins, FirstMicAtMs: base - hour, LastMicAtMs: base - hour + mins}
		if on {
			d.Seed(0, mic.DayRoomsKey("hy", 5, day), mic.DayRooms{"r"}.AppendBinary(nil)) // written before the totals
		} else {
			known.Rooms, known.RoomsKept = mic.DayRooms{"r"}, true // kept while the totals were on
		}
		d.Seed(0, mic.TotalsKey("hy", 5), (&mic.Totals{SessionCount: 1, SeatOccupiedMs: mins, Days: []mic.DayTotals{known}}).AppendBinary(nil))
		a := &sess{u: 5, room: "r", id: "ms-a"}
		b := &sess{u: 5, room: "r2", id: "ms-b"}
		e.produce([]mic.Event{a.ev("up", base), a.ev("down", base+mins, withReason("leave")),
			b.ev("up", base+2*mins), b.ev("down", base+3*mins, withReason("leave"))})
		o := e.read(4, 0)
		if len(o.daily) != 2 || o.daily[0].RoomCountDelta != 0 || o.daily[1].RoomCountDelta != 1 {
			t.Fatalf("totals on %v: daily deltas %v, want room r counted before (0), r2 new (1)", on, o.daily)
		}
		store := d.Store(0)
		v, _ := store.Get(mic.TotalsKey("hy", 5))
		var tot mic.Totals
		if err := mic.UnmarshalTotals(v, &tot); err != nil {
			t.Fatal(err)
		}
		keyRooms, _ := store.Get(mic.DayRoomsKey("hy", 5, day))
		rooms, err := mic.UnmarshalDayRooms(keyRooms)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case on && (len(tot.Days) != 1 || !tot.Days[0].RoomsKept || !slices.Equal(tot.Days[0].Rooms, mic.DayRooms{"r", "r2"}) ||
			tot.Days[0].RoomCount != 1 || !slices.Equal(rooms, mic.DayRooms{"r"})):
			t.Fatalf("totals on: totals %+v, day-room key %v; want the rooms r, r2 in the totals, the key as it was", tot, rooms)
		case !on && (tot.SessionCount != 1 || !slices.Equal(rooms, mic.DayRooms{"r2", "r"}) && !slices.Equal(rooms, mic.DayRooms{"r", "r2"})):
			t.Fatalf("totals off: totals %+v, day-room key %v; want the totals untouched, r and r2 in the key", tot, rooms)
		}
	}
}

// TestDayRoomsKeptForOpenSessions: a day's rooms outlive its total and
// their own retention while a session of that day is still open (its down
// late by 50 hours, the compensation off), in the totals value as in a
// day-room key, so its close counts a room already counted once, not twice.
func TestDayRoomsKeptForOpenSessions(t *testing.T) {
	day0 := mic.DayOf(base) * mic.DayMs
	for _, totals := range []bool{false, true} {
		e := lateEnv(t, day0, totals)
		a := &sess{u: 5, room: "r", id: "ms-a"}
		b := &sess{u: 5, room: "r", id: "ms-b"}
		c := &sess{u: 5, room: "x", id: "ms-c"}
		other := &sess{u: 6, room: "y", id: "ms-o"}
		e.produce([]mic.Event{a.ev("up", day0+10*hour), a.ev("down", day0+11*hour, withReason("leave")),
			b.ev("up", day0+12*hour), b.ev("publish_confirmed", day0+12*hour+mins),
			other.ev("up", day0+mic.DayMs+50*hour)}) // the watermark 50h past the day's end
		if err := e.driver().Punctuate(e.proc.Prune); err != nil {
			t.Fatal(err)
		}
		e.produce([]mic.Event{c.ev("up", day0+2*mic.DayMs+13*hour), c.ev("down", day0+2*mic.DayMs+14*hour, withReason("leave")),
			b.ev("down", day0+13*hour, withReason("leave"))})
		o := e.read(8, 0)
		got := o.daily[len(o.daily)-1]
		if got.MicSessionId != "ms-b" || got.RoomCountDelta != 0 || got.SessionCountDelta != 1 {
			t.Fatalf("totals %v: the late close's daily delta %v, want room r not counted again", totals, got)
		}
	}
}

// TestDayRoomsKeptForLateOpens: a session of a day whose rooms are near
// their retention opens after the partition's last scan (its up late by a
// day and a half); a later close of the user must not drop the day's rooms
// while it is open.
func TestDayRoomsKeptForLateOpens(t *testing.T) {
	day0 := mic.DayOf(base) * mic.DayMs
	for _, totals := range []bool{false, true} {
		e := lateEnv(t, day0, totals)
		a := &sess{u: 5, room: "r", id: "ms-a"}
		late := &sess{u: 5, room: "r", id: "ms-late"}
		c := &sess{u: 5, room: "x", id: "ms-c"}
		other := &sess{u: 6, room: "y", id: "ms-o"}
		e.produce([]mic.Event{a.ev("up", day0+10*hour), a.ev("down", day0+11*hour, withReason("leave")),
			other.ev("up", day0+mic.DayMs+37*hour)})
		if err := e.driver().Punctuate(e.proc.Prune); err != nil { // no session of day 0 open
			t.Fatal(err)
		}
		e.produce([]mic.Event{late.ev("up", day0+12*hour), other.ev("publish_confirmed", day0+mic.DayMs+50*hour),
			c.ev("up", day0+2*mic.DayMs+13*hour), c.ev("down", day0+2*mic.DayMs+14*hour, withReason("leave")),
			late.ev("down", day0+13*hour, withReason("leave"))})
		o := e.read(8, 0)
		got := o.daily[len(o.daily)-1]
		if got.MicSessionId != "ms-late" || got.RoomCountDelta != 0 {
			t.Fatalf("totals %v: the late session's daily delta %v, want room r not counted again", totals, got)
		}
	}
}

// lateEnv is a one-partition driver four days after day0 with the least
// totals retention, 48h of day-room retention, no timer closes, and the
// totals on (marked) or not.
func lateEnv(t *testing.T, day0 int64, totals bool) *env {
	e := newMemEnv(t, 1, time.UnixMilli(day0+4*mic.DayMs))
	e.cfg.Settings.DayTotalsRetention = 36 * time.Hour
	e.cfg.Settings.DayRoomRetention = 48 * time.Hour
	e.cfg.Settings.DisableCompensation = true
	if totals {
		e.markAll(1)
	}
	return e
}

// A timer close that reads a corrupt value after writing another key (day
// 0's room set, then day 1's undecodable one) is undone whole: day 0's
// room set keeps no room the close never counted, so a later session in
// that room on day 0 counts it.
func TestTimerCloseOfACorruptValueWritesNothing(t *testing.T) {
	day0 := mic.DayOf(base) * mic.DayMs
	e := newMemEnv(t, 1, time.UnixMilli(day0+mic.DayMs+10*mins))
	d := e.driver()
	d.Seed(0, mic.DayRoomsKey("hy", 5, mic.DayOf(day0)+1), []byte{0xff, 0xff, 0xff})
	a := &sess{u: 5, room: "r", id: "ms-a"}
	e.produce([]mic.Event{a.ev("up", day0+mic.DayMs-mins)}) // due on day 1, across midnight
	e.tick()
	if v, ok := d.Store(0).Get(mic.DayRoomsKey("hy", 5, mic.DayOf(day0))); ok {
		t.Fatalf("the skipped close left day 0's room set %x written", v)
	}
	b := &sess{u: 5, room: "r", id: "ms-b"}
	e.produce([]mic.Event{b.ev("up", day0+10*hour), b.ev("down", day0+11*hour, withReason("leave"))})
	var counted bool
	for _, x := range e.read(0, 0).daily {
		if x.MicSessionId == "ms-b" {
			counted = x.RoomCountDelta == 1
		}
	}
	if !counted {
		t.Fatal("room r on day 0 not counted by the first close that saw it")
	}
}

// A timer close that reads a value of a newer release fails the run (its
// writes undone), as an event reading one stalls its partition: the
// session stays open for an instance that reads the version.
func TestTimerCloseOfANewerValueFailsTheRun(t *testing.T) {
	day0 := mic.DayOf(base) * mic.DayMs
	e := newMemEnv(t, 1, time.UnixMilli(day0+mic.DayMs+10*mins))
	d := e.driver()
	d.Seed(0, mic.DayRoomsKey("hy", 5, mic.DayOf(day0)+1), []byte{2, 8, 1}) // state version 2
	a := &sess{u: 5, room: "r", id: "ms-a"}
	e.produce([]mic.Event{a.ev("up", day0+mic.DayMs-mins)})
	err := d.Punctuate(e.proc.Compensate)
	if !errors.Is(err, envelope.ErrNewerVersion) {
		t.Fatalf("compensation over a newer day-room value: %v, want ErrNewerVersion", err)
	}
	if _, ok := d.Store(0).Get(mic.DayRoomsKey("hy", 5, mic.DayOf(day0))); ok {
		t.Fatal("the failed close left day 0's room set written")
	}
	v, ok := d.Store(0).Get(mic.SessionID{AppCode: "hy", UserID: 5, MicSessionID: "ms-a"}.Key())
	if s, err := mic.PeekTimer(v); !ok || err != nil || !s.Status.Open() {
		t.Fatalf("session after the failed close: %v %v %+v, want still open", ok, err, s)
	}
}
