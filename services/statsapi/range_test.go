package statsapi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/services/statsapi"
)

// refSession is one generated session; end == 0 while it is open.
type refSession struct {
	app             string
	user            int64
	id              string
	start, pub, end int64
	open            bool
}

// refRange is the brute-force reference of an exact range: every closed
// session of the user, clamped into [from, to) one by one.
func refRange(ss []refSession, app string, user, from, to int64) statsapi.Stats {
	var st statsapi.Stats
	overlap := func(a, b int64) int64 { return max(0, min(b, to)-max(a, from)) }
	for _, s := range ss {
		if s.app != app || s.user != user || s.open {
			continue
		}
		zeroLen := s.end == s.start
		if s.start >= to || (!zeroLen && s.end <= from) || (zeroLen && s.start < from) {
			continue
		}
		st.SessionCount++
		st.SeatOccupiedMs += overlap(s.start, s.end)
		if s.pub > 0 {
			st.MicOnlineMs += overlap(s.pub, s.end)
		}
		first := max(s.start, from)
		last := max(min(s.end, to-1), first)
		if st.FirstMicAtMs == 0 || first < st.FirstMicAtMs {
			st.FirstMicAtMs = first
		}
		st.LastMicAtMs = max(st.LastMicAtMs, last)
	}
	return st
}

// genSessions draws sessions of users 1..3 of app "hyapp" (and user 1 of
// app "other") over ten days: many cross midnight, some last more than a
// day, some are zero-length, some never published, some are still open.
// It returns the sessions and the ledger entries the mic processor would
// write for them (with mic.SplitDays' daily deltas).
func genSessions(r *rand.Rand, base int64) ([]refSession, []*userv1.MicLedgerEntry) {
	var ss []refSession
	var es []*userv1.MicLedgerEntry
	n := 0
	for _, who := range []struct {
		app  string
		user int64
	}{{"hyapp", 1}, {"hyapp", 2}, {"hyapp", 3}, {"other", 1}} {
		for range 40 {
			n++
			s := refSession{app: who.app, user: who.user, id: fmt.Sprintf("s%d", n)}
			s.start = base + r.Int64N(10*mic.DayMs)
			switch r.IntN(10) {
			case 0:
				s.end = s.start // zero-length
			case 1:
				s.end = s.start + mic.DayMs + r.Int64N(mic.DayMs) // over a day
			default:
				s.end = s.start + 1 + r.Int64N(6*3600_000)
			}
			if r.IntN(3) > 0 {
				s.pub = s.start + r.Int64N(s.end-s.start+1)
			}
			s.open = r.IntN(12) == 0
			ss = append(ss, s)
			es = append(es, ledgerOf(s))
		}
	}
	return ss, es
}

func ledgerOf(s refSession) *userv1.MicLedgerEntry {
	sess := &userv1.MicSession{AppCode: s.app, MicSessionId: s.id, UserId: s.user, RoomId: "r-" + s.id,
		SeatStartedAtMs: s.start, PublishingStartedAtMs: s.pub, Version: 3, OpenedEventId: s.id + "-up",
		LastEventId: s.id + "-last", CreatedAtMs: s.start, UpdatedAtMs: s.start}
	e := &userv1.MicLedgerEntry{EventId: s.id + "-last", AppCode: s.app, EventType: "RoomMicChanged", UserId: s.user,
		MicSessionId: s.id, RoomId: sess.RoomId, Status: "consumed", Session: sess}
	if s.open {
		e.Action, sess.Status = "publish_confirmed", "publishing"
		return e
	}
	e.Action, e.OccurredAtMs = "down", s.end
	sess.Status, sess.EndedAtMs, sess.EndReason, sess.UpdatedAtMs = "ended", s.end, "leave", s.end
	sess.SeatOccupiedMs = s.end - s.start
	if s.pub > 0 {
		sess.MicOnlineMs = s.end - s.pub
	}
	for _, d := range mic.SplitDays(s.start, s.pub, s.end) {
		e.Daily = append(e.Daily, &userv1.MicDailyDelta{StatDate: d.Date, SeatOccupiedDeltaMs: d.SeatOccupiedMs,
			MicOnlineDeltaMs: d.MicOnlineMs, SessionCountDelta: 1, RoomCountDelta: 1, FirstMicAtMs: d.FirstMicAtMs, LastMicAtMs: d.LastMicAtMs})
	}
	e.Lifetime = &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: sess.SeatOccupiedMs, MicOnlineDeltaMs: sess.MicOnlineMs,
		SessionCountDelta: 1, FirstMicAtMs: s.start, LastMicAtMs: s.end}
	return e
}

// TestRangeMatchesReference: for random sessions in MariaDB and random
// ranges (many on session edges and UTC midnights), Store.Range equals the
// brute-force reference; a range of exactly one UTC day equals that day's
// user_mic_daily_stats row; a range covering everything equals lifetime.
func TestRangeMatchesReference(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	base := ms("2026-03-01T00:00:00Z")
	ss, es := genSessions(r, base)
	m := testenv.NewMySQL(t)
	apply(t, m, es)
	st := statsapi.NewStore(m.DB)
	ctx := context.Background()

	// Interesting points: every session edge (and one ms either side) and every midnight.
	var points []int64
	for _, s := range ss {
		for _, p := range []int64{s.start, s.end, s.pub} {
			if p > 0 {
				points = append(points, p-1, p, p+1)
			}
		}
	}
	for d := base - mic.DayMs; d <= base+13*mic.DayMs; d += mic.DayMs {
		points = append(points, d)
	}
	pick := func() int64 {
		if r.IntN(4) == 0 {
			return base - mic.DayMs + r.Int64N(14*mic.DayMs)
		}
		return points[r.IntN(len(points))]
	}
	users := []struct {
		app  string
		user int64
	}{{"hyapp", 1}, {"hyapp", 2}, {"hyapp", 3}, {"other", 1}, {"hyapp", 99}}
	for i := range 600 {
		a, b := pick(), pick()
		if r.IntN(5) == 0 {
			b = a + 1 + r.Int64N(3*mic.DayMs)
		}
		from, to := min(a, b), max(a, b)
		if from == to {
			to++
		}
		u := users[i%len(users)]
		got, err := st.Range(ctx, u.app, u.user, statsapi.Range{FromMs: from, ToMs: to})
		if err != nil {
			t.Fatal(err)
		}
		if want := refRange(ss, u.app, u.user, from, to); got != want {
			t.Fatalf("seed %d: %s/%d [%d, %d) (%s .. %s):\n got %+v\nwant %+v", seed, u.app, u.user, from, to,
				time.UnixMilli(from).UTC().Format(time.RFC3339Nano), time.UnixMilli(to).UTC().Format(time.RFC3339Nano), got, want)
		}
	}

	// One UTC day is that day's daily row; everything is the lifetime row.
	for _, u := range users[:4] {
		for d := base; d < base+13*mic.DayMs; d += mic.DayMs {
			var want statsapi.Stats
			err := m.DB.QueryRow("SELECT COALESCE(SUM(seat_occupied_ms),0), COALESCE(SUM(mic_online_ms),0), COALESCE(SUM(session_count),0), "+
				"COALESCE(MAX(first_mic_at_ms),0), COALESCE(MAX(last_mic_at_ms),0) FROM user_mic_daily_stats WHERE app_code = ? AND user_id = ? AND stat_date = ?",
				u.app, u.user, mic.DayDate(mic.DayOf(d))).Scan(&want.SeatOccupiedMs, &want.MicOnlineMs, &want.SessionCount, &want.FirstMicAtMs, &want.LastMicAtMs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := st.Range(ctx, u.app, u.user, statsapi.Range{FromMs: d, ToMs: d + mic.DayMs})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("seed %d: %s/%d day %s: range %+v, daily row %+v", seed, u.app, u.user, mic.DayDate(mic.DayOf(d)), got, want)
			}
		}
		lt, err := st.Lifetime(ctx, u.app, u.user)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.Range(ctx, u.app, u.user, statsapi.Range{FromMs: base - mic.DayMs, ToMs: base + 20*mic.DayMs})
		if err != nil {
			t.Fatal(err)
		}
		if got != lt.Stats {
			t.Fatalf("seed %d: %s/%d: all-time range %+v, lifetime %+v", seed, u.app, u.user, got, lt.Stats)
		}
	}
}
