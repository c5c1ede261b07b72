package imoutbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/envelope"
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
// Before claiming, each poll is held for Config.FastPathDelay from the moment
// it was consumed (this process's monotonic clock; no other host's clock
// is compared): room-service publishes each event itself right after its
// transaction and marks the row delivered (IM-7), and the fast path
// must not send the same event in between. Rows delivered meanwhile are
// skipped by the claim. Polls leave the hold in order, so rooms stay in
// order. The hold is bounded (maxHeld records): when it is full the
// consumer stops polling until the oldest poll is due, and the client then
// issues no new fetch (it buffers at most one per broker).
//
// A poll's results are recorded in batched statements when all its rooms
// are done; its offsets are marked for commit only when every earlier poll
// is recorded too (held polls never are), a partition's only while the
// fast path runs and still owns it, and committed every second, on
// rebalance (after the work in flight drains; held records of revoked
// partitions are dropped for the next owner) and on shutdown. A
// partition's room chains stop when it is given up (see onRevoked).
// Claimed-but-unsent work is bounded (MaxInFlight) so that it always drains
// well within lock_ttl.
type FastPath struct {
	svc         *Service
	cl          *kgo.Client
	topic       string
	group       string
	share       *share // this replica's part of the IM capacity, by owned partitions
	maxPoll     int
	maxInFlight int
	backoff     time.Duration
	delay       time.Duration
	maxHeld     int

	tokens  chan struct{} // one per claimed job in flight
	results chan chainResult
	chains  sync.WaitGroup

	mu    sync.Mutex
	tails map[string]chan struct{} // room -> done of its latest chain
	queue []*pollBatch             // polls in order, until marked
	owned map[int32]*partition     // partitions of the topic this fast path owns
	idle  *sync.Cond               // signalled when results are recorded

	// claiming is held by the dispatcher from taking a poll off the hold
	// until it is queued, so a revoke sees every poll either held or queued.
	claiming sync.Mutex
	heldMu   sync.Mutex
	held     []heldPoll
	heldN    int           // records in held
	heldIn   chan struct{} // a poll was added to the hold (1-buffered)
	heldOut  chan struct{} // a poll left the hold (1-buffered)
}

// heldPoll is a consumed poll waiting for its delay.
type heldPoll struct {
	recs   []*kgo.Record
	due    time.Time            // consumption + delay, monotonic
	owners map[int32]*partition // the ownership its records were polled under
}

type pollBatch struct {
	recs   []*kgo.Record
	owners map[int32]*partition
	rooms  int  // chains not yet recorded (recorder goroutine only)
	done   bool // every result recorded
}

// ours is b's records whose partition is still owned as when they were
// polled, none once the fast path stops: the offsets of a partition given
// up stay where they were, so its next owner reads again what we did not
// finish and claims the rows we handed back, in order.
func (b *pollBatch) ours(run context.Context) []*kgo.Record {
	if run.Err() != nil {
		return nil
	}
	var recs []*kgo.Record
	for _, r := range b.recs {
		if o := b.owners[r.Partition]; o != nil && o.ctx.Err() == nil {
			recs = append(recs, r)
		}
	}
	return recs
}

// chainResult is one result of a room chain within one poll.
type chainResult struct {
	b     *pollBatch
	owner *partition // nil for a poll without a chain
	out   *outcome
	last  bool // the room's last result in this poll
}

// newFastPath creates the fast path and its Kafka client on cfg.Kafka:
// topic cfg.Topic, consumer group cfg.Group (a static member when
// cfg.InstanceID is set), read_committed (the relay writes
// transactionally), marked-offset autocommit every second, rebalances held
// while a poll is being claimed and drained before partitions are revoked.
// appRate (the IM client's calls per second) bounds claimed work so that
// it drains within a third of lock_ttl. The hold keeps at most twice what
// appRate sends in cfg.FastPathDelay (at least 1000 records), so it never
// limits throughput below appRate.
// fastPathBounds sizes the fast path for appRate calls per second: claimed
// work in flight drains within a third of lockTTL (100 to 10,000 records),
// a poll takes at most 1000 of it, and the hold keeps twice what appRate
// sends in delay (at least 1000 records).
func fastPathBounds(appRate int, lockTTL, delay time.Duration) (maxPoll, inflight, maxHeld int) {
	inflight = int(float64(appRate) * lockTTL.Seconds() / 3)
	inflight = max(100, min(inflight, 10000))
	return min(1000, inflight), inflight, max(1000, int(2*float64(appRate)*delay.Seconds()))
}

func newFastPath(svc *Service, cfg Config, appRate int, sh *share) (*FastPath, error) {
	delay := cfg.FastPathDelay
	maxPoll, inflight, maxHeld := fastPathBounds(appRate, svc.cfg.LockTTL, delay)
	f := &FastPath{svc: svc, topic: cfg.Topic, group: cfg.Group, share: sh, maxPoll: maxPoll, maxInFlight: inflight, backoff: 500 * time.Millisecond,
		delay: delay, maxHeld: maxHeld,
		heldIn: make(chan struct{}, 1), heldOut: make(chan struct{}, 1),
		tokens: make(chan struct{}, inflight), tails: map[string]chan struct{}{}, owned: map[int32]*partition{},
		results: make(chan chainResult, 4096)}
	f.idle = sync.NewCond(&f.mu)
	// A crashed publisher's partitions move after the cluster's session
	// timeout, not Kafka's 45 s default; the compensation scan covers the
	// gap either way.
	opts := append(cfg.Kafka.GroupOpts(),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumerGroup(cfg.Group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsAssigned(f.onAssigned),
		kgo.OnPartitionsRevoked(f.onRevoked),
		kgo.OnPartitionsLost(f.onLost),
	)
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	cl, err := cfg.Kafka.NewClient("publish-im", opts...)
	if err != nil {
		return nil, err
	}
	f.cl = cl
	return f, nil
}

// Run consumes until ctx ends: it then stops polling and claiming, drops
// what is held (not done: the offsets stay uncommitted), lets the work in
// flight finish (sends bounded by publish_timeout, unsent rows released),
// records results, commits, and closes the Kafka client, all within
// shutdown.timeout: a send still in flight then is cancelled and its row
// left delivering. A consumer group the broker refuses for good ends it
// the same way, with that *kafkax.GroupRefusedError. Every goroutine it
// started has ended when it returns, so MySQL is not touched after Run
// returns.
func (f *FastPath) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx) // a failed Run stops its own goroutines too
	lt, release := f.svc.newLifetime(ctx)
	defer release()
	recStop, recDone := make(chan struct{}), make(chan struct{})
	go func() { f.recorder(lt, recStop); close(recDone) }()
	dispDone := make(chan struct{})
	go func() { f.dispatcher(lt); close(dispDone) }()
	defer func() {
		stop()
		deadline := time.Now().Add(f.svc.cfg.DrainTimeout)
		left := func() time.Duration { return max(time.Until(deadline), 100*time.Millisecond) }
		<-dispDone
		f.chains.Wait() // sends end by lt.abort at the latest
		close(recStop)
		<-recDone
		f.mu.Lock()
		unrecorded := len(f.queue)
		f.queue = nil // never marked; the revoke on Close has nothing to wait for
		f.mu.Unlock()
		if unrecorded > 0 {
			f.svc.log.Warn("fast path results not all recorded at shutdown; their rows stay delivering until lock_until_ms", "polls", unrecorded)
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), left())
		if err := f.cl.CommitMarkedOffsets(cctx); err != nil {
			f.svc.log.Warn("final offset commit failed", "error", err.Error())
		}
		cancel()
		// Close leaves the group; a join still waiting for a crashed
		// member's session to expire must not hold SIGTERM up beyond the
		// bound (the broker then drops us at session timeout).
		f.cl.AllowRebalance()
		cctx, cancel = context.WithTimeout(context.Background(), left())
		kafkax.CloseWithin(cctx, f.cl, f.svc.log)
		cancel()
	}()
	for {
		room := f.waitHoldRoom(ctx)
		if room == 0 {
			return nil
		}
		fetches := f.cl.PollRecords(ctx, min(f.maxPoll, room))
		if ctx.Err() != nil {
			f.cl.AllowRebalance()
			return nil
		}
		if fetches.IsClientClosed() {
			return errors.New("imoutbox: kafka client closed")
		}
		if err := kafkax.RefusedGroup(f.group, fetches); err != nil {
			f.cl.AllowRebalance()
			return err
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				f.svc.log.Warn("fetch error", "topic", topic, "partition", p, "error", err.Error())
			}
		})
		if recs := fetches.Records(); len(recs) > 0 {
			f.hold(recs)
		}
		f.cl.AllowRebalance()
	}
}

// waitHoldRoom returns how many records the hold takes now, waiting while
// it is full (no poll, so the client stops fetching); 0 when ctx ended.
func (f *FastPath) waitHoldRoom(ctx context.Context) int {
	for {
		f.heldMu.Lock()
		room := f.maxHeld - f.heldN
		f.heldMu.Unlock()
		if ctx.Err() != nil {
			return 0
		}
		if room > 0 {
			return room
		}
		select {
		case <-f.heldOut:
		case <-ctx.Done():
			return 0
		}
	}
}

// hold adds a consumed poll to the hold, due delay from now, under the
// partitions' ownership now.
func (f *FastPath) hold(recs []*kgo.Record) {
	owners := map[int32]*partition{}
	f.mu.Lock()
	for _, r := range recs {
		owners[r.Partition] = f.owned[r.Partition]
	}
	f.mu.Unlock()
	f.heldMu.Lock()
	f.held = append(f.held, heldPoll{recs: recs, due: time.Now().Add(f.delay), owners: owners})
	f.heldN += len(recs)
	f.svc.m.held.Set(float64(f.heldN))
	f.heldMu.Unlock()
	select {
	case f.heldIn <- struct{}{}:
	default:
	}
}

// dropHeld removes the held records of revoked partitions.
func (f *FastPath) dropHeld(revoked map[string][]int32) {
	gone := map[string]map[int32]bool{}
	for t, ps := range revoked {
		gone[t] = map[int32]bool{}
		for _, p := range ps {
			gone[t][p] = true
		}
	}
	f.heldMu.Lock()
	kept := f.held[:0]
	for _, h := range f.held {
		recs := h.recs[:0:0]
		for _, r := range h.recs {
			if gone[r.Topic][r.Partition] {
				f.heldN--
			} else {
				recs = append(recs, r)
			}
		}
		if len(recs) > 0 {
			kept = append(kept, heldPoll{recs: recs, due: h.due, owners: h.owners})
		}
	}
	clear(f.held[len(kept):])
	f.held = kept
	f.svc.m.held.Set(float64(f.heldN))
	f.heldMu.Unlock()
	select {
	case f.heldOut <- struct{}{}:
	default:
	}
}

// dispatcher takes polls off the hold in order once they are due and
// claims them, until lt.run ends.
func (f *FastPath) dispatcher(lt lifetime) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		f.claiming.Lock()
		f.heldMu.Lock()
		var next heldPoll
		wait := time.Duration(-1) // nothing held
		if len(f.held) > 0 {
			next = f.held[0]
			if wait = time.Until(next.due); wait <= 0 {
				f.held[0] = heldPoll{}
				f.held = f.held[1:]
				f.heldN -= len(next.recs)
				f.svc.m.held.Set(float64(f.heldN))
			}
		}
		f.heldMu.Unlock()
		if wait <= 0 && next.recs != nil {
			select {
			case f.heldOut <- struct{}{}:
			default:
			}
			ok := f.dispatch(lt, next)
			f.claiming.Unlock()
			if !ok {
				return
			}
			continue
		}
		f.claiming.Unlock()
		var due <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			due = timer.C
		}
		select {
		case <-due: // the head may have changed (revoke): look again
		case <-f.heldIn:
		case <-lt.run.Done():
			return
		}
		timer.Stop() // Go 1.23+: no stale tick after Stop or Reset
	}
}

// dispatch claims h's records and starts their room chains. It reports
// false when lt.run ended before the claim (nothing claimed, offsets not
// marked).
func (f *FastPath) dispatch(lt lifetime, h heldPoll) bool {
	ids, envs, owners := f.decodePoll(h)
	// Reserve in-flight room before claiming, so claimed rows never wait
	// for capacity while their locks run.
	if !f.reserveTokens(lt.run, len(ids)) {
		return false
	}
	claims, ok := f.claimPoll(lt.run, ids)
	if !ok {
		return false
	}
	f.releaseTokens(len(ids) - len(claims.Claimed))
	f.countClaims(len(ids), claims, envs)
	order, byRoom := roomJobs(ids, claims, envs)
	b := &pollBatch{recs: h.recs, owners: h.owners, rooms: max(1, len(order))}
	f.mu.Lock()
	f.queue = append(f.queue, b)
	f.mu.Unlock()
	if len(order) == 0 {
		f.results <- chainResult{b: b, out: &outcome{}, last: true}
		return true
	}
	for _, room := range order {
		// Records are keyed by room_id: a room's events share a partition.
		f.startChain(lt, b, room, byRoom[room], owners[byRoom[room][0].row.EventID])
	}
	return true
}

// decodePoll returns the event ids of h's records in record order, each
// once, and their envelopes and partitions' owners by id (the last record
// of an id wins). Records of partitions given up since they were polled are
// left out: their next owner reads them again.
func (f *FastPath) decodePoll(h heldPoll) (ids []string, envs map[string]envelope.View, owners map[string]*partition) {
	envs, owners = map[string]envelope.View{}, map[string]*partition{}
	for _, r := range h.recs {
		o := h.owners[r.Partition]
		if o == nil || o.ctx.Err() != nil {
			continue
		}
		var env envelope.View
		if err := env.Parse(r.Value); err != nil || len(env.EventID) == 0 {
			// The compensation scan meets the same bytes in room_outbox and
			// records the error on the row; here it is only counted.
			f.svc.m.decodeErrors.Inc()
			f.svc.log.Error("room event is not an EventEnvelope", "event_id", string(envelope.Header(r, envelope.HeaderEventID)),
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "error", fmt.Sprint(err))
			continue
		}
		id := string(env.EventID)
		if _, dup := envs[id]; !dup {
			ids = append(ids, id)
		}
		envs[id], owners[id] = env, o
	}
	return ids, envs, owners
}

// reserveTokens takes n in-flight tokens; when ctx ends first it gives
// back those it took and reports false.
func (f *FastPath) reserveTokens(ctx context.Context, n int) bool {
	for i := range n {
		select {
		case f.tokens <- struct{}{}:
		case <-ctx.Done():
			f.releaseTokens(i)
			return false
		}
	}
	return true
}

// claimPoll claims ids, retrying a failed claim after a backoff. When ctx
// ends first it gives back the tokens reserved for ids and reports false.
func (f *FastPath) claimPoll(ctx context.Context, ids []string) (EventClaims, bool) {
	for {
		claims, err := f.svc.repo.ClaimEvents(ctx, f.svc.worker, ids, f.svc.cfg.LockTTL)
		if err == nil {
			return claims, true
		}
		f.svc.m.batchErrors.WithLabelValues("claim").Inc()
		f.svc.log.Error("fast path claim failed; retrying", "events", len(ids), "error", err.Error())
		select {
		case <-ctx.Done():
			f.releaseTokens(len(ids))
			return EventClaims{}, false
		case <-time.After(retryJitter.Jitter(f.backoff)):
		}
	}
}

// countClaims records a claim of n events in the metrics, registers the
// claimed rows for lock renewal and logs the events without a row.
func (f *FastPath) countClaims(n int, claims EventClaims, envs map[string]envelope.View) {
	f.svc.m.claimBatch.WithLabelValues("fast").Observe(float64(n))
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
			"event_type", string(envs[id].EventType), "room_id", string(envs[id].RoomID))
	}
}

// roomJobs groups the claimed events of ids by room: the rooms in order of
// their first event, and each room's jobs in record order (its order).
func roomJobs(ids []string, claims EventClaims, envs map[string]envelope.View) (order []string, byRoom map[string][]job) {
	byRoom = map[string][]job{}
	for _, id := range ids {
		row, ok := claims.Claimed[id]
		if !ok {
			continue
		}
		if _, seen := byRoom[row.RoomID]; !seen {
			order = append(order, row.RoomID)
		}
		byRoom[row.RoomID] = append(byRoom[row.RoomID], job{row: row, env: envs[id]})
	}
	return order, byRoom
}

// startChain starts room's chain for poll b: it waits for the room's
// previous chain and a lane, then sends jobs in order, handing each result
// to the recorder at once. When owner's partition is given up the chain
// starts no send: the rows left are handed back (see onRevoked).
func (f *FastPath) startChain(lt lifetime, b *pollBatch, room string, jobs []job, owner *partition) {
	f.mu.Lock()
	prev := f.tails[room]
	done := make(chan struct{})
	f.tails[room] = done
	owner.open += len(jobs)
	f.mu.Unlock()
	f.chains.Go(func() {
		lt, stop := lt.until(owner.ctx)
		defer stop()
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
		lane := true
		select {
		case f.svc.lanes <- struct{}{}:
		case <-lt.run.Done(): // nothing to send: the rows go back without a lane
			lane = false
		}
		var mu sync.Mutex
		for i, j := range jobs {
			out := &outcome{}
			f.svc.one(lt, "fast", j, &mu, out)
			<-f.tokens
			last := i == len(jobs)-1
			if last && lane {
				<-f.svc.lanes
			}
			// Each result goes to the recorder at once, so a send is
			// marked within milliseconds, not when its room's run ends.
			f.results <- chainResult{b: b, owner: owner, out: out, last: last}
		}
	})
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
// whose results are all recorded, in order. When stop is closed (every
// chain has ended) it records what is left and returns.
func (f *FastPath) recorder(lt lifetime, stop <-chan struct{}) {
	for {
		var batch []chainResult
		select {
		case first := <-f.results:
			batch = collect(first, f.results)
		case <-stop:
			for len(f.results) > 0 {
				batch = append(batch, <-f.results)
			}
			if len(batch) == 0 {
				return
			}
		}
		var all outcome
		for _, r := range batch {
			all.merge(r.out)
		}
		if err := f.svc.record(lt, "fast", &all); err != nil {
			f.svc.log.Error("fast path results had errors", "error", err.Error())
		}
		f.mu.Lock()
		for _, r := range batch {
			if r.owner != nil {
				r.owner.open--
			}
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
			f.cl.MarkCommitRecords(f.queue[n].ours(lt.run)...)
			n++
		}
		f.queue = append(f.queue[:0], f.queue[n:]...)
		f.idle.Broadcast()
		f.mu.Unlock()
	}
}
