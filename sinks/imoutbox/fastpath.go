package imoutbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// FastPath consumes room events from Kafka (a consumer group; records are
// keyed by room_id, so one room's events arrive in order on one partition)
// and delivers them as a pipeline: each poll is claimed in one batched
// transaction and its rooms are handed to per-room chains that run
// concurrently (at most Lanes rooms sending at once) while the next poll is
// claimed. A room's chain waits for that room's previous chain, so one
// room's events are sent in order across polls, and a busy room (paced at
// 40/s) never holds up the others.
//
// A poll's results are recorded in batched statements when all its rooms
// are done; its offsets are marked for commit only when every earlier poll
// is recorded too, and committed every second, on rebalance (after the
// work in flight drains) and on shutdown. Claimed-but-unsent work is
// bounded (MaxInFlight) so that it always drains well within lock_ttl.
type FastPath struct {
	svc         *Service
	cl          *kgo.Client
	maxPoll     int
	maxInFlight int
	backoff     time.Duration

	tokens  chan struct{} // one per claimed job in flight
	results chan chainResult

	mu    sync.Mutex
	tails map[string]chan struct{} // room -> done of its latest chain
	queue []*pollBatch             // polls in order, until marked
	idle  *sync.Cond               // signalled when queue shrinks
}

type pollBatch struct {
	recs  []*kgo.Record
	rooms int  // chains not yet recorded (recorder goroutine only)
	done  bool // every result recorded
}

// chainResult is one result of a room chain within one poll.
type chainResult struct {
	b    *pollBatch
	out  *outcome
	last bool // the room's last result in this poll
}

// NewFastPath creates the fast path and its Kafka client on kcfg: topic
// room events, consumer group group, read_committed (the relay writes
// transactionally), marked-offset autocommit every second, rebalances held
// while a poll is being claimed and drained before partitions are revoked.
// appRate is im.max_calls_per_second, used to bound claimed work so that
// it drains within a third of lock_ttl. reg (may be nil) gets the client's
// roomflow_kafka_* metrics; log (may be nil) its warnings, tagged
// component=publish-im (see kafkax.Opts).
func NewFastPath(svc *Service, kcfg config.KafkaConfig, group string, reg prometheus.Registerer, log *slog.Logger, appRate int, extra ...kgo.Opt) (*FastPath, error) {
	inflight := int(float64(appRate) * svc.opt.LockTTL.Seconds() / 3)
	inflight = max(100, min(inflight, 10000))
	f := &FastPath{svc: svc, maxPoll: min(1000, inflight), maxInFlight: inflight, backoff: 500 * time.Millisecond,
		tokens: make(chan struct{}, inflight), tails: map[string]chan struct{}{}, results: make(chan chainResult, 4096)}
	f.idle = sync.NewCond(&f.mu)
	opts := append([]kgo.Opt{
		kgo.ConsumeTopics(kcfg.Topics.RoomEvents),
		kgo.ConsumerGroup(group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.OnPartitionsRevoked(f.onRevoked),
	}, kafkax.GroupOpts(kcfg)...)
	// A crashed publisher's partitions move after kafka.session_timeout,
	// not Kafka's 45 s default; the compensation scan covers the gap
	// either way. extra (tests) comes last and wins.
	opts = append(opts, extra...)
	cl, err := kafkax.NewClient(kcfg, "publish-im", reg, log, opts...)
	if err != nil {
		return nil, err
	}
	f.cl = cl
	return f, nil
}

// onRevoked drains the work in flight (bounded by DrainTimeout), so the
// next owner of a partition starts after our last recorded event, and
// commits the marked offsets.
func (f *FastPath) onRevoked(ctx context.Context, cl *kgo.Client, _ map[string][]int32) {
	f.drain(f.svc.opt.DrainTimeout)
	cctx, cancel := context.WithTimeout(ctx, f.svc.opt.DrainTimeout)
	defer cancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		f.svc.m.batchErrors.WithLabelValues("commit").Inc()
		f.svc.log.Warn("offset commit on revoke failed; events will be seen again and skipped as delivered", "error", err.Error())
	}
}

// drain waits until every poll handed out has its results recorded.
func (f *FastPath) drain(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { f.mu.Lock(); f.idle.Broadcast(); f.mu.Unlock() })
	defer stop.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.queue) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		f.idle.Wait()
	}
	return true
}

// Run consumes until ctx ends: it then stops polling and claiming, lets
// the work in flight finish (sends bounded by publish_timeout, unsent rows
// released), records results, commits, and closes the Kafka client. MySQL
// is not touched after Run returns.
func (f *FastPath) Run(ctx context.Context) error {
	recStop, recDone := make(chan struct{}), make(chan struct{})
	go func() { f.recorder(ctx, recStop); close(recDone) }()
	defer func() {
		// The whole stop fits in shutdown.timeout (DrainTimeout), so the
		// frame closes MySQL only after results are recorded.
		deadline := time.Now().Add(f.svc.opt.DrainTimeout)
		left := func() time.Duration { return max(time.Until(deadline), 100*time.Millisecond) }
		if !f.drain(left()) {
			f.svc.log.Warn("fast path work still in flight at shutdown; its rows stay delivering until lock_until_ms")
		}
		close(recStop)
		<-recDone
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), left())
		if err := f.cl.CommitMarkedOffsets(cctx); err != nil {
			f.svc.log.Warn("final offset commit failed", "error", err.Error())
		}
		cancel()
		// Close leaves the group; a join still waiting for a crashed
		// member's session to expire must not hold SIGTERM up beyond the
		// bound (the broker then drops us at session timeout).
		f.cl.AllowRebalance()
		closed := make(chan struct{})
		go func() { f.cl.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(left()):
			f.svc.log.Warn("kafka client did not leave the group within shutdown.timeout; continuing shutdown")
		}
	}()
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
		if recs := fetches.Records(); len(recs) > 0 {
			if !f.dispatch(ctx, recs) {
				f.cl.AllowRebalance()
				return nil
			}
		}
		f.cl.AllowRebalance()
	}
}

// dispatch claims recs and starts their room chains. It reports false when
// ctx ended before the claim (nothing claimed, offsets not marked).
func (f *FastPath) dispatch(ctx context.Context, recs []*kgo.Record) bool {
	var ids []string
	raws := map[string][]byte{}
	envs := map[string]*roomv1.EventEnvelope{}
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
		if _, dup := raws[env.EventId]; !dup {
			ids = append(ids, env.EventId)
		}
		raws[env.EventId] = r.Value
		envs[env.EventId] = &env
	}
	// Reserve in-flight room before claiming, so claimed rows never wait
	// for capacity while their locks run.
	for i := range ids {
		select {
		case f.tokens <- struct{}{}:
		case <-ctx.Done():
			f.releaseTokens(i)
			return false
		}
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
			f.releaseTokens(len(ids))
			return false
		case <-time.After(f.backoff):
		}
	}
	f.releaseTokens(len(ids) - len(claims.Claimed))
	f.svc.m.claimBatch.WithLabelValues("fast").Observe(float64(len(ids)))
	for _, row := range claims.Claimed {
		f.svc.claimed(row)
	}
	m := f.svc.m.claims
	m.WithLabelValues("fast", "claimed").Add(float64(len(claims.Claimed)))
	m.WithLabelValues("fast", "done").Add(float64(len(claims.Done)))
	m.WithLabelValues("fast", "busy").Add(float64(len(claims.Busy)))
	m.WithLabelValues("fast", "missing").Add(float64(len(claims.Missing)))
	for _, id := range claims.Missing {
		f.svc.log.Warn("room event has no room_outbox row; not published", "event_id", id,
			"event_type", envs[id].GetEventType(), "room_id", envs[id].GetRoomId())
	}

	var order []string
	byRoom := map[string][]job{}
	for _, id := range ids { // record order = per-room order
		row, ok := claims.Claimed[id]
		if !ok {
			continue
		}
		if _, seen := byRoom[row.RoomID]; !seen {
			order = append(order, row.RoomID)
		}
		byRoom[row.RoomID] = append(byRoom[row.RoomID], job{row: row, raw: raws[id]})
	}
	b := &pollBatch{recs: recs, rooms: max(1, len(order))}
	f.mu.Lock()
	f.queue = append(f.queue, b)
	f.mu.Unlock()
	if len(order) == 0 {
		f.results <- chainResult{b: b, out: &outcome{}, last: true}
		return true
	}
	for _, room := range order {
		f.mu.Lock()
		prev := f.tails[room]
		done := make(chan struct{})
		f.tails[room] = done
		f.mu.Unlock()
		jobs := byRoom[room]
		go func() {
			defer func() {
				f.mu.Lock()
				if f.tails[room] == done {
					delete(f.tails, room)
				}
				f.mu.Unlock()
				close(done)
			}()
			if prev != nil {
				<-prev
			}
			f.svc.lanes <- struct{}{}
			var mu sync.Mutex
			for i, j := range jobs {
				out := &outcome{}
				f.svc.one(ctx, "fast", j, &mu, out)
				<-f.tokens
				if i == len(jobs)-1 {
					<-f.svc.lanes
				}
				// Each result goes to the recorder at once, so a send is
				// marked within milliseconds, not when its room's run ends.
				f.results <- chainResult{b: b, out: out, last: i == len(jobs)-1}
			}
		}()
	}
	return true
}

func (f *FastPath) releaseTokens(n int) {
	for i := 0; i < n; i++ {
		select {
		case <-f.tokens:
		default:
			return
		}
	}
}

// recorder records room chains' results in batched statements (whatever
// arrived within a few milliseconds, so a busy room never delays the marks
// of the others) and marks offsets for commit for every leading poll
// whose results are all recorded, in order. It returns when stop is
// closed (after the drain); a chain finishing later only fills the buffer.
func (f *FastPath) recorder(ctx context.Context, stop <-chan struct{}) {
	for {
		var first chainResult
		select {
		case first = <-f.results:
		case <-stop:
			return
		}
		batch := []chainResult{first}
		timeout := time.After(5 * time.Millisecond)
	collect:
		for len(batch) < 1000 {
			select {
			case r := <-f.results:
				batch = append(batch, r)
			case <-timeout:
				break collect
			}
		}
		var all outcome
		for _, r := range batch {
			all.delivered = append(all.delivered, r.out.delivered...)
			all.failed = append(all.failed, r.out.failed...)
			all.released = append(all.released, r.out.released...)
			all.errs = append(all.errs, r.out.errs...)
		}
		if err := f.svc.record(ctx, "fast", &all); err != nil {
			f.svc.log.Error("fast path results had errors", "error", err.Error())
		}
		f.mu.Lock()
		for _, r := range batch {
			if !r.last {
				continue
			}
			r.b.rooms--
			if r.b.rooms == 0 {
				r.b.done = true
			}
		}
		n := 0
		for n < len(f.queue) && f.queue[n].done {
			f.cl.MarkCommitRecords(f.queue[n].recs...)
			n++
		}
		if n > 0 {
			f.queue = append(f.queue[:0], f.queue[n:]...)
			f.idle.Broadcast()
		}
		f.mu.Unlock()
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
