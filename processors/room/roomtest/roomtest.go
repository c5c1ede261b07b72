// Package roomtest generates room-event workloads with their expected
// results, for the room processor's tests and benchmarks.
package roomtest

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// AppCode is the app_code of generated events.
const AppCode = "hyapp"

// Envelope serializes an EventEnvelope carrying payload.
func Envelope(eventID, eventType, roomID string, roomVersion, occurredAtMs int64, payload proto.Message) []byte {
	var p []byte
	if payload != nil {
		var err error
		if p, err = proto.Marshal(payload); err != nil {
			panic(err)
		}
	}
	b, err := proto.Marshal(&roomv1.EventEnvelope{
		EventId: eventID, EventType: eventType, AppCode: AppCode, RoomId: roomID,
		RoomVersion: roomVersion, OccurredAtMs: occurredAtMs, Payload: p,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// MicEvent is one generated RoomMicChanged.
type MicEvent struct {
	EventID   string
	UserID    int64
	RoomID    string
	SessionID string
	Index     int // position in its session
	Version   int64
	At        int64 // occurred_at_ms
	Value     []byte
}

// RelayHeaders are the headers the relay puts on room-topic records.
func RelayHeaders(eventID, eventType string, roomVersion, occurredAtMs int64) []kgo.RecordHeader {
	h := envelope.AppendHeaders(nil, []byte(eventID), []byte(eventType), []byte(AppCode))
	return append(h,
		kgo.RecordHeader{Key: envelope.HeaderRoomVersion, Value: strconv.AppendInt(nil, roomVersion, 10)},
		kgo.RecordHeader{Key: envelope.HeaderOccurredAtMs, Value: strconv.AppendInt(nil, occurredAtMs, 10)},
	)
}

// MicWorkload is a stream of RoomMicChanged events over rooms and users:
// sessions (up, publish_confirmed, change*, down) of users who are on at
// most one seat at a time, interleaved across rooms.
type MicWorkload struct {
	Events   []MicEvent
	Sessions map[string][]string // session id -> event ids in order
}

// Mic generates n mic events over rooms rooms and users users.
func Mic(n, rooms, users int, seed uint64) *MicWorkload {
	rng := rand.New(rand.NewPCG(seed, 0x3c))
	type session struct {
		id    string
		user  int64
		room  string
		steps int
		seat  int32
	}
	w := &MicWorkload{Sessions: map[string][]string{}}
	onMic := map[int64]bool{}
	versions := map[string]int64{}
	var active []*session
	maxActive := max(users/2, 1)
	seq := 0
	ts := int64(1_767_225_600_000) // 2026-01-01T00:00:00Z
	for len(w.Events) < n {
		ts += int64(rng.IntN(50))
		var s *session
		if len(active) < maxActive && (len(active) == 0 || rng.IntN(3) == 0) {
			u := int64(1 + rng.IntN(users))
			if onMic[u] {
				continue
			}
			onMic[u] = true
			seq++
			s = &session{id: fmt.Sprintf("ms-%d", seq), user: u, room: "room-" + strconv.Itoa(1+rng.IntN(rooms)), seat: int32(1 + rng.IntN(8))}
			active = append(active, s)
		} else {
			s = active[rng.IntN(len(active))]
		}
		action, state := "up", "pending_publish"
		switch {
		case s.steps == 0:
		case s.steps == 1:
			action, state = "publish_confirmed", "publishing"
		case rng.IntN(3) == 0 && s.steps < 6:
			action, state = "change", "publishing"
		default:
			action, state = "down", "closed"
		}
		versions[s.room]++
		id := fmt.Sprintf("evt-mic-%d", len(w.Events))
		mc := &roomv1.RoomMicChanged{UserId: s.user, SeatNo: s.seat, Action: action, MicSessionId: s.id, PublishState: state}
		if action == "down" {
			mc.Reason = "leave"
		}
		w.Events = append(w.Events, MicEvent{
			EventID: id, UserID: s.user, RoomID: s.room, SessionID: s.id, Index: s.steps, Version: versions[s.room], At: ts,
			Value: Envelope(id, "RoomMicChanged", s.room, versions[s.room], ts, mc),
		})
		w.Sessions[s.id] = append(w.Sessions[s.id], id)
		s.steps++
		if action == "down" {
			delete(onMic, s.user)
			for i, a := range active {
				if a == s {
					active = append(active[:i], active[i+1:]...)
					break
				}
			}
		}
	}
	return w
}

// Records returns the events as the relay writes them to the room topic:
// keyed by room_id, with the relay's headers.
func (w *MicWorkload) Records(topic string) []*kgo.Record {
	out := make([]*kgo.Record, len(w.Events))
	for i, e := range w.Events {
		out[i] = &kgo.Record{Topic: topic, Key: []byte(e.RoomID), Value: e.Value,
			Headers: RelayHeaders(e.EventID, "RoomMicChanged", e.Version, e.At)}
	}
	return out
}

// Gift returns a RoomGiftSent envelope.
func Gift(eventID, roomID string, version int64, g *roomv1.RoomGiftSent) []byte {
	return Envelope(eventID, "RoomGiftSent", roomID, version, 1_767_225_600_000+version, g)
}

// Rule is a valid lucky rule version with the given ppm values and a
// two-tier table, its target its table's analytic payout rate (1% × 1).
func Rule(giftID, version string, poolPPM, platformPPM, roomPPM int64) *lucky.Rule {
	return &lucky.Rule{GiftID: giftID, RuleVersion: version, GiftPrice: 100, PoolRatePPM: poolPPM,
		TargetPayoutRatePPM: 10000, PlatformWeightPPM: platformPPM, RoomWeightPPM: roomPPM, MaxSinglePayout: 10000, Status: "active",
		Tiers: []lucky.Tier{
			{TierID: "none", RewardType: "none", ProbabilityPPM: 990000, Enabled: true},
			{TierID: "small_1x", RewardType: "multiplier", RewardValue: 1, ProbabilityPPM: 10000, Enabled: true},
		}}
}

// InsertRule writes r and its tiers into lucky_gift_rules and
// lucky_reward_tiers.
func InsertRule(t testing.TB, db *sql.DB, r *lucky.Rule) {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO lucky_gift_rules (gift_id, rule_version, gift_price, pool_rate_ppm,
	target_payout_rate_ppm, platform_weight_ppm, room_weight_ppm, max_single_payout, status)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.GiftID, r.RuleVersion, r.GiftPrice, r.PoolRatePPM,
		r.TargetPayoutRatePPM, r.PlatformWeightPPM, r.RoomWeightPPM, r.MaxSinglePayout, r.Status); err != nil {
		t.Fatal(err)
	}
	for _, tr := range r.Tiers {
		if _, err := db.Exec(`INSERT INTO lucky_reward_tiers (gift_id, rule_version, tier_id, reward_type,
		reward_value, probability_ppm, min_pool_balance, enabled) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			r.GiftID, r.RuleVersion, tr.TierID, tr.RewardType, tr.RewardValue, tr.ProbabilityPPM, tr.MinPoolBalance, tr.Enabled); err != nil {
			t.Fatal(err)
		}
	}
}
