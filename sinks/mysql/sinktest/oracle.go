package sinktest

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// Oracle computes, from every record the sink was given, what the tables
// must hold after exactly-once application. It is written independently
// of the sink (plain maps, one event at a time) so the two can be compared.
type Oracle struct {
	Consumed  map[string]string // app|event_id -> consumption row text
	Sessions  map[string]*userv1.MicSession
	Daily     map[string]*[7]int64 // app|user|date -> seat, online, sessions, rooms, first, last, updated
	Lifetime  map[string]*[6]int64 // app|user -> seat, online, sessions, first, last, updated
	Inflows   map[string]string    // app|event_id -> consumption row text
	Pools     map[string]*[2]int64 // app|scope|id -> balance, total_in
	PoolTouch map[string]int64     // app|scope|id -> inflows touching it (upper bound of version)
}

// NewOracle returns an empty oracle.
func NewOracle() *Oracle {
	return &Oracle{
		Consumed: map[string]string{}, Sessions: map[string]*userv1.MicSession{},
		Daily: map[string]*[7]int64{}, Lifetime: map[string]*[6]int64{},
		Inflows: map[string]string{}, Pools: map[string]*[2]int64{}, PoolTouch: map[string]int64{},
	}
}

func firstMin(cur, v int64) int64 {
	if v == 0 {
		return cur
	}
	if cur == 0 || v < cur {
		return v
	}
	return cur
}

// AddLedger applies entries one by one; repeated event ids are ignored.
func (o *Oracle) AddLedger(es ...*userv1.MicLedgerEntry) {
	for _, e := range es {
		k := e.AppCode + "|" + e.EventId
		if _, ok := o.Consumed[k]; ok {
			continue
		}
		o.Consumed[k] = fmt.Sprintf("%s|%s|%d|%s|%s|%s|%d", e.EventType, e.MicSessionId, e.UserId, e.Action, e.Status, e.SkipReason, e.OccurredAtMs)
		if e.Status != "consumed" {
			continue
		}
		if s := e.Session; s != nil {
			sk := e.AppCode + "|" + s.MicSessionId
			if cur := o.Sessions[sk]; cur == nil || s.Version > cur.Version {
				o.Sessions[sk] = s
			}
		}
		for _, d := range e.Daily {
			dk := fmt.Sprintf("%s|%d|%s", e.AppCode, e.UserId, d.StatDate)
			r := o.Daily[dk]
			if r == nil {
				r = &[7]int64{}
				o.Daily[dk] = r
			}
			r[0] += d.SeatOccupiedDeltaMs
			r[1] += d.MicOnlineDeltaMs
			r[2] += d.SessionCountDelta
			r[3] += d.RoomCountDelta
			r[4] = firstMin(r[4], d.FirstMicAtMs)
			r[5] = max(r[5], d.LastMicAtMs)
			r[6] = max(r[6], e.OccurredAtMs)
		}
		if d := e.Lifetime; d != nil {
			lk := fmt.Sprintf("%s|%d", e.AppCode, e.UserId)
			r := o.Lifetime[lk]
			if r == nil {
				r = &[6]int64{}
				o.Lifetime[lk] = r
			}
			r[0] += d.SeatOccupiedDeltaMs
			r[1] += d.MicOnlineDeltaMs
			r[2] += d.SessionCountDelta
			r[3] = firstMin(r[3], d.FirstMicAtMs)
			r[4] = max(r[4], d.LastMicAtMs)
			r[5] = max(r[5], e.OccurredAtMs)
		}
	}
}

// AddInflows applies inflows one by one; repeated event ids are ignored.
func (o *Oracle) AddInflows(in ...*activityv1.LuckyPoolInflow) {
	for _, e := range in {
		k := e.AppCode + "|" + e.EventId
		if _, ok := o.Inflows[k]; ok {
			continue
		}
		o.Inflows[k] = fmt.Sprintf("%s|%s|%s|%s|%d|%d|%d|%d|%d", e.SourceEventId, e.RoomId, e.GiftId, e.RuleVersion, e.PoolIn, e.PlatformIn, e.RoomIn, e.GiftIn, e.OccurredAtMs)
		for _, p := range []struct {
			scope, id string
			in        int64
		}{{"platform", "global", e.PlatformIn}, {"room", e.RoomId, e.RoomIn}, {"gift", e.GiftId, e.GiftIn}} {
			pk := e.AppCode + "|" + p.scope + "|" + p.id
			r := o.Pools[pk]
			if r == nil {
				r = &[2]int64{}
				o.Pools[pk] = r
			}
			r[0] += p.in
			r[1] += p.in
			o.PoolTouch[pk]++
		}
	}
}

// diff collects mismatches between two keyed sets of row texts.
func diff(table string, want, got map[string]string) []string {
	var out []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: missing row %s (want %s)", table, k, w))
		case g != w:
			out = append(out, fmt.Sprintf("%s: row %s: got %s want %s", table, k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: unexpected row %s (%s)", table, k, g))
		}
	}
	return out
}

func query(ctx context.Context, db *sql.DB, q string, scan func(*sql.Rows) (string, string, error)) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		k, v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

func nz(v sql.NullInt64) int64 { return v.Int64 }

// Check compares every row of the sink's tables with the oracle and
// returns an error listing the first mismatches. Processing-time columns
// (consumed_at_ms, consumption updated_at_ms) and pool versions are not
// deterministic across crashes and are checked only for range.
func (o *Oracle) Check(ctx context.Context, db *sql.DB) error {
	c := &tableCheck{ctx: ctx, db: db}
	o.checkMicTables(c)
	o.checkLuckyTables(c)
	problems := c.problems
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	n := len(problems)
	if len(problems) > 15 {
		problems = problems[:15]
	}
	return fmt.Errorf("%d mismatches with the oracle:\n  %s", n, strings.Join(problems, "\n  "))
}

// tableCheck collects the mismatches of one Check.
type tableCheck struct {
	ctx      context.Context
	db       *sql.DB
	problems []string
}

// add compares table's rows, as q and scan key and render them, with want.
func (c *tableCheck) add(table string, want map[string]string, q string, scan func(*sql.Rows) (string, string, error)) {
	got, err := query(c.ctx, c.db, q, scan)
	if err != nil {
		c.problems = append(c.problems, table+": "+err.Error())
		return
	}
	c.problems = append(c.problems, diff(table, want, got)...)
}

// checkMicTables checks the mic sink's consumption, session and stats
// tables.
func (o *Oracle) checkMicTables(c *tableCheck) {
	c.add("user_mic_event_consumption", o.Consumed,
		"SELECT app_code, event_id, event_type, mic_session_id, user_id, action, status, skip_reason, created_at_ms FROM user_mic_event_consumption",
		func(r *sql.Rows) (string, string, error) {
			var app, id, typ, sid, action, status, skip string
			var user, created int64
			err := r.Scan(&app, &id, &typ, &sid, &user, &action, &status, &skip, &created)
			return app + "|" + id, fmt.Sprintf("%s|%s|%d|%s|%s|%s|%d", typ, sid, user, action, status, skip, created), err
		})

	wantS := map[string]string{}
	for k, s := range o.Sessions {
		wantS[k] = fmt.Sprintf("%d|%s|%d|%d|%s|%d|%d|%d|%s|%d|%d|%s|%s|%s|%s|%d|%d|%d|%d",
			s.UserId, s.RoomId, s.FirstSeatNo, s.CurrentSeatNo, s.Status, s.SeatStartedAtMs, s.PublishingStartedAtMs, s.EndedAtMs,
			s.EndReason, s.SeatOccupiedMs, s.MicOnlineMs, s.OpenedEventId, s.PublishEventId, s.ClosedEventId, s.LastEventId,
			s.LastRoomVersion, s.CreatedAtMs, s.UpdatedAtMs, s.Version)
	}
	c.add("user_mic_sessions", wantS,
		"SELECT app_code, mic_session_id, user_id, room_id, first_seat_no, current_seat_no, status, seat_started_at_ms, publishing_started_at_ms, ended_at_ms, end_reason, seat_occupied_ms, mic_online_ms, opened_event_id, publish_event_id, closed_event_id, last_event_id, last_room_version, created_at_ms, updated_at_ms, snapshot_version FROM user_mic_sessions",
		func(r *sql.Rows) (string, string, error) {
			var app, sid, room, status, reason, oe, pe, ce, le string
			var user, first, cur, started, occ, online, lrv, created, updated, ver int64
			var pub, ended sql.NullInt64
			err := r.Scan(&app, &sid, &user, &room, &first, &cur, &status, &started, &pub, &ended, &reason, &occ, &online, &oe, &pe, &ce, &le, &lrv, &created, &updated, &ver)
			return app + "|" + sid, fmt.Sprintf("%d|%s|%d|%d|%s|%d|%d|%d|%s|%d|%d|%s|%s|%s|%s|%d|%d|%d|%d",
				user, room, first, cur, status, started, nz(pub), nz(ended), reason, occ, online, oe, pe, ce, le, lrv, created, updated, ver), err
		})

	wantD := map[string]string{}
	for k, r := range o.Daily {
		wantD[k] = fmt.Sprint(*r)
	}
	c.add("user_mic_daily_stats", wantD,
		"SELECT app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms FROM user_mic_daily_stats",
		func(r *sql.Rows) (string, string, error) {
			var app, date string
			var user int64
			var v [7]int64
			err := r.Scan(&app, &user, &date, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6])
			return fmt.Sprintf("%s|%d|%s", app, user, date), fmt.Sprint(v), err
		})

	wantL := map[string]string{}
	for k, r := range o.Lifetime {
		wantL[k] = fmt.Sprint(*r)
	}
	c.add("user_mic_lifetime_stats", wantL,
		"SELECT app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms FROM user_mic_lifetime_stats",
		func(r *sql.Rows) (string, string, error) {
			var app string
			var user int64
			var v [6]int64
			err := r.Scan(&app, &user, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5])
			return fmt.Sprintf("%s|%d", app, user), fmt.Sprint(v), err
		})
}

// checkLuckyTables checks the lucky inflow's consumption rows and the
// pools.
func (o *Oracle) checkLuckyTables(c *tableCheck) {
	c.add("lucky_pool_inflow_consumption", o.Inflows,
		"SELECT app_code, event_id, source_event_id, room_id, gift_id, rule_version, pool_in, platform_in, room_in, gift_in, occurred_at_ms FROM lucky_pool_inflow_consumption WHERE status = 'consumed'",
		func(r *sql.Rows) (string, string, error) {
			var app, id, src, room, gift, rule string
			var pin, plat, rin, gin, occ int64
			err := r.Scan(&app, &id, &src, &room, &gift, &rule, &pin, &plat, &rin, &gin, &occ)
			return app + "|" + id, fmt.Sprintf("%s|%s|%s|%s|%d|%d|%d|%d|%d", src, room, gift, rule, pin, plat, rin, gin, occ), err
		})

	wantP := map[string]string{}
	for k, r := range o.Pools {
		wantP[k] = fmt.Sprint(*r)
	}
	c.add("lucky_pools", wantP,
		"SELECT app_code, scope_type, scope_id, balance, total_in, version FROM lucky_pools",
		func(r *sql.Rows) (string, string, error) {
			var app, scope, id string
			var v [2]int64
			var ver int64
			err := r.Scan(&app, &scope, &id, &v[0], &v[1], &ver)
			k := app + "|" + scope + "|" + id
			if ver < 1 || ver > o.PoolTouch[k] {
				c.problems = append(c.problems, fmt.Sprintf("lucky_pools: row %s: version %d outside 1..%d", k, ver, o.PoolTouch[k]))
			}
			return k, fmt.Sprint(v), err
		})
}
