package loadgen

import (
	"sort"
	"time"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// MicTotals are the mic facts of a user (lifetime) or a user-day (daily).
type MicTotals struct {
	SeatOccupiedMs int64
	MicOnlineMs    int64
	SessionCount   int64
	RoomCount      int64 // daily only
	FirstMicAtMs   int64
	LastMicAtMs    int64
}

// UserDay keys a daily row.
type UserDay struct {
	UserID int64
	Date   string
}

// Pool keys a lucky_pools row.
type Pool struct{ ScopeType, ScopeID string }

// RuleKey names a lucky rule version.
type RuleKey struct{ GiftID, RuleVersion string }

// Oracle is what roomflow must produce from a stream of room events,
// computed straight from the events with the rules of seed 001, seed 003 and
// the design: a reference written independently of processors/, used by
// tests, the demo and `roomflow verify`.
//
// Without a TimerPolicy only sessions closed by a real `down` are
// accounted; sessions still open (or closed by the mic processor's timers)
// are listed in OpenSessions and their users left out of the mic
// comparison. With one (BuildOracleTimers), every session ends: by its
// `down`, or by the timer close the design prescribes.
type Oracle struct {
	Events       int // distinct events
	IMMessages   int // events that produce a Tencent IM message (not no-op types)
	Sessions     []MicSession
	OpenSessions map[string]MicSession
	Lifetime     map[int64]*MicTotals
	Daily        map[UserDay]*MicTotals
	Pools        map[Pool]int64 // expected total_in
	LuckyGifts   int
	// Rejected counts lucky gifts the room processor must send to the DLQ
	// (unknown rule version, negative heat).
	Rejected int

	timers *TimerPolicy
}

// TimerPolicy is the mic processor's timer windows (mic.pending_publish_max_age,
// mic.publishing_session_max_age), for an oracle of traffic in wall-clock
// time whose open sessions the timers close.
type TimerPolicy struct {
	PendingPublishMaxAge    time.Duration
	PublishingSessionMaxAge time.Duration
}

// dueAtMs is when the timers close s (design "Business rules"): a pending
// session at seat start + pending max age, a publishing one at publishing
// start + publishing max age. The close time is also the session's end.
func (p TimerPolicy) dueAtMs(s MicSession) (int64, string) {
	if s.PublishMs == 0 {
		return s.SeatStartMs + p.PendingPublishMaxAge.Milliseconds(), "compensated_publish_timeout"
	}
	return s.PublishMs + p.PublishingSessionMaxAge.Milliseconds(), "compensated_publishing_max_window"
}

// BuildOracle computes the expected facts of appCode's events (duplicates
// by event_id count once) from their EventEnvelope bytes (values that do
// not decode are no events, as for the pipeline), with rules the
// lucky_gift_rules rows known to exist. An event without app_code is
// appCode's (the rule of every stage); events of another app count in
// Events and IMMessages, which the relay and the IM publisher carry for
// every app, but not in the facts, which Compare reads for appCode only.
func BuildOracle(values [][]byte, rules map[RuleKey]LuckyRule, appCode string) *Oracle {
	return BuildOracleTimers(values, rules, appCode, nil)
}

// BuildOracleTimers is BuildOracle for traffic whose times are wall-clock
// times, with the mic timers of pol: an event of a session that comes after
// the session's due time finds it closed by the timer (the processor skips
// it as session_already_closed), and every session still open after the
// last event is closed by the timer too (the run must last until then). It
// assumes the pipeline delivers each event well before or well after a due
// time; Scenario.Timers generates traffic with such margins.
func BuildOracleTimers(values [][]byte, rules map[RuleKey]LuckyRule, appCode string, pol *TimerPolicy) *Oracle {
	o := &Oracle{OpenSessions: map[string]MicSession{}, Lifetime: map[int64]*MicTotals{},
		Daily: map[UserDay]*MicTotals{}, Pools: map[Pool]int64{}, timers: pol}
	seen := map[string]bool{}
	var e envelope.View
	for _, value := range values {
		if e.Parse(value) != nil {
			continue
		}
		if seen[string(e.EventID)] {
			continue
		}
		seen[string(e.EventID)] = true
		o.Events++
		switch string(e.EventType) {
		case "RoomCreated", "RoomHeatChanged", "RoomRankChanged":
		default:
			o.IMMessages++
		}
		if len(e.AppCode) > 0 && string(e.AppCode) != appCode {
			continue
		}
		switch string(e.EventType) {
		case "RoomMicChanged":
			var m envelope.MicChanged
			if m.Parse(e.Payload) == nil {
				o.mic(&e, &m)
			}
		case "RoomGiftSent":
			var g envelope.GiftSent
			if g.Parse(e.Payload) == nil && g.Lucky {
				o.gift(&e, &g, rules)
			}
		}
	}
	if pol != nil {
		for id, s := range o.OpenSessions {
			o.closeByTimer(id, s)
		}
	}
	o.accountSessions()
	return o
}

// closeByTimer ends the open session s the way the mic processor's timer
// does: at its due time, without mic online time when never published.
func (o *Oracle) closeByTimer(id string, s MicSession) {
	s.EndMs, s.EndReason = o.timers.dueAtMs(s)
	delete(o.OpenSessions, id)
	o.Sessions = append(o.Sessions, s)
}

func (o *Oracle) mic(e *envelope.View, m *envelope.MicChanged) {
	id := string(m.MicSessionID)
	if id == "" || m.UserID == 0 {
		return
	}
	s, open := o.OpenSessions[id]
	if open && o.timers != nil {
		if due, _ := o.timers.dueAtMs(s); e.OccurredAtMs > due {
			o.closeByTimer(id, s)
			return // the session is closed: the event is skipped
		}
	}
	switch string(m.Action) {
	case "up":
		if !open {
			o.OpenSessions[id] = MicSession{ID: id, UserID: m.UserID, RoomID: string(e.RoomID), SeatStartMs: e.OccurredAtMs}
		}
	case "publish_confirmed":
		if open && s.PublishMs == 0 {
			s.PublishMs = e.OccurredAtMs
			if m.PublishEventTimeMs > 0 {
				s.PublishMs = m.PublishEventTimeMs
			}
			s.PublishMs = max(s.PublishMs, s.SeatStartMs)
			o.OpenSessions[id] = s
		}
	case "change":
		if open {
			s.SeatChanges++
			o.OpenSessions[id] = s
		}
	case "down":
		if open {
			s.EndMs = e.OccurredAtMs
			if m.RTCStoppedAtMs > 0 {
				s.EndMs = m.RTCStoppedAtMs
			}
			s.EndMs = max(s.EndMs, s.SeatStartMs)
			s.EndReason = string(m.Reason)
			if s.PublishMs > s.EndMs {
				s.PublishMs = s.EndMs
			}
			delete(o.OpenSessions, id)
			o.Sessions = append(o.Sessions, s)
		}
	}
}

func (o *Oracle) gift(e *envelope.View, g *envelope.GiftSent, rules map[RuleKey]LuckyRule) {
	giftID := string(g.GiftID)
	rule, ok := rules[RuleKey{giftID, string(g.LuckyRuleVersion)}]
	if !ok || g.HeatValue < 0 {
		o.Rejected++
		return
	}
	o.LuckyGifts++
	in := rule.Inflow(g.HeatValue)
	o.Pools[Pool{"platform", "global"}] += in.Platform
	o.Pools[Pool{"room", string(e.RoomID)}] += in.Room
	o.Pools[Pool{"gift", giftID}] += in.Gift
}

// Inflow is a lucky gift's pool inflow and its split over the three
// layers (seed 003).
type Inflow struct{ Pool, Platform, Room, Gift int64 }

// Inflow computes the inflow of a gift of heat under r: floor(heat ×
// pool rate), the platform and room layers floor(pool × weight), the gift
// layer the remainder.
func (r LuckyRule) Inflow(heat int64) Inflow {
	pool := heat * r.PoolRatePPM / 1_000_000
	platform := pool * r.PlatformWeightPPM / 1_000_000
	room := pool * r.RoomWeightPPM / 1_000_000
	return Inflow{Pool: pool, Platform: platform, Room: room, Gift: pool - platform - room}
}

// accountSessions sums closed sessions into lifetime and UTC-daily totals.
func (o *Oracle) accountSessions() {
	sort.Slice(o.Sessions, func(i, j int) bool { return o.Sessions[i].SeatStartMs < o.Sessions[j].SeatStartMs })
	dayRooms := map[UserDay]map[string]bool{}
	for _, ms := range o.Sessions {
		lt := o.Lifetime[ms.UserID]
		if lt == nil {
			lt = &MicTotals{}
			o.Lifetime[ms.UserID] = lt
		}
		lt.SeatOccupiedMs += ms.EndMs - ms.SeatStartMs
		if ms.PublishMs > 0 {
			lt.MicOnlineMs += ms.EndMs - ms.PublishMs
		}
		lt.SessionCount++
		lt.FirstMicAtMs = minNonZero(lt.FirstMicAtMs, ms.SeatStartMs)
		lt.LastMicAtMs = max(lt.LastMicAtMs, ms.EndMs)

		// Every UTC day with seat time; a zero-length session counts on its start day.
		for dayStart := utcDay(ms.SeatStartMs); dayStart < max(ms.EndMs, ms.SeatStartMs+1); dayStart += dayMs {
			dayEnd := dayStart + dayMs
			seat := overlapMs(ms.SeatStartMs, ms.EndMs, dayStart, dayEnd)
			k := UserDay{ms.UserID, time.UnixMilli(dayStart).UTC().Format(time.DateOnly)}
			d := o.Daily[k]
			if d == nil {
				d = &MicTotals{}
				o.Daily[k] = d
				dayRooms[k] = map[string]bool{}
			}
			d.SeatOccupiedMs += seat
			if ms.PublishMs > 0 {
				d.MicOnlineMs += overlapMs(ms.PublishMs, ms.EndMs, dayStart, dayEnd)
			}
			d.SessionCount++
			if !dayRooms[k][ms.RoomID] {
				dayRooms[k][ms.RoomID] = true
				d.RoomCount++
			}
			first := max(ms.SeatStartMs, dayStart)
			d.FirstMicAtMs = minNonZero(d.FirstMicAtMs, first)
			d.LastMicAtMs = max(d.LastMicAtMs, max(min(ms.EndMs, dayEnd-1), first))
		}
	}
}

const dayMs = int64(24 * time.Hour / time.Millisecond)

func utcDay(ms int64) int64 { return ms - ((ms%dayMs)+dayMs)%dayMs }

func overlapMs(a0, a1, b0, b1 int64) int64 {
	lo, hi := max(a0, b0), min(a1, b1)
	return max(hi-lo, 0)
}

func minNonZero(a, b int64) int64 {
	if a == 0 {
		return b
	}
	return min(a, b)
}
