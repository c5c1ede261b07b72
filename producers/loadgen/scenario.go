// Package loadgen generates synthetic room traffic — mic sessions, gifts
// (lucky and plain), joins and leaves — as the room service would write it,
// together with an Oracle: the facts roomflow must end up with, computed
// independently of the processors from the scenario itself.
//
// A Scenario is deterministic for its Seed, so a failing run can be
// replayed. Events are returned in commit order: ascending occurred_at,
// room_version increasing per room, every mic session's events in order.
package loadgen

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/roomv1"
)

// LuckyRule is the lucky_gift_rules row the scenario's lucky gifts use; the
// loader writes it so the room processor can find it.
type LuckyRule struct {
	GiftID            string
	RuleVersion       string
	PoolRatePPM       int64
	PlatformWeightPPM int64
	RoomWeightPPM     int64
}

// Scenario describes the traffic to generate.
type Scenario struct {
	Seed     uint64
	AppCode  string
	Rooms    int
	Users    int
	Sessions int // mic sessions in total, spread over users
	Gifts    int // RoomGiftSent events in total
	// LuckyShare is the fraction of gifts that are lucky (0..1).
	LuckyShare float64
	// Start is the occurred_at of the first event; sessions spread over
	// Span (so they cross UTC midnights when Span covers them).
	Start time.Time
	Span  time.Duration
	// MaxSessionLength bounds one session's seat time.
	MaxSessionLength time.Duration
	Rule             LuckyRule
	// EventIDPrefix makes event ids unique across runs on one database.
	EventIDPrefix string
	// OmitAppCodeEvery > 0 leaves app_code out of every that-many-th
	// envelope (and its room_outbox row), as a room-service relying on the
	// configured app_code would: the facts must not change.
	OmitAppCodeEvery int

	// Timers, when set, makes this wall-clock traffic (Start near now,
	// written by WriteOutboxLive) whose open sessions the mic timers
	// close, and the oracle predicts those closes (BuildOracleTimers).
	// Every other session keeps its events TimerMargin clear of its due
	// time: publish within 5s of up, length at most a max age minus the
	// margin. The Abandoned share of sessions (seat start within
	// AbandonWithin of Start; 0: Span) is left open on purpose, in three
	// equal kinds: never published, published without down, and never
	// published with a late down LateDownAfter (0: TimerMargin) after
	// the timer closed it.
	Timers        *TimerPolicy
	TimerMargin   time.Duration
	Abandoned     float64
	AbandonWithin time.Duration
	LateDownAfter time.Duration
}

// DefaultScenario is a small mixed load over two UTC days.
func DefaultScenario() Scenario {
	return Scenario{
		Seed: 1, AppCode: "hyapp", Rooms: 50, Users: 300, Sessions: 2000, Gifts: 3000, LuckyShare: 0.4,
		Start:            time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC),
		Span:             30 * time.Hour,
		MaxSessionLength: 3 * time.Hour,
		Rule:             LuckyRule{GiftID: "lucky-rose", RuleVersion: "v1", PoolRatePPM: 50_000, PlatformWeightPPM: 200_000, RoomWeightPPM: 300_000},
		EventIDPrefix:    "lg",
	}
}

// Event is one room_outbox row.
type Event struct {
	Envelope *roomv1.EventEnvelope
	Payload  []byte // Envelope serialized: the room_outbox.payload column
	// Malformed: Payload is not Envelope but bytes no decoder accepts (a
	// fault of Load.MalformedShare, dead-lettered by the room processor).
	Malformed bool
	// Redelivered: the record is produced twice (Load.RedeliveryShare).
	Redelivered bool
}

// MicSession is one mic session as the oracle reconstructs it.
type MicSession struct {
	ID          string
	UserID      int64
	RoomID      string
	SeatStartMs int64
	PublishMs   int64 // 0 = never published
	EndMs       int64
	EndReason   string
	SeatChanges int
}

// Generate returns the events in commit order and the oracle of their facts.
func (s Scenario) Generate() ([]Event, *Oracle) {
	g := newScenarioGen(s)
	g.sessions()
	g.gifts()
	out := g.envelopes()
	b := NewOracleBuilder(map[RuleKey]LuckyRule{{s.Rule.GiftID, s.Rule.RuleVersion}: s.Rule}, s.AppCode, s.Timers)
	b.KeepSessions = true
	for _, e := range out {
		b.Add(e.Payload)
	}
	return out, b.Oracle()
}

// scenarioGen is Generate's state: the scenario, its random source, the
// times that follow from it and the events generated so far. Every step
// draws from r in a fixed order, so a seed always gives the same events.
type scenarioGen struct {
	s   Scenario
	r   *rand.Rand
	evs []rawEvent

	startMs, spanMs int64
	maxLen          int64 // of a session's seat time
	publishWithin   int64 // of the seat start
	// Timers scenarios only: the timers' max ages, the margin kept clear
	// of them, the late down's delay and the span abandoned sessions
	// start in.
	pendingAge, publishingAge, margin, lateDown, abandonSpan int64
}

// rawEvent is a generated event before its envelope.
type rawEvent struct {
	at      int64
	room    string
	typ     string
	id      string
	payload proto.Message
}

func newScenarioGen(s Scenario) *scenarioGen {
	g := &scenarioGen{s: s, r: rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15)),
		startMs: s.Start.UnixMilli(), spanMs: s.Span.Milliseconds(),
		maxLen: max(s.MaxSessionLength.Milliseconds(), 60_000), publishWithin: 30_000}
	if s.Timers != nil {
		g.pendingAge, g.publishingAge = s.Timers.PendingPublishMaxAge.Milliseconds(), s.Timers.PublishingSessionMaxAge.Milliseconds()
		g.margin = s.TimerMargin.Milliseconds()
		g.lateDown = g.margin
		if s.LateDownAfter > 0 {
			g.lateDown = s.LateDownAfter.Milliseconds()
		}
		g.maxLen = max(min(s.MaxSessionLength.Milliseconds(), g.pendingAge-g.margin, g.publishingAge-g.margin)-1000, 1000) // + 1s below
		g.publishWithin = 5000
		g.abandonSpan = g.spanMs
		if s.AbandonWithin > 0 {
			g.abandonSpan = min(s.AbandonWithin.Milliseconds(), g.spanMs)
		}
	}
	return g
}

func (g *scenarioGen) add(at int64, room, typ, id string, m proto.Message) {
	g.evs = append(g.evs, rawEvent{at, room, typ, id, m})
}

func (g *scenarioGen) room() string { return fmt.Sprintf("room-%d", g.r.IntN(g.s.Rooms)) }

// sessionPlan is where a Timers scenario places a session and whether it
// is left open on purpose.
type sessionPlan struct {
	abandon abandonKind
	at      int64
}

// sessionOrder returns the order sessions are generated in, with their
// plans in a Timers scenario (nil otherwise): a Timers scenario places its
// sessions in time order, each on a user free at its start, so sessions
// keep their planned times (the timers measure them against the clock).
func (g *scenarioGen) sessionOrder() ([]int, []sessionPlan) {
	s, r := g.s, g.r
	order := make([]int, s.Sessions)
	for i := range order {
		order[i] = i
	}
	if s.Timers == nil {
		return order, nil
	}
	plans := make([]sessionPlan, s.Sessions)
	for i := range plans {
		plans[i].at = g.startMs + r.Int64N(g.spanMs)
		if r.Float64() < s.Abandoned {
			plans[i] = sessionPlan{abandon: abandonKind(1 + r.IntN(3)), at: g.startMs + r.Int64N(g.abandonSpan)}
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return plans[order[a]].at < plans[order[b]].at })
	return order, plans
}

// sessions generates the mic sessions: each user's sessions are
// sequential and never overlap.
func (g *scenarioGen) sessions() {
	nextFree := make([]int64, g.s.Users)
	order, plans := g.sessionOrder()
	for _, i := range order {
		ms, abandon := g.placeSession(i, plans, nextFree)
		g.micEvents(ms, abandon)
	}
}

// placeSession picks session i's user (one free at its start), seat time,
// room, publish and end, and marks the user busy until its end.
func (g *scenarioGen) placeSession(i int, plans []sessionPlan, nextFree []int64) (MicSession, abandonKind) {
	s, r := g.s, g.r
	reasons := []string{"leave", "kick", "room_closed", "publish_timeout", "presence_stale", "rtc_audio_stopped"}
	u := r.IntN(s.Users)
	userID := int64(100000 + u)
	abandon := abandonNone
	var at int64
	if s.Timers != nil {
		abandon, at = plans[i].abandon, plans[i].at
		if nextFree[u] > at { // busy: take the user free soonest
			for v := range nextFree {
				if nextFree[v] < nextFree[u] {
					u = v
				}
			}
			userID = int64(100000 + u)
		}
	} else {
		at = g.startMs + r.Int64N(g.spanMs)
	}
	seat := max(nextFree[u], at) + 1000
	length := 1000 + r.Int64N(g.maxLen)
	ms := MicSession{ID: fmt.Sprintf("%s-ms-%d", s.EventIDPrefix, i), UserID: userID, RoomID: g.room(),
		SeatStartMs: seat, EndMs: seat + length, EndReason: reasons[r.IntN(len(reasons))]}
	if abandon == abandonPublishing || abandon == abandonNone && r.Float64() < 0.8 {
		ms.PublishMs = seat + r.Int64N(min(g.publishWithin, length-1)) + 1
	}
	switch abandon {
	case abandonPending:
		ms.EndMs = seat + g.pendingAge + g.margin // the user's next session starts after the timer close
	case abandonPublishing:
		ms.EndMs = ms.PublishMs + g.publishingAge + g.margin
	case abandonLateDown:
		ms.EndMs = seat + g.pendingAge + g.lateDown // the down comes after the timer closed the session
	}
	nextFree[u] = ms.EndMs + 1
	return ms, abandon
}

// micEvents generates ms's RoomMicChanged events: up, publish_confirmed
// when it publishes, then (unless abandon leaves it open) maybe a seat
// change and the down.
func (g *scenarioGen) micEvents(ms MicSession, abandon abandonKind) {
	s, r := g.s, g.r
	seat := ms.SeatStartMs
	seatNo := int32(1 + r.IntN(8))
	mic := func(action string, at int64, extra func(*roomv1.RoomMicChanged)) {
		m := &roomv1.RoomMicChanged{UserId: ms.UserID, SeatNo: seatNo, Action: action, MicSessionId: ms.ID}
		if extra != nil {
			extra(m)
		}
		g.add(at, ms.RoomID, "RoomMicChanged", fmt.Sprintf("%s-%s-%s", s.EventIDPrefix, ms.ID, action+fmt.Sprint(at)), m)
	}
	mic("up", seat, func(m *roomv1.RoomMicChanged) {
		m.PublishState = "pending_publish"
		m.PublishDeadlineMs = seat + 120_000
	})
	if ms.PublishMs > 0 {
		mic("publish_confirmed", ms.PublishMs, func(m *roomv1.RoomMicChanged) {
			m.PublishState = "publishing"
			m.PublishEventTimeMs = ms.PublishMs
		})
	}
	if abandon != abandonNone {
		if abandon == abandonLateDown {
			mic("down", ms.EndMs, func(m *roomv1.RoomMicChanged) { m.Reason = ms.EndReason })
		}
		return
	}
	if r.Float64() < 0.2 {
		at := seat + (ms.EndMs-seat)/2
		if at > ms.PublishMs {
			prev := seatNo
			seatNo = int32(1 + r.IntN(8))
			mic("change", at, func(m *roomv1.RoomMicChanged) { m.PreviousSeatNo = prev })
		}
	}
	mic("down", ms.EndMs, func(m *roomv1.RoomMicChanged) { m.Reason = ms.EndReason })
}

// gifts generates the gifts (a LuckyShare of them lucky), with a heat
// change after every 10th and a join after every 5th, spread over the span.
func (g *scenarioGen) gifts() {
	s, r := g.s, g.r
	for i := 0; i < s.Gifts; i++ {
		at := g.startMs + r.Int64N(g.spanMs)
		gift := &roomv1.RoomGiftSent{SenderUserId: int64(100000 + r.IntN(s.Users)), TargetUserId: int64(100000 + r.IntN(s.Users)),
			GiftCount: int32(1 + r.IntN(10)), BillingReceiptId: fmt.Sprintf("bill-%d", i)}
		gift.CoinSpent = int64(gift.GiftCount) * (10 + r.Int64N(990))
		gift.HeatValue = gift.CoinSpent
		if r.Float64() < s.LuckyShare {
			gift.GiftId, gift.Lucky, gift.LuckyRuleVersion, gift.DrawId = s.Rule.GiftID, true, s.Rule.RuleVersion, fmt.Sprintf("%s-draw-%d", s.EventIDPrefix, i)
		} else {
			gift.GiftId = fmt.Sprintf("gift-%d", r.IntN(20))
		}
		g.add(at, g.room(), "RoomGiftSent", fmt.Sprintf("%s-gift-%d", s.EventIDPrefix, i), gift)
		if i%10 == 0 {
			g.add(at+1, g.room(), "RoomHeatChanged", fmt.Sprintf("%s-heat-%d", s.EventIDPrefix, i), &roomv1.RoomHeatChanged{Heat: int64(i), Delta: 1})
		}
		if i%5 == 0 {
			g.add(at+2, g.room(), "RoomUserJoined", fmt.Sprintf("%s-join-%d", s.EventIDPrefix, i), &roomv1.RoomUserJoined{UserId: int64(100000 + r.IntN(s.Users))})
		}
	}
}

// envelopes returns the events in commit (time) order, each in its
// envelope with the room's next version.
func (g *scenarioGen) envelopes() []Event {
	s, evs := g.s, g.evs
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	versions := map[string]int64{}
	out := make([]Event, 0, len(evs))
	for i, e := range evs {
		versions[e.room]++
		body, err := proto.Marshal(e.payload)
		if err != nil {
			panic(err) // generated messages always marshal
		}
		app := s.AppCode
		if s.OmitAppCodeEvery > 0 && i%s.OmitAppCodeEvery == 0 {
			app = ""
		}
		env := &roomv1.EventEnvelope{EventId: e.id, EventType: e.typ, AppCode: app, RoomId: e.room,
			RoomVersion: versions[e.room], OccurredAtMs: e.at, RequestId: "req-" + e.id, CommandId: "cmd-" + e.id, Payload: body}
		b, err := proto.Marshal(env)
		if err != nil {
			panic(err)
		}
		out = append(out, Event{Envelope: env, Payload: b})
	}
	return out
}

// abandonKind is how a session of a Timers scenario is left open on purpose.
type abandonKind int

const (
	abandonNone       abandonKind = iota
	abandonPending                // up only: closed as compensated_publish_timeout
	abandonPublishing             // up and publish_confirmed: compensated_publishing_max_window
	abandonLateDown               // up, then a down after the pending timer closed it
)
