package luckyoutbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/hyapp/roomflow/schemas/activityv1"
)

// EventMessageTypes are the lucky event messages the outbox publishes (the
// messages of lucky_events.proto): the event_type values of
// roomflow_lucky_outbox_oldest_seconds, each present at 0 from the start.
func EventMessageTypes() []string {
	ms := activityv1.File_hyapp_activity_v1_lucky_events_proto.Messages()
	out := make([]string, ms.Len())
	for i := range out {
		out[i] = string(ms.Get(i).Name())
	}
	return out
}

// oldestWork is what waits longest: the created_at_ms of the oldest draw
// whose reward is still pending (0: none), and per message type of the
// oldest lucky event not yet published.
type oldestWork struct {
	rewardMs int64
	eventsMs map[string]int64
}

// oldestUnfinished reads oldestWork. The reads go by an index: the
// rewards by (reward_status, created_at_ms), the events by status among
// the rows not done, which is the backlog; a lucky_draw_events row counts
// for each message type it carries (its message_types).
func oldestUnfinished(ctx context.Context, db *sql.DB) (oldestWork, error) {
	w := oldestWork{eventsMs: map[string]int64{}}
	var reward sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MIN(created_at_ms) FROM lucky_draw_records WHERE reward_status = 'pending'`).Scan(&reward); err != nil {
		return w, fmt.Errorf("luckyoutbox: oldest pending reward: %w", err)
	}
	w.rewardMs = reward.Int64
	rows, err := db.QueryContext(ctx, `SELECT message_type, MIN(created_at_ms) FROM lucky_outbox
		WHERE status IN ('pending', 'processing', 'failed') AND event_type = 'activity_event' GROUP BY message_type
		UNION ALL SELECT message_types, MIN(created_at_ms) FROM lucky_draw_events
		WHERE status IN ('pending', 'processing', 'failed') GROUP BY message_types`)
	if err != nil {
		return w, fmt.Errorf("luckyoutbox: oldest unpublished event: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		var ms int64
		if err := rows.Scan(&t, &ms); err != nil {
			return w, fmt.Errorf("luckyoutbox: oldest unpublished event: %w", err)
		}
		for _, m := range strings.Split(t, ",") {
			if old, ok := w.eventsMs[m]; !ok || ms < old {
				w.eventsMs[m] = ms
			}
		}
	}
	return w, rows.Err()
}

// ageSeconds is how long ago atMs was at nowMs, 0 for none (atMs 0) or a
// time ahead of the clock.
func ageSeconds(nowMs, atMs int64) float64 {
	if atMs <= 0 || atMs >= nowMs {
		return 0
	}
	return float64(nowMs-atMs) / 1000
}
