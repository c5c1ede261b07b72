package loadgen

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
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
// user_mic_sessions (when o kept its sessions; otherwise the caller's
// SessionCheck does) and lucky_pools for appCode and diffs them against o.
// Users with sessions the oracle cannot close (open, or timer-closed) are
// skipped; rows MySQL has that the oracle lacks are diffs too.
func Compare(ctx context.Context, db *sql.DB, appCode string, o *Oracle) (Report, error) {
	var rep Report
	skip := openUsers(o)
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
	// says. An oracle that did not keep its sessions leaves this to the
	// caller's SessionCheck, fed as they closed (roomflow verify).
	if o.keptSessions {
		check := NewSessionCheck(db, appCode)
		for _, s := range o.Sessions {
			check.Add(ctx, s)
		}
		if err := check.Finish(ctx, o, &rep); err != nil {
			return rep, err
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

// openUsers are the users with sessions o cannot close: not compared.
func openUsers(o *Oracle) map[int64]bool {
	skip := map[int64]bool{}
	for _, s := range o.OpenSessions {
		skip[s.UserID] = true
	}
	return skip
}

// SessionCheck compares closed sessions with their user_mic_sessions rows
// as they close (OracleBuilder.OnSession), a batch of rows at a time, so
// verify never holds every session: only its differences and a count of
// sessions per user.
type SessionCheck struct {
	db      *sql.DB
	appCode string
	batch   []MicSession
	perUser map[int64]int64 // sessions compared
	diffs   []Diff
	users   []int64 // the user of each diff
	err     error
}

// sessionCheckBatch is how many sessions one query of SessionCheck reads.
const sessionCheckBatch = 500

// NewSessionCheck compares appCode's sessions with db's.
func NewSessionCheck(db *sql.DB, appCode string) *SessionCheck {
	return &SessionCheck{db: db, appCode: appCode, perUser: map[int64]int64{}}
}

// sessionRow is the user_mic_sessions row of a session.
type sessionRow struct {
	User                               int64
	Status, Reason                     string
	Seat, Publish, End, SeatMs, Online int64
}

// wantRow is the row a closed session must have.
func wantRow(s MicSession) sessionRow {
	w := sessionRow{User: s.UserID, Status: "ended", Reason: s.EndReason, Seat: s.SeatStartMs, Publish: s.PublishMs,
		End: s.EndMs, SeatMs: s.EndMs - s.SeatStartMs}
	if s.PublishMs > 0 {
		w.Online = s.EndMs - s.PublishMs
	}
	return w
}

// Add compares s (with the next sessions, in a batch). A read error is
// kept for Finish.
func (c *SessionCheck) Add(ctx context.Context, s MicSession) {
	if c.batch = append(c.batch, s); len(c.batch) >= sessionCheckBatch {
		c.flush(ctx)
	}
}

func (c *SessionCheck) flush(ctx context.Context) {
	if c.err != nil || len(c.batch) == 0 {
		c.batch = c.batch[:0]
		return
	}
	args := make([]any, 0, len(c.batch)+1)
	args = append(args, c.appCode)
	for _, s := range c.batch {
		args = append(args, s.ID)
	}
	got := map[string]sessionRow{}
	rows, err := c.db.QueryContext(ctx, `SELECT mic_session_id, user_id, status, end_reason, seat_started_at_ms,
		COALESCE(publishing_started_at_ms, 0), COALESCE(ended_at_ms, 0), seat_occupied_ms, mic_online_ms
		FROM user_mic_sessions WHERE app_code = ? AND mic_session_id IN (?`+strings.Repeat(",?", len(c.batch)-1)+`)`, args...)
	if err == nil {
		for rows.Next() {
			var id string
			var r sessionRow
			if err = rows.Scan(&id, &r.User, &r.Status, &r.Reason, &r.Seat, &r.Publish, &r.End, &r.SeatMs, &r.Online); err != nil {
				break
			}
			got[id] = r
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
	}
	if err != nil {
		c.err = fmt.Errorf("loadgen: read user_mic_sessions: %w", err)
		return
	}
	for _, s := range c.batch {
		c.perUser[s.UserID]++
		if w, g := wantRow(s), got[s.ID]; w != g {
			c.diffs = append(c.diffs, Diff{"user_mic_sessions", s.ID, fmt.Sprintf("%+v", w), fmt.Sprintf("%+v", g)})
			c.users = append(c.users, s.UserID)
		}
	}
	c.batch = c.batch[:0]
}

// Finish compares the last batch, then counts each user's rows: a user
// with more rows than closed sessions has rows no event of the log closed.
// Users with sessions o left open are not compared. It adds to rep's
// SessionRows and Diffs and returns a read error of any batch.
func (c *SessionCheck) Finish(ctx context.Context, o *Oracle, rep *Report) error {
	c.flush(ctx)
	if c.err != nil {
		return c.err
	}
	skip := openUsers(o)
	for i, d := range c.diffs {
		if !skip[c.users[i]] {
			rep.Diffs = append(rep.Diffs, d)
		}
	}
	for u, n := range c.perUser {
		if !skip[u] {
			rep.SessionRows += int(n)
		}
	}
	return ScanRows(ctx, c.db, `SELECT user_id, COUNT(*) FROM user_mic_sessions WHERE app_code = ? GROUP BY user_id ORDER BY user_id`, c.appCode, func(rows *sql.Rows) error {
		var u, n int64
		if err := rows.Scan(&u, &n); err != nil {
			return err
		}
		if !skip[u] && n != c.perUser[u] {
			rep.Diffs = append(rep.Diffs, Diff{"user_mic_sessions rows of user", fmt.Sprint(u), fmt.Sprintf("%d (its closed sessions)", c.perUser[u]), fmt.Sprint(n)})
		}
		return nil
	})
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
