// Package mictest generates valid RoomMicChanged streams with their ground
// truth, computes the expected daily and lifetime totals independently of
// package mic (calendar stepping with package time, not day arithmetic),
// and tallies ledger entries the way the MySQL sink applies them, so tests
// of the pure engine and of the stream processor compare the same facts.
package mictest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// Truth is one generated session as it really happened.
type Truth struct {
	AppCode      string
	UserID       int64
	RoomID       string
	MicSessionID string
	SeatStartMs  int64
	// PublishMs is the effective publish start (0: never published).
	PublishMs int64
	// EndMs is the effective end; 0 when the stream has no down (the
	// session stays open until a timer closes it).
	EndMs     int64
	EndReason string
	FirstSeat int32
	LastSeat  int32
}

// Stream is a generated input: events in delivery order (per user order is
// the order of the slice) plus the truth of every session.
type Stream struct {
	Events   []mic.Event
	Sessions []Truth
}

// Gen configures Generate.
type Gen struct {
	AppCode  string
	Users    int
	Sessions int
	StartMs  int64         // earliest seat start
	SpreadMs int64         // seat starts fall in [StartMs, StartMs+SpreadMs)
	MaxLen   time.Duration // longest session (cross-day when > a day)
	// DupRate is the probability that an event is delivered twice (the copy
	// a few events later).
	DupRate float64
	// OpenRate is the probability that a session gets no down.
	OpenRate float64
	// Skips adds events that must be skipped (unknown sessions, empty ids,
	// unknown actions).
	Skips bool
}

// Generate builds a random valid stream.
func Generate(r *rand.Rand, g Gen) Stream {
	if g.AppCode == "" {
		g.AppCode = "hy"
	}
	gen := &generator{r: r, g: g}
	var st Stream
	for i := 0; i < g.Sessions; i++ {
		st.Sessions = append(st.Sessions, gen.session(i))
	}
	if g.Skips {
		gen.skips()
	}
	st.Events = deliver(r, g.DupRate, gen.evs)
	return st
}

// generator holds what Generate has generated so far.
type generator struct {
	r   *rand.Rand
	g   Gen
	evs []timedEvent
	seq int
}

// timedEvent is a generated event with its generation order, which breaks
// ties of its time.
type timedEvent struct {
	ev  mic.Event
	at  int64
	seq int
}

func (gen *generator) add(ev mic.Event) {
	gen.seq++
	gen.evs = append(gen.evs, timedEvent{ev: ev, at: ev.OccurredAtMs, seq: gen.seq})
}

// session generates the events of session i (up, maybe a publish, seat
// changes, maybe a down) and returns its truth.
func (gen *generator) session(i int) Truth {
	user := int64(1000 + gen.r.IntN(max(gen.g.Users, 1)))
	room := fmt.Sprintf("room-%d", gen.r.IntN(max(gen.g.Users/2, 3)))
	ms := fmt.Sprintf("ms-%d-%d", user, i)
	start := gen.g.StartMs + gen.r.Int64N(max(gen.g.SpreadMs, 1))
	if gen.r.IntN(4) == 0 { // land close to a midnight
		start = mic.DayOf(start)*mic.DayMs + mic.DayMs - gen.r.Int64N(int64(2*time.Hour/time.Millisecond)) - 1
	}
	length := gen.r.Int64N(max(gen.g.MaxLen.Milliseconds(), 1))
	if gen.r.IntN(10) == 0 {
		length = 0
	}
	seat := int32(1 + gen.r.IntN(8))
	t := Truth{AppCode: gen.g.AppCode, UserID: user, RoomID: room, MicSessionID: ms, SeatStartMs: start,
		FirstSeat: seat, LastSeat: seat}
	base := mic.Event{AppCode: gen.g.AppCode, RoomID: room, UserID: user, MicSessionID: ms,
		EventType: mic.EventTypeRoomMicChanged}
	up := base
	up.EventID, up.Action, up.SeatNo, up.OccurredAtMs = ms+"-up", mic.ActionUp, seat, start
	up.PublishState = "pending_publish"
	gen.add(up)
	cur := start
	end := start + length
	if gen.r.IntN(4) != 0 && length > 0 { // publishes
		pubOcc := start + gen.r.Int64N(length+1)
		pe := base
		pe.EventID, pe.Action, pe.SeatNo, pe.OccurredAtMs = ms+"-pub", mic.ActionPublishConfirmed, seat, pubOcc
		pe.PublishState = "publishing"
		eff := pubOcc
		switch gen.r.IntN(3) {
		case 0: // RTC time a bit before the server accepted it, maybe before the seat
			pe.PublishEventTimeMs = pubOcc - gen.r.Int64N(3000)
			eff = max(pe.PublishEventTimeMs, start)
		case 1:
			pe.PublishEventTimeMs = pubOcc
		}
		t.PublishMs = eff
		gen.add(pe)
		cur = pubOcc
	}
	for c := gen.r.IntN(3); c > 0 && end > cur; c-- { // seat changes
		at := cur + gen.r.Int64N(end-cur+1)
		ce := base
		seat = int32(1 + gen.r.IntN(8))
		ce.EventID, ce.Action, ce.SeatNo, ce.OccurredAtMs = fmt.Sprintf("%s-chg%d", ms, c), mic.ActionChange, seat, at
		gen.add(ce)
		t.LastSeat = seat
		cur = at
	}
	if gen.r.Float64() >= gen.g.OpenRate {
		de := base
		de.EventID, de.Action, de.SeatNo, de.OccurredAtMs = ms+"-down", mic.ActionDown, seat, max(end, cur)
		de.Reason = []string{"leave", "kick", "room_closed", "publish_timeout", "rtc_audio_stopped"}[gen.r.IntN(5)]
		endEff := de.OccurredAtMs
		if gen.r.IntN(3) == 0 { // precise RTC stop time, possibly before the publish
			de.RTCStoppedAtMs = max(de.OccurredAtMs-gen.r.Int64N(5000), 1)
			endEff = max(de.RTCStoppedAtMs, start)
		}
		t.EndMs, t.EndReason = endEff, de.Reason
		gen.add(de)
	}
	return t
}

// skips generates events that must be skipped: downs of unknown sessions,
// ups without a session id or a user, unknown actions.
func (gen *generator) skips() {
	for i := 0; i < gen.g.Sessions/10+4; i++ {
		at := gen.g.StartMs + gen.r.Int64N(max(gen.g.SpreadMs, 1))
		user := int64(1000 + gen.r.IntN(max(gen.g.Users, 1)))
		e := mic.Event{AppCode: gen.g.AppCode, RoomID: "room-x", UserID: user, EventType: mic.EventTypeRoomMicChanged,
			OccurredAtMs: at, EventID: fmt.Sprintf("skip-%d", i)}
		switch i % 4 {
		case 0:
			e.Action, e.MicSessionID = mic.ActionDown, fmt.Sprintf("ghost-%d", i)
		case 1:
			e.Action = mic.ActionUp // no mic_session_id
		case 2:
			e.Action, e.MicSessionID = "teleport", fmt.Sprintf("ghost-%d", i)
		case 3:
			e.Action, e.MicSessionID, e.UserID = mic.ActionUp, fmt.Sprintf("ghost-%d", i), 0
		}
		gen.add(e)
	}
}

// deliver returns evs in delivery order with room versions, and a copy of
// each event with probability dupRate a few positions later.
func deliver(r *rand.Rand, dupRate float64, evs []timedEvent) []mic.Event {
	var out []mic.Event
	// Deliver in time order (per session order holds: its times never
	// decrease and ties keep generation order).
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].seq < evs[j].seq
	})
	roomVer := map[string]int64{}
	for _, e := range evs {
		ev := e.ev
		roomVer[ev.RoomID]++
		ev.RoomVersion = roomVer[ev.RoomID]
		out = append(out, ev)
		if r.Float64() < dupRate {
			// the copy arrives later in the same user's order
			out = append(out, ev)
		}
	}
	if dupRate > 0 { // move some copies a few positions further
		for i := len(out) - 1; i > 0; i-- {
			if out[i].EventID == out[i-1].EventID && i+1 < len(out) && r.IntN(2) == 0 {
				j := min(i+1+r.IntN(4), len(out)-1)
				d := out[i]
				copy(out[i:j], out[i+1:j+1])
				out[j] = d
			}
		}
	}
	return out
}

// Agg is one row of expected or tallied totals.
type Agg struct {
	SeatMs, OnlineMs, Sessions, Rooms int64
	FirstAtMs, LastAtMs               int64
}

// DayKey names a user's UTC day.
type DayKey struct {
	AppCode string
	UserID  int64
	Date    string
}

// UserKey names a user.
type UserKey struct {
	AppCode string
	UserID  int64
}

// Totals are daily and lifetime stats per user.
type Totals struct {
	Daily    map[DayKey]*Agg
	Lifetime map[UserKey]*Agg
}

func newTotals() Totals {
	return Totals{Daily: map[DayKey]*Agg{}, Lifetime: map[UserKey]*Agg{}}
}

// Close fills the end of sessions the stream left open, as the timers close
// them (MIC-10): pending ends at seat start + pending max age with no
// online time, publishing at publish start + publishing max age.
func Close(sessions []Truth, p mic.Policy) []Truth {
	out := make([]Truth, len(sessions))
	for i, s := range sessions {
		if s.EndMs == 0 {
			if s.PublishMs == 0 {
				s.EndMs, s.EndReason = s.SeatStartMs+p.PendingPublishMaxAge.Milliseconds(), mic.ReasonCompensatedPublishTimeout
			} else {
				s.EndMs, s.EndReason = s.PublishMs+p.PublishingSessionMaxAge.Milliseconds(), mic.ReasonCompensatedPublishingWindow
			}
		}
		out[i] = s
	}
	return out
}

// Expect computes the totals of the closed sessions by walking calendar
// days with package time: every UTC day the seat interval overlaps gets
// its seat and online milliseconds, a session count and, once per distinct
// room, a room count; a zero-length session counts on its start day.
func Expect(sessions []Truth) Totals {
	tot := newTotals()
	rooms := map[DayKey]map[string]bool{}
	for _, s := range sessions {
		if s.EndMs == 0 {
			continue
		}
		start, end := time.UnixMilli(s.SeatStartMs).UTC(), time.UnixMilli(max(s.EndMs, s.SeatStartMs)).UTC()
		var pub time.Time
		if s.PublishMs > 0 {
			pub = time.UnixMilli(s.PublishMs).UTC()
			if pub.After(end) {
				pub = end
			}
		}
		uk := UserKey{s.AppCode, s.UserID}
		life := tot.Lifetime[uk]
		if life == nil {
			life = &Agg{}
			tot.Lifetime[uk] = life
		}
		life.Sessions++
		life.SeatMs += end.Sub(start).Milliseconds()
		if !pub.IsZero() {
			life.OnlineMs += end.Sub(pub).Milliseconds()
		}
		life.FirstAtMs = minNZ(life.FirstAtMs, s.SeatStartMs)
		life.LastAtMs = max(life.LastAtMs, end.UnixMilli())
		day := time.Date(start.Year(), start.Month(), start.Day(), 0, 0, 0, 0, time.UTC)
		for first := true; first || day.Before(end); first = false {
			next := day.AddDate(0, 0, 1)
			seat := span(start, end, day, next)
			if seat == 0 && !(first && end.Equal(start)) {
				day = next
				continue
			}
			dk := DayKey{s.AppCode, s.UserID, day.Format("2006-01-02")}
			a := tot.Daily[dk]
			if a == nil {
				a = &Agg{}
				tot.Daily[dk] = a
				rooms[dk] = map[string]bool{}
			}
			a.Sessions++
			a.SeatMs += seat
			if !pub.IsZero() {
				a.OnlineMs += span(pub, end, day, next)
			}
			if !rooms[dk][s.RoomID] {
				rooms[dk][s.RoomID] = true
				a.Rooms++
			}
			lo := start
			if day.After(lo) {
				lo = day
			}
			hi := end
			if last := next.Add(-time.Millisecond); hi.After(last) {
				hi = last
			}
			if hi.Before(lo) {
				hi = lo
			}
			a.FirstAtMs = minNZ(a.FirstAtMs, lo.UnixMilli())
			a.LastAtMs = max(a.LastAtMs, hi.UnixMilli())
			day = next
		}
	}
	return tot
}

func span(a0, a1, b0, b1 time.Time) int64 {
	lo, hi := a0, a1
	if b0.After(lo) {
		lo = b0
	}
	if b1.Before(hi) {
		hi = b1
	}
	if !hi.After(lo) {
		return 0
	}
	return hi.Sub(lo).Milliseconds()
}

func minNZ(a, b int64) int64 {
	if a == 0 || b < a {
		return b
	}
	return a
}

// Tally applies ledger entries like the MySQL sink: once per event_id,
// deltas summed, first/last as MIN/MAX, session snapshots kept by highest
// version. It also checks per-entry invariants and returns the first
// violation it saw.
type Tally struct {
	Totals
	Sessions map[string]*userv1.MicSession // by mic_session_id
	Entries  map[string]*userv1.MicLedgerEntry
	Skipped  map[string]string // event_id -> skip reason
	Dupes    int               // entries whose event_id was already applied
	Err      error
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{Totals: newTotals(), Sessions: map[string]*userv1.MicSession{},
		Entries: map[string]*userv1.MicLedgerEntry{}, Skipped: map[string]string{}}
}

func (t *Tally) fail(format string, args ...any) {
	if t.Err == nil {
		t.Err = fmt.Errorf(format, args...)
	}
}

// Apply adds one ledger entry.
func (t *Tally) Apply(e *userv1.MicLedgerEntry) {
	if _, ok := t.Entries[e.EventId]; ok {
		t.Dupes++
		return
	}
	t.Entries[e.EventId] = e
	if e.Status == mic.StatusSkipped {
		t.Skipped[e.EventId] = e.SkipReason
		if e.Session != nil || len(e.Daily) > 0 || e.Lifetime != nil {
			t.fail("skipped entry %s carries effects", e.EventId)
		}
		return
	}
	if s := e.Session; s != nil {
		if s.MicOnlineMs > s.SeatOccupiedMs {
			t.fail("session %s: mic_online %d > seat %d", s.MicSessionId, s.MicOnlineMs, s.SeatOccupiedMs)
		}
		if old := t.Sessions[s.MicSessionId]; old == nil || s.Version > old.Version {
			t.Sessions[s.MicSessionId] = s
		}
	}
	for _, d := range e.Daily {
		if d.MicOnlineDeltaMs > d.SeatOccupiedDeltaMs {
			t.fail("%s %s: day online %d > seat %d", e.EventId, d.StatDate, d.MicOnlineDeltaMs, d.SeatOccupiedDeltaMs)
		}
		dk := DayKey{e.AppCode, e.UserId, d.StatDate}
		a := t.Daily[dk]
		if a == nil {
			a = &Agg{}
			t.Daily[dk] = a
		}
		a.SeatMs += d.SeatOccupiedDeltaMs
		a.OnlineMs += d.MicOnlineDeltaMs
		a.Sessions += d.SessionCountDelta
		a.Rooms += d.RoomCountDelta
		a.FirstAtMs = minNZ(a.FirstAtMs, d.FirstMicAtMs)
		a.LastAtMs = max(a.LastAtMs, d.LastMicAtMs)
	}
	if l := e.Lifetime; l != nil {
		uk := UserKey{e.AppCode, e.UserId}
		a := t.Lifetime[uk]
		if a == nil {
			a = &Agg{}
			t.Lifetime[uk] = a
		}
		a.SeatMs += l.SeatOccupiedDeltaMs
		a.OnlineMs += l.MicOnlineDeltaMs
		a.Sessions += l.SessionCountDelta
		a.FirstAtMs = minNZ(a.FirstAtMs, l.FirstMicAtMs)
		a.LastAtMs = max(a.LastAtMs, l.LastMicAtMs)
	}
}

// Diff compares tallied totals with expected ones; it returns a
// description of up to 10 differences ("" when equal). Lifetime rooms are
// not a lifetime column and are ignored.
func Diff(got, want Totals) string {
	var out []string
	note := func(format string, args ...any) {
		if len(out) < 10 {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	for k, w := range want.Daily {
		if g := got.Daily[k]; g == nil || *g != *w {
			note("daily %v: got %+v want %+v", k, g, *w)
		}
	}
	for k, g := range got.Daily {
		if want.Daily[k] == nil {
			note("daily %v: unexpected %+v", k, *g)
		}
	}
	for k, w := range want.Lifetime {
		g := got.Lifetime[k]
		if g == nil || g.SeatMs != w.SeatMs || g.OnlineMs != w.OnlineMs || g.Sessions != w.Sessions ||
			g.FirstAtMs != w.FirstAtMs || g.LastAtMs != w.LastAtMs {
			note("lifetime %v: got %+v want %+v", k, g, *w)
		}
	}
	for k, g := range got.Lifetime {
		if want.Lifetime[k] == nil {
			note("lifetime %v: unexpected %+v", k, *g)
		}
	}
	s := ""
	for _, o := range out {
		s += o + "\n"
	}
	return s
}

// SumDaily sums a user's daily rows (for the daily == lifetime check).
func (t Totals) SumDaily() map[UserKey]Agg {
	out := map[UserKey]Agg{}
	for k, a := range t.Daily {
		u := UserKey{k.AppCode, k.UserID}
		s := out[u]
		s.SeatMs += a.SeatMs
		s.OnlineMs += a.OnlineMs
		out[u] = s
	}
	return out
}
