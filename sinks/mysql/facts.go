package mysqlsink

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// Consumption statuses written to user_mic_event_consumption and
// lucky_pool_inflow_consumption.
const (
	StatusConsumed = "consumed"
	StatusSkipped  = "skipped"
)

// Lucky pool scopes (seed 003): one platform row, one per room, one per gift.
const (
	ScopePlatform = "platform"
	ScopeRoom     = "room"
	ScopeGift     = "gift"
	GlobalScopeID = "global"
)

// InvalidRecordError says why a record can never be applied (undecodable
// bytes, a missing id, a value wider than its column). The sink sends such
// records to the DLQ and moves on instead of blocking the partition.
type InvalidRecordError struct {
	Reason string // short, stable: "decode", "missing_event_id", ...
	Detail string
}

func (e *InvalidRecordError) Error() string {
	if e.Detail == "" {
		return "invalid record: " + e.Reason
	}
	return "invalid record: " + e.Reason + ": " + e.Detail
}

func invalid(reason, format string, args ...any) error {
	return &InvalidRecordError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Column widths of the tables the sink writes (schemas/mysql/migrations).
const (
	maxAppCode     = 32
	maxEventID     = 128
	maxInflowID    = 160
	maxEventType   = 64
	maxSessionID   = 128
	maxAction      = 32
	maxStatus      = 32
	maxSkipReason  = 128
	maxRoomID      = 64
	maxEndReason   = 64
	maxGiftID      = 64
	maxRuleVersion = 64
)

func checkLen(field, v string, max int) error {
	if len(v) > max {
		return invalid("too_long", "%s is %d bytes, at most %d", field, len(v), max)
	}
	return nil
}

// DecodeLedger parses and validates one mic-ledger record value. Every
// string must fit its column so that a bad record fails here, not as a
// MySQL error that would stall the whole batch. An empty app_code is
// defaultAppCode (config app_code, the rule of every stage; the processors
// always fill it in, so only a foreign producer leaves it out); with both
// empty the record is invalid.
func DecodeLedger(value []byte, defaultAppCode string) (*userv1.MicLedgerEntry, error) {
	var e userv1.MicLedgerEntry
	if err := proto.Unmarshal(value, &e); err != nil {
		return nil, invalid("decode", "%v", err)
	}
	if e.EventId == "" {
		return nil, invalid("missing_event_id", "")
	}
	if e.AppCode == "" {
		e.AppCode = defaultAppCode
	}
	if e.AppCode == "" {
		return nil, invalid("missing_app_code", "event_id %s", e.EventId)
	}
	switch e.Status {
	case StatusConsumed, StatusSkipped:
	default:
		return nil, invalid("bad_status", "event_id %s: status %q", e.EventId, e.Status)
	}
	for _, c := range []struct {
		f string
		v string
		n int
	}{
		{"app_code", e.AppCode, maxAppCode}, {"event_id", e.EventId, maxEventID},
		{"event_type", e.EventType, maxEventType}, {"mic_session_id", e.MicSessionId, maxSessionID},
		{"action", e.Action, maxAction}, {"skip_reason", e.SkipReason, maxSkipReason},
	} {
		if err := checkLen(c.f, c.v, c.n); err != nil {
			return nil, err
		}
	}
	if s := e.Session; s != nil {
		if s.MicSessionId == "" {
			return nil, invalid("bad_session", "event_id %s: snapshot without mic_session_id", e.EventId)
		}
		if s.AppCode != "" && s.AppCode != e.AppCode {
			return nil, invalid("bad_session", "event_id %s: snapshot app_code %q differs", e.EventId, s.AppCode)
		}
		for _, c := range []struct {
			f string
			v string
			n int
		}{
			{"session.mic_session_id", s.MicSessionId, maxSessionID}, {"session.room_id", s.RoomId, maxRoomID},
			{"session.status", s.Status, maxStatus}, {"session.end_reason", s.EndReason, maxEndReason},
			{"session.opened_event_id", s.OpenedEventId, maxEventID}, {"session.publish_event_id", s.PublishEventId, maxEventID},
			{"session.closed_event_id", s.ClosedEventId, maxEventID}, {"session.last_event_id", s.LastEventId, maxEventID},
		} {
			if err := checkLen(c.f, c.v, c.n); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range e.Daily {
		if _, err := time.Parse(time.DateOnly, d.StatDate); err != nil {
			return nil, invalid("bad_stat_date", "event_id %s: stat_date %q", e.EventId, d.StatDate)
		}
	}
	return &e, nil
}

// DecodeInflow parses and validates one lucky-pool-inflow record value; an
// empty app_code is defaultAppCode, as in DecodeLedger.
func DecodeInflow(value []byte, defaultAppCode string) (*activityv1.LuckyPoolInflow, error) {
	var in activityv1.LuckyPoolInflow
	if err := proto.Unmarshal(value, &in); err != nil {
		return nil, invalid("decode", "%v", err)
	}
	if in.EventId == "" {
		return nil, invalid("missing_event_id", "")
	}
	if in.AppCode == "" {
		in.AppCode = defaultAppCode
	}
	if in.AppCode == "" {
		return nil, invalid("missing_app_code", "event_id %s", in.EventId)
	}
	if in.RoomId == "" || in.GiftId == "" {
		return nil, invalid("missing_scope", "event_id %s: room_id and gift_id are required", in.EventId)
	}
	if in.PlatformIn < 0 || in.RoomIn < 0 || in.GiftIn < 0 || in.PoolIn < 0 {
		return nil, invalid("negative_inflow", "event_id %s", in.EventId)
	}
	for _, c := range []struct {
		f string
		v string
		n int
	}{
		{"app_code", in.AppCode, maxAppCode}, {"event_id", in.EventId, maxInflowID},
		{"source_event_id", in.SourceEventId, maxEventID}, {"room_id", in.RoomId, maxRoomID},
		{"gift_id", in.GiftId, maxGiftID}, {"rule_version", in.RuleVersion, maxRuleVersion},
	} {
		if err := checkLen(c.f, c.v, c.n); err != nil {
			return nil, err
		}
	}
	return &in, nil
}

// EventKey identifies a source event in a consumption table.
type EventKey struct {
	AppCode string
	EventID string
}

// DedupeLedger keeps the first entry of each (app_code, event_id) and
// reports how many repeats it dropped. Order is preserved.
func DedupeLedger(es []*userv1.MicLedgerEntry) ([]*userv1.MicLedgerEntry, int) {
	seen := make(map[EventKey]struct{}, len(es))
	out := es[:0:0]
	for _, e := range es {
		k := EventKey{e.AppCode, e.EventId}
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, e)
	}
	return out, len(es) - len(out)
}

// DedupeInflows is DedupeLedger for inflows.
func DedupeInflows(in []*activityv1.LuckyPoolInflow) ([]*activityv1.LuckyPoolInflow, int) {
	seen := make(map[EventKey]struct{}, len(in))
	out := in[:0:0]
	for _, e := range in {
		k := EventKey{e.AppCode, e.EventId}
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, e)
	}
	return out, len(in) - len(out)
}

// SessionRow is the newest snapshot of one session in a batch.
type SessionRow struct {
	AppCode string
	*userv1.MicSession
}

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

// PoolKey is the primary key of lucky_pools.
type PoolKey struct {
	AppCode   string
	ScopeType string
	ScopeID   string
}

// PoolRow is the summed inflow of one lucky_pools row in a batch.
type PoolRow struct {
	PoolKey
	In          int64
	UpdatedAtMs int64
}

// Facts is what one batch of new (not yet consumed) entries changes, with
// every delta pre-aggregated per row and rows sorted by primary key, so
// each row is written once per batch and concurrent sinks lock rows in
// the same order.
type Facts struct {
	Sessions []SessionRow
	Daily    []DailyRow
	Lifetime []LifetimeRow
	Pools    []PoolRow
}

// Rows is the number of fact rows the batch writes.
func (f Facts) Rows() int { return len(f.Sessions) + len(f.Daily) + len(f.Lifetime) + len(f.Pools) }

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

// BuildFacts aggregates the facts of entries and inflows that are known to
// be new. Skipped ledger entries only have a consumption row: they add no
// deltas and no snapshot. Of several snapshots of one session the highest
// version wins (the first of equal versions).
func BuildFacts(ledger []*userv1.MicLedgerEntry, inflows []*activityv1.LuckyPoolInflow) Facts {
	sessions := map[EventKey]SessionRow{}
	daily := map[DailyKey]*DailyRow{}
	life := map[LifetimeKey]*LifetimeRow{}
	for _, e := range ledger {
		if e.Status != StatusConsumed {
			continue
		}
		at := eventTime(e)
		if s := e.Session; s != nil {
			k := EventKey{e.AppCode, s.MicSessionId}
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
			r.SeatOccupiedMs += d.SeatOccupiedDeltaMs
			r.MicOnlineMs += d.MicOnlineDeltaMs
			r.SessionCount += d.SessionCountDelta
			r.RoomCount += d.RoomCountDelta
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
			r.SeatOccupiedMs += d.SeatOccupiedDeltaMs
			r.MicOnlineMs += d.MicOnlineDeltaMs
			r.SessionCount += d.SessionCountDelta
			r.FirstMicAtMs = minNonZero(r.FirstMicAtMs, d.FirstMicAtMs)
			r.LastMicAtMs = max(r.LastMicAtMs, d.LastMicAtMs)
			r.UpdatedAtMs = max(r.UpdatedAtMs, at)
		}
	}
	pools := map[PoolKey]*PoolRow{}
	add := func(k PoolKey, in, at int64) {
		r := pools[k]
		if r == nil {
			r = &PoolRow{PoolKey: k}
			pools[k] = r
		}
		r.In += in
		r.UpdatedAtMs = max(r.UpdatedAtMs, at)
	}
	for _, in := range inflows {
		add(PoolKey{in.AppCode, ScopePlatform, GlobalScopeID}, in.PlatformIn, in.OccurredAtMs)
		add(PoolKey{in.AppCode, ScopeRoom, in.RoomId}, in.RoomIn, in.OccurredAtMs)
		add(PoolKey{in.AppCode, ScopeGift, in.GiftId}, in.GiftIn, in.OccurredAtMs)
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
	for _, r := range pools {
		f.Pools = append(f.Pools, *r)
	}
	slices.SortFunc(f.Pools, func(a, b PoolRow) int {
		return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.ScopeType, b.ScopeType), cmp.Compare(a.ScopeID, b.ScopeID))
	})
	return f
}
