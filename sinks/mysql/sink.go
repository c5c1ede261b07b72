package mysqlsink

import (
	"context"
	"errors"
	"fmt"
	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/mysqlerr"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Hooks let tests stop the sink at chosen points as a crash would. A hook
// returning an error makes Run return that error at once: no further
// MySQL or Kafka commit, the Kafka client closed without committing.
type Hooks struct {
	// BeforeApply runs before each transaction attempt.
	BeforeApply func(ctx context.Context, records int) error
	// InTxn runs inside each transaction after the facts are written and
	// before the offsets are; an error rolls the transaction back.
	InTxn func(ctx context.Context) error
	// AfterCommit runs right after each transaction's MySQL commit (facts
	// and offsets), before anything else: a crash at the first moment the
	// facts are durable, which tells offsets written in the transaction
	// from offsets written after it.
	AfterCommit func(ctx context.Context) error
	// AfterApply runs after the MySQL commit and before the (informational)
	// Kafka offset commit.
	AfterApply func(ctx context.Context, res Result) error
}

// Sink is the engine of `roomflow sink`: it consumes the topics of its
// store's appliers in consumer group Config.Group and applies them to
// MySQL exactly once (see Store.Apply). Kafka offsets committed by the
// sink are informational; the positions that count are the ones in
// roomflow_sink_offsets, read on every assignment.
type Sink struct {
	cfg   Config
	store *Store
	log   *slog.Logger // cfg.Logger tagged component=sink
	m     *Metrics

	// shared are the topics whose partitions stay in one transaction
	// (Applier.SharedRows).
	shared map[string]bool

	mu     sync.Mutex
	claims map[TP]int64 // generation claimed per owned partition
	cl     *kgo.Client
	// client counts the Kafka clients Run made; the group callbacks of an
	// older one (closing in the background) change nothing.
	client int
	// fenced: a batch of the current client was fenced; Run replaces the
	// client after that batch.
	fenced  bool
	lastErr error
}

// New returns a sink applying the topics of store's appliers to store's
// database. It fills cfg's defaults and fails on a config that does not
// validate (each error a *cfgerr.FieldError naming the field) or whose
// Group is not the store's; Kafka is only contacted by Run.
func New(cfg Config, store *Store) (*Sink, error) {
	if cfg.Group == "" {
		cfg.Group = store.group
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Group != store.group {
		return nil, &cfgerr.FieldError{Key: "group", Msg: fmt.Sprintf("must be the store's group %q: the offsets in roomflow_sink_offsets are kept under it (got %q)", store.group, cfg.Group)}
	}
	s := &Sink{cfg: cfg, store: store, claims: map[TP]int64{}, shared: map[string]bool{}}
	for topic, a := range store.appliers {
		s.shared[topic] = a.SharedRows()
	}
	s.log = cfg.Logger.With("component", "sink")
	s.m = NewMetrics(cfg.Registerer)
	if cfg.Hooks.InTxn != nil {
		store.inTxn = cfg.Hooks.InTxn
	}
	if cfg.Hooks.AfterCommit != nil {
		store.afterCommit = cfg.Hooks.AfterCommit
	}
	if cfg.Health != nil {
		cfg.Health.AddReadiness("sink", func() error {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.lastErr
		})
	}
	return s, nil
}

// Owner is the instance id used for fencing.
func (s *Sink) Owner() string { return s.cfg.OwnerID }

// Metrics returns the sink's metrics.
func (s *Sink) Metrics() *Metrics { return s.m }

func nowMs() int64 { return time.Now().UnixMilli() }

// Run consumes until ctx is cancelled, then applies the batch in flight
// (within Config.ShutdownTimeout), closes its Kafka client and returns
// nil. It returns an error when a batch cannot be applied after
// Config.MaxRetries retries, a non-transient MySQL error occurs or the
// broker refuses the consumer group for good (*kafkax.GroupRefusedError).
func (s *Sink) Run(ctx context.Context) error {
	s.log.Info("sink started", "owner_id", s.cfg.OwnerID, "group", s.cfg.Group, "topics", s.store.Topics())
	for {
		restart, err := s.consume(ctx)
		if err != nil {
			return err
		}
		if !restart {
			break
		}
		s.log.Warn("kafka client replaced after a fenced batch: the group had evicted this instance")
	}
	s.log.Info("sink stopped", "owner_id", s.cfg.OwnerID)
	return nil
}

// newClient makes the Kafka client of a new consumption: a new group
// member with no claims.
func (s *Sink) newClient() (*kgo.Client, error) {
	s.mu.Lock()
	s.client++
	client := s.client
	s.claims = map[TP]int64{}
	s.fenced = false
	s.mu.Unlock()
	revoked := func(_ context.Context, _ *kgo.Client, m map[string][]int32) { s.revoked(client, m) }
	opts := append([]kgo.Opt{
		kgo.ConsumerGroup(s.cfg.Group),
		kgo.ConsumeTopics(s.store.Topics()...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AdjustFetchOffsetsFn(func(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return s.adjust(ctx, client, offsets)
		}),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			s.log.Debug("partitions assigned", "partitions", fmt.Sprint(m))
		}),
		kgo.OnPartitionsRevoked(revoked),
		kgo.OnPartitionsLost(revoked),
	}, s.cfg.Kafka.GroupOpts()...)
	if s.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(s.cfg.InstanceID))
	}
	// The cluster's options (brokers, client id, metrics, logs) come last,
	// so its Extra overrides the sink's own.
	cl, err := kgo.NewClient(append(opts, s.cfg.Kafka.Opts("sink")...)...)
	if err != nil {
		return nil, fmt.Errorf("mysql sink: kafka client: %w", err)
	}
	s.mu.Lock()
	s.cl = cl
	s.mu.Unlock()
	return cl, nil
}

// consume runs one Kafka client until ctx is cancelled (restart false,
// nil), a batch fails (its error) or a batch was fenced (restart true).
// A fenced batch means the group evicted this member, and franz-go may
// rejoin it under a new member id still owning its old partitions: no
// OnPartitionsLost, no AdjustFetchOffsetsFn for a partition it keeps, so
// nothing would claim them again (finding 9 in docs/reliability.md). A new
// client joins with no partitions, and claims every one it gets.
func (s *Sink) consume(ctx context.Context) (restart bool, err error) {
	cl, err := s.newClient()
	if err != nil {
		return false, err
	}
	for {
		recs, hw, closed, refused := s.collect(ctx, cl)
		if refused != nil {
			// The batch is abandoned, as at shutdown: the stored offsets
			// are where the next owner starts.
			s.setErr(refused)
			s.closeClient(ctx, cl)
			return false, refused
		}
		if len(recs) > 0 {
			err := s.process(ctx, cl, recs, hw)
			if err != nil && ctx.Err() != nil {
				// Shutting down: the batch is abandoned, not half-applied;
				// the next owner re-reads it from the stored offsets.
				s.log.Warn("in-flight batch abandoned at shutdown", "records", len(recs), "error", err)
				break
			}
			if err != nil {
				s.closeClient(ctx, cl)
				return false, err
			}
			s.mu.Lock()
			restart = s.fenced && ctx.Err() == nil
			s.mu.Unlock()
		}
		cl.AllowRebalance()
		if restart || closed || ctx.Err() != nil {
			break
		}
	}
	s.closeClient(ctx, cl)
	return restart, nil
}

// closeClient leaves the group and closes cl. Leaving may wait for a
// JoinGroup answer up to the rebalance timeout: bounded by
// Config.ShutdownTimeout.
func (s *Sink) closeClient(ctx context.Context, cl *kgo.Client) {
	cl.AllowRebalance()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	kafkax.CloseWithin(cctx, cl, s.log)
	cancel()
}

// collect polls up to Config.BatchSize records, waiting at most
// Config.FlushInterval after the first one; closed when the client is.
// A group the broker refuses for good ends it at once with that
// *kafkax.GroupRefusedError.
func (s *Sink) collect(ctx context.Context, cl *kgo.Client) (_ []*kgo.Record, _ map[TP]int64, closed bool, _ error) {
	var out []*kgo.Record
	hw := map[TP]int64{}
	var deadline time.Time
	for len(out) < s.cfg.BatchSize {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if !deadline.IsZero() {
			if time.Until(deadline) <= 0 {
				break
			}
			pctx, cancel = context.WithDeadline(ctx, deadline)
		}
		fs := cl.PollRecords(pctx, s.cfg.BatchSize-len(out))
		cancel()
		if fs.IsClientClosed() {
			return out, hw, true, nil
		}
		if err := kafkax.RefusedGroup(s.cfg.Group, fs); err != nil {
			return nil, nil, false, err
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Warn("fetch error", "topic", t, "partition", p, "error", err)
			}
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				hw[TP{p.Topic, p.Partition}] = p.HighWatermark
				out = append(out, p.Records...)
			}
		})
		if len(out) == 0 {
			// A poll that returned only errors still blocks rebalancing
			// (BlockRebalanceOnPoll); nothing is in flight, so allow it.
			cl.AllowRebalance()
		} else if deadline.IsZero() {
			deadline = time.Now().Add(s.cfg.FlushInterval)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return out, hw, false, nil
}

// adjust claims newly assigned partitions in MySQL and starts each at the
// offset stored there (the start of the log when there is none).
func (s *Sink) adjust(ctx context.Context, client int, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	var tps []TP
	for t, ps := range offsets {
		for p := range ps {
			tps = append(tps, TP{t, p})
		}
	}
	var claimed map[TP]Claimed
	var err error
	for attempt := 0; ; attempt++ {
		claimed, err = s.store.Claim(ctx, s.cfg.OwnerID, tps, nowMs())
		if err == nil || !mysqlerr.Retryable(err) || attempt >= s.cfg.MaxRetries {
			break
		}
		s.m.Retries.WithLabelValues(mysqlerr.Reason(err)).Inc()
		if !sleepCtx(ctx, retryDelay(attempt)) {
			break
		}
	}
	if err != nil {
		s.log.Error("claiming partitions failed; the group will rejoin", "error", err)
		return nil, fmt.Errorf("mysql sink: claim: %w", err)
	}
	s.mu.Lock()
	if client != s.client {
		s.mu.Unlock()
		return nil, errReplacedClient
	}
	for tp, c := range claimed {
		s.claims[tp] = c.Generation
		at := kgo.NewOffset().AtStart()
		if c.NextOffset >= 0 {
			at = kgo.NewOffset().At(c.NextOffset)
		}
		offsets[tp.Topic][tp.Partition] = at
		s.log.Debug("partition claimed", "topic", tp.Topic, "partition", tp.Partition, "generation", c.Generation, "next_offset", c.NextOffset)
	}
	s.mu.Unlock()
	s.m.Claims.Add(float64(len(claimed)))
	s.log.Info("partitions claimed in MySQL", "owner_id", s.cfg.OwnerID, "partitions", len(claimed))
	return offsets, nil
}

// errReplacedClient fails the offset fetch of a client Run has replaced.
var errReplacedClient = errors.New("mysql sink: kafka client replaced")

// revoked forgets the claims of partitions client no longer owns.
func (s *Sink) revoked(client int, m map[string][]int32) {
	s.log.Debug("partitions revoked or lost", "partitions", fmt.Sprint(m))
	s.mu.Lock()
	defer s.mu.Unlock()
	if client != s.client {
		return // the claims are the new client's
	}
	for t, ps := range m {
		for _, p := range ps {
			delete(s.claims, TP{t, p})
			s.m.dropLag(TP{t, p})
		}
	}
}

// retryCeiling is the longest wait before retry attempt+1 of a batch or a
// claim: 20ms doubling to 2s.
func retryCeiling(attempt int) time.Duration {
	d := 20 * time.Millisecond << min(attempt, 7)
	return min(d, 2*time.Second)
}

// retryJitter spreads the retries of sinks that failed together (a MySQL
// failover) over the upper half of each wait.
var retryJitter = backoff.MustNew(backoff.Config{JitterFraction: 0.5})

// retryDelay is the wait before retry attempt+1: in [ceiling/2, ceiling].
func retryDelay(attempt int) time.Duration { return retryJitter.Jitter(retryCeiling(attempt)) }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// process decodes recs, sends undecodable ones to the DLQ, and applies the
// batch with whole-batch retries. After ctx is cancelled the batch still
// gets Config.ShutdownTimeout to commit.
func (s *Sink) process(ctx context.Context, cl *kgo.Client, krecs []*kgo.Record, hw map[TP]int64) error {
	ctx, done := drainContext(ctx, s.cfg.ShutdownTimeout)
	defer done()
	s.mu.Lock()
	claims := maps.Clone(s.claims)
	s.mu.Unlock()

	recs := make([]Record, 0, len(krecs))
	last := map[TP]*kgo.Record{}
	for _, kr := range krecs {
		tp := TP{kr.Topic, kr.Partition}
		if _, ok := claims[tp]; !ok {
			continue // not claimed by this client (revoked meanwhile)
		}
		r := Record{TP: tp, Offset: kr.Offset}
		a, ok := s.store.appliers[kr.Topic]
		if !ok {
			return fmt.Errorf("mysql sink: record of %s, a topic without applier", kr.Topic)
		}
		if item, err := a.decode(kr); err != nil {
			if derr := s.deadLetter(ctx, cl, kr, err); derr != nil {
				return derr
			}
		} else {
			r.Item = item
		}
		recs = append(recs, r)
		last[tp] = kr
	}
	s.m.BatchRecords.WithLabelValues().Observe(float64(len(recs)))

	// Disjoint partition groups commit in concurrent transactions; each
	// carries the offsets of its own partitions, so each is exactly once on
	// its own. Partitions that share fact rows (SharedRows) stay together.
	groups := splitByPartition(recs, s.cfg.Parallelism, s.shared)
	results := make([]Result, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		gclaims := maps.Clone(claims) // applyGroup drops fenced partitions from its copy
		wg.Go(func() { results[i], errs[i] = s.applyGroup(ctx, gclaims, g) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var offsets []map[TP]int64
	for _, res := range results {
		if res.Offsets == nil {
			continue // fenced as a whole
		}
		s.m.observe(res)
		if h := s.cfg.Hooks.AfterApply; h != nil {
			if err := h(ctx, res); err != nil {
				return err
			}
		}
		offsets = append(offsets, res.Offsets)
	}
	commit := map[string]map[int32]kgo.EpochOffset{}
	for tp, next := range mergeOffsets(offsets) {
		if h, ok := hw[tp]; ok {
			s.m.setLag(tp, h-next)
		}
		kr := last[tp]
		if kr == nil {
			continue
		}
		if commit[tp.Topic] == nil {
			commit[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		commit[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: kr.LeaderEpoch, Offset: next}
	}
	// Informational only (lag tools): positions that count are in MySQL.
	cl.CommitOffsets(context.WithoutCancel(ctx), commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			s.log.Debug("informational kafka offset commit failed", "error", err)
		}
	})
	return nil
}

// applyGroup applies one group of records with whole-batch retries. Records
// of partitions found fenced are dropped and the rest retried; a group
// left empty returns a zero Result.
func (s *Sink) applyGroup(ctx context.Context, claims map[TP]int64, recs []Record) (Result, error) {
	for attempt := 0; len(recs) > 0; {
		if h := s.cfg.Hooks.BeforeApply; h != nil {
			if err := h(ctx, len(recs)); err != nil {
				return Result{}, err
			}
		}
		t0 := time.Now()
		res, err := s.store.Apply(ctx, s.cfg.OwnerID, claims, recs, nowMs())
		var fe *FencedError
		switch {
		case err == nil:
			s.m.TxnSeconds.WithLabelValues("committed").Observe(time.Since(t0).Seconds())
			s.setErr(nil)
			return res, nil
		case errors.As(err, &fe):
			s.m.TxnSeconds.WithLabelValues("fenced").Observe(time.Since(t0).Seconds())
			s.m.Fenced.Inc()
			s.log.Warn("batch fenced: another instance owns these partitions now; dropping their records", "partitions", fmt.Sprint(fe.Partitions))
			recs = s.fence(fe.Partitions, claims, recs)
		case mysqlerr.Retryable(err) && attempt < s.cfg.MaxRetries:
			s.m.TxnSeconds.WithLabelValues("retry").Observe(time.Since(t0).Seconds())
			s.m.Retries.WithLabelValues(mysqlerr.Reason(err)).Inc()
			s.setErr(err)
			s.log.Warn("batch failed, retrying the whole batch", "attempt", attempt+1, "records", len(recs), "error", err)
			if !sleepCtx(ctx, retryDelay(attempt)) {
				return Result{}, fmt.Errorf("mysql sink: batch not applied before shutdown: %w", err)
			}
			attempt++
		default:
			s.m.TxnSeconds.WithLabelValues("failed").Observe(time.Since(t0).Seconds())
			s.setErr(err)
			return Result{}, fmt.Errorf("mysql sink: apply batch: %w", err)
		}
	}
	return Result{}, nil
}

// splitByPartition deals the records' partitions round-robin (in sorted
// order) into at most n groups, keeping each partition's records together
// and in order. All partitions of a shared topic (Applier.SharedRows) form
// one slot, dealt before the single partitions: the lucky pool inflow
// partitions all write the (platform, global) row, which is then written
// once per batch instead of once per group.
func splitByPartition(recs []Record, n int, shared map[string]bool) [][]Record {
	var tps []TP
	seen := map[TP]bool{}
	for _, r := range recs {
		if !seen[r.TP] {
			seen[r.TP] = true
			tps = append(tps, r.TP)
		}
	}
	sortTPs(tps)
	// Slots: one per shared topic first, then one per other partition.
	slot := map[TP]int{}
	topicSlot := map[string]int{}
	slots := 0
	for _, tp := range tps {
		if shared[tp.Topic] {
			if _, ok := topicSlot[tp.Topic]; !ok {
				topicSlot[tp.Topic] = slots
				slots++
			}
			slot[tp] = topicSlot[tp.Topic]
		}
	}
	for _, tp := range tps {
		if !shared[tp.Topic] {
			slot[tp] = slots
			slots++
		}
	}
	n = max(1, min(n, slots))
	if n == 1 {
		return [][]Record{recs}
	}
	groups := make([][]Record, n)
	for _, r := range recs {
		g := slot[r.TP] % n
		groups[g] = append(groups[g], r)
	}
	return groups
}

func mergeOffsets(ms []map[TP]int64) map[TP]int64 {
	out := map[TP]int64{}
	for _, m := range ms {
		for tp, n := range m {
			out[tp] = n
		}
	}
	return out
}

// drainContext returns a context that outlives ctx by grace: the batch in
// flight when shutdown starts still gets grace to commit.
func drainContext(ctx context.Context, grace time.Duration) (context.Context, func()) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return dctx, func() { stop(); cancel() }
}

// fence drops the records of partitions another instance claimed, and
// marks the client stale: Run replaces it after this batch (consume).
func (s *Sink) fence(tps []TP, claims map[TP]int64, recs []Record) []Record {
	drop := map[TP]bool{}
	for _, tp := range tps {
		drop[tp] = true
		delete(claims, tp)
	}
	s.mu.Lock()
	s.fenced = true
	s.mu.Unlock()
	out := recs[:0]
	for _, r := range recs {
		if !drop[r.TP] {
			out = append(out, r)
		}
	}
	return out
}

func (s *Sink) setErr(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// deadLetter sends a record that can never be applied to Config.DLQTopic
// with headers naming the error and the source position. Its offset still
// advances with the batch, so it never blocks the partition.
func (s *Sink) deadLetter(ctx context.Context, cl *kgo.Client, kr *kgo.Record, cause error) error {
	reason := "invalid"
	var ie *InvalidRecordError
	if errors.As(cause, &ie) {
		reason = ie.Reason
	}
	s.m.DLQ.WithLabelValues(reason).Inc()
	s.log.Warn("record sent to DLQ", "event_id", string(envelope.Header(kr, envelope.HeaderEventID)), "event_type", string(envelope.Header(kr, envelope.HeaderEventType)),
		"topic", kr.Topic, "partition", kr.Partition, "offset", kr.Offset, "reason", reason, "error", cause)
	rec := (&envelope.DeadLetter{Stage: "sink", Reason: reason, Err: cause, From: kr}).Build(s.cfg.DLQTopic)
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("mysql sink: dlq: %w", err)
	}
	return nil
}
