// Package sinktest generates realistic mic-ledger and lucky-pool-inflow
// streams for the MySQL sink's tests and benchmark, and holds an oracle
// that computes the expected tables from the stream independently of the
// sink's own aggregation code.
package sinktest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// LedgerGen produces mic sessions the way the mic processor reports them:
// per user, sessions one after another; each session is an "up" entry, an
// optional "publish_confirmed" entry and a "down" entry that closes it with
// one daily delta, or two when it crosses 00:00 UTC, and a lifetime delta.
// Half the sessions publish, so 60% of the entries are session updates and
// 40% are closes, the mix the benchmark asks for.
type LedgerGen struct {
	AppCode string
	Users   int     // distinct users (default 1000)
	Rooms   int     // distinct rooms (default 200)
	Prefix  string  // event id prefix (default "e")
	SkipPct float64 // share of extra skipped entries (0..1)
	// Start is the time of the first session (default 2026-03-01 UTC).
	Start time.Time

	rng   *rand.Rand
	seq   int
	users []*genUser
}

type genUser struct {
	id      int64
	nextAt  int64
	pending []*userv1.MicLedgerEntry
}

// NewLedgerGen returns a generator with a fixed seed.
func NewLedgerGen(seed uint64, appCode string, users int) *LedgerGen {
	g := &LedgerGen{AppCode: appCode, Users: users, Rooms: 200, Prefix: "e", rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	g.Start = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	return g
}

func (g *LedgerGen) init() {
	if g.users != nil {
		return
	}
	if g.Users <= 0 {
		g.Users = 1000
	}
	if g.Rooms <= 0 {
		g.Rooms = 200
	}
	for i := range g.Users {
		// Spread the first sessions over ~3 days so sessions cross midnight.
		at := g.Start.UnixMilli() + g.rng.Int64N(3*24*3600*1000)
		g.users = append(g.users, &genUser{id: int64(100000 + i), nextAt: at})
	}
}

func (g *LedgerGen) id() string {
	g.seq++
	return g.Prefix + "-" + strconv.Itoa(g.seq)
}

// Next returns the next n entries, interleaving users at random while
// keeping each user's entries in order.
func (g *LedgerGen) Next(n int) []*userv1.MicLedgerEntry {
	g.init()
	out := make([]*userv1.MicLedgerEntry, 0, n)
	for len(out) < n {
		u := g.users[g.rng.IntN(len(g.users))]
		if len(u.pending) == 0 {
			u.pending = g.session(u)
		}
		out = append(out, u.pending[0])
		u.pending = u.pending[1:]
		if g.SkipPct > 0 && len(out) < n && g.rng.Float64() < g.SkipPct {
			out = append(out, g.skipped(u))
		}
	}
	return out
}

func (g *LedgerGen) skipped(u *genUser) *userv1.MicLedgerEntry {
	reasons := []string{"unknown_session", "session_already_closed", "stale_event", "incomplete_mic_event"}
	r := reasons[g.rng.IntN(len(reasons))]
	return &userv1.MicLedgerEntry{
		EventId: g.id(), AppCode: g.AppCode, EventType: "RoomMicChanged", UserId: u.id,
		MicSessionId: "gone-" + strconv.Itoa(g.seq), Action: "down", RoomId: "r-0",
		Status: "skipped", SkipReason: r, OccurredAtMs: u.nextAt,
	}
}

const dayMs = 24 * 3600 * 1000

func dateOf(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.DateOnly) }

// session builds all entries of one session of u.
func (g *LedgerGen) session(u *genUser) []*userv1.MicLedgerEntry {
	start := u.nextAt
	room := "r-" + strconv.Itoa(g.rng.IntN(g.Rooms))
	sid := fmt.Sprintf("ms-%d-%d", u.id, start)
	seat := int32(g.rng.IntN(8))
	publishes := g.rng.IntN(2) == 0
	dur := 60_000 + g.rng.Int64N(4*3600*1000) // 1 min .. 4 h
	end := start + dur
	u.nextAt = end + 1000 + g.rng.Int64N(2*3600*1000)

	s := &userv1.MicSession{
		AppCode: g.AppCode, MicSessionId: sid, UserId: u.id, RoomId: room,
		FirstSeatNo: seat, CurrentSeatNo: seat, Status: "pending_publish",
		SeatStartedAtMs: start, CreatedAtMs: start, UpdatedAtMs: start, Version: 1,
	}
	var out []*userv1.MicLedgerEntry
	upID := g.id()
	s.OpenedEventId, s.LastEventId = upID, upID
	out = append(out, &userv1.MicLedgerEntry{
		EventId: upID, AppCode: g.AppCode, EventType: "RoomMicChanged", UserId: u.id, MicSessionId: sid,
		Action: "up", RoomId: room, Status: "consumed", OccurredAtMs: start, Session: proto.Clone(s).(*userv1.MicSession),
	})
	pubAt := int64(0)
	if publishes {
		pubAt = start + g.rng.Int64N(min(dur, 30_000))
		pid := g.id()
		s.Status, s.PublishingStartedAtMs, s.PublishEventId, s.LastEventId = "publishing", pubAt, pid, pid
		s.UpdatedAtMs, s.Version = pubAt, s.Version+1
		out = append(out, &userv1.MicLedgerEntry{
			EventId: pid, AppCode: g.AppCode, EventType: "RoomMicChanged", UserId: u.id, MicSessionId: sid,
			Action: "publish_confirmed", RoomId: room, Status: "consumed", OccurredAtMs: pubAt, Session: proto.Clone(s).(*userv1.MicSession),
		})
	}
	did := g.id()
	s.Status, s.EndedAtMs, s.EndReason, s.ClosedEventId, s.LastEventId = "ended", end, "leave", did, did
	s.SeatOccupiedMs = end - start
	if publishes {
		s.MicOnlineMs = end - pubAt
	}
	s.UpdatedAtMs, s.Version = end, s.Version+1
	down := &userv1.MicLedgerEntry{
		EventId: did, AppCode: g.AppCode, EventType: "RoomMicChanged", UserId: u.id, MicSessionId: sid,
		Action: "down", RoomId: room, Status: "consumed", OccurredAtMs: end, Session: proto.Clone(s).(*userv1.MicSession),
		Lifetime: &userv1.MicLifetimeDelta{
			SeatOccupiedDeltaMs: s.SeatOccupiedMs, MicOnlineDeltaMs: s.MicOnlineMs, SessionCountDelta: 1,
			FirstMicAtMs: start, LastMicAtMs: end,
		},
	}
	// Split at 00:00 UTC.
	for dayStart := start - start%dayMs; dayStart < end; dayStart += dayMs {
		lo, hi := max(start, dayStart), min(end, dayStart+dayMs)
		if hi <= lo {
			continue
		}
		d := &userv1.MicDailyDelta{
			StatDate: dateOf(dayStart), SeatOccupiedDeltaMs: hi - lo,
			SessionCountDelta: 1, RoomCountDelta: 1, FirstMicAtMs: lo, LastMicAtMs: hi,
		}
		if publishes {
			plo := max(pubAt, dayStart)
			if hi > plo {
				d.MicOnlineDeltaMs = hi - plo
			}
		}
		down.Daily = append(down.Daily, d)
	}
	return append(out, down)
}

// InflowGen produces lucky pool inflows over a few rooms and gifts.
type InflowGen struct {
	AppCode string
	Rooms   int
	Gifts   int
	Prefix  string
	rng     *rand.Rand
	seq     int
}

// NewInflowGen returns an inflow generator with a fixed seed.
func NewInflowGen(seed uint64, appCode string, rooms, gifts int) *InflowGen {
	return &InflowGen{AppCode: appCode, Rooms: rooms, Gifts: gifts, Prefix: "src", rng: rand.New(rand.NewPCG(seed, seed+1))}
}

// Next returns n inflows.
func (g *InflowGen) Next(n int) []*activityv1.LuckyPoolInflow {
	out := make([]*activityv1.LuckyPoolInflow, 0, n)
	for range n {
		g.seq++
		heat := int64(10 + g.rng.IntN(10000))
		poolIn := heat * 30 / 100
		platform := poolIn * 2 / 10
		room := poolIn * 3 / 10
		src := g.Prefix + "-" + strconv.Itoa(g.seq)
		out = append(out, &activityv1.LuckyPoolInflow{
			EventId: "LuckyPoolInflow:" + src, AppCode: g.AppCode,
			RoomId: "room-" + strconv.Itoa(g.rng.IntN(g.Rooms)), GiftId: "gift-" + strconv.Itoa(g.rng.IntN(g.Gifts)),
			RuleVersion: "v1", HeatValue: heat, PoolIn: poolIn, PlatformIn: platform, RoomIn: room,
			GiftIn: poolIn - platform - room, OccurredAtMs: 1772323200000 + int64(g.seq), SourceEventId: src,
		})
	}
	return out
}

// LedgerRecords encodes entries as Kafka records keyed by user_id, with the
// design's headers.
func LedgerRecords(topic string, es []*userv1.MicLedgerEntry) []*kgo.Record {
	out := make([]*kgo.Record, len(es))
	for i, e := range es {
		v, err := proto.Marshal(e)
		if err != nil {
			panic(err)
		}
		out[i] = &kgo.Record{Topic: topic, Key: []byte(strconv.FormatInt(e.UserId, 10)), Value: v, Headers: headers(e.EventId, e.EventType, e.AppCode)}
	}
	return out
}

// InflowRecords encodes inflows as Kafka records keyed by room_id.
func InflowRecords(topic string, in []*activityv1.LuckyPoolInflow) []*kgo.Record {
	out := make([]*kgo.Record, len(in))
	for i, e := range in {
		v, err := proto.Marshal(e)
		if err != nil {
			panic(err)
		}
		out[i] = &kgo.Record{Topic: topic, Key: []byte(e.RoomId), Value: v, Headers: headers(e.EventId, "LuckyPoolInflow", e.AppCode)}
	}
	return out
}

func headers(id, typ, app string) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: "event_id", Value: []byte(id)}, {Key: "event_type", Value: []byte(typ)},
		{Key: "app_code", Value: []byte(app)}, {Key: "content-type", Value: []byte("application/x-protobuf")},
	}
}

// Produce writes recs and waits for every ack.
func Produce(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	const chunk = 5000
	for lo := 0; lo < len(recs); lo += chunk {
		if err := cl.ProduceSync(ctx, recs[lo:min(len(recs), lo+chunk)]...).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}
