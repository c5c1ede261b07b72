package loadgen

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
)

// Diff is one fact where MySQL disagrees with the oracle.
type Diff struct {
	Table string
	Key   string
	Want  string
	Got   string
}

func (d Diff) String() string {
	return fmt.Sprintf("%s[%s]: want %s, got %s", d.Table, d.Key, d.Want, d.Got)
}

// Report is the outcome of comparing MySQL with an oracle.
type Report struct {
	LifetimeRows, DailyRows, PoolRows int // rows compared
	SessionRows                       int // user_mic_sessions rows compared
	SkippedUsers                      int // users with open sessions, not compared
	Diffs                             []Diff
}

// OK reports whether every compared fact matched.
func (r Report) OK() bool { return len(r.Diffs) == 0 }

// Compare reads user_mic_lifetime_stats, user_mic_daily_stats,
// user_mic_sessions and lucky_pools for appCode and diffs them against o. Users with sessions the
// oracle cannot close (open, or timer-closed) are skipped; rows MySQL has
// that the oracle lacks are diffs too.
func Compare(ctx context.Context, db *sql.DB, appCode string, o *Oracle) (Report, error) {
	var rep Report
	skip := map[int64]bool{}
	for _, s := range o.OpenSessions {
		skip[s.UserID] = true
	}
	rep.SkippedUsers = len(skip)

	got := map[int64]MicTotals{}
	if err := ScanRows(ctx, db, `SELECT user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms
		FROM user_mic_lifetime_stats WHERE app_code = ?`, appCode, func(rows *sql.Rows) error {
		var u int64
		var t MicTotals
		if err := rows.Scan(&u, &t.SeatOccupiedMs, &t.MicOnlineMs, &t.SessionCount, &t.FirstMicAtMs, &t.LastMicAtMs); err != nil {
			return err
		}
		got[u] = t
		return nil
	}); err != nil {
		return rep, err
	}
	for _, u := range unionKeys(o.Lifetime, got) {
		if skip[u] {
			continue
		}
		rep.LifetimeRows++
		want := MicTotals{}
		if w := o.Lifetime[u]; w != nil {
			want = *w
		}
		if g := got[u]; g != want {
			rep.Diffs = append(rep.Diffs, Diff{"user_mic_lifetime_stats", fmt.Sprint(u), fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", g)})
		}
	}

	gotDaily := map[UserDay]MicTotals{}
	if err := ScanRows(ctx, db, `SELECT user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count,
		first_mic_at_ms, last_mic_at_ms FROM user_mic_daily_stats WHERE app_code = ?`, appCode, func(rows *sql.Rows) error {
		var k UserDay
		var t MicTotals
		if err := rows.Scan(&k.UserID, &k.Date, &t.SeatOccupiedMs, &t.MicOnlineMs, &t.SessionCount, &t.RoomCount, &t.FirstMicAtMs, &t.LastMicAtMs); err != nil {
			return err
		}
		gotDaily[k] = t
		return nil
	}); err != nil {
		return rep, err
	}
	for _, k := range unionKeys(o.Daily, gotDaily) {
		if skip[k.UserID] {
			continue
		}
		rep.DailyRows++
		want := MicTotals{}
		if w := o.Daily[k]; w != nil {
			want = *w
		}
		if g := gotDaily[k]; g != want {
			rep.Diffs = append(rep.Diffs, Diff{"user_mic_daily_stats", fmt.Sprintf("%d %s", k.UserID, k.Date), fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", g)})
		}
	}

	// user_mic_sessions: every closed session of the oracle ended as it
	// says (an open row of a compared user is a difference too). An oracle
	// that did not keep its sessions leaves this to the caller (verify
	// compares them as they close).
	if len(o.Sessions) != o.ClosedSessions {
		return rep, comparePools(ctx, db, appCode, o, &rep)
	}
	type sessionRow struct {
		User                               int64
		Status, Reason                     string
		Seat, Publish, End, SeatMs, Online int64
	}
	gotSessions := map[string]sessionRow{}
	if err := ScanRows(ctx, db, `SELECT mic_session_id, user_id, status, end_reason, seat_started_at_ms,
		COALESCE(publishing_started_at_ms, 0), COALESCE(ended_at_ms, 0), seat_occupied_ms, mic_online_ms
		FROM user_mic_sessions WHERE app_code = ?`, appCode, func(rows *sql.Rows) error {
		var id string
		var r sessionRow
		if err := rows.Scan(&id, &r.User, &r.Status, &r.Reason, &r.Seat, &r.Publish, &r.End, &r.SeatMs, &r.Online); err != nil {
			return err
		}
		gotSessions[id] = r
		return nil
	}); err != nil {
		return rep, err
	}
	wantSessions := map[string]sessionRow{}
	for _, s := range o.Sessions {
		w := sessionRow{User: s.UserID, Status: "ended", Reason: s.EndReason, Seat: s.SeatStartMs, Publish: s.PublishMs,
			End: s.EndMs, SeatMs: s.EndMs - s.SeatStartMs}
		if s.PublishMs > 0 {
			w.Online = s.EndMs - s.PublishMs
		}
		wantSessions[s.ID] = w
	}
	for _, id := range unionKeys(wantSessions, gotSessions) {
		w, g := wantSessions[id], gotSessions[id]
		if skip[w.User] || skip[g.User] {
			continue
		}
		rep.SessionRows++
		if w != g {
			rep.Diffs = append(rep.Diffs, Diff{"user_mic_sessions", id, fmt.Sprintf("%+v", w), fmt.Sprintf("%+v", g)})
		}
	}

	return rep, comparePools(ctx, db, appCode, o, &rep)
}

// comparePools diffs lucky_pools of appCode against o into rep.
func comparePools(ctx context.Context, db *sql.DB, appCode string, o *Oracle, rep *Report) error {
	// Once roomflow lucky owns the pools (lucky_pool_owner), they also pay
	// out and are funded: balance = funded + total_in - total_out. Either
	// way total_in is every gift's inflow, entered exactly once.
	var owned int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lucky_pool_owner`).Scan(&owned); err != nil {
		return err
	}
	gotPools := map[Pool]int64{}
	if err := ScanRows(ctx, db, `SELECT scope_type, scope_id, total_in, balance, funded, total_out FROM lucky_pools WHERE app_code = ?`, appCode, func(rows *sql.Rows) error {
		var p Pool
		var in, bal, funded, out int64
		if err := rows.Scan(&p.ScopeType, &p.ScopeID, &in, &bal, &funded, &out); err != nil {
			return err
		}
		gotPools[p] = in
		want := in // no payouts flow through roomflow: balance grows with inflow
		if owned > 0 {
			want = funded + in - out
		}
		if bal != want {
			rep.Diffs = append(rep.Diffs, Diff{"lucky_pools.balance", p.ScopeType + "/" + p.ScopeID, fmt.Sprint(want), fmt.Sprint(bal)})
		}
		return nil
	}); err != nil {
		return err
	}
	for _, p := range unionKeys(o.Pools, gotPools) {
		rep.PoolRows++
		if o.Pools[p] != gotPools[p] {
			rep.Diffs = append(rep.Diffs, Diff{"lucky_pools.total_in", p.ScopeType + "/" + p.ScopeID, fmt.Sprint(o.Pools[p]), fmt.Sprint(gotPools[p])})
		}
	}
	return nil
}

// ScanRows runs q with arg and calls scan on every row. It returns the
// query's, a scan's or the iteration's error, so a result cut short is
// never compared as if it were complete.
func ScanRows(ctx context.Context, db *sql.DB, q string, arg any, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q, arg)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func unionKeys[K comparable, A, B any](a map[K]A, b map[K]B) []K {
	seen := map[K]bool{}
	var out []K
	for k := range a {
		seen[k] = true
		out = append(out, k)
	}
	for k := range b {
		if !seen[k] {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i]) < fmt.Sprint(out[j]) })
	return out
}
