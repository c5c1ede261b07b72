package micledger

import (
	"cmp"
	"slices"

	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// SessionRow is the newest snapshot of one session in a batch.
type SessionRow struct {
	AppCode string
	*userv1.MicSession
}

// sessionKey is the primary key of user_mic_sessions.
type sessionKey struct{ appCode, micSessionID string }

// DailyKey is the primary key of user_mic_daily_stats.
type DailyKey struct {
	AppCode  string
	UserID   int64
	StatDate string
}

// DailyRow is the summed delta of one user_mic_daily_stats row.
type DailyRow struct {
	DailyKey
	SeatOccupiedMs int64
	MicOnlineMs    int64
	SessionCount   int64
	RoomCount      int64
	FirstMicAtMs   int64 // 0 = no change; applied as MIN ignoring 0
	LastMicAtMs    int64 // 0 = no change; applied as MAX
	UpdatedAtMs    int64 // newest event time that touched the row
}

// LifetimeKey is the primary key of user_mic_lifetime_stats.
type LifetimeKey struct {
	AppCode string
	UserID  int64
}

// LifetimeRow is the summed delta of one user_mic_lifetime_stats row.
type LifetimeRow struct {
	LifetimeKey
	SeatOccupiedMs int64
	MicOnlineMs    int64
	SessionCount   int64
	FirstMicAtMs   int64
	LastMicAtMs    int64
	UpdatedAtMs    int64
}

// Facts is what one batch of new (not yet consumed) entries changes, with
// every delta pre-aggregated per row and rows sorted by primary key, so
// each row is written once per batch and concurrent sinks lock rows in
// the same order.
type Facts struct {
	Sessions []SessionRow
	Daily    []DailyRow
	Lifetime []LifetimeRow
}

func minNonZero(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// eventTime is the time a ledger entry stands for: its occurrence, or the
// snapshot's update time for entries without one (timer closes).
func eventTime(e *userv1.MicLedgerEntry) int64 {
	if e.OccurredAtMs > 0 {
		return e.OccurredAtMs
	}
	return e.GetSession().GetUpdatedAtMs()
}

// BuildFacts aggregates the facts of ledger entries that are known to be
// new. Skipped ledger entries only have a consumption row: they add no
// deltas and no snapshot. Of several snapshots of one session the highest
// version wins (the first of equal versions). A sum past int64 is a
// *mysqlsink.OverflowError.
func BuildFacts(ledger []*userv1.MicLedgerEntry) (Facts, error) {
	sessions := map[sessionKey]SessionRow{}
	daily := map[DailyKey]*DailyRow{}
	life := map[LifetimeKey]*LifetimeRow{}
	var sums mysqlsink.Sums
	for _, e := range ledger {
		if e.Status != StatusConsumed {
			continue
		}
		at := eventTime(e)
		if s := e.Session; s != nil {
			k := sessionKey{e.AppCode, s.MicSessionId}
			if cur, ok := sessions[k]; !ok || s.Version > cur.Version {
				sessions[k] = SessionRow{AppCode: e.AppCode, MicSession: s}
			}
		}
		for _, d := range e.Daily {
			k := DailyKey{e.AppCode, e.UserId, d.StatDate}
			r := daily[k]
			if r == nil {
				r = &DailyRow{DailyKey: k}
				daily[k] = r
			}
			sums.Add("user_mic_daily_stats.seat_occupied_ms", &r.SeatOccupiedMs, d.SeatOccupiedDeltaMs)
			sums.Add("user_mic_daily_stats.mic_online_ms", &r.MicOnlineMs, d.MicOnlineDeltaMs)
			sums.Add("user_mic_daily_stats.session_count", &r.SessionCount, d.SessionCountDelta)
			sums.Add("user_mic_daily_stats.room_count", &r.RoomCount, d.RoomCountDelta)
			r.FirstMicAtMs = minNonZero(r.FirstMicAtMs, d.FirstMicAtMs)
			r.LastMicAtMs = max(r.LastMicAtMs, d.LastMicAtMs)
			r.UpdatedAtMs = max(r.UpdatedAtMs, at)
		}
		if d := e.Lifetime; d != nil {
			k := LifetimeKey{e.AppCode, e.UserId}
			r := life[k]
			if r == nil {
				r = &LifetimeRow{LifetimeKey: k}
				life[k] = r
			}
			sums.Add("user_mic_lifetime_stats.seat_occupied_ms", &r.SeatOccupiedMs, d.SeatOccupiedDeltaMs)
			sums.Add("user_mic_lifetime_stats.mic_online_ms", &r.MicOnlineMs, d.MicOnlineDeltaMs)
			sums.Add("user_mic_lifetime_stats.session_count", &r.SessionCount, d.SessionCountDelta)
			r.FirstMicAtMs = minNonZero(r.FirstMicAtMs, d.FirstMicAtMs)
			r.LastMicAtMs = max(r.LastMicAtMs, d.LastMicAtMs)
			r.UpdatedAtMs = max(r.UpdatedAtMs, at)
		}
	}
	if err := sums.Err(); err != nil {
		return Facts{}, err
	}
	// Rows sorted by primary key (see Facts).
	var f Facts
	for _, s := range sessions {
		f.Sessions = append(f.Sessions, s)
	}
	slices.SortFunc(f.Sessions, func(a, b SessionRow) int {
		return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.MicSessionId, b.MicSessionId))
	})
	for _, r := range daily {
		f.Daily = append(f.Daily, *r)
	}
	slices.SortFunc(f.Daily, func(a, b DailyRow) int {
		return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.UserID, b.UserID), cmp.Compare(a.StatDate, b.StatDate))
	})
	for _, r := range life {
		f.Lifetime = append(f.Lifetime, *r)
	}
	slices.SortFunc(f.Lifetime, func(a, b LifetimeRow) int {
		return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.UserID, b.UserID))
	})
	return f, nil
}
