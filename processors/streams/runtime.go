package streams

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Runtime runs one Processor over a consumer group with Kafka transactions.
// Create it with New and call Run once.
type Runtime struct {
	name string
	proc Processor
	cfg  Config
	m    *metrics
	log  *slog.Logger

	sess *kgo.GroupTransactSession
	adm  *kadm.Client

	evMu   sync.Mutex
	events []partEvent

	tasks map[int32]*task
	// arena holds the memory of the open transaction's records (see
	// txnArena); reset when a transaction ends.
	arena *txnArena

	// open transaction
	inTxn      bool
	txnStart   time.Time // real time of the first content
	txnContent bool
	txnIn      int
	txnOut     topicCounts
	// stamp is the output timestamp of the poll being processed,
	// reused for stampLeft more input records (pollStamp)
	stamp     time.Time
	stampLeft int
	txnDLQ    map[string]int
	txnPunct  map[string]int
	// txnCatchUp: the open transaction holds a catch-up run (Task.MoreDue)
	// and is committed at once, so the next run can follow.
	txnCatchUp bool
	// txnSeq counts ended transactions.
	txnSeq uint64
	// commitErrSeq is txnSeq after the last transaction whose commit
	// failed and was aborted, commitErrBackoff its back-off (endAborted).
	commitErrSeq     uint64
	commitErrBackoff time.Duration
	// stopBy is the end of ShutdownTimeout, set when shutdown begins.
	stopBy     time.Time
	prodMu     sync.Mutex
	prodErr    error
	promise    func(*kgo.Record, error)
	recordsIn  prometheus.Counter
	processor  prometheus.Labels
	killed     atomic.Bool
	ready      atomic.Bool
	restoring  atomic.Int32 // partitions whose restore has not finished
	killOnce   sync.Once
	sessReady  chan struct{}
	sessCloser sync.Once
	assigned   atomic.Pointer[[]int32]
	runCtx     context.Context
	// lso reads the input's last stable offsets for punctuation ticks.
	lso lsoReads
	// restoreOpts connect a changelog reader like the session client, but
	// without its hooks (metrics plugins register per client).
	restoreOpts []kgo.Opt
}

type partEventKind int

const (
	evAssigned partEventKind = iota
	evRevoked
)

type partEvent struct {
	kind       partEventKind
	partitions []int32
}

// New validates cfg (with its defaults applied, see Config) and returns
// a runtime running proc under cfg.Name. It does not connect. A
// configuration error is keyed by Config's field names (cfgerr).
func New(cfg Config, proc Processor) (*Runtime, error) {
	if proc == nil {
		return nil, errors.New("runtime: nil processor")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Punctuations = slices.Clone(cfg.Punctuations)
	name := cfg.Name
	r := &Runtime{
		name:      name,
		proc:      proc,
		cfg:       cfg,
		m:         newMetrics(cfg.Registerer),
		log:       cfg.Logger.With("component", "processor", "processor", name),
		tasks:     map[int32]*task{},
		arena:     newTxnArena(),
		txnDLQ:    map[string]int{},
		txnPunct:  map[string]int{},
		sessReady: make(chan struct{}),
	}
	r.promise = func(_ *kgo.Record, err error) {
		if err != nil {
			r.prodMu.Lock()
			if r.prodErr == nil {
				r.prodErr = err
			}
			r.prodMu.Unlock()
		}
	}
	r.recordsIn = r.m.recordsIn.WithLabelValues(name, cfg.Input)
	r.m.precreate(name, cfg.RejectReasons)
	return r, nil
}

// Ready is nil once Run has connected and entered its processing loop and
// while no partition is being restored; use it as a readiness check.
func (r *Runtime) Ready() error {
	if n := r.restoring.Load(); n > 0 {
		return fmt.Errorf("runtime %s: restoring %d partitions", r.name, n)
	}
	if r.ready.Load() {
		return nil
	}
	return errors.New("runtime " + r.name + ": not ready")
}

// Assigned returns the input partitions whose tasks are restored and
// running, in no particular order. Safe for concurrent use.
func (r *Runtime) Assigned() []int32 {
	if p := r.assigned.Load(); p != nil {
		return append([]int32(nil), (*p)...)
	}
	return nil
}

func (r *Runtime) publishAssigned() {
	ps := make([]int32, 0, len(r.tasks))
	for p := range r.tasks {
		ps = append(ps, p)
	}
	r.assigned.Store(&ps)
}

// Kill closes the Kafka client at once without ending the open
// transaction, as a crash would: the broker aborts that transaction when an
// instance with the same transactional id starts, or after the transaction
// timeout. Run then returns ErrKilled. It exists for crash tests and for
// callers that must stop without committing.
func (r *Runtime) Kill() {
	r.killed.Store(true)
	r.killOnce.Do(func() {
		go func() {
			<-r.sessReady
			// Leaving the group (instead of waiting for the session
			// timeout) only makes the takeover fast; the transaction
			// is left open, as in a crash.
			r.sess.Client().Close()
		}()
	})
}

// Run consumes, processes and commits until ctx is cancelled (it then
// commits the open transaction within ShutdownTimeout, or aborts it, leaves
// the group and returns nil) or a fatal error occurs (*TxnError,
// *RestoreError, ErrKilled, a configuration mismatch such as a changelog
// with fewer partitions than the input).
func (r *Runtime) Run(ctx context.Context) error {
	r.runCtx = ctx
	if err := r.start(); err != nil {
		return err
	}
	defer r.closeSession()

	if err := r.checkTopics(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil // stopped before it consumed anything
		}
		return err
	}
	lagCtx, stopLag := context.WithCancel(ctx)
	defer stopLag()
	if r.cfg.LagInterval > 0 {
		go r.lagLoop(lagCtx)
	}

	err := r.loop(ctx)
	if r.killed.Load() {
		return ErrKilled
	}
	return err
}

func (r *Runtime) start() error {
	opts := r.cfg.clientOpts(
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Input),
		kgo.TransactionalID(r.cfg.TransactionalID),
		kgo.TransactionTimeout(r.cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers advance the consume position, so a
		// caught-up task reaches the last stable offset (punctuate).
		kgo.KeepControlRecords(),
		kgo.RequireStableFetchOffsets(),
		kgo.DisableAutoCommit(),
		// A new group starts at the beginning, and a consumer that has read
		// never jumps: kgo's reset policy would restart a partition from its
		// first offset inside the open transaction when a new leader knows
		// no end for the epoch it read in (unclean election), and state
		// whose duplicate memory is bounded would count old input again.
		// A real OFFSET_OUT_OF_RANGE stops the partition with an error.
		kgo.ConsumeResetOffset(kgo.NoResetOffset().AtStart()),
		kgo.RecordPartitioner(partitioner{changelog: r.cfg.Changelog, def: kgo.StickyKeyPartitioner(nil)}),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			r.logGroupChange(cl, "partitions assigned", m[r.cfg.Input])
			r.pushEvent(evAssigned, m[r.cfg.Input])
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			r.logGroupChange(cl, "partitions revoked", m[r.cfg.Input])
			r.pushEvent(evRevoked, m[r.cfg.Input])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			r.logGroupChange(cl, "partitions lost", m[r.cfg.Input])
			r.pushEvent(evRevoked, m[r.cfg.Input])
		}),
	)
	if r.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(r.cfg.InstanceID))
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("runtime %s: client: %w", r.name, err)
	}
	r.sess = sess
	r.adm = kadm.NewClient(sess.Client())
	r.restoreOpts = restoreOpts(sess.Client())
	close(r.sessReady)
	if r.killed.Load() {
		return ErrKilled
	}
	return nil
}

func (r *Runtime) closeSession() {
	r.sessCloser.Do(func() {
		if r.killed.Load() {
			return // Kill closes it
		}
		r.closeClient()
	})
	for p := range r.tasks {
		r.dropTask(p)
	}
}

func (r *Runtime) pushEvent(kind partEventKind, ps []int32) {
	if len(ps) == 0 {
		return
	}
	r.evMu.Lock()
	r.events = append(r.events, partEvent{kind: kind, partitions: append([]int32(nil), ps...)})
	r.evMu.Unlock()
}

// logGroupChange logs an assignment change as the group hands it over,
// with the member and generation: the record of who owned what, when.
func (r *Runtime) logGroupChange(cl *kgo.Client, msg string, ps []int32) {
	if len(ps) == 0 {
		return
	}
	member, gen := cl.GroupMetadata()
	r.log.Info(msg, "partitions", fmt.Sprint(ps), "member_id", member, "generation", gen)
}

func (r *Runtime) takeEvents() []partEvent {
	r.evMu.Lock()
	defer r.evMu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

// checkTopics verifies that the changelog is co-partitioned with the input.
func (r *Runtime) checkTopics(ctx context.Context) error {
	if r.cfg.Changelog == "" {
		return nil
	}
	for {
		td, err := r.adm.ListTopics(ctx, r.cfg.Input, r.cfg.Changelog)
		if err == nil {
			in, okIn := td[r.cfg.Input]
			cl, okCl := td[r.cfg.Changelog]
			if okIn && okCl && in.Err == nil && cl.Err == nil {
				if len(cl.Partitions) < len(in.Partitions) {
					return fmt.Errorf("runtime %s: changelog %s has %d partitions, input %s has %d: must be co-partitioned",
						r.name, r.cfg.Changelog, len(cl.Partitions), r.cfg.Input, len(in.Partitions))
				}
				return nil
			}
			err = fmt.Errorf("topics %s or %s missing", r.cfg.Input, r.cfg.Changelog)
		}
		if r.killed.Load() {
			return ErrKilled
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.log.Warn("checking topics", "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryJitter.Jitter(time.Second)):
		}
	}
}

func (r *Runtime) loop(ctx context.Context) error {
	readyOnce := false
	stopping := func() bool { return ctx.Err() != nil || r.killed.Load() }
	for {
		if stopping() {
			return r.shutdown()
		}
		if _, err := r.handleEvents(ctx); err != nil {
			if stopping() {
				return r.shutdown()
			}
			return err
		}
		if !readyOnce {
			readyOnce = true
			r.ready.Store(true)
		}
		if err := r.beginTxn(); err != nil {
			return err
		}
		resumeIn := r.resumeStalled()
		r.punctuate()
		fetches := r.poll(ctx, resumeIn)
		if fetches.IsClientClosed() || r.killed.Load() {
			if r.killed.Load() {
				return ErrKilled
			}
			return r.shutdown()
		}
		fetches.EachError(func(t string, p int32, err error) {
			switch {
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			case errors.Is(err, kerr.OffsetOutOfRange):
				// The input never resets (see start): the partition stays stopped
				// until an operator moves the group's offset.
				r.log.Error("input partition stopped: its committed position is no longer in the log", "topic", t, "partition", p, "error", err)
			default:
				r.log.Warn("fetch error", "topic", t, "partition", p, "error", err)
			}
		})
		// Assignment changes seen after the poll: restore new partitions
		// before processing; a revoke aborts and rewinds, so the fetched
		// records are stale and dropped.
		rewound, err := r.handleEvents(ctx)
		if err != nil {
			if stopping() {
				return r.shutdown()
			}
			return err
		}
		if !rewound {
			if err := r.processFetches(fetches); err != nil {
				// The client and the tasks disagree on the assignment:
				// rewind everything to the last commit.
				r.log.Error("transaction aborted", "error", err)
				if _, err := r.endTxn(r.cfg.TransactionTimeout, false, "unowned_partition"); err != nil {
					return err
				}
				continue
			}
		}
		if r.commitDue() {
			if _, err := r.endTxn(r.cfg.TransactionTimeout, true, ""); err != nil {
				if stopping() {
					return r.shutdown()
				}
				return err
			}
		}
	}
}

// beginTxn opens a transaction unless one is open.
func (r *Runtime) beginTxn() error {
	if r.inTxn {
		return nil
	}
	if err := r.sess.Begin(); err != nil {
		if r.killed.Load() {
			return ErrKilled
		}
		return &TxnError{Processor: r.name, Err: err}
	}
	r.inTxn = true
	return nil
}

// poll fetches up to the records the open transaction still takes, waiting
// at most until the transaction is due (CommitInterval after its first
// content) or a stalled partition's backoff ends (resumeIn > 0). A due
// transaction with content polls nothing: it commits first. A catch-up run
// polls only the records already fetched (catchUpPoll): the next run
// follows its commit.
func (r *Runtime) poll(ctx context.Context, resumeIn time.Duration) kgo.Fetches {
	wait := r.cfg.CommitInterval
	if r.txnContent {
		wait = max(time.Until(r.txnStart.Add(r.cfg.CommitInterval)), 0)
	}
	if resumeIn > 0 {
		wait = min(wait, resumeIn)
	}
	if r.txnCatchUp {
		wait = catchUpPoll
	}
	if wait <= 0 && r.txnContent {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return r.sess.PollRecords(pctx, max(r.cfg.CommitRecords-r.txnIn, 1))
}

// commitDue reports whether the open transaction holds a catch-up run
// (committed at once so the next run can follow), CommitRecords input
// records, or has been open CommitInterval since its first content.
func (r *Runtime) commitDue() bool {
	return r.inTxn && r.txnContent && (r.txnCatchUp || r.txnIn >= r.cfg.CommitRecords || !time.Now().Before(r.txnStart.Add(r.cfg.CommitInterval)))
}

// processFetches hands the polled records to their tasks, in offset order
// per partition. A record failing with a non-reject error stalls its
// partition (stallRecord) and the partition's later records are left to be
// fetched again; the other partitions go on.
func (r *Runtime) processFetches(fetches kgo.Fetches) error {
	var err error
	r.stampLeft = 0 // a fresh timestamp for this poll's output
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if err != nil || fp.Topic != r.cfg.Input || len(fp.Records) == 0 {
			return
		}
		t := r.tasks[fp.Partition]
		if t == nil {
			err = fmt.Errorf("runtime %s: records of unowned partition %d", r.name, fp.Partition)
			return
		}
		for _, rec := range fp.Records {
			if rec.Attrs.IsControl() {
				continue // a transaction marker: consumed, nothing to process
			}
			if t.stall != nil && t.stall.fetchPaused() {
				// Polled before the pause took effect: set back, so
				// these records are refetched, not committed.
				r.setBack(t, rec)
				return
			}
			if perr := r.processRecord(t, rec); perr != nil {
				r.stallRecord(t, rec, perr)
				return
			}
			if t.stall != nil && t.stall.offset >= 0 && rec.Offset >= t.stall.offset {
				r.recovered(t)
			}
		}
	})
	return err
}

// shutdown ends the open transaction with a commit attempt bounded by the
// shutdown timeout (GroupTransactSession aborts it instead if that is not
// safe) and returns nil.
func (r *Runtime) shutdown() error {
	if r.killed.Load() {
		return ErrKilled
	}
	r.stopBy = time.Now().Add(r.cfg.ShutdownTimeout)
	if r.inTxn {
		committed, err := r.endTxn(r.cfg.ShutdownTimeout, r.txnContent, "shutdown")
		if err != nil {
			r.log.Error("final transaction failed; it is aborted by the broker", "error", err)
			return nil
		}
		r.log.Info("stopped", "final_commit", committed)
	}
	return nil
}

// markContent notes that the open transaction holds work.
func (r *Runtime) markContent() {
	if !r.txnContent {
		r.txnContent = true
		r.txnStart = time.Now()
	}
}

// processRecord runs the processor on rec. A reject (or corrupt state)
// sends rec to the DLQ; any other error is returned with rec's writes and
// emits undone, so the open transaction stays committable.
func (r *Runtime) processRecord(t *task, rec *kgo.Record) error {
	r.markContent()
	emits, err := t.step(func() error { return r.proc.Process(t, rec) })
	if err == nil {
		if len(emits) > 0 {
			r.produceEmits(emits, r.pollStamp())
		}
		r.txnIn++
		return nil
	}
	rej, ok := asDeadLetter(err)
	if !ok {
		return err
	}
	r.txnIn++
	r.produce(r.dlqRecord(rec, rej))
	r.txnDLQ[rej.Reason]++
	t.log.Warn("record rejected to the DLQ", "offset", rec.Offset, "reason", rej.Reason, "error", rej.Err,
		"event_id", string(envelope.Header(rec, envelope.HeaderEventID)), "event_type", string(envelope.Header(rec, envelope.HeaderEventType)))
	return nil
}

// stampEvery is how many input records of one poll share the timestamp
// of their output: one clock read per record was a visible share of a
// processor's CPU. roomflow's processors take microseconds per record, so
// a timestamp lags by well under a millisecond (nothing reads output
// timestamps but tools such as peek).
const stampEvery = 64

// pollStamp is the timestamp for the output of the poll's next input
// record (processFetches resets it per poll).
func (r *Runtime) pollStamp() time.Time {
	if r.stampLeft == 0 {
		r.stamp, r.stampLeft = time.Now(), stampEvery
	}
	r.stampLeft--
	return r.stamp
}

// produceEmits produces the output of one successful step and clears the
// task's references to it. Records without a timestamp get now (kgo would
// read the clock for each).
func (r *Runtime) produceEmits(emits []*kgo.Record, now time.Time) {
	for i, e := range emits {
		if e.Timestamp.IsZero() {
			e.Timestamp = now
		}
		r.produce(e)
		emits[i] = nil
	}
}

func (r *Runtime) produce(rec *kgo.Record) {
	r.txnOut.add(rec.Topic)
	r.sess.Produce(context.Background(), rec, r.promise)
}

// topicCounts counts a transaction's output records per topic. A
// processor writes to a few topics, whose names usually share their bytes
// (a pointer compare): a scan beats hashing the name for every record.
type topicCounts []topicCount

type topicCount struct {
	topic string
	n     int
}

func (c *topicCounts) add(topic string) {
	for i := range *c {
		if (*c)[i].topic == topic {
			(*c)[i].n++
			return
		}
	}
	*c = append(*c, topicCount{topic, 1})
}

// dlqRecord is rec's dead letter (schemas/envelope), its error text
// "reason: error" as always.
func (r *Runtime) dlqRecord(rec *kgo.Record, rej *RejectError) *kgo.Record {
	var cause error
	if rej.Err != nil {
		cause = fmt.Errorf("%s: %w", rej.Reason, rej.Err)
	}
	return (&envelope.DeadLetter{Stage: r.name, Reason: rej.Reason, Err: cause, From: rec}).Build(r.cfg.DLQ)
}

// endTxn ends the open transaction. With commit it first prepares the
// commit (prepareCommit) and commits unless that finds a reason to abort.
// It applies (committed) or discards (aborted) the store writes either
// way. An error is fatal (*TxnError), except a failed commit kgo aborted
// with the producer still usable (endAborted).
//
// Ending a transaction must not be interrupted half-way (a cancelled End
// leaves the producer unusable), so it does not follow Run's context: it
// is bounded by timeout (the transaction timeout; the shutdown timeout for
// the final one).
func (r *Runtime) endTxn(timeout time.Duration, commit bool, abortCause string) (bool, error) {
	if !r.inTxn {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if commit {
		if cause := r.prepareCommit(ctx); cause != "" {
			commit, abortCause = false, cause
		}
	}
	var committed bool
	var err error
	if commit && r.sess.Client().UncommittedOffsets() == nil && !r.eventsPending() {
		committed, err = r.endWithoutOffsets(ctx)
	} else {
		try := kgo.TryAbort
		if commit {
			try = kgo.TryCommit
		}
		committed, err = r.sess.End(ctx, try)
	}
	if err != nil && commit && r.endAborted(ctx, err) {
		err, abortCause = nil, commitErrorCause
	}
	elapsed := time.Since(r.txnStart)
	hadContent := r.txnContent
	r.inTxn = false
	r.prodMu.Lock()
	r.prodErr = nil
	r.prodMu.Unlock()
	if committed && err == nil {
		r.committed()
	} else {
		r.aborted(hadContent || commit, abortCause, err)
	}
	if hadContent {
		r.m.txnDuration.WithLabelValues(r.name).Observe(elapsed.Seconds())
	}
	r.txnContent = false
	r.txnCatchUp = false
	r.txnSeq++
	r.txnIn = 0
	r.txnOut = r.txnOut[:0]
	clear(r.txnDLQ)
	clear(r.txnPunct)
	if err != nil {
		// kgo may still hold records: the arena is not reused (the
		// runtime stops on this error).
		return false, &TxnError{Processor: r.name, Err: err}
	}
	// End flushed or aborted every record of the transaction: kgo no
	// longer references the arena.
	r.arena.reset()
	return committed, nil
}

// prepareCommit produces the changelog records of every dirty key and
// flushes, then checks what a commit needs: the flush and every produce
// succeeded and, for punctuation output alone, the group still has this
// member at its generation. It returns the abort cause, "" to commit.
func (r *Runtime) prepareCommit(ctx context.Context) string {
	r.produceChangelogs()
	cause := ""
	if err := r.sess.Client().Flush(ctx); err != nil {
		cause = "flush"
	}
	if cause == "" && r.txnIn == 0 && len(r.txnOut) > 0 {
		// Punctuation output only: no offsets, so the broker's
		// generation check on TxnOffsetCommit does not apply.
		if err := r.checkMembership(ctx); err != nil {
			if !r.killed.Load() {
				r.log.Warn("not a confirmed group member; aborting punctuation output", "error", err)
			}
			cause = "membership"
		}
	}
	r.prodMu.Lock()
	defer r.prodMu.Unlock()
	if r.prodErr != nil {
		if !r.killed.Load() {
			r.log.Error("produce failed; aborting the transaction", "error", r.prodErr)
		}
		cause = "produce"
	}
	return cause
}

// produceChangelogs produces one changelog record per key the open
// transaction wrote, in the transaction's arena.
func (r *Runtime) produceChangelogs() {
	now := time.Now() // one timestamp for the changelog records
	for _, t := range r.tasks {
		if t.store == nil {
			continue
		}
		t.store.eachDirty(func(k string, e entry, deleted bool) {
			rec := &r.arena.recs.take(1)[0]
			rec.Topic, rec.Partition, rec.Key = r.cfg.Changelog, t.partition, r.arena.bytes.copyString(k)
			rec.Timestamp = now
			if !deleted {
				rec.Value = r.arena.bytes.Append(9+len(e.value), func(b []byte) []byte { return appendChangelogValue(b, e) })
			}
			r.produce(rec)
		})
	}
}

// committed applies a committed transaction: the stores' writes become
// committed state and the transaction's counts go to the metrics.
func (r *Runtime) committed() {
	for _, t := range r.tasks {
		if t.store != nil {
			t.store.commit()
			r.updateStateGauges(t)
		}
	}
	r.recordsIn.Add(float64(r.txnIn))
	for _, c := range r.txnOut {
		r.m.recordsOut.WithLabelValues(r.name, c.topic).Add(float64(c.n))
	}
	for reason, n := range r.txnDLQ {
		r.m.dlq.WithLabelValues(r.name, reason).Add(float64(n))
	}
	for name, n := range r.txnPunct {
		r.m.punctuations.WithLabelValues(r.name, name).Add(float64(n))
	}
	r.m.txnCommits.WithLabelValues(r.name).Inc()
}

// aborted discards an aborted transaction's store writes and, when it held
// work (counted), counts and logs the abort under cause (default
// rebalance: GroupTransactSession refused the commit). endErr is End's
// error, which the caller reports instead.
func (r *Runtime) aborted(counted bool, cause string, endErr error) {
	for _, t := range r.tasks {
		if t.store != nil {
			t.store.abort()
		}
	}
	if !counted {
		return
	}
	if cause == "" {
		cause = "rebalance"
	}
	r.m.txnAborts.WithLabelValues(r.name, cause).Inc()
	if endErr == nil && !r.killed.Load() {
		r.log.Warn("transaction aborted; consumption rewound to the last commit", "cause", cause, "records", r.txnIn)
	}
}

// endWithoutOffsets commits a transaction that carries no input offsets
// (punctuation output only) on the client itself. GroupTransactSession.End
// would commit it too, but then holds the session for 500ms (a guard for
// offset commits to brokers without KIP-447, which a commit without offsets
// does not need), and a catch-up commits such transactions back to back.
// What End checks is checked before: membership (checkMembership), and no
// revoke or loss seen since the last poll (eventsPending).
// A commit the broker refuses as abortable is retried as an abort, as End
// does.
func (r *Runtime) endWithoutOffsets(ctx context.Context) (bool, error) {
	err := r.sess.Client().EndTransaction(ctx, kgo.TryCommit)
	if errors.Is(err, kerr.OperationNotAttempted) || errors.Is(err, kerr.TransactionAbortable) {
		r.log.Warn("commit of punctuation output not possible; aborting it", "error", err)
		return false, r.sess.Client().EndTransaction(ctx, kgo.TryAbort)
	}
	return err == nil, err
}

// eventsPending reports whether an assignment change waits for
// handleEvents.
func (r *Runtime) eventsPending() bool {
	r.evMu.Lock()
	defer r.evMu.Unlock()
	return len(r.events) > 0
}

// checkMembership asks the group coordinator whether this member and
// generation are still current (a Heartbeat), so a zombie — expired from
// the group without having noticed — cannot commit a transaction that
// carries punctuation output but no input offsets. Any error, including a
// rebalance in progress, means "do not commit".
func (r *Runtime) checkMembership(ctx context.Context) error {
	member, gen := r.sess.Client().GroupMetadata()
	if member == "" || gen < 0 {
		return errors.New("not in the group")
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group = r.cfg.Group
	req.MemberID = member
	req.Generation = gen
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(hctx, r.sess.Client())
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

// handleEvents applies assignment changes: a revoke or loss aborts the open
// transaction (rewinding every partition to its committed offset) and drops
// the partitions' tasks; an assignment restores the new tasks (with a
// changelog, that also aborts the open transaction). It reports whether the
// open transaction was aborted.
func (r *Runtime) handleEvents(ctx context.Context) (bool, error) {
	events := r.takeEvents()
	if len(events) == 0 {
		return false, nil
	}
	rewound := false
	var assigned []int32
	for _, ev := range events {
		switch ev.kind {
		case evRevoked:
			if r.inTxn && !rewound {
				if _, err := r.endTxn(r.cfg.TransactionTimeout, false, "rebalance"); err != nil {
					return true, err
				}
				rewound = true
			}
			for _, p := range ev.partitions {
				r.dropTask(p)
			}
			// A partition assigned earlier in this batch and revoked now
			// is not restored.
			assigned = removeAll(assigned, ev.partitions)
		case evAssigned:
			for _, p := range ev.partitions {
				// The group hands over only what this member did not own in
				// the generation before. A task still held for such a
				// partition missed its revoke (kfake handed a restarted
				// static member its partitions again without revoking them
				// from their new owner: chaos seed 856094729), and another
				// owner may have written state since: restore it afresh.
				r.dropTask(p)
				if !slices.Contains(assigned, p) {
					assigned = append(assigned, p)
				}
			}
		}
	}
	if len(assigned) > 0 {
		aborted, err := r.restore(ctx, assigned)
		rewound = rewound || aborted
		if err != nil {
			return rewound, err
		}
	}
	return rewound, nil
}

func removeAll(ps, rm []int32) []int32 {
	out := ps[:0]
	for _, p := range ps {
		keep := true
		for _, q := range rm {
			keep = keep && p != q
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}

func (r *Runtime) newTask(p int32) *task {
	t := &task{
		topic:     r.cfg.Input,
		partition: p,
		log:       r.log.With("topic", r.cfg.Input, "partition", p),
		clock:     r.cfg.Now,
		ctx:       r.runCtx,
		arena:     r.arena,
		nextPunct: make([]time.Time, len(r.cfg.Punctuations)),
	}
	if r.cfg.Changelog != "" {
		t.store = newStore(r.cfg.Now)
	}
	return t
}

func (r *Runtime) startTask(t *task) {
	now := r.cfg.Now()
	for i, p := range r.cfg.Punctuations {
		t.nextPunct[i] = now.Add(p.Interval)
	}
	t.nextSweep = now.Add(r.cfg.TTLSweepInterval)
	r.tasks[t.partition] = t
	if t.store != nil {
		r.updateStateGauges(t)
	}
	// An owned partition's stall gauge exists at 0 (dropTask deletes it).
	r.m.stalled.WithLabelValues(r.name, strconv.FormatInt(int64(t.partition), 10)).Set(0)
	r.publishAssigned()
}

func (r *Runtime) dropTask(p int32) {
	t, ok := r.tasks[p]
	if !ok {
		return
	}
	delete(r.tasks, p)
	r.publishAssigned()
	r.unstall(t)
	if t.store != nil {
		part := strconv.FormatInt(int64(p), 10)
		r.m.stateKeys.DeleteLabelValues(r.name, part)
		r.m.stateBytes.DeleteLabelValues(r.name, part)
	}
	r.m.deleteLag(r.name, r.cfg.Input, strconv.FormatInt(int64(p), 10))
}

func (r *Runtime) updateStateGauges(t *task) {
	part := strconv.FormatInt(int64(t.partition), 10)
	r.m.stateKeys.WithLabelValues(r.name, part).Set(float64(t.store.Len()))
	r.m.stateBytes.WithLabelValues(r.name, part).Set(float64(t.store.Bytes()))
}

// lagLoop publishes the group's lag for the input partitions this
// instance owns: every second until it has published some (so a fresh
// instance reports its lag at once), then every LagInterval.
func (r *Runtime) lagLoop(ctx context.Context) {
	published := false
	for {
		wait := r.cfg.LagInterval
		if !published {
			wait = min(wait, time.Second)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		lags, err := r.adm.Lag(ctx, r.cfg.Group)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Debug("lag", "error", err)
			}
			continue
		}
		gl, ok := lags[r.cfg.Group]
		if !ok || gl.Error() != nil {
			continue
		}
		owned := map[int32]bool{}
		for _, p := range r.Assigned() {
			owned[p] = true
		}
		for p, ml := range gl.Lag[r.cfg.Input] {
			// Each member exports the partitions it owns, so replicas
			// never report the same partition twice.
			part := strconv.FormatInt(int64(p), 10)
			switch {
			case !owned[p]:
				r.m.deleteLag(r.name, r.cfg.Input, part)
			case ml.Lag >= 0:
				r.m.setLag(r.name, r.cfg.Input, part, float64(ml.Lag))
				published = true
			}
		}
	}
}

// retryJitter spreads the runtime's retries (a stalled record or
// punctuation, a failed commit, the restore's marker transaction, the
// topic check) over the upper half of each backoff, so the processors and
// partitions that failed together (a broker or MySQL outage) do not retry
// in step: a retry waits between half the backoff and the backoff, which
// doubles from RetryBackoffMin to RetryBackoffMax as before.
var retryJitter = backoff.MustNew(backoff.Config{JitterFraction: 0.5})

// partitioner sends changelog records to the partition the runtime set
// (co-partitioning) and hashes every other keyed record like the Java
// client (murmur2), so equal keys always land on the same partition.
type partitioner struct {
	changelog string
	def       kgo.Partitioner
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic != "" && topic == p.changelog {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return p.def.ForTopic(topic)
}

// restoreOpts copies the connection options of cl (brokers, client id,
// TLS, SASL, dialer, logger) for a short-lived changelog reader. Hooks are
// left out on purpose: a metrics hook such as kprom registers collectors
// per client and would collide with the session client's.
func restoreOpts(cl *kgo.Client) []kgo.Opt {
	var o []kgo.Opt
	if v, ok := cl.OptValue(kgo.SeedBrokers).([]string); ok {
		o = append(o, kgo.SeedBrokers(v...))
	}
	if v, ok := cl.OptValue(kgo.ClientID).(string); ok && v != "" {
		o = append(o, kgo.ClientID(v+"-restore"))
	}
	// kgo reports a dialer even when none was set (its default, TLS
	// included) and refuses one beside a TLS config: copy one of the two.
	if v, ok := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); ok && v != nil {
		o = append(o, kgo.DialTLSConfig(v))
	} else if v, ok := cl.OptValue(kgo.Dialer).(func(context.Context, string, string) (net.Conn, error)); ok && v != nil {
		o = append(o, kgo.Dialer(v))
	}
	if v, ok := cl.OptValue(kgo.SASL).([]sasl.Mechanism); ok && len(v) > 0 {
		o = append(o, kgo.SASL(v...))
	}
	if v, ok := cl.OptValue(kgo.WithLogger).(kgo.Logger); ok && v != nil {
		o = append(o, kgo.WithLogger(v))
	}
	return o
}
