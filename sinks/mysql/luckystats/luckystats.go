// Package luckystats is the MySQL sink's applier of the lucky events
// (kafka.topics.lucky_events, default hyapp.activity.lucky-events.v1),
// which `roomflow lucky`'s outbox worker publishes at least once: every
// event is recorded once in lucky_event_consumption (a repeat, by
// (app_code, event_id), changes nothing), and each new LuckyGiftDrawn adds
// to the hourly payout facts lucky_payout_stats_hourly per (app_code,
// gift_id, rule_version, UTC hour of drawn_at_ms): draws + 1, hits + hit,
// coins_in + coin_spent, coins_out + reward_coins, and the rule version's
// target_payout_rate_ppm. LuckyGiftDrawn and LuckyDrawRejected also add
// to the room facts lucky_room_stats_hourly per (app_code, room_id, UTC
// hour): draws, hits, coins in and out of the draws, and the rejections
// with the coins they were debited (to refund). The other lucky events
// (LuckyRewardGranted, LuckyRewardPending, LuckyPoolChanged,
// LuckyRiskRejected, LuckyFairnessCommitted, LuckyFairnessRevealed) are
// consumed and recorded, without facts of their own.
//
// Records are decoded by their event_type header (schemas/envelope): an
// unknown type, an undecodable value or a value wider than its column is
// an *mysqlsink.InvalidRecordError (the sink dead-letters it and moves on).
//
// PayoutCollector exports the facts of the last hours as Prometheus gauges
// (payout rate against target per gift and rule version) for the
// dashboards and the LuckyPayoutRateOutOfBand alert.
//
// The topic is keyed by gift_id, but one room receives gifts of many gift
// ids, so partitions share the room rows: SharedRows is true, and the
// engine applies all partitions of a batch in one transaction, writing
// each room hour once per batch instead of from concurrent transactions
// that would wait on, or deadlock over, its row lock.
package luckystats

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// Event types of the lucky events topic (the event_type header).
const (
	TypeGiftDrawn     = "LuckyGiftDrawn"
	TypeRewardGranted = "LuckyRewardGranted"
	TypeRewardPending = "LuckyRewardPending"
	TypePoolChanged   = "LuckyPoolChanged"
	TypeRiskRejected  = "LuckyRiskRejected"
	TypeDrawRejected  = "LuckyDrawRejected"
	// The fairness events (docs/fairness.md), keyed by app_code.
	TypeFairnessCommitted = "LuckyFairnessCommitted"
	TypeFairnessRevealed  = "LuckyFairnessRevealed"
)

// HourMs is one hour in milliseconds: the facts' time bucket.
const HourMs = int64(3_600_000)

// Column widths of the tables the applier writes (schemas/mysql/migrations).
const (
	maxEventID     = 160
	maxGiftID      = 64
	maxRuleVersion = 64
	maxRoomID      = 64
)

// Config configures the applier (New): its topic and default app_code.
type Config = mysqlsink.ApplierConfig

// Event is one decoded lucky event: its key and type, and the message when
// it is one with facts (LuckyGiftDrawn, LuckyDrawRejected).
type Event struct {
	mysqlsink.EventKey
	Type     string
	Drawn    *activityv1.LuckyGiftDrawn    // nil for the other types
	Rejected *activityv1.LuckyDrawRejected // nil for the other types
}

// Applier applies the lucky events topic; register it with
// mysqlsink.Register.
type Applier struct {
	mysqlsink.Input
}

// New returns the applier of cfg.Topic; it fails on a config that does
// not validate.
func New(cfg Config) (*Applier, error) {
	in, err := mysqlsink.NewInput(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{in}, nil
}

// SharedRows is true: the room facts of one room come from every gift's
// partition.
func (a *Applier) SharedRows() bool { return true }

// Decode parses and validates one record (Decode), plain or in the
// Confluent wire format (envelope.Payload decides per record).
func (a *Applier) Decode(rec *kgo.Record) (*Event, error) {
	value, err := envelope.Payload(rec)
	if err != nil {
		return nil, mysqlsink.Invalid("decode", "%v", err)
	}
	return Decode(string(envelope.Header(rec, envelope.HeaderEventType)), value, a.DefaultAppCode())
}

// keyed is what every lucky event message has: its id and app_code.
type keyed interface {
	proto.Message
	GetEventId() string
	GetAppCode() string
}

// Decode parses and validates one lucky event of eventType (the record's
// event_type header); errors are *mysqlsink.InvalidRecordError. An empty
// app_code is defaultAppCode (mysqlsink.CheckEventKey).
func Decode(eventType string, value []byte, defaultAppCode string) (*Event, error) {
	var m keyed
	var drawn *activityv1.LuckyGiftDrawn
	var rejected *activityv1.LuckyDrawRejected
	switch eventType {
	case TypeGiftDrawn:
		drawn = &activityv1.LuckyGiftDrawn{}
		m = drawn
	case TypeRewardGranted:
		m = &activityv1.LuckyRewardGranted{}
	case TypeRewardPending:
		m = &activityv1.LuckyRewardPending{}
	case TypePoolChanged:
		m = &activityv1.LuckyPoolChanged{}
	case TypeRiskRejected:
		m = &activityv1.LuckyRiskRejected{}
	case TypeFairnessCommitted:
		m = &activityv1.LuckyFairnessCommitted{}
	case TypeFairnessRevealed:
		m = &activityv1.LuckyFairnessRevealed{}
	case TypeDrawRejected:
		rejected = &activityv1.LuckyDrawRejected{}
		m = rejected
	default:
		return nil, mysqlsink.Invalid("unknown_event_type", "event_type %q", eventType)
	}
	if err := proto.Unmarshal(value, m); err != nil {
		return nil, mysqlsink.Invalid("decode", "%s: %v", eventType, err)
	}
	k, err := mysqlsink.CheckEventKey(m.GetEventId(), m.GetAppCode(), defaultAppCode)
	if err != nil {
		return nil, err
	}
	if err := mysqlsink.CheckColumns(
		mysqlsink.Column{Name: "app_code", Value: k.AppCode, Max: mysqlsink.MaxAppCode},
		mysqlsink.Column{Name: "event_id", Value: k.EventID, Max: maxEventID},
	); err != nil {
		return nil, err
	}
	if drawn != nil {
		drawn.AppCode = k.AppCode
		if err := checkDrawn(drawn); err != nil {
			return nil, err
		}
	}
	if rejected != nil {
		rejected.AppCode = k.AppCode
		if err := checkRejected(rejected); err != nil {
			return nil, err
		}
	}
	return &Event{EventKey: k, Type: eventType, Drawn: drawn, Rejected: rejected}, nil
}

// checkDrawn validates what the hourly facts take from a LuckyGiftDrawn.
func checkDrawn(d *activityv1.LuckyGiftDrawn) error {
	if d.GiftId == "" || d.RuleVersion == "" {
		return mysqlsink.Invalid("missing_gift", "event_id %s: gift_id and rule_version are required", d.EventId)
	}
	if d.CoinSpent < 0 || d.RewardCoins < 0 || d.TargetPayoutRatePpm < 0 {
		return mysqlsink.Invalid("negative_amount", "event_id %s", d.EventId)
	}
	if err := mysqlsink.CheckAmounts(d.EventId, mysqlsink.Amount{Name: "coin_spent", Value: d.CoinSpent, Max: envelope.MaxGiftCoins}); err != nil {
		return err
	}
	if d.DrawnAtMs <= 0 {
		return mysqlsink.Invalid("bad_drawn_at", "event_id %s: drawn_at_ms %d", d.EventId, d.DrawnAtMs)
	}
	if err := mysqlsink.CheckColumns(
		mysqlsink.Column{Name: "gift_id", Value: d.GiftId, Max: maxGiftID},
		mysqlsink.Column{Name: "rule_version", Value: d.RuleVersion, Max: maxRuleVersion},
	); err != nil {
		return err
	}
	return checkRoom(d.EventId, d.RoomId)
}

// checkRejected validates what the room facts take from a
// LuckyDrawRejected.
func checkRejected(r *activityv1.LuckyDrawRejected) error {
	if r.CoinSpent < 0 {
		return mysqlsink.Invalid("negative_amount", "event_id %s", r.EventId)
	}
	if err := mysqlsink.CheckAmounts(r.EventId, mysqlsink.Amount{Name: "coin_spent", Value: r.CoinSpent, Max: envelope.MaxGiftCoins}); err != nil {
		return err
	}
	if r.CreatedAtMs <= 0 {
		return mysqlsink.Invalid("bad_created_at", "event_id %s: created_at_ms %d", r.EventId, r.CreatedAtMs)
	}
	return checkRoom(r.EventId, r.RoomId)
}

// checkRoom: the room facts need the room, within its column.
func checkRoom(eventID, roomID string) error {
	if roomID == "" {
		return mysqlsink.Invalid("missing_room", "event_id %s: room_id is required", eventID)
	}
	return mysqlsink.CheckColumns(mysqlsink.Column{Name: "room_id", Value: roomID, Max: maxRoomID})
}

// Consumption is lucky_event_consumption.
var Consumption = mysqlsink.Consumption[*Event]{
	Table: "lucky_event_consumption",
	Key:   func(e *Event) mysqlsink.EventKey { return e.EventKey },
	Head:  "INSERT INTO lucky_event_consumption (app_code, event_id, event_type, created_at_ms) VALUES ",
	Row:   "(?,?,?,?)",
	Args: func(a []any, e *Event, nowMs int64) []any {
		return append(a, e.AppCode, e.EventID, e.Type, nowMs)
	},
}

const (
	hourlyHead = "INSERT INTO lucky_payout_stats_hourly (app_code, gift_id, rule_version, hour_start_ms, draws, hits, coins_in, coins_out, target_payout_rate_ppm, updated_at_ms) VALUES "
	hourlyRow  = "(?,?,?,?,?,?,?,?,?,?)"
	// The target is the rule version's (immutable), so the newest is as
	// good as any.
	hourlyTail = " ON DUPLICATE KEY UPDATE draws = draws + VALUES(draws), hits = hits + VALUES(hits), coins_in = coins_in + VALUES(coins_in), coins_out = coins_out + VALUES(coins_out), target_payout_rate_ppm = VALUES(target_payout_rate_ppm), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
)

const (
	roomHead = "INSERT INTO lucky_room_stats_hourly (app_code, room_id, hour_start_ms, draws, hits, coins_in, coins_out, rejections, rejected_coins, updated_at_ms) VALUES "
	roomRow  = "(?,?,?,?,?,?,?,?,?,?)"
	roomTail = " ON DUPLICATE KEY UPDATE draws = draws + VALUES(draws), hits = hits + VALUES(hits), coins_in = coins_in + VALUES(coins_in), coins_out = coins_out + VALUES(coins_out), rejections = rejections + VALUES(rejections), rejected_coins = rejected_coins + VALUES(rejected_coins), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
)

// Apply records the events in lucky_event_consumption and adds the new
// draws to lucky_payout_stats_hourly, the new draws and rejections to
// lucky_room_stats_hourly.
func (a *Applier) Apply(ctx context.Context, tx *mysqlsink.Tx, events []*Event) (mysqlsink.Applied, error) {
	fresh, consumed, err := Consumption.Consume(ctx, tx, events)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	rows, err := BuildHourly(fresh)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	if err := tx.ExecRows(ctx, hourlyHead, hourlyRow, hourlyTail, len(rows), func(i int, a []any) []any {
		r := rows[i]
		return append(a, r.AppCode, r.GiftID, r.RuleVersion, r.HourStartMs, r.Draws, r.Hits, r.CoinsIn, r.CoinsOut, r.TargetPayoutRatePPM, r.UpdatedAtMs)
	}); err != nil {
		return mysqlsink.Applied{}, fmt.Errorf("upsert lucky_payout_stats_hourly: %w", err)
	}
	rooms, err := BuildRoomHourly(fresh)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	if err := tx.ExecRows(ctx, roomHead, roomRow, roomTail, len(rooms), func(i int, a []any) []any {
		r := rooms[i]
		return append(a, r.AppCode, r.RoomID, r.HourStartMs, r.Draws, r.Hits, r.CoinsIn, r.CoinsOut, r.Rejections, r.RejectedCoins, r.UpdatedAtMs)
	}); err != nil {
		return mysqlsink.Applied{}, fmt.Errorf("upsert lucky_room_stats_hourly: %w", err)
	}
	return mysqlsink.Applied{Consumed: consumed, FactRows: map[string]int{"lucky_payout_stats_hourly": len(rows), "lucky_room_stats_hourly": len(rooms)}}, nil
}

// HourlyKey is the primary key of lucky_payout_stats_hourly.
type HourlyKey struct {
	AppCode     string
	GiftID      string
	RuleVersion string
	HourStartMs int64 // UTC hour of drawn_at_ms
}

// HourlyRow is the summed draws of one lucky_payout_stats_hourly row in a
// batch.
type HourlyRow struct {
	HourlyKey
	Draws, Hits         int64
	CoinsIn, CoinsOut   int64
	TargetPayoutRatePPM int64 // of the newest draw in the batch
	UpdatedAtMs         int64 // newest drawn_at_ms
}

// BuildHourly sums the LuckyGiftDrawn events among events (the others add
// nothing) per lucky_payout_stats_hourly row, sorted by primary key. A sum
// past int64 is a *mysqlsink.OverflowError.
func BuildHourly(events []*Event) ([]HourlyRow, error) {
	rows := map[HourlyKey]*HourlyRow{}
	var sums mysqlsink.Sums
	for _, e := range events {
		d := e.Drawn
		if d == nil {
			continue
		}
		k := HourlyKey{e.AppCode, d.GiftId, d.RuleVersion, d.DrawnAtMs - d.DrawnAtMs%HourMs}
		r := rows[k]
		if r == nil {
			r = &HourlyRow{HourlyKey: k}
			rows[k] = r
		}
		r.Draws++
		if d.Hit {
			r.Hits++
		}
		sums.Add("lucky_payout_stats_hourly.coins_in", &r.CoinsIn, d.CoinSpent)
		sums.Add("lucky_payout_stats_hourly.coins_out", &r.CoinsOut, d.RewardCoins)
		if d.DrawnAtMs >= r.UpdatedAtMs {
			r.UpdatedAtMs, r.TargetPayoutRatePPM = d.DrawnAtMs, d.TargetPayoutRatePpm
		}
	}
	if err := sums.Err(); err != nil {
		return nil, err
	}
	out := make([]HourlyRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b HourlyRow) int {
		return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.GiftID, b.GiftID), cmp.Compare(a.RuleVersion, b.RuleVersion), cmp.Compare(a.HourStartMs, b.HourStartMs))
	})
	return out, nil
}

// RoomHourlyKey is the primary key of lucky_room_stats_hourly.
type RoomHourlyKey struct {
	AppCode     string
	RoomID      string
	HourStartMs int64 // UTC hour of drawn_at_ms or of the rejection
}

// RoomHourlyRow is the summed draws and rejections of one room hour in a
// batch.
type RoomHourlyRow struct {
	RoomHourlyKey
	Draws, Hits       int64
	CoinsIn, CoinsOut int64 // of the draws
	Rejections        int64
	RejectedCoins     int64 // debited for the rejections: to refund
	UpdatedAtMs       int64 // newest event time
}

// BuildRoomHourly sums the LuckyGiftDrawn and LuckyDrawRejected events
// among events per lucky_room_stats_hourly row, sorted by primary key. A
// sum past int64 is a *mysqlsink.OverflowError.
func BuildRoomHourly(events []*Event) ([]RoomHourlyRow, error) {
	rows := map[RoomHourlyKey]*RoomHourlyRow{}
	var sums mysqlsink.Sums
	row := func(app, room string, atMs int64) *RoomHourlyRow {
		k := RoomHourlyKey{app, room, atMs - atMs%HourMs}
		r := rows[k]
		if r == nil {
			r = &RoomHourlyRow{RoomHourlyKey: k}
			rows[k] = r
		}
		r.UpdatedAtMs = max(r.UpdatedAtMs, atMs)
		return r
	}
	for _, e := range events {
		switch {
		case e.Drawn != nil:
			d := e.Drawn
			r := row(e.AppCode, d.RoomId, d.DrawnAtMs)
			r.Draws++
			if d.Hit {
				r.Hits++
			}
			sums.Add("lucky_room_stats_hourly.coins_in", &r.CoinsIn, d.CoinSpent)
			sums.Add("lucky_room_stats_hourly.coins_out", &r.CoinsOut, d.RewardCoins)
		case e.Rejected != nil:
			j := e.Rejected
			r := row(e.AppCode, j.RoomId, j.CreatedAtMs)
			r.Rejections++
			sums.Add("lucky_room_stats_hourly.rejected_coins", &r.RejectedCoins, j.CoinSpent)
		}
	}
	if err := sums.Err(); err != nil {
		return nil, err
	}
	out := make([]RoomHourlyRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b RoomHourlyRow) int {
		return cmp.Or(cmp.Compare(a.AppCode, b.AppCode), cmp.Compare(a.RoomID, b.RoomID), cmp.Compare(a.HourStartMs, b.HourStartMs))
	})
	return out, nil
}
