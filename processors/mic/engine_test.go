package mic_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/userv1"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli()

const (
	sec  = int64(1000)
	mins = 60 * sec
	hour = 60 * mins
)

func ms(t string) int64 {
	v, err := time.Parse(time.RFC3339Nano, t)
	if err != nil {
		panic(err)
	}
	return v.UnixMilli()
}

// e builds an event of session "s1" of user 7 in room "r1".
func e(id, action string, at int64, mods ...func(*mic.Event)) mic.Event {
	ev := mic.Event{EventID: id, EventType: mic.EventTypeRoomMicChanged, AppCode: "hy", RoomID: "r1",
		OccurredAtMs: at, UserID: 7, SeatNo: 1, Action: action, MicSessionID: "s1"}
	for _, m := range mods {
		m(&ev)
	}
	return ev
}

func pubAt(t int64) func(*mic.Event)       { return func(e *mic.Event) { e.PublishEventTimeMs = t } }
func rtcStop(t int64) func(*mic.Event)     { return func(e *mic.Event) { e.RTCStoppedAtMs = t } }
func reason(r string) func(*mic.Event)     { return func(e *mic.Event) { e.Reason = r } }
func seat(n int32) func(*mic.Event)        { return func(e *mic.Event) { e.SeatNo = n } }
func session(s string) func(*mic.Event)    { return func(e *mic.Event) { e.MicSessionID = s } }
func user(u int64) func(*mic.Event)        { return func(e *mic.Event) { e.UserID = u } }
func roomVersion(v int64) func(*mic.Event) { return func(e *mic.Event) { e.RoomVersion = v } }

type step struct {
	ev      mic.Event
	outcome mic.Outcome
	skip    string
}

func ok(ev mic.Event) step                { return step{ev: ev, outcome: mic.OutcomeConsumed} }
func skipped(ev mic.Event, r string) step { return step{ev: ev, outcome: mic.OutcomeSkipped, skip: r} }
func dup(ev mic.Event) step               { return step{ev: ev, outcome: mic.OutcomeDuplicate} }

// want is the closed session "s1" (nil: it must not be closed).
type want struct {
	seat, online, started, published, ended int64
	reason                                  string
	firstSeat, curSeat                      int32
	version                                 int64
}

func TestHandleTable(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
		want  *want
	}{
		{"publish ten minutes then down", []step{
			ok(e("a", "up", t0)),
			ok(e("b", "publish_confirmed", t0+5*sec, pubAt(t0+4*sec))),
			ok(e("c", "down", t0+4*sec+10*mins, reason("leave"))),
		}, &want{seat: 10*mins + 4*sec, online: 10 * mins, started: t0, published: t0 + 4*sec, ended: t0 + 4*sec + 10*mins,
			reason: "leave", firstSeat: 1, curSeat: 1, version: 3}},
		{"occupy without publish, publish_timeout down", []step{
			ok(e("a", "up", t0)),
			ok(e("b", "down", t0+2*mins, reason("publish_timeout"))),
		}, &want{seat: 2 * mins, started: t0, ended: t0 + 2*mins, reason: "publish_timeout", firstSeat: 1, curSeat: 1, version: 2}},
		{"seat change keeps the session and time continuous", []step{
			ok(e("a", "up", t0)),
			ok(e("b", "publish_confirmed", t0)),
			ok(e("c", "change", t0+mins, seat(3))),
			ok(e("d", "change", t0+2*mins, seat(5))),
			ok(e("f", "down", t0+3*mins, seat(5), reason("kick"))),
		}, &want{seat: 3 * mins, online: 3 * mins, started: t0, published: t0, ended: t0 + 3*mins, reason: "kick",
			firstSeat: 1, curSeat: 5, version: 5}},
		{"publish time falls back to occurred_at and never precedes the seat", []step{
			ok(e("a", "up", t0)),
			ok(e("b", "publish_confirmed", t0+sec, pubAt(t0-5*sec))),
			ok(e("c", "down", t0+mins)),
		}, &want{seat: mins, online: mins, started: t0, published: t0, ended: t0 + mins, firstSeat: 1, curSeat: 1, version: 3}},
		{"rtc_stopped_at is the end when set", []step{
			ok(e("a", "up", t0)),
			ok(e("b", "publish_confirmed", t0+sec)),
			ok(e("c", "down", t0+mins, rtcStop(t0+30*sec), reason("rtc_audio_stopped"))),
		}, &want{seat: 30 * sec, online: 29 * sec, started: t0, published: t0 + sec, ended: t0 + 30*sec,
			reason: "rtc_audio_stopped", firstSeat: 1, curSeat: 1, version: 3}},
		{"end before the publish start gives no online time", []step{
			ok(e("a", "up", t0)),
			ok(e("b", "publish_confirmed", t0+10*sec)),
			ok(e("c", "down", t0+mins, rtcStop(t0+5*sec))),
		}, &want{seat: 5 * sec, online: 0, started: t0, published: t0 + 10*sec, ended: t0 + 5*sec, firstSeat: 1, curSeat: 1, version: 3}},
		{"end before the seat start gives no negative time", []step{
			ok(e("a", "up", t0)),
			ok(e("b", "down", t0-mins)),
		}, &want{seat: 0, started: t0, ended: t0, firstSeat: 1, curSeat: 1, version: 2}},
		{"duplicates are dropped without output", []step{
			ok(e("a", "up", t0)),
			dup(e("a", "up", t0)),
			ok(e("b", "publish_confirmed", t0)),
			dup(e("a", "up", t0)),
			dup(e("b", "publish_confirmed", t0)),
			ok(e("c", "change", t0+sec, seat(2))),
			dup(e("c", "change", t0+sec, seat(2))),
			ok(e("d", "down", t0+mins)),
			dup(e("d", "down", t0+mins)),
			dup(e("b", "publish_confirmed", t0)),
		}, &want{seat: mins, online: mins, started: t0, published: t0, ended: t0 + mins, firstSeat: 1, curSeat: 2, version: 4}},
		{"late down after close is session_already_closed", []step{
			ok(e("a", "up", t0)),
			ok(e("b", "down", t0+mins)),
			skipped(e("c", "down", t0+2*mins), mic.SkipAlreadyClosed),
			skipped(e("d", "change", t0+2*mins), mic.SkipAlreadyClosed),
			skipped(e("f", "publish_confirmed", t0+2*mins), mic.SkipAlreadyClosed),
			skipped(e("g", "up", t0+2*mins), mic.SkipAlreadyClosed),
		}, &want{seat: mins, started: t0, ended: t0 + mins, firstSeat: 1, curSeat: 1, version: 2}},
		{"events of an unknown session", []step{
			skipped(e("a", "down", t0), mic.SkipUnknownSession),
			skipped(e("b", "publish_confirmed", t0), mic.SkipUnknownSession),
			skipped(e("c", "change", t0), mic.SkipUnknownSession),
		}, nil},
		{"second up and second publish are stale", []step{
			ok(e("a", "up", t0)),
			skipped(e("b", "up", t0+sec), mic.SkipStale),
			ok(e("c", "publish_confirmed", t0+2*sec)),
			skipped(e("d", "publish_confirmed", t0+3*sec), mic.SkipStale),
			ok(e("f", "down", t0+mins)),
		}, &want{seat: mins, online: mins - 2*sec, started: t0, published: t0 + 2*sec, ended: t0 + mins, firstSeat: 1, curSeat: 1, version: 3}},
		{"lower room_version is stale", []step{
			ok(e("a", "up", t0, roomVersion(10))),
			ok(e("b", "change", t0+sec, roomVersion(12), seat(4))),
			skipped(e("c", "change", t0+2*sec, roomVersion(11), seat(6)), mic.SkipStale),
			skipped(e("d", "down", t0+3*sec, roomVersion(11)), mic.SkipStale),
			ok(e("f", "down", t0+4*sec, roomVersion(12))),
		}, &want{seat: 4 * sec, started: t0, ended: t0 + 4*sec, firstSeat: 1, curSeat: 4, version: 3}},
		{"incomplete and unknown actions", []step{
			skipped(e("a", "up", t0, session("")), mic.SkipIncomplete),
			skipped(e("b", "up", t0, user(0)), mic.SkipIncomplete),
			skipped(e("c", "teleport", t0), mic.SkipUnknownAction),
			skipped(e("d", "", t0), mic.SkipUnknownAction),
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := mic.NewMapState()
			var closes []mic.Output
			for i, s := range c.steps {
				out := mic.Handle(st, &s.ev)
				if out.Outcome != s.outcome || out.SkipReason != s.skip {
					t.Fatalf("step %d (%s %s): outcome %v %q, want %v %q", i, s.ev.EventID, s.ev.Action, out.Outcome, out.SkipReason, s.outcome, s.skip)
				}
				checkOutput(t, &s.ev, out)
				if out.Closed != nil {
					closes = append(closes, out)
				}
			}
			if c.want == nil {
				if len(closes) != 0 {
					t.Fatalf("closed %d sessions, want none", len(closes))
				}
				return
			}
			if len(closes) != 1 {
				t.Fatalf("closed %d times, want once", len(closes))
			}
			s := closes[0].Ledger.Session
			w := c.want
			got := want{seat: s.SeatOccupiedMs, online: s.MicOnlineMs, started: s.SeatStartedAtMs, published: s.PublishingStartedAtMs,
				ended: s.EndedAtMs, reason: s.EndReason, firstSeat: s.FirstSeatNo, curSeat: s.CurrentSeatNo, version: s.Version}
			if got != *w {
				t.Fatalf("closed session\n got %+v\nwant %+v", got, *w)
			}
			cl := closes[0].Closed
			if cl.SeatOccupiedMs != w.seat || cl.MicOnlineMs != w.online || cl.EndReason != w.reason || cl.EndedAtMs != w.ended ||
				cl.EventId != "UserMicSessionClosed:s1" || cl.RoomId != "r1" || cl.UserId != 7 || cl.AppCode != "hy" {
				t.Fatalf("UserMicSessionClosed %v does not match the session", cl)
			}
			if lt := closes[0].Lifetime; lt.SeatOccupiedDeltaMs != w.seat || lt.MicOnlineDeltaMs != w.online || lt.SessionCountDelta != 1 {
				t.Fatalf("lifetime delta %v", lt)
			}
		})
	}
}

// checkOutput checks the invariants every output must hold.
func checkOutput(t *testing.T, ev *mic.Event, out mic.Output) {
	t.Helper()
	l := out.Ledger
	if out.Outcome == mic.OutcomeDuplicate {
		if l != nil || out.Closed != nil || out.Daily != nil || out.Lifetime != nil {
			t.Fatalf("duplicate %s produced output", ev.EventID)
		}
		return
	}
	if l == nil || l.EventId != ev.EventID || l.EventType != ev.EventType || l.AppCode != ev.AppCode ||
		l.UserId != ev.UserID || l.MicSessionId != ev.MicSessionID || l.Action != ev.Action || l.OccurredAtMs != ev.OccurredAtMs {
		t.Fatalf("ledger entry %v does not name event %+v", l, ev)
	}
	switch out.Outcome {
	case mic.OutcomeSkipped:
		if l.Status != "skipped" || l.SkipReason == "" || l.Session != nil || l.Daily != nil || l.Lifetime != nil || out.Closed != nil {
			t.Fatalf("skipped entry with effects: %v", l)
		}
	case mic.OutcomeConsumed:
		if l.Status != "consumed" || l.SkipReason != "" || l.Session == nil || l.Session.LastEventId != ev.EventID {
			t.Fatalf("consumed entry %v", l)
		}
		closed := l.Session.Status == "ended"
		if closed != (out.Closed != nil) || closed != (l.Lifetime != nil) || closed != (len(l.Daily) > 0) || len(l.Daily) != len(out.Daily) {
			t.Fatalf("close outputs inconsistent: %v", l)
		}
		var seat, online int64
		for i, d := range l.Daily {
			seat += d.SeatOccupiedDeltaMs
			online += d.MicOnlineDeltaMs
			if d.MicOnlineDeltaMs > d.SeatOccupiedDeltaMs {
				t.Fatalf("day %s online > seat", d.StatDate)
			}
			p := out.Daily[i]
			if p.EventId != "UserMicDailyStatsUpdated:"+ev.MicSessionID+":"+d.StatDate || p.StatDate != d.StatDate ||
				p.SeatOccupiedDeltaMs != d.SeatOccupiedDeltaMs || p.MicOnlineDeltaMs != d.MicOnlineDeltaMs ||
				p.RoomCountDelta != d.RoomCountDelta || p.SessionCountDelta != 1 || p.UserId != ev.UserID {
				t.Fatalf("daily event %v does not match delta %v", p, d)
			}
		}
		if closed && (seat != l.Session.SeatOccupiedMs || online != l.Session.MicOnlineMs || l.Session.MicOnlineMs > l.Session.SeatOccupiedMs) {
			t.Fatalf("daily sums %d/%d != session %d/%d", seat, online, l.Session.SeatOccupiedMs, l.Session.MicOnlineMs)
		}
	}
}

func TestSplitDays(t *testing.T) {
	type sl struct {
		date            string
		seat, online    int64
		firstAt, lastAt int64
	}
	cases := []struct {
		name            string
		start, pub, end int64
		want            []sl
	}{
		{"inside one day", ms("2026-11-29T10:00:00Z"), ms("2026-11-29T10:01:00Z"), ms("2026-11-29T10:11:00Z"),
			[]sl{{"2026-11-29", 11 * mins, 10 * mins, ms("2026-11-29T10:00:00Z"), ms("2026-11-29T10:11:00Z")}}},
		{"23:30 to 01:10 is 30 + 70 minutes", ms("2026-11-29T23:30:00Z"), ms("2026-11-29T23:30:00Z"), ms("2026-11-30T01:10:00Z"),
			[]sl{
				{"2026-11-29", 30 * mins, 30 * mins, ms("2026-11-29T23:30:00Z"), ms("2026-11-29T23:59:59.999Z")},
				{"2026-11-30", 70 * mins, 70 * mins, ms("2026-11-30T00:00:00Z"), ms("2026-11-30T01:10:00Z")},
			}},
		{"publishing only after midnight", ms("2026-11-29T23:30:00Z"), ms("2026-11-30T00:10:00Z"), ms("2026-11-30T01:10:00Z"),
			[]sl{
				{"2026-11-29", 30 * mins, 0, ms("2026-11-29T23:30:00Z"), ms("2026-11-29T23:59:59.999Z")},
				{"2026-11-30", 70 * mins, 60 * mins, ms("2026-11-30T00:00:00Z"), ms("2026-11-30T01:10:00Z")},
			}},
		{"ending exactly at midnight touches one day", ms("2026-11-29T23:00:00Z"), 0, ms("2026-11-30T00:00:00Z"),
			[]sl{{"2026-11-29", hour, 0, ms("2026-11-29T23:00:00Z"), ms("2026-11-29T23:59:59.999Z")}}},
		{"starting exactly at midnight", ms("2026-11-30T00:00:00Z"), 0, ms("2026-11-30T00:00:01Z"),
			[]sl{{"2026-11-30", sec, 0, ms("2026-11-30T00:00:00Z"), ms("2026-11-30T00:00:01Z")}}},
		{"three days, month and year end", ms("2026-12-30T22:00:00Z"), ms("2026-12-30T23:00:00Z"), ms("2027-01-01T02:00:00Z"),
			[]sl{
				{"2026-12-30", 2 * hour, hour, ms("2026-12-30T22:00:00Z"), ms("2026-12-30T23:59:59.999Z")},
				{"2026-12-31", 24 * hour, 24 * hour, ms("2026-12-31T00:00:00Z"), ms("2026-12-31T23:59:59.999Z")},
				{"2027-01-01", 2 * hour, 2 * hour, ms("2027-01-01T00:00:00Z"), ms("2027-01-01T02:00:00Z")},
			}},
		{"zero length counts on its start day", ms("2026-11-30T00:00:00Z"), 0, ms("2026-11-30T00:00:00Z"),
			[]sl{{"2026-11-30", 0, 0, ms("2026-11-30T00:00:00Z"), ms("2026-11-30T00:00:00Z")}}},
		{"end before start clamps", ms("2026-11-30T05:00:00Z"), 0, ms("2026-11-30T04:00:00Z"),
			[]sl{{"2026-11-30", 0, 0, ms("2026-11-30T05:00:00Z"), ms("2026-11-30T05:00:00Z")}}},
		{"publish after end clamps to no online time", ms("2026-11-30T05:00:00Z"), ms("2026-11-30T07:00:00Z"), ms("2026-11-30T06:00:00Z"),
			[]sl{{"2026-11-30", hour, 0, ms("2026-11-30T05:00:00Z"), ms("2026-11-30T06:00:00Z")}}},
		{"leap day", ms("2028-02-28T23:00:00Z"), 0, ms("2028-03-01T01:00:00Z"),
			[]sl{
				{"2028-02-28", hour, 0, ms("2028-02-28T23:00:00Z"), ms("2028-02-28T23:59:59.999Z")},
				{"2028-02-29", 24 * hour, 0, ms("2028-02-29T00:00:00Z"), ms("2028-02-29T23:59:59.999Z")},
				{"2028-03-01", hour, 0, ms("2028-03-01T00:00:00Z"), ms("2028-03-01T01:00:00Z")},
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := mic.SplitDays(c.start, c.pub, c.end)
			if len(got) != len(c.want) {
				t.Fatalf("got %d slices %+v, want %d", len(got), got, len(c.want))
			}
			for i, g := range got {
				w := c.want[i]
				if (sl{g.Date, g.SeatOccupiedMs, g.MicOnlineMs, g.FirstMicAtMs, g.LastMicAtMs}) != w {
					t.Fatalf("slice %d: got %+v want %+v", i, g, w)
				}
			}
		})
	}
	t.Run("span is capped", func(t *testing.T) {
		got := mic.SplitDays(ms("2026-01-01T00:00:00Z"), 0, mic.MaxTimeMs)
		var seat int64
		for _, g := range got {
			seat += g.SeatOccupiedMs
		}
		if seat != mic.MaxSessionSpanMs || len(got) != 400 {
			t.Fatalf("capped span: %d days, %d ms", len(got), seat)
		}
	})
}

func TestRoomCountPerUserDay(t *testing.T) {
	st := mic.NewMapState()
	day := ms("2026-11-29T00:00:00Z")
	var rooms []int64
	run := func(msid, room string, start, end int64) []*userv1.MicDailyDelta {
		up := e(msid+"u", "up", start, session(msid), func(e *mic.Event) { e.RoomID = room })
		down := e(msid+"d", "down", end, session(msid), func(e *mic.Event) { e.RoomID = room })
		mic.Handle(st, &up)
		out := mic.Handle(st, &down)
		for _, d := range out.Ledger.Daily {
			rooms = append(rooms, d.RoomCountDelta)
		}
		return out.Ledger.Daily
	}
	run("s1", "rA", day+hour, day+2*hour)                    // rA day1: 1
	run("s2", "rA", day+3*hour, day+4*hour)                  // rA again: 0
	run("s3", "rB", day+5*hour, day+6*hour)                  // rB: 1
	run("s4", "rA", day+23*hour, day+25*hour)                // rA day1: 0, day2: 1
	run("s5", "rB", day+26*hour, day+27*hour)                // rB day2: 1
	other := e("o-u", "up", day+hour, session("o"), user(8)) // another user in rA: 1
	mic.Handle(st, &other)
	od := e("o-d", "down", day+2*hour, session("o"), user(8))
	out := mic.Handle(st, &od)
	rooms = append(rooms, out.Ledger.Daily[0].RoomCountDelta)
	if fmt.Sprint(rooms) != "[1 0 1 0 1 1 1]" {
		t.Fatalf("room count deltas %v", rooms)
	}
}

func TestCompensate(t *testing.T) {
	p := mic.Policy{PendingPublishMaxAge: 2 * time.Minute, PublishingSessionMaxAge: 12 * time.Hour}
	id := mic.SessionID{AppCode: "hy", UserID: 7, MicSessionID: "s1"}
	t.Run("pending_publish", func(t *testing.T) {
		st := mic.NewMapState()
		up := e("a", "up", t0)
		mic.Handle(st, &up)
		if _, ok := mic.Compensate(st, p, id, t0+2*mins); ok {
			t.Fatal("closed at exactly the max age")
		}
		out, ok := mic.Compensate(st, p, id, t0+2*mins+1)
		if !ok {
			t.Fatal("not closed after the max age")
		}
		s := out.Ledger.Session
		if out.Ledger.EventId != "MicSessionCompensated:s1" || out.Ledger.EventType != "MicSessionCompensated" ||
			s.EndedAtMs != t0+2*mins || s.SeatOccupiedMs != 2*mins || s.MicOnlineMs != 0 ||
			s.EndReason != "compensated_publish_timeout" || s.Status != "ended" || s.ClosedEventId != "MicSessionCompensated:s1" {
			t.Fatalf("timer close %v", out.Ledger)
		}
		if out.Closed.EndReason != "compensated_publish_timeout" || out.Closed.ClosedEventId != "MicSessionCompensated:s1" {
			t.Fatalf("closed event %v", out.Closed)
		}
		if _, ok := mic.Compensate(st, p, id, t0+time.Hour.Milliseconds()); ok {
			t.Fatal("closed twice")
		}
		late := e("b", "down", t0+3*mins)
		if o := mic.Handle(st, &late); o.Outcome != mic.OutcomeSkipped || o.SkipReason != mic.SkipAlreadyClosed {
			t.Fatalf("late down: %v %s", o.Outcome, o.SkipReason)
		}
	})
	t.Run("publishing", func(t *testing.T) {
		st := mic.NewMapState()
		up, pub := e("a", "up", t0), e("b", "publish_confirmed", t0+mins)
		mic.Handle(st, &up)
		mic.Handle(st, &pub)
		if _, ok := mic.Compensate(st, p, id, t0+mins+12*hour); ok {
			t.Fatal("closed at exactly the max window")
		}
		out, ok := mic.Compensate(st, p, id, t0+48*hour)
		if !ok {
			t.Fatal("not closed")
		}
		s := out.Ledger.Session
		if s.EndedAtMs != t0+mins+12*hour || s.MicOnlineMs != 12*hour || s.SeatOccupiedMs != 12*hour+mins ||
			s.EndReason != "compensated_publishing_max_window" || out.Ledger.OccurredAtMs != t0+48*hour {
			t.Fatalf("timer close %v", s)
		}
		if len(out.Daily) != 1 || out.Daily[0].StatDate != "2026-11-29" || out.Daily[0].MicOnlineDeltaMs != 12*hour {
			t.Fatalf("days %v", out.Daily)
		}
	})
	t.Run("absent session", func(t *testing.T) {
		if _, ok := mic.Compensate(mic.NewMapState(), p, id, t0); ok {
			t.Fatal("closed an absent session")
		}
	})
}

func TestSelectDue(t *testing.T) {
	cands := []mic.Candidate{{"e", 50}, {"a", 10}, {"c", 30}, {"b", 10}, {"d", 100}, {"f", 99}}
	got := mic.SelectDue(cands, 100, 3)
	if fmt.Sprint(got) != "[{a 10} {b 10} {c 30}]" {
		t.Fatalf("got %v", got)
	}
	cands = []mic.Candidate{{"e", 50}, {"a", 10}, {"d", 100}}
	if got := mic.SelectDue(cands, 100, 10); fmt.Sprint(got) != "[{a 10} {e 50}]" {
		t.Fatalf("got %v", got)
	}
	if got := mic.SelectDue(nil, 100, 10); len(got) != 0 {
		t.Fatalf("got %v", got)
	}
}
