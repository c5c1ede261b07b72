package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// lagRefresh is how often every replica looks up the oldest unrelayed row
// (two indexed reads of room_outbox).
const lagRefresh = time.Second

// lagScanRows bounds the rows above the high-water id whose occurred_at the
// lag read compares (rows are inserted roughly in occurred_at order, so
// the oldest is among the first few; the bound keeps the read cheap however
// far behind the relay is).
const lagScanRows = 100

// lagWatch is roomflow_relay_lag_seconds: now − since, where since is
// occurred_at of the oldest committed room_outbox row not yet relayed, or,
// when there is none, the time that was last verified. It is kept by every
// replica, standby included, and does not depend on anyone leading:
//
//   - the committed position comes from tailing the offsets topic
//     (read_committed, the leader's own commits included), so a standby
//     knows it as well as the leader;
//   - "not yet relayed" is what that position says is not done: ids above
//     its high-water id, and its open holes. An abandoned hole is not
//     counted (it was dead-lettered as gap_abandoned and alerted on by
//     roomflow_relay_gaps_abandoned_total); a hole whose row is still
//     uncommitted is not counted either (it is invisible: not yet a
//     committed row);
//   - a failed read (MySQL down) or an unknown position (Kafka down since
//     start) leaves since where it was, so the value keeps growing: a
//     relay stuck on MySQL or without a leader cannot look fresh.
//
// Until the position is known, since is the process start.
type lagWatch struct {
	mu    sync.Mutex
	since time.Time
	now   func() time.Time
}

func newLagWatch(now func() time.Time) *lagWatch { return &lagWatch{since: now(), now: now} }

// seconds is the gauge's value.
func (w *lagWatch) seconds() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(0, w.now().Sub(w.since).Seconds())
}

func (w *lagWatch) set(since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.since = since
}

// watchLag tails the committed position and refreshes the lag every
// lagRefresh until ctx ends. Failures are logged once per streak and
// retried; they never stop the relay.
func (r *Relay) watchLag(ctx context.Context) {
	// The tail reports no client metrics: it is not part of relaying.
	k := r.cfg.Kafka
	k.Metrics = nil
	cl, err := k.NewClient(Component+"-lag",
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.OffsetsTopic: {positionPartition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		r.log.Warn("relay lag: position reader", "error", err)
		return
	}
	defer cl.Close()
	var (
		latest  []byte // newest committed position record value
		synced  bool   // latest is the newest one as of some fetch
		failing bool
		last    time.Time
	)
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, lagRefresh)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		got := false
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, rec := range p.Records {
				got = true
				if string(rec.Key) == r.cfg.TransactionalID {
					latest = rec.Value
				}
			}
			// Read up to the last stable offset but its transaction marker:
			// nothing committed is left unread.
			if n := len(p.Records); n > 0 && p.Records[n-1].Offset+2 >= p.LastStableOffset {
				synced = true
			}
		})
		if !got && fs.Err0() == nil || errors.Is(fs.Err0(), context.DeadlineExceeded) {
			synced = true // a poll that waited lagRefresh found nothing newer
		}
		if !synced || r.cfg.Now().Sub(last) < lagRefresh {
			continue
		}
		last = r.cfg.Now()
		err := r.refreshLag(ctx, latest)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			r.log.Warn("relay lag: cannot read the oldest unrelayed row; roomflow_relay_lag_seconds keeps growing until it can", "error", err)
		case err == nil && failing:
			failing = false
			r.log.Info("relay lag: reading the oldest unrelayed row again")
		}
	}
}

// refreshLag sets the lag from the committed position encoded in value
// (nil: the relay has never committed, so every row is unrelayed).
func (r *Relay) refreshLag(ctx context.Context, value []byte) error {
	var pos Position
	if value != nil {
		p, err := DecodePosition(value)
		if err != nil {
			return err
		}
		pos = p
	}
	// The youngest holes are the ones still likely to fill; the oldest
	// are mostly rolled-back inserts that will be given up.
	young := pos.Holes[len(pos.Holes)-min(len(pos.Holes), maxInList):]
	holes := make([]uint64, len(young))
	for i, h := range young {
		holes[i] = h.ID
	}
	checked := r.cfg.Now()
	ms, found, err := r.src.OldestUnrelayed(ctx, pos.High, holes)
	if err != nil {
		return err
	}
	if found {
		r.lag.set(time.UnixMilli(ms))
	} else {
		r.lag.set(checked)
	}
	return nil
}

// lagGaugeValue is the GaugeFunc behind roomflow_relay_lag_seconds.
func (r *Relay) lagGaugeValue() float64 { return r.lag.seconds() }
