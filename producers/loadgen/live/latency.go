package live

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"time"

	"github.com/hyapp/roomflow/producers/loadgen/report"
)

// LatencyOptions bound a FactLatency.
type LatencyOptions struct {
	// PerSecond is how many events of each second of commit time are
	// sampled (0: every event offered, as the end-to-end benchmark does).
	// It bounds the samples kept to PerSecond a second of run.
	PerSecond int
	// MaxPending bounds the events waiting for their row (default 10000);
	// an event offered while it is full is not sampled.
	MaxPending int
	// GiveUp is how long after its commit an event may wait for its row
	// before it counts as missing (default 2 minutes).
	GiveUp time.Duration
}

// LatencyResult is what a FactLatency measured.
type LatencyResult struct {
	report.Summary
	// Missing are sampled events whose row had not arrived GiveUp after
	// their commit (or by the end of Drain).
	Missing int
}

// FactLatency measures the latency from a mic event's commit (room_outbox
// insert, or produce with --to kafka) to its user_mic_event_consumption
// row. The time of arrival is the row's updated_at_ms (the sink's batch
// time), so the latency assumes the writer's and the sink's clocks agree.
// Offer only events the sink writes a row for (RoomMicChanged, not
// malformed ones). Safe for concurrent use.
type FactLatency struct {
	db      *sql.DB
	appCode string
	o       LatencyOptions

	mu       sync.Mutex
	pending  map[string]time.Time // event id → commit time
	second   int64                // unix second of commit time being sampled
	inSecond int
	missing  int
	samples  report.Samples
}

// NewFactLatency samples on db (roomflow's MySQL) for app appCode.
func NewFactLatency(db *sql.DB, appCode string, o LatencyOptions) *FactLatency {
	if o.MaxPending <= 0 {
		o.MaxPending = 10000
	}
	if o.GiveUp <= 0 {
		o.GiveUp = 2 * time.Minute
	}
	return &FactLatency{db: db, appCode: appCode, o: o, pending: map[string]time.Time{}}
}

// Committed offers an event committed at at; it reports whether the
// event was sampled (within this second's share and MaxPending).
func (f *FactLatency) Committed(eventID string, at time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) >= f.o.MaxPending {
		return false
	}
	if f.o.PerSecond > 0 {
		// Writers commit side by side: a commit of the second before
		// counts in the current one rather than opening it again.
		if s := at.Unix(); s > f.second {
			f.second, f.inSecond = s, 0
		}
		if f.inSecond >= f.o.PerSecond {
			return false
		}
		f.inSecond++
	}
	f.pending[eventID] = at
	return true
}

// pollChunk is the event ids per query (one IN list).
const pollChunk = 500

// Poll looks the pending events up once, records the latency of those
// whose row arrived, and counts as missing those waiting longer than
// GiveUp. It fails on a MySQL error (the events stay pending).
func (f *FactLatency) Poll(ctx context.Context) error {
	f.mu.Lock()
	ids := make([]string, 0, len(f.pending))
	for id := range f.pending {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), pollChunk)
		if err := f.lookup(ctx, ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, at := range f.pending {
		if time.Since(at) > f.o.GiveUp {
			delete(f.pending, id)
			f.missing++
		}
	}
	return nil
}

func (f *FactLatency) lookup(ctx context.Context, ids []string) error {
	args := make([]any, 0, len(ids)+1)
	args = append(args, f.appCode)
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := f.db.QueryContext(ctx, "SELECT event_id, updated_at_ms FROM user_mic_event_consumption WHERE app_code = ? AND event_id IN (?"+
		strings.Repeat(",?", len(ids)-1)+")", args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var ms int64
		if err := rows.Scan(&id, &ms); err != nil {
			return err
		}
		f.mu.Lock()
		if at, ok := f.pending[id]; ok {
			f.samples.Add(time.UnixMilli(ms).Sub(at))
			delete(f.pending, id)
		}
		f.mu.Unlock()
	}
	return rows.Err()
}

// Run polls every interval until ctx ends; a failed poll is retried at
// the next interval. It returns ctx's error.
func (f *FactLatency) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			_ = f.Poll(ctx)
		}
	}
}

// Drain polls until no event is pending or timeout has passed; what is
// still pending then counts as missing. It fails on ctx's end or on a
// MySQL error of its last poll.
func (f *FactLatency) Drain(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f.Poll(ctx)
		if f.Pending() == 0 {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			f.mu.Lock()
			f.missing += len(f.pending)
			clear(f.pending)
			f.mu.Unlock()
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Pending is the number of sampled events still waiting for their row.
func (f *FactLatency) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// Samples are the latencies measured so far.
func (f *FactLatency) Samples() *report.Samples { return &f.samples }

// Result is the latency summary and the missing count so far.
func (f *FactLatency) Result() LatencyResult {
	f.mu.Lock()
	missing := f.missing
	f.mu.Unlock()
	return LatencyResult{Summary: f.samples.Summary(), Missing: missing}
}
