package imoutbox

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// failureLog keeps an IM outage from flooding the log. Every failed publish
// is logged at DEBUG with the row's fields (IM-10: event_id, event_type,
// room_id, retry_count, status, error, plus code and source); at WARN only
// the first failure of each error code, then one summary per interval with
// the failures per code since the previous one. An interval without
// failures ends the episode: the next failure of any code is a WARN again.
// The counts are also in roomflow_im_outbox_retries_total{code}.
type failureLog struct {
	log *slog.Logger

	mu     sync.Mutex
	warned map[string]bool // codes whose first failure of this episode was logged at WARN
	counts map[string]int  // failures per code since the last summary
	since  time.Time
}

func newFailureLog(log *slog.Logger) *failureLog {
	return &failureLog{log: log, warned: map[string]bool{}, counts: map[string]int{}, since: time.Now()}
}

// failed logs one failed publish of row (status is what the row becomes).
func (f *failureLog) failed(row Row, source, status, code string, err error) {
	f.mu.Lock()
	f.counts[code]++
	first := !f.warned[code]
	f.warned[code] = true
	f.mu.Unlock()
	level, msg := slog.LevelDebug, "im publish failed"
	if first {
		level, msg = slog.LevelWarn, "im publish failed; further failures with this code are summarized periodically (each at debug)"
	}
	f.log.Log(context.Background(), level, msg, "source", source, "event_id", row.EventID, "event_type", row.EventType,
		"room_id", row.RoomID, "retry_count", row.RetryCount+1, "status", status, "code", code, "error", err.Error())
}

// summarize logs, at WARN, the failures per code since the last summary,
// or ends the episode when there were none.
func (f *failureLog) summarize() {
	f.mu.Lock()
	counts, since := f.counts, f.since
	f.counts, f.since = map[string]int{}, time.Now()
	if len(counts) == 0 {
		clear(f.warned)
	}
	f.mu.Unlock()
	if len(counts) == 0 {
		return
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	f.log.Warn("im publish failures since the last summary", "failures", total, "by_code", counts,
		"period", time.Since(since).Round(time.Millisecond).String())
}

// run summarizes every interval until ctx ends, and once more then.
func (f *failureLog) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			f.summarize()
			return
		case <-tick.C:
			f.summarize()
		}
	}
}
