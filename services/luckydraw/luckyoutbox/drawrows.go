package luckyoutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The worker's side of lucky_draw_events (lucky.outbox_format
// draw_events): a row per draw carrying its events. Each event is
// produced as a lucky_outbox activity_event row is, and the row is done
// once all of them are.

// table is an outbox table the worker claims and settles rows of.
type table struct{ name, key, cols string }

var (
	outboxTable     = table{name: "lucky_outbox", key: "event_id", cols: rowCols}
	drawEventsTable = table{name: "lucky_draw_events", key: "draw_id", cols: `draw_id, app_code, events, retry_count`}
)

// drawRow is a claimed lucky_draw_events row.
type drawRow struct {
	DrawID     string
	AppCode    string
	Events     []byte
	RetryCount int
}

func scanDrawRows(rows *sql.Rows) ([]drawRow, error) {
	defer rows.Close()
	var out []drawRow
	for rows.Next() {
		var d drawRow
		if err := rows.Scan(&d.DrawID, &d.AppCode, &d.Events, &d.RetryCount); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// unpack turns claimed draw rows into the activity_event rows produce
// takes, marked Packed; a row it cannot decode becomes failed with the
// reason (never produced; LuckyEventBacklogOld then fires on its age).
func (w *Worker) unpack(ctx context.Context, draws []drawRow) ([]row, error) {
	var out []row
	var bad []retry
	for _, d := range draws {
		if d.AppCode == "" {
			d.AppCode = w.cfg.AppCode
		}
		events, err := DecodeEvents(d.Events)
		if err != nil {
			w.log.Error("lucky_draw_events row cannot be decoded; failed, not produced", "draw_id", d.DrawID, "error", err)
			bad = append(bad, retry{Key: d.DrawID, Attempt: d.RetryCount, Error: err.Error(), Failed: true})
			continue
		}
		for _, e := range events {
			out = append(out, row{EventID: e.EventID, AppCode: d.AppCode, EventType: EventTypeActivityEvent, MessageType: e.MessageType,
				AggregateID: d.DrawID, KafkaKey: e.Key, Payload: e.Payload, RetryCount: d.RetryCount, Packed: d.DrawID})
		}
	}
	return out, markRetry(ctx, w.db, drawEventsTable, w.cfg.WorkerID, bad, w.cfg.Now().UnixMilli())
}

// settleProduced records produce results (recs[i] is rows[i]'s record;
// results come in completion order, matched by record): a lucky_outbox
// row done or back to retry on its own; a lucky_draw_events row done once
// every event it carries is produced, else back to retry whole (its
// produced events go again: at least once). The unsent events (not
// framed) count as failed. It returns the events done and the rows put
// back.
func (w *Worker) settleProduced(ctx context.Context, rows []row, recs []*kgo.Record, results kgo.ProduceResults, unsent []unsentEvent, now int64) (done, retried int, retries []retry, err error) {
	at := make(map[*kgo.Record]int, len(recs))
	for i, rec := range recs {
		at[rec] = i
	}
	var doneIDs, doneDraws []string
	var drawRetries []retry
	failed := map[string]bool{} // draw_id of a draw row with an event not produced
	fail := func(r row, err error) {
		switch {
		case r.Packed == "":
			retries = append(retries, w.retryOf(r.EventID, r.RetryCount, err, now))
		case !failed[r.Packed]:
			failed[r.Packed] = true
			drawRetries = append(drawRetries, w.retryOf(r.Packed, r.RetryCount, fmt.Errorf("%s: %w", r.EventID, err), now))
		}
	}
	for _, u := range unsent {
		fail(u.row, u.err)
	}
	for _, res := range results {
		r := rows[at[res.Record]]
		switch {
		case res.Err == nil && r.Packed == "":
			doneIDs = append(doneIDs, r.EventID)
		case res.Err != nil:
			fail(r, res.Err)
		}
	}
	done, retried = len(doneIDs), len(retries)
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Packed != "" && failed[r.Packed] {
			retried++ // its row is retried whole: each of its events counts
		}
		if r.Packed != "" && !failed[r.Packed] {
			done++
			if !seen[r.Packed] {
				seen[r.Packed] = true
				doneDraws = append(doneDraws, r.Packed)
			}
		}
	}
	err = errors.Join(markDone(ctx, w.db, outboxTable, doneIDs, now), markDone(ctx, w.db, drawEventsTable, doneDraws, now),
		markRetry(ctx, w.db, outboxTable, w.cfg.WorkerID, retries, now), markRetry(ctx, w.db, drawEventsTable, w.cfg.WorkerID, drawRetries, now))
	return done, retried, append(retries, drawRetries...), err
}

// unsentEvent is an event the worker did not produce (it could not frame
// it), and why.
type unsentEvent struct {
	row row
	err error
}

// retryOf is the retry of a row (key) whose produce failed with err.
func (w *Worker) retryOf(key string, retryCount int, err error, now int64) retry {
	attempt := retryCount + 1
	return retry{Key: key, Attempt: attempt, NextRetry: now + w.backoff.Delay(attempt).Milliseconds(), Error: err.Error()}
}
