package loadgen

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

func micEnv(id, room string, at int64, m *roomv1.RoomMicChanged) *roomv1.EventEnvelope {
	b, _ := proto.Marshal(m)
	return &roomv1.EventEnvelope{EventId: id, EventType: "RoomMicChanged", AppCode: "a", RoomId: room, OccurredAtMs: at, Payload: b}
}

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

// The design's example: 23:30 to 01:10 gives 30 min to the first day and 70
// to the second, for seat and online time alike.
// values are the wire bytes of envs, as BuildOracle reads them.
func values(envs ...*roomv1.EventEnvelope) [][]byte {
	out := make([][]byte, len(envs))
	for i, e := range envs {
		out[i], _ = proto.Marshal(e)
	}
	return out
}

func TestOracleCrossMidnight(t *testing.T) {
	up, pub, down := ms("2026-11-28T23:30:00Z"), ms("2026-11-28T23:30:00Z"), ms("2026-11-29T01:10:00Z")
	o := BuildOracle(values(
		micEnv("e1", "r1", up, &roomv1.RoomMicChanged{UserId: 7, Action: "up", MicSessionId: "s1"}),
		micEnv("e2", "r1", pub, &roomv1.RoomMicChanged{UserId: 7, Action: "publish_confirmed", MicSessionId: "s1"}),
		micEnv("e3", "r1", down, &roomv1.RoomMicChanged{UserId: 7, Action: "down", MicSessionId: "s1", Reason: "leave"}),
		micEnv("e3", "r1", down, &roomv1.RoomMicChanged{UserId: 7, Action: "down", MicSessionId: "s1", Reason: "leave"}), // duplicate
	), nil, "a")
	d1, d2 := o.Daily[UserDay{7, "2026-11-28"}], o.Daily[UserDay{7, "2026-11-29"}]
	if d1 == nil || d2 == nil || d1.SeatOccupiedMs != 30*60_000 || d2.SeatOccupiedMs != 70*60_000 ||
		d1.MicOnlineMs != 30*60_000 || d2.MicOnlineMs != 70*60_000 {
		t.Fatalf("split: %+v %+v", d1, d2)
	}
	if d1.SessionCount != 1 || d2.SessionCount != 1 || d1.RoomCount != 1 || d2.RoomCount != 1 {
		t.Fatalf("counts: %+v %+v", d1, d2)
	}
	if d1.FirstMicAtMs != up || d1.LastMicAtMs != ms("2026-11-29T00:00:00Z")-1 || d2.FirstMicAtMs != ms("2026-11-29T00:00:00Z") || d2.LastMicAtMs != down {
		t.Fatalf("clamped first/last: %+v %+v", d1, d2)
	}
	lt := o.Lifetime[7]
	if lt.SeatOccupiedMs != 100*60_000 || lt.SessionCount != 1 || lt.FirstMicAtMs != up || lt.LastMicAtMs != down {
		t.Fatalf("lifetime: %+v", lt)
	}
	if o.Events != 3 {
		t.Fatalf("duplicates must count once, got %d events", o.Events)
	}
}

func TestOracleNoPublishOpenAndIncomplete(t *testing.T) {
	o := BuildOracle(values(
		micEnv("a1", "r", 1000, &roomv1.RoomMicChanged{UserId: 1, Action: "up", MicSessionId: "s"}),
		micEnv("a2", "r", 61000, &roomv1.RoomMicChanged{UserId: 1, Action: "down", MicSessionId: "s", RtcStoppedAtMs: 31000}),
		micEnv("b1", "r", 1000, &roomv1.RoomMicChanged{UserId: 2, Action: "up", MicSessionId: "open"}),
		micEnv("c1", "r", 1000, &roomv1.RoomMicChanged{UserId: 3, Action: "up", MicSessionId: ""}),
	), nil, "a")
	lt := o.Lifetime[1]
	if lt.SeatOccupiedMs != 30000 || lt.MicOnlineMs != 0 {
		t.Fatalf("rtc_stopped_at_ms is the end; never published is 0 online: %+v", lt)
	}
	if _, ok := o.OpenSessions["open"]; !ok || o.Lifetime[2] != nil || o.Lifetime[3] != nil {
		t.Fatalf("open/incomplete sessions: %+v", o.OpenSessions)
	}
}

// An event without app_code is the configured app's, like everywhere in the
// pipeline; another app's events are delivered (Events, IMMessages) but
// yield none of the configured app's facts.
func TestOracleAppCode(t *testing.T) {
	noApp := func(e *roomv1.EventEnvelope) *roomv1.EventEnvelope { e.AppCode = ""; return e }
	other := func(e *roomv1.EventEnvelope) *roomv1.EventEnvelope { e.AppCode = "b"; return e }
	o := BuildOracle(values(
		micEnv("a1", "r", 1000, &roomv1.RoomMicChanged{UserId: 1, Action: "up", MicSessionId: "s"}),
		noApp(micEnv("a2", "r", 61000, &roomv1.RoomMicChanged{UserId: 1, Action: "down", MicSessionId: "s"})),
		other(micEnv("b1", "r", 1000, &roomv1.RoomMicChanged{UserId: 2, Action: "up", MicSessionId: "t"})),
		other(micEnv("b2", "r", 2000, &roomv1.RoomMicChanged{UserId: 2, Action: "down", MicSessionId: "t"})),
	), nil, "a")
	if lt := o.Lifetime[1]; lt == nil || lt.SeatOccupiedMs != 60000 || len(o.Sessions) != 1 || o.Lifetime[2] != nil {
		t.Fatalf("facts of app a: %+v, sessions %+v", o.Lifetime, o.Sessions)
	}
	if o.Events != 4 || o.IMMessages != 4 {
		t.Fatalf("every app's events are delivered: %d events, %d IM messages", o.Events, o.IMMessages)
	}
}

func TestOraclePools(t *testing.T) {
	rule := LuckyRule{GiftID: "g", RuleVersion: "v1", PoolRatePPM: 50_000, PlatformWeightPPM: 333_333, RoomWeightPPM: 333_333}
	gift := func(id string, heat int64, version string) *roomv1.EventEnvelope {
		b, _ := proto.Marshal(&roomv1.RoomGiftSent{GiftId: "g", HeatValue: heat, Lucky: true, LuckyRuleVersion: version})
		return &roomv1.EventEnvelope{EventId: id, EventType: "RoomGiftSent", RoomId: "r", Payload: b}
	}
	o := BuildOracle(values(gift("1", 1999, "v1"), gift("2", 1000, "v9"), gift("3", -5, "v1")),
		map[RuleKey]LuckyRule{{"g", "v1"}: rule}, "hyapp")
	// pool_in = floor(1999*0.05) = 99; platform = room = floor(99*333333/1e6) = 32; gift = 35.
	if o.Pools[Pool{"platform", "global"}] != 32 || o.Pools[Pool{"room", "r"}] != 32 || o.Pools[Pool{"gift", "g"}] != 35 {
		t.Fatalf("pools: %v", o.Pools)
	}
	if o.LuckyGifts != 1 || o.Rejected != 2 {
		t.Fatalf("lucky %d rejected %d", o.LuckyGifts, o.Rejected)
	}
}

func TestScenarioShape(t *testing.T) {
	sc := DefaultScenario()
	sc.Sessions, sc.Gifts = 500, 500
	evs, o := sc.Generate()
	evs2, _ := sc.Generate()
	if len(evs) != len(evs2) || !bytes.Equal(evs[len(evs)/2].Payload, evs2[len(evs)/2].Payload) {
		t.Fatal("a scenario must be deterministic for its seed")
	}
	lastVersion := map[string]int64{}
	ids := map[string]bool{}
	var prevAt int64
	for _, e := range evs {
		env := e.Envelope
		if env.RoomVersion != lastVersion[env.RoomId]+1 {
			t.Fatalf("room %s: version %d after %d", env.RoomId, env.RoomVersion, lastVersion[env.RoomId])
		}
		lastVersion[env.RoomId] = env.RoomVersion
		if env.OccurredAtMs < prevAt || ids[env.EventId] {
			t.Fatalf("events out of time order or duplicated at %s", env.EventId)
		}
		prevAt = env.OccurredAtMs
		ids[env.EventId] = true
	}
	if len(o.Sessions) != 500 || len(o.OpenSessions) != 0 || o.LuckyGifts == 0 || len(o.Daily) <= len(o.Lifetime) {
		t.Fatalf("oracle: %d sessions, %d open, %d lucky, %d daily rows, %d users",
			len(o.Sessions), len(o.OpenSessions), o.LuckyGifts, len(o.Daily), len(o.Lifetime))
	}
	var seat, daySeat int64
	for _, l := range o.Lifetime {
		seat += l.SeatOccupiedMs
		if l.MicOnlineMs > l.SeatOccupiedMs {
			t.Fatal("mic online exceeds seat time")
		}
	}
	for _, d := range o.Daily {
		daySeat += d.SeatOccupiedMs
	}
	if seat != daySeat {
		t.Fatalf("daily seat %d != lifetime seat %d", daySeat, seat)
	}
}

func TestWriteOutbox(t *testing.T) {
	m := testenv.NewMySQL(t)
	sc := DefaultScenario()
	sc.Sessions, sc.Gifts = 100, 100
	evs, _ := sc.Generate()
	n, err := WriteOutbox(context.Background(), m.DB, evs, 37, 0)
	if err != nil || n != len(evs) {
		t.Fatalf("wrote %d of %d: %v", n, len(evs), err)
	}
	var count int
	var payload []byte
	m.DB.QueryRow("SELECT COUNT(*) FROM room_outbox WHERE status = 'pending'").Scan(&count)
	m.DB.QueryRow("SELECT payload FROM room_outbox WHERE event_id = ?", evs[10].Envelope.EventId).Scan(&payload)
	if count != len(evs) || !bytes.Equal(payload, evs[10].Payload) {
		t.Fatalf("rows %d, payload equal %v", count, bytes.Equal(payload, evs[10].Payload))
	}
	if err := SeedRule(context.Background(), m.DB, sc.Rule); err != nil {
		t.Fatal(err)
	}
	if err := SeedRule(context.Background(), m.DB, sc.Rule); err != nil {
		t.Fatal("SeedRule must be idempotent: ", err)
	}
	// Compare on an empty fact store reports every expected row as missing.
	_, o := sc.Generate()
	rep, err := Compare(context.Background(), m.DB, sc.AppCode, o)
	if err != nil || rep.OK() || len(rep.Diffs) != len(o.Lifetime)+len(o.Daily)+len(o.Pools) {
		t.Fatalf("compare on empty tables: %d diffs for %d facts (%v)", len(rep.Diffs), len(o.Lifetime)+len(o.Daily)+len(o.Pools), err)
	}
}

// Records are the relay's records for the events: key room_id, value the
// stored bytes, timestamp occurred_at_ms, the relay's headers.
func TestRecordsAreTheRelays(t *testing.T) {
	sc := DefaultScenario()
	events, _ := sc.Generate()
	events = events[:50]
	recs := Records("room-events", events)
	if len(recs) != len(events) {
		t.Fatalf("%d records for %d events", len(recs), len(events))
	}
	for i, r := range recs {
		env := events[i].Envelope
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		if r.Topic != "room-events" || string(r.Key) != env.RoomId || !bytes.Equal(r.Value, events[i].Payload) ||
			r.Timestamp.UnixMilli() != env.OccurredAtMs || h["event_id"] != env.EventId || h["event_type"] != env.EventType ||
			h["app_code"] != env.AppCode || h["room_version"] != strconv.FormatInt(env.RoomVersion, 10) ||
			h["occurred_at_ms"] != strconv.FormatInt(env.OccurredAtMs, 10) || h["content-type"] != "application/x-protobuf" {
			t.Fatalf("record %d: topic %s key %s headers %v, want event %v", i, r.Topic, r.Key, h, env)
		}
	}
}
