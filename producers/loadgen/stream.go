package loadgen

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/roomv1"
)

// Stream generates the traffic of a sustained run, one event at a time in
// commit order (ascending occurred_at, room_version increasing per room),
// without holding the run: only the future events of the sessions open now
// wait in a queue. Arrivals come at Load's rate (events per second, ramped)
// from Scenario.Start for Load.Duration: a mic session on a free user in a
// uniform room (seats, not popularity, bound a room's sessions), or a gift
// (with a heat change and a join now and then) in a Zipf-skewed room. The
// events planned past the end are left out: their sessions stay open for the
// mic timers (with Scenario.Timers) or for verify to skip.
//
// Scenario gives Seed, AppCode, Rooms, Users, LuckyShare, Rule,
// EventIDPrefix, and for wall-clock traffic Timers, TimerMargin and
// Abandoned (the share of sessions left without a down). With Timers, no
// session event falls within TimerMargin of the session's due time: a down
// that would is moved past it (the timer closes the session, the down is
// skipped), as in a Timers Scenario.
type Stream struct {
	sc   Scenario
	ld   Load
	r    *rand.Rand
	zipf *rand.Zipf

	startMs, endMs int64
	nextArrival    float64 // ms
	scheduled      float64 // events the schedule brought up to nextArrival
	mu, sigma      float64 // session length, ln ms
	queue          plannedQueue
	seq            uint64
	versions       []int64 // per room
	nextFree       []int64 // per user: when the user may take a seat again

	margin, pendingAge, publishingAge, publishWithin int64

	// SkippedSessions counts session arrivals that found no free user.
	SkippedSessions int
}

// sessionShare is the share of arrivals that are mic sessions (the rest
// are gifts).
const sessionShare = 0.3

// NewStream plans sc's traffic shaped by ld (which must be valid).
func NewStream(sc Scenario, ld Load) *Stream {
	r := rand.New(rand.NewPCG(sc.Seed, sc.Seed^0x9e3779b97f4a7c15))
	s := &Stream{sc: sc, ld: ld, r: r, zipf: rand.NewZipf(r, ld.HotRoomSkew, 1, uint64(max(sc.Rooms-1, 0))),
		startMs: sc.Start.UnixMilli(), versions: make([]int64, sc.Rooms), nextFree: make([]int64, sc.Users),
		publishWithin: 30_000}
	s.endMs = s.startMs + ld.Duration.Milliseconds()
	s.nextArrival = float64(s.startMs)
	s.mu, s.sigma = lognormal(ld.SessionMedian, ld.SessionP99)
	if p := sc.Timers; p != nil {
		s.margin, s.pendingAge, s.publishingAge = sc.TimerMargin.Milliseconds(), p.PendingPublishMaxAge.Milliseconds(), p.PublishingSessionMaxAge.Milliseconds()
		s.publishWithin = max(min(5000, s.pendingAge-s.margin-1), 1)
	}
	return s
}

// planned is one future event of the stream.
type planned struct {
	at   int64
	seq  uint64
	room int
	typ  string
	id   string
	msg  proto.Message
}

type plannedQueue []*planned

func (q plannedQueue) Len() int { return len(q) }
func (q plannedQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q plannedQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *plannedQueue) Push(x any)   { *q = append(*q, x.(*planned)) }
func (q *plannedQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return p
}

// Pending is how many planned events wait in the queue (the stream's
// memory besides its per-room and per-user counters).
func (s *Stream) Pending() int { return len(s.queue) }

// Next returns the next event in commit order, false after the last.
func (s *Stream) Next() (Event, bool) {
	for {
		arrival := int64(s.nextArrival)
		if arrival < s.endMs && (len(s.queue) == 0 || arrival <= s.queue[0].at) {
			s.arrive(arrival)
			// Poisson arrivals on the schedule's clock: exponential gaps in
			// events, mapped to time through the ramp.
			s.scheduled += s.r.ExpFloat64() * s.perArrival(arrival)
			s.nextArrival = float64(s.startMs) + float64(s.ld.timeOf(s.scheduled))/float64(time.Millisecond)
			continue
		}
		if len(s.queue) == 0 || s.queue[0].at >= s.endMs {
			s.queue = nil
			return Event{}, false
		}
		return s.event(heap.Pop(&s.queue).(*planned)), true
	}
}

// perArrival is how many events an arrival at atMs brings before the end
// on average: a gift 1.3 (with its heat changes and joins), a session its
// up, and its publish, change and down when they come before the end (so
// sessions longer than the run do not leave it below its rate).
func (s *Stream) perArrival(atMs int64) float64 {
	left := float64(s.endMs - atMs)
	if left <= 0 {
		return 1
	}
	within := func(ms float64) float64 { // P(a session is shorter than ms): the log-normal's CDF
		return 0.5 * math.Erfc(-(math.Log(ms)-s.mu)/(s.sigma*math.Sqrt2))
	}
	publish := (1 - s.ld.PublishFailureShare) * min(left/float64(s.publishWithin), 1)
	session := 1 + publish + 0.2*within(2*left) + (1-s.sc.Abandoned)*within(left)
	return sessionShare*session + (1-sessionShare)*1.3
}

func (s *Stream) plan(at int64, room int, typ, id string, m proto.Message) {
	s.seq++
	heap.Push(&s.queue, &planned{at: at, seq: s.seq, room: room, typ: typ, id: id, msg: m})
}

func (s *Stream) arrive(at int64) {
	if s.r.Float64() < sessionShare {
		s.session(at)
	} else {
		s.gift(at)
	}
}

// hotRoom draws a room by popularity (Zipf: room 0 the hottest).
func (s *Stream) hotRoom() int { return int(s.zipf.Uint64()) }

// sessionLength draws a seat time from the log-normal of Load.
func (s *Stream) sessionLength() int64 {
	return max(int64(math.Exp(s.mu+s.sigma*s.r.NormFloat64())), 1000)
}

func (s *Stream) session(at int64) {
	u := -1
	for range 8 {
		if v := s.r.IntN(s.sc.Users); s.nextFree[v] <= at {
			u = v
			break
		}
	}
	if u < 0 {
		s.SkippedSessions++
		return
	}
	userID, room := int64(100000+u), s.r.IntN(s.sc.Rooms)
	id := fmt.Sprintf("%s-ms-%d", s.sc.EventIDPrefix, s.seq)
	seat, length := at, s.sessionLength()
	end := seat + length
	var pub int64
	if s.r.Float64() >= s.ld.PublishFailureShare {
		pub = seat + 1 + s.r.Int64N(max(min(s.publishWithin, length-1), 1))
	}
	abandoned := s.r.Float64() < s.sc.Abandoned
	free := end
	due := int64(math.MaxInt64)
	if s.sc.Timers != nil {
		due = seat + s.pendingAge
		if pub > 0 {
			due = pub + s.publishingAge
		}
		if end > due-s.margin && end < due+s.margin {
			end = due + s.margin // the timer closes it first; its down comes late
		}
		if abandoned || end > due {
			free = max(end, due+s.margin) // closed by the timer
		}
	} else if abandoned {
		free = math.MaxInt64 - 1000 // never closed: the user sits on
	}
	s.nextFree[u] = free + 1000
	seatNo := int32(1 + s.r.IntN(8))
	mic := func(action string, at int64, m *roomv1.RoomMicChanged) {
		m.UserId, m.Action, m.MicSessionId = userID, action, id
		if m.SeatNo == 0 {
			m.SeatNo = seatNo
		}
		s.plan(at, room, "RoomMicChanged", fmt.Sprintf("%s-%s-%d", id, action, at), m)
	}
	mic("up", seat, &roomv1.RoomMicChanged{PublishState: "pending_publish", PublishDeadlineMs: seat + 120_000})
	if pub > 0 {
		mic("publish_confirmed", pub, &roomv1.RoomMicChanged{PublishState: "publishing", PublishEventTimeMs: pub})
	}
	if mid := seat + length/2; s.r.Float64() < 0.2 && mid > pub && mid < due-s.margin {
		next := int32(1 + s.r.IntN(8))
		mic("change", mid, &roomv1.RoomMicChanged{SeatNo: next, PreviousSeatNo: seatNo})
		seatNo = next
	}
	if !abandoned {
		reasons := []string{"leave", "kick", "room_closed", "rtc_audio_stopped"}
		mic("down", end, &roomv1.RoomMicChanged{Reason: reasons[s.r.IntN(len(reasons))]})
	}
}

func (s *Stream) gift(at int64) {
	n := s.seq
	p := s.sc.EventIDPrefix
	g := &roomv1.RoomGiftSent{SenderUserId: int64(100000 + s.r.IntN(s.sc.Users)), TargetUserId: int64(100000 + s.r.IntN(s.sc.Users)),
		GiftCount: int32(1 + s.r.IntN(10)), BillingReceiptId: fmt.Sprintf("%s-bill-%d", p, n)}
	g.CoinSpent = int64(g.GiftCount) * (10 + s.r.Int64N(990))
	g.HeatValue = g.CoinSpent
	if s.r.Float64() < s.sc.LuckyShare {
		g.GiftId, g.Lucky, g.LuckyRuleVersion, g.DrawId = s.sc.Rule.GiftID, true, s.sc.Rule.RuleVersion, fmt.Sprintf("%s-draw-%d", p, n)
	} else {
		g.GiftId = fmt.Sprintf("gift-%d", s.r.IntN(20))
	}
	room := s.hotRoom()
	s.plan(at, room, "RoomGiftSent", fmt.Sprintf("%s-gift-%d", p, n), g)
	if x := s.r.Float64(); x < 0.1 {
		s.plan(at+1, room, "RoomHeatChanged", fmt.Sprintf("%s-heat-%d", p, n), &roomv1.RoomHeatChanged{Heat: g.HeatValue, Delta: g.HeatValue})
	} else if x < 0.3 {
		s.plan(at+2, s.hotRoom(), "RoomUserJoined", fmt.Sprintf("%s-join-%d", p, n), &roomv1.RoomUserJoined{UserId: int64(100000 + s.r.IntN(s.sc.Users))})
	}
}

// malformedPrefix starts a malformed row's payload: field number 0 makes
// it no EventEnvelope for any decoder.
const malformedPrefix = "\x07malformed "

// event numbers p in its room and serializes it, with Load's faults.
func (s *Stream) event(p *planned) Event {
	s.versions[p.room]++
	body, err := proto.Marshal(p.msg)
	if err != nil {
		panic(err) // generated messages always marshal
	}
	env := &roomv1.EventEnvelope{EventId: p.id, EventType: p.typ, AppCode: s.sc.AppCode, RoomId: fmt.Sprintf("room-%d", p.room),
		RoomVersion: s.versions[p.room], OccurredAtMs: p.at, RequestId: "req-" + p.id, CommandId: "cmd-" + p.id, Payload: body}
	e := Event{Envelope: env}
	if e.Payload, err = proto.Marshal(env); err != nil {
		panic(err)
	}
	if s.ld.MalformedShare > 0 && s.r.Float64() < s.ld.MalformedShare {
		e.Payload, e.Malformed = []byte(malformedPrefix+p.id), true
	} else if s.ld.RedeliveryShare > 0 && s.r.Float64() < s.ld.RedeliveryShare {
		e.Redelivered = true
	}
	return e
}
