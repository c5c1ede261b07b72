package loadgen

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/producers/relay"
)

// SeedRule writes the scenario's lucky rule (and a tier table summing to
// 1,000,000 ppm, whose analytic payout rate, 9% × 1 + 1% × 5 = 140,000
// ppm, is its target) so the room processor can resolve it. Idempotent.
func SeedRule(ctx context.Context, db *sql.DB, r LuckyRule) error {
	now := time.Now().UnixMilli()
	// One transaction: a version is never visible without its tiers.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("loadgen: seed rule: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT IGNORE INTO lucky_gift_rules
		(gift_id, rule_version, gift_price, pool_rate_ppm, target_payout_rate_ppm, max_single_payout,
		 status, effective_at_ms, created_at_ms, updated_at_ms, platform_weight_ppm, room_weight_ppm)
		VALUES (?, ?, 100, ?, 140000, 100000, 'active', ?, ?, ?, ?, ?)`,
		r.GiftID, r.RuleVersion, r.PoolRatePPM, now, now, now, r.PlatformWeightPPM, r.RoomWeightPPM); err != nil {
		return fmt.Errorf("loadgen: seed rule: %w", err)
	}
	_, err = tx.ExecContext(ctx, `INSERT IGNORE INTO lucky_reward_tiers
		(gift_id, rule_version, tier_id, reward_type, reward_value, probability_ppm, min_pool_balance, enabled) VALUES
		(?, ?, 'none', 'none', 0, 900000, 0, TRUE), (?, ?, 'small_1x', 'multiplier', 1, 90000, 0, TRUE),
		(?, ?, 'medium_5x', 'multiplier', 5, 10000, 1000, TRUE)`,
		r.GiftID, r.RuleVersion, r.GiftID, r.RuleVersion, r.GiftID, r.RuleVersion)
	if err != nil {
		return fmt.Errorf("loadgen: seed tiers: %w", err)
	}
	return tx.Commit()
}

// WriteOutbox inserts events into room_outbox in order, batch rows per
// transaction (multi-row INSERT, as a busy room service commits), at most
// rate events per second (0 = as fast as possible). It stops at ctx's end
// and returns how many rows it wrote.
func WriteOutbox(ctx context.Context, db *sql.DB, events []Event, batch int, rate float64) (int, error) {
	if batch <= 0 {
		batch = 500
	}
	start := time.Now()
	written := 0
	for written < len(events) {
		n := min(batch, len(events)-written)
		if rate > 0 {
			due := start.Add(time.Duration(float64(written+n) / rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return written, ctx.Err()
				case <-time.After(d):
				}
			}
		}
		if err := insertRows(ctx, db, events[written:written+n]); err != nil {
			return written, err
		}
		written += n
	}
	return written, nil
}

// WriteOutboxLive inserts events (in occurred_at order, as Generate returns
// them) into room_outbox as the room service would in real time: each one
// once the wall clock reaches its occurred_at, those due together in one
// transaction of up to batch rows. It is the writer of a Timers scenario,
// whose events lie around now. It stops at ctx's end and returns how many
// rows it wrote and how late the latest write was behind its event time.
func WriteOutboxLive(ctx context.Context, db *sql.DB, events []Event, batch int) (written int, maxLate time.Duration, err error) {
	return WriteOutboxLiveWith(ctx, db, events, batch, nil)
}

// BeforeWrite is called with the rows of one transaction right before
// they are inserted, and may change them in place: room-service draws a
// lucky gift (and names its draw_id) before it commits the gift row. Its
// time counts in the writer's lateness. An error stops the writer.
type BeforeWrite func(ctx context.Context, evs []Event) error

// WriteOutboxLiveWith is WriteOutboxLive calling before (nil: none) with
// each transaction's rows before it inserts them.
func WriteOutboxLiveWith(ctx context.Context, db *sql.DB, events []Event, batch int, before BeforeWrite) (written int, maxLate time.Duration, err error) {
	if batch <= 0 {
		batch = 500
	}
	for written < len(events) {
		now := time.Now()
		if d := time.UnixMilli(events[written].Envelope.OccurredAtMs).Sub(now); d > 0 {
			select {
			case <-ctx.Done():
				return written, maxLate, ctx.Err()
			case <-time.After(d):
			}
			continue
		}
		n := 0
		for written+n < len(events) && n < batch && events[written+n].Envelope.OccurredAtMs <= now.UnixMilli() {
			n++
		}
		if before != nil {
			if err := before(ctx, events[written:written+n]); err != nil {
				return written, maxLate, err
			}
		}
		if err := insertRows(ctx, db, events[written:written+n]); err != nil {
			return written, maxLate, err
		}
		maxLate = max(maxLate, time.Since(time.UnixMilli(events[written].Envelope.OccurredAtMs)))
		written += n
	}
	return written, maxLate, nil
}

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func insertRows(ctx context.Context, db execer, evs []Event) error {
	var b strings.Builder
	b.WriteString(`INSERT INTO room_outbox (app_code, event_id, event_type, room_id, room_version, payload,
		occurred_at_ms, created_at_ms, updated_at_ms) VALUES `)
	args := make([]any, 0, len(evs)*9)
	now := time.Now().UnixMilli()
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?)")
		env := e.Envelope
		args = append(args, env.AppCode, env.EventId, env.EventType, env.RoomId, env.RoomVersion, e.Payload,
			env.OccurredAtMs, now, now)
	}
	if _, err := db.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("loadgen: insert room_outbox: %w", err)
	}
	return nil
}

// Records turns events into the records the relay would produce (built by
// the relay's own Router, unrouted: every event type on topic), for feeding
// processors straight from Kafka.
func Records(topic string, events []Event) []*kgo.Record {
	rt := relay.Router{Default: topic}
	out := make([]*kgo.Record, len(events))
	for i, e := range events {
		env := e.Envelope
		out[i], _ = rt.Record(&relay.Row{AppCode: env.AppCode, EventID: env.EventId, EventType: env.EventType,
			RoomID: env.RoomId, RoomVersion: env.RoomVersion, Payload: e.Payload, OccurredAtMs: env.OccurredAtMs}, "")
	}
	return out
}
