package loadgen

import (
	"cmp"
	"hash/fnv"
	"slices"
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
// computed straight from the events with the rules of docs/requirements.md
// (MIC-*, LUCKY-*) and docs/design.md: a reference written independently of
// processors/, used by tests, the demo and `roomflow verify`.
//
// Without a TimerPolicy only sessions closed by a real `down` are
// accounted; sessions still open (or closed by the mic processor's timers)
// are listed in OpenSessions and their users left out of the mic
// comparison. With one (BuildOracleTimers), every session ends: by its
// `down`, or by the timer close the design prescribes.
type Oracle struct {
	Events     int // distinct events
	IMMessages int // events that produce a Tencent IM message (not no-op types)
	// ClosedSessions counts the sessions closed (by down or timer);
	// Sessions lists them when the builder kept them (BuildOracle does).
	ClosedSessions int
	Sessions       []MicSession
	OpenSessions   map[string]MicSession
	Lifetime       map[int64]*MicTotals
	Daily          map[UserDay]*MicTotals
	Pools          map[Pool]int64 // expected total_in
	LuckyGifts     int
	// Refunded counts the lucky gifts among LuckyGifts whose Execute was
	// rejected (OracleBuilder.Refunded): no pool inflow.
	Refunded int
	// Rejected counts lucky gifts the room processor must send to the DLQ
	// (unknown rule version, heat outside [0, envelope.MaxGiftCoins]).
	Rejected int

	timers       *TimerPolicy
	keptSessions bool // Sessions lists every closed session
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
// It keeps every closed session in Sessions; an OracleBuilder need not.
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
	b := NewOracleBuilder(rules, appCode, pol)
	b.KeepSessions = true
	for _, v := range values {
		b.Add(v)
	}
	return b.Oracle()
}

// OracleBuilder computes an Oracle one event at a time, in memory bounded
// by the facts (users, user-days, rooms, pools) and the sessions open at
// once (with a TimerPolicy, Expire closes those the timers closed), never
// by the events: a closed session is folded into Lifetime and Daily as it
// closes.
//
// Duplicates (a record delivered twice) are recognised without a set of
// every event id. It assumes what the relay guarantees: the records of a
// room are in room_version order on its partition. An event whose
// room_version is above its room's high-water mark is new; one at or
// below it is a duplicate when its event_id is among the room's last
// recentPerRoom events (by a 64-bit hash), and otherwise new (an event
// without room_version, or a later run restarting the room's versions).
// So a duplicate arriving more than recentPerRoom events of its room after
// the original counts twice.
type OracleBuilder struct {
	// KeepSessions lists every closed session in Oracle.Sessions, for the
	// per-session comparison of Compare; its memory grows with sessions.
	KeepSessions bool
	// OnSession, when set, is called with each session as it closes (by
	// its down or by a timer), for a per-session comparison that streams.
	OnSession func(MicSession)
	// OnLuckyGift, when set, is called with each distinct lucky gift of
	// appCode that enters the pools: e and g alias the value passed to Add
	// and are valid only during the call.
	OnLuckyGift func(e *envelope.View, g *envelope.GiftSent, in Inflow)
	// Refunded holds the draw ids whose ExecuteLuckyGiftDraw was rejected
	// after the debit: their gifts are refunded and their inflow enters no
	// pool (they are still passed to OnLuckyGift, to be matched).
	Refunded map[string]bool

	o        *Oracle
	rules    map[RuleKey]LuckyRule
	appCode  string
	rooms    map[string]*roomSeen // app_code + "\x00" + room_id
	roomIdx  map[string]uint32    // interned room ids of dayRooms
	dayRooms map[dayRoom]struct{}

	env  envelope.View
	mic  envelope.MicChanged
	gift envelope.GiftSent
}

// recentPerRoom is how many event ids per room the builder remembers to
// recognise a duplicate at or below the room's high-water mark.
const recentPerRoom = 16

// roomSeen is a room's room_version high-water mark and the hashes of its
// last recentPerRoom event ids.
type roomSeen struct {
	hwm    int64
	recent [recentPerRoom]uint64
	next   int
}

// dayRoom is one room a user sat in on one UTC day (daily room_count).
type dayRoom struct {
	user int64
	day  int64 // UTC day start, ms
	room uint32
}

// NewOracleBuilder starts an empty oracle of appCode's facts with rules
// (see BuildOracle) and, for wall-clock traffic closed by the mic timers,
// pol (nil: none; see BuildOracleTimers).
func NewOracleBuilder(rules map[RuleKey]LuckyRule, appCode string, pol *TimerPolicy) *OracleBuilder {
	return &OracleBuilder{
		o: &Oracle{OpenSessions: map[string]MicSession{}, Lifetime: map[int64]*MicTotals{},
			Daily: map[UserDay]*MicTotals{}, Pools: map[Pool]int64{}, timers: pol},
		rules: rules, appCode: appCode, rooms: map[string]*roomSeen{},
		roomIdx: map[string]uint32{}, dayRooms: map[dayRoom]struct{}{},
	}
}

// Add accounts one EventEnvelope value and reports whether it was a new
// event (false: it does not decode, or it is a duplicate). Nothing of
// value is referenced once the next Add has run.
func (b *OracleBuilder) Add(value []byte) bool {
	e := &b.env
	if e.Parse(value) != nil || b.duplicate(e) {
		return false
	}
	o := b.o
	o.Events++
	switch string(e.EventType) {
	case "RoomCreated", "RoomHeatChanged", "RoomRankChanged":
	default:
		o.IMMessages++
	}
	if len(e.AppCode) > 0 && string(e.AppCode) != b.appCode {
		return true
	}
	switch string(e.EventType) {
	case "RoomMicChanged":
		if b.mic.Parse(e.Payload) == nil {
			b.micEvent(e, &b.mic)
		}
	case "RoomGiftSent":
		if b.gift.Parse(e.Payload) == nil && b.gift.Lucky {
			b.luckyGift(e, &b.gift)
		}
	}
	return true
}

// duplicate reports whether e was seen (see OracleBuilder) and remembers it.
func (b *OracleBuilder) duplicate(e *envelope.View) bool {
	key := string(e.AppCode) + "\x00" + string(e.RoomID)
	r := b.rooms[key]
	if r == nil {
		r = &roomSeen{}
		b.rooms[key] = r
	}
	h := fnv.New64a()
	h.Write(e.EventID)
	id := h.Sum64()
	if e.RoomVersion <= r.hwm && slices.Contains(r.recent[:], id) {
		return true
	}
	r.hwm = max(r.hwm, e.RoomVersion)
	r.recent[r.next] = id
	r.next = (r.next + 1) % recentPerRoom
	return false
}

// Expire closes, with a TimerPolicy, the open sessions whose timers came
// due before watermarkMs, so they need not stay open until Oracle. The
// caller guarantees that no event it adds later is older than
// watermarkMs (a stream in commit order; not a topic read partition by
// partition).
func (b *OracleBuilder) Expire(watermarkMs int64) {
	if b.o.timers == nil {
		return
	}
	for id, s := range b.o.OpenSessions {
		if due, _ := b.o.timers.dueAtMs(s); due < watermarkMs {
			b.closeByTimer(id, s)
		}
	}
}

// Oracle closes what the timers close (with a TimerPolicy) and returns the
// oracle; call it once, after the last Add.
func (b *OracleBuilder) Oracle() *Oracle {
	if b.o.timers != nil {
		for id, s := range b.o.OpenSessions {
			b.closeByTimer(id, s)
		}
	}
	if b.o.keptSessions = b.KeepSessions; b.KeepSessions {
		slices.SortFunc(b.o.Sessions, func(x, y MicSession) int { return cmp.Compare(x.SeatStartMs, y.SeatStartMs) })
	}
	return b.o
}

// closeByTimer ends the open session s the way the mic processor's timer
// does: at its due time, without mic online time when never published.
func (b *OracleBuilder) closeByTimer(id string, s MicSession) {
	s.EndMs, s.EndReason = b.o.timers.dueAtMs(s)
	delete(b.o.OpenSessions, id)
	b.closed(s)
}

func (b *OracleBuilder) micEvent(e *envelope.View, m *envelope.MicChanged) {
	o := b.o
	if len(m.MicSessionID) == 0 || m.UserID == 0 {
		return
	}
	s, open := o.OpenSessions[string(m.MicSessionID)]
	if open && o.timers != nil {
		if due, _ := o.timers.dueAtMs(s); e.OccurredAtMs > due {
			b.closeByTimer(s.ID, s)
			return // the session is closed: the event is skipped
		}
	}
	switch string(m.Action) {
	case "up":
		if !open {
			id := string(m.MicSessionID)
			o.OpenSessions[id] = MicSession{ID: id, UserID: m.UserID, RoomID: string(e.RoomID), SeatStartMs: e.OccurredAtMs}
		}
	case "publish_confirmed":
		if open && s.PublishMs == 0 {
			s.PublishMs = e.OccurredAtMs
			if m.PublishEventTimeMs > 0 {
				s.PublishMs = m.PublishEventTimeMs
			}
			s.PublishMs = max(s.PublishMs, s.SeatStartMs)
			o.OpenSessions[s.ID] = s
		}
	case "change":
		if open {
			s.SeatChanges++
			o.OpenSessions[s.ID] = s
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
			delete(o.OpenSessions, s.ID)
			b.closed(s)
		}
	}
}

func (b *OracleBuilder) luckyGift(e *envelope.View, g *envelope.GiftSent) {
	o := b.o
	giftID := string(g.GiftID)
	rule, ok := b.rules[RuleKey{giftID, string(g.LuckyRuleVersion)}]
	if !ok || envelope.CheckAmount("heat_value", g.HeatValue, envelope.MaxGiftCoins) != nil {
		o.Rejected++
		return
	}
	o.LuckyGifts++
	in := rule.Inflow(g.HeatValue)
	if b.OnLuckyGift != nil {
		b.OnLuckyGift(e, g, in)
	}
	if len(g.DrawID) > 0 && b.Refunded[string(g.DrawID)] {
		o.Refunded++
		return
	}
	o.Pools[Pool{"platform", "global"}] += in.Platform
	o.Pools[Pool{"room", string(e.RoomID)}] += in.Room
	o.Pools[Pool{"gift", giftID}] += in.Gift
}

// Inflow is a lucky gift's pool inflow and its split over the three
// layers (LUCKY-4).
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

// closed sums the closed session ms into lifetime and UTC-daily totals
// (sums, minima and maxima: the order sessions close in does not matter).
func (b *OracleBuilder) closed(ms MicSession) {
	o := b.o
	o.ClosedSessions++
	if b.KeepSessions {
		o.Sessions = append(o.Sessions, ms)
	}
	if b.OnSession != nil {
		b.OnSession(ms)
	}
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

	room, ok := b.roomIdx[ms.RoomID]
	if !ok {
		room = uint32(len(b.roomIdx))
		b.roomIdx[ms.RoomID] = room
	}
	// Every UTC day with seat time; a zero-length session counts on its start day.
	for dayStart := utcDay(ms.SeatStartMs); dayStart < max(ms.EndMs, ms.SeatStartMs+1); dayStart += dayMs {
		dayEnd := dayStart + dayMs
		seat := overlapMs(ms.SeatStartMs, ms.EndMs, dayStart, dayEnd)
		k := UserDay{ms.UserID, time.UnixMilli(dayStart).UTC().Format(time.DateOnly)}
		d := o.Daily[k]
		if d == nil {
			d = &MicTotals{}
			o.Daily[k] = d
		}
		d.SeatOccupiedMs += seat
		if ms.PublishMs > 0 {
			d.MicOnlineMs += overlapMs(ms.PublishMs, ms.EndMs, dayStart, dayEnd)
		}
		d.SessionCount++
		if dr := (dayRoom{ms.UserID, dayStart, room}); !hasKey(b.dayRooms, dr) {
			b.dayRooms[dr] = struct{}{}
			d.RoomCount++
		}
		first := max(ms.SeatStartMs, dayStart)
		d.FirstMicAtMs = minNonZero(d.FirstMicAtMs, first)
		d.LastMicAtMs = max(d.LastMicAtMs, max(min(ms.EndMs, dayEnd-1), first))
	}
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
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
