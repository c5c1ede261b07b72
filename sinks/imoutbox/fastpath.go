package imoutbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/roomv1"
)

// FastPath consumes room events from Kafka (a consumer group; records are
// keyed by room_id, so one room's events arrive in order on one partition)
// and delivers each poll's events with one batched claim, parallel rooms,
// per-room order, and batched marks. Offsets are committed after the
// results are recorded; a rebalance waits for the batch in hand.
type FastPath struct {
	svc     *Service
	cl      *kgo.Client
	maxPoll int
	backoff time.Duration
}

// FastPathOpts are the kgo options the fast path needs on top of the base
// client options: the topic, the group, read_committed (the relay writes
// transactionally), manual commits after delivery, and rebalances blocked
// while a batch is in flight.
func FastPathOpts(topic, group string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumerGroup(group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
}

// NewFastPath returns a fast path on cl (built with FastPathOpts). Run
// closes cl.
func NewFastPath(svc *Service, cl *kgo.Client) *FastPath {
	return &FastPath{svc: svc, cl: cl, maxPoll: 1000, backoff: 500 * time.Millisecond}
}

// Run consumes until ctx ends: it then stops polling, lets the batch in
// hand finish (sends bounded by publish_timeout, unsent rows released),
// records results, commits, and closes the Kafka client. MySQL is not
// touched after Run returns.
func (f *FastPath) Run(ctx context.Context) error {
	defer f.cl.Close()
	for {
		fetches := f.cl.PollRecords(ctx, f.maxPoll)
		if ctx.Err() != nil {
			f.cl.AllowRebalance()
			return nil
		}
		if fetches.IsClientClosed() {
			return errors.New("imoutbox: kafka client closed")
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				f.svc.log.Warn("fetch error", "topic", topic, "partition", p, "error", err.Error())
			}
		})
		recs := fetches.Records()
		if len(recs) > 0 {
			if done := f.batch(ctx, recs); done {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.svc.opt.DrainTimeout)
				if err := f.cl.CommitRecords(cctx, recs...); err != nil {
					f.svc.m.batchErrors.WithLabelValues("commit").Inc()
					f.svc.log.Warn("offset commit failed; events will be seen again and skipped as delivered", "error", err.Error())
				}
				cancel()
			}
		}
		f.cl.AllowRebalance()
	}
}

// batch claims and delivers recs. It reports false when the claim never
// succeeded before ctx ended (offsets are then not committed).
func (f *FastPath) batch(ctx context.Context, recs []*kgo.Record) bool {
	type item struct {
		raw []byte
		env *roomv1.EventEnvelope
	}
	var ids []string
	items := map[string]item{}
	for _, r := range recs {
		var env roomv1.EventEnvelope
		if err := proto.Unmarshal(r.Value, &env); err != nil || env.GetEventId() == "" {
			// The compensation scan meets the same bytes in room_outbox and
			// records the error on the row; here it is only counted.
			f.svc.m.decodeErrors.Inc()
			f.svc.log.Error("room event is not an EventEnvelope", "event_id", header(r, "event_id"),
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", fmt.Sprint(err))
			continue
		}
		if _, dup := items[env.EventId]; !dup {
			ids = append(ids, env.EventId)
		}
		items[env.EventId] = item{raw: r.Value, env: &env}
	}
	if len(ids) == 0 {
		return true
	}
	var claims EventClaims
	for {
		var err error
		claims, err = f.svc.repo.ClaimEvents(ctx, f.svc.worker, ids, f.svc.opt.LockTTL)
		if err == nil {
			break
		}
		f.svc.m.batchErrors.WithLabelValues("claim").Inc()
		f.svc.log.Error("fast path claim failed; retrying", "events", len(ids), "error", err.Error())
		select {
		case <-ctx.Done():
			return false
		case <-time.After(f.backoff):
		}
	}
	m := f.svc.m.claims
	m.WithLabelValues("fast", "claimed").Add(float64(len(claims.Claimed)))
	m.WithLabelValues("fast", "done").Add(float64(len(claims.Done)))
	m.WithLabelValues("fast", "busy").Add(float64(len(claims.Busy)))
	m.WithLabelValues("fast", "missing").Add(float64(len(claims.Missing)))
	for _, id := range claims.Missing {
		it := items[id]
		f.svc.log.Warn("room event has no room_outbox row; not published", "event_id", id,
			"event_type", it.env.GetEventType(), "room_id", it.env.GetRoomId())
	}
	jobs := make([]job, 0, len(claims.Claimed))
	for _, id := range ids { // record order = per-room order
		row, ok := claims.Claimed[id]
		if !ok {
			continue
		}
		jobs = append(jobs, job{row: row, raw: items[id].raw})
	}
	if err := f.svc.deliver(ctx, "fast", jobs); err != nil {
		f.svc.log.Error("fast path batch had errors", "error", err.Error())
	}
	return true
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
