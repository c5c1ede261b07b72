package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// txn is the runtime's Kafka transaction (Kafka Streams splits it into
// StreamsProducer and RecordCollector): it begins one on the session, takes
// what the tasks produce into it (output with its timestamps, dead letters,
// changelog records, all in the transaction's arena), polls no more input
// than it still takes, and commits or aborts it. It counts what the
// transaction held and hands the counts to the metrics only once committed.
//
// It does not know the tasks: the runtime writes their changelogs into it
// before the commit and applies or discards their store writes after it.
type txn struct {
	sh    *shared
	arena *txnArena // memory of the open transaction's records
	open  bool
	// content: the transaction holds work (a record, a punctuation, a
	// sweep); start is the real time it got it.
	content bool
	start   time.Time
	// ctx is the records' context (context), cancel its end.
	ctx    context.Context
	cancel context.CancelFunc
	// catchUp: the transaction holds a catch-up run (Task.MoreDue) and is
	// committed at once, so the next run can follow.
	catchUp bool
	seq     uint64 // ended transactions
	counts  txnCounts
	// stamp is the output timestamp of the poll being processed, reused
	// for stampLeft more input records (pollStamp).
	stamp     time.Time
	stampLeft int
	prodErr   produceErr
	promise   func(*kgo.Record, error)
	// commitErr is the back-off of commits that kgo aborted (endAborted).
	commitErr commitBackoff
	recordsIn prometheus.Counter
}

// txnCounts is what the open transaction holds, for the metrics once it
// commits.
type txnCounts struct {
	in    int // input records consumed (processed or dead-lettered)
	out   topicCounts
	dlq   map[string]int // per reason
	punct map[string]int // punctuation runs per name
}

// produceErr is the first failed produce of the open transaction, set by
// kgo's promise goroutine.
type produceErr struct {
	mu  sync.Mutex
	err error
}

// commitBackoff is the back-off after a commit kgo aborted: seq is the
// transaction sequence number once that transaction has ended.
type commitBackoff struct {
	seq     uint64
	backoff time.Duration
}

// init readies x in place (its promise refers to x).
func (x *txn) init(sh *shared) {
	x.sh = sh
	x.arena = newTxnArena()
	x.counts = txnCounts{dlq: map[string]int{}, punct: map[string]int{}}
	x.promise = func(_ *kgo.Record, err error) {
		if err != nil {
			x.prodErr.mu.Lock()
			if x.prodErr.err == nil {
				x.prodErr.err = err
			}
			x.prodErr.mu.Unlock()
		}
	}
	x.recordsIn = sh.m.recordsIn.WithLabelValues(sh.name, sh.cfg.Input)
}

// memory is the arena the tasks build their records in.
func (x *txn) memory() *txnArena { return x.arena }

func (x *txn) isOpen() bool { return x.open }

// hasContent reports whether the open transaction holds work.
func (x *txn) hasContent() bool { return x.content }

// sequence is the number of transactions ended so far: the open one's.
func (x *txn) sequence() uint64 { return x.seq }

// begin opens a transaction unless one is open.
func (x *txn) begin() error {
	if x.open {
		return nil
	}
	x.sh.watch.Reset()
	if err := x.sh.sess.Begin(); err != nil {
		if x.sh.killed.Load() {
			return ErrKilled
		}
		return &TxnError{Processor: x.sh.name, Err: err}
	}
	x.open = true
	return nil
}

// markContent notes that the open transaction holds work.
func (x *txn) markContent() {
	if !x.content {
		x.content = true
		x.start = time.Now()
	}
}

// context is the context of the records processed in the open
// transaction: Run's, ending half the transaction timeout after the
// transaction's first content. The broker aborts a transaction open past
// its timeout and fences the producer; with the other half left, the
// records after the deadline (their lookups failing at once) and the
// commit still fit.
func (x *txn) context() context.Context {
	if x.ctx == nil {
		x.ctx, x.cancel = context.WithDeadline(x.sh.ctx, x.start.Add(x.sh.cfg.TransactionTimeout/2))
	}
	return x.ctx
}

// holdCatchUp makes the open transaction commit at once (a catch-up run).
func (x *txn) holdCatchUp() { x.catchUp = true }

// poll fetches up to the records the open transaction still takes, waiting
// at most until the transaction is due (CommitInterval after its first
// content) or a stalled partition's backoff ends (resumeIn > 0). A due
// transaction with content polls nothing: it commits first. A catch-up run
// polls only the records already fetched (catchUpPoll): the next run
// follows its commit.
func (x *txn) poll(ctx context.Context, resumeIn time.Duration) kgo.Fetches {
	cfg := &x.sh.cfg
	wait := cfg.CommitInterval
	if x.content {
		wait = max(time.Until(x.start.Add(cfg.CommitInterval)), 0)
	}
	if resumeIn > 0 {
		wait = min(wait, resumeIn)
	}
	if x.catchUp {
		wait = catchUpPoll
	}
	if wait <= 0 && x.content {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return x.sh.sess.PollRecords(pctx, max(cfg.CommitRecords-x.counts.in, 1))
}

// due reports whether the open transaction holds a catch-up run (committed
// at once so the next run can follow), CommitRecords input records, or has
// been open CommitInterval since its first content.
func (x *txn) due() bool {
	return x.open && x.content && (x.catchUp || x.counts.in >= x.sh.cfg.CommitRecords || !time.Now().Before(x.start.Add(x.sh.cfg.CommitInterval)))
}

// stampEvery is how many input records of one poll share the timestamp
// of their output: one clock read per record was a visible share of a
// processor's CPU. roomflow's processors take microseconds per record, so
// a timestamp lags by well under a millisecond (nothing reads output
// timestamps but tools such as peek).
const stampEvery = 64

// newPoll gives the next poll's output a fresh timestamp.
func (x *txn) newPoll() { x.stampLeft = 0 }

// pollStamp is the timestamp for the output of the poll's next input
// record.
func (x *txn) pollStamp() time.Time {
	if x.stampLeft == 0 {
		x.stamp, x.stampLeft = time.Now(), stampEvery
	}
	x.stampLeft--
	return x.stamp
}

// consumed takes the output of one processed input record.
func (x *txn) consumed(emits []*kgo.Record) {
	if len(emits) > 0 {
		x.produceEmits(emits, x.pollStamp())
	}
	x.counts.in++
}

// deadLetter consumes rec by producing its dead letter (schemas/envelope),
// its error text "reason: error" as always.
func (x *txn) deadLetter(rec *kgo.Record, rej *RejectError) {
	x.counts.in++
	var cause error
	if rej.Err != nil {
		cause = fmt.Errorf("%s: %w", rej.Reason, rej.Err)
	}
	d := envelope.DeadLetter{Stage: x.sh.name, Reason: rej.Reason, Err: cause, From: rec}
	out := d.Build(x.sh.cfg.DLQ)
	if recordSize(out) > MaxRecordBytes {
		// Refused with its value, the letter would abort every transaction:
		// it goes without it, as the relay's payload_too_large does.
		from := *rec
		from.Value = nil
		d.From, d.Extra = &from, []kgo.RecordHeader{{Key: envelope.HeaderPayloadBytes, Value: strconv.AppendInt(nil, int64(len(rec.Value)), 10)}}
		out = d.Build(x.sh.cfg.DLQ)
	}
	x.produce(out)
	x.counts.dlq[rej.Reason]++
}

// MaxRecordBytes bounds a record the runtime produces, overhead included:
// what the relay writes by default.
const MaxRecordBytes = kafkax.MessageBytes

// recordSize is r's size as the producer counts it, plus a generous
// allowance for its batch framing (61 bytes of header, the varints).
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value) + 128
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// punctuated takes the output of one run of the punctuation name.
func (x *txn) punctuated(name string, emits []*kgo.Record) {
	x.produceEmits(emits, time.Now())
	x.counts.punct[name]++
}

// produceEmits produces the output of one successful step and clears the
// task's references to it. Records without a timestamp get now (kgo would
// read the clock for each).
func (x *txn) produceEmits(emits []*kgo.Record, now time.Time) {
	for i, e := range emits {
		if e.Timestamp.IsZero() {
			e.Timestamp = now
		}
		x.produce(e)
		emits[i] = nil
	}
}

func (x *txn) produce(rec *kgo.Record) {
	x.counts.out.add(rec.Topic)
	x.sh.sess.Produce(context.Background(), rec, x.promise)
}

// changelog produces the changelog record of key k of partition p, in the
// arena, stamped now; deleted makes it a tombstone.
func (x *txn) changelog(p int32, k string, e entry, deleted bool, now time.Time) {
	rec := &x.arena.recs.take(1)[0]
	rec.Topic, rec.Partition, rec.Key = x.sh.cfg.Changelog, p, x.arena.bytes.copyString(k)
	rec.Timestamp = now
	if !deleted {
		rec.Value = x.arena.bytes.Append(9+len(e.value), func(b []byte) []byte { return appendChangelogValue(b, e) })
	}
	x.produce(rec)
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

// prepareCommit flushes (the changelog records are produced already), then
// checks what a commit needs: the flush and every produce succeeded and,
// for punctuation output alone, the group still has this member at its
// generation (member). It returns the abort cause, "" to commit.
func (x *txn) prepareCommit(ctx context.Context, member func(context.Context) error) string {
	cause := ""
	if err := x.sh.client().Flush(ctx); err != nil {
		cause = "flush"
	}
	if cause == "" && x.counts.in == 0 && len(x.counts.out) > 0 {
		// Punctuation output only: no offsets, so the broker's
		// generation check on TxnOffsetCommit does not apply.
		if err := member(ctx); err != nil {
			if !x.sh.killed.Load() {
				x.sh.log.Warn("not a confirmed group member; aborting punctuation output", "error", err)
			}
			cause = "membership"
		}
	}
	x.prodErr.mu.Lock()
	defer x.prodErr.mu.Unlock()
	if x.prodErr.err != nil {
		if !x.sh.killed.Load() {
			x.sh.log.Error("produce failed; aborting the transaction", "error", x.prodErr.err)
		}
		cause = "produce"
	}
	return cause
}

// end ends the open transaction on the broker: a commit if commit, else an
// abort. A commit without input offsets and with no assignment change
// pending (eventsPending) is ended on the client (endWithoutOffsets). It
// returns whether the transaction committed and its abort cause: cause,
// or commit_error when kgo aborted a failed commit with the producer still
// usable (endAborted). Any other error is End's, and fatal.
func (x *txn) end(ctx context.Context, commit bool, cause string, eventsPending func() bool) (bool, string, error) {
	var committed bool
	var err error
	noOffsets := x.sh.client().UncommittedOffsets() == nil
	if commit && noOffsets && !eventsPending() {
		committed, err = x.endWithoutOffsets(ctx)
	} else {
		try := kgo.TryAbort
		if commit {
			try = kgo.TryCommit
		}
		committed, err = x.sh.sess.End(ctx, try)
	}
	if err != nil && commit && x.endAborted(ctx, err) {
		err, cause = nil, commitErrorCause
	}
	if committed && err == nil && noOffsets && x.sh.watch.Aborted() {
		// A commit without input offsets that franz-go ended as an abort:
		// nothing was consumed, so it is rolled back as any abort is, and
		// the state's timers punctuate again.
		x.sh.log.Warn("franz-go ended a commit without input offsets as an abort; it is rolled back")
		committed, cause = false, silentAbortCause
	}
	return committed, cause, err
}

// finish closes the books of the transaction end returned on (commit: it
// was asked to commit): the counts go to the metrics if it committed, the
// abort is counted and logged if not, and the transaction's state is reset
// for the next one. An end error comes back as a *TxnError.
func (x *txn) finish(committed, commit bool, cause string, err error) (bool, error) {
	elapsed := time.Since(x.start)
	hadContent := x.content
	x.open = false
	x.prodErr.mu.Lock()
	x.prodErr.err = nil
	x.prodErr.mu.Unlock()
	if committed && err == nil {
		x.countCommit()
	} else {
		x.countAbort(hadContent || commit, cause, err)
	}
	if hadContent {
		x.sh.m.txnDuration.WithLabelValues(x.sh.name).Observe(elapsed.Seconds())
	}
	x.content = false
	x.catchUp = false
	if x.cancel != nil {
		x.cancel()
		x.ctx, x.cancel = nil, nil
	}
	x.seq++
	x.counts.in = 0
	x.counts.out = x.counts.out[:0]
	clear(x.counts.dlq)
	clear(x.counts.punct)
	if err != nil {
		// kgo may still hold records: the arena is not reused (the
		// runtime stops on this error).
		return false, &TxnError{Processor: x.sh.name, Err: err}
	}
	// End flushed or aborted every record of the transaction: kgo no
	// longer references the arena.
	x.arena.reset()
	return committed, nil
}

// countCommit hands a committed transaction's counts to the metrics.
func (x *txn) countCommit() {
	m, name := x.sh.m, x.sh.name
	x.recordsIn.Add(float64(x.counts.in))
	for _, c := range x.counts.out {
		m.recordsOut.WithLabelValues(name, c.topic).Add(float64(c.n))
	}
	for reason, n := range x.counts.dlq {
		m.dlq.WithLabelValues(name, reason).Add(float64(n))
	}
	for pn, n := range x.counts.punct {
		m.punctuations.WithLabelValues(name, pn).Add(float64(n))
	}
	m.txnCommits.WithLabelValues(name).Inc()
}

// countAbort counts and logs an abort that held work (counted) under cause
// (default rebalance: GroupTransactSession refused the commit). endErr is
// End's error, which the caller reports instead.
func (x *txn) countAbort(counted bool, cause string, endErr error) {
	if !counted {
		return
	}
	if cause == "" {
		cause = "rebalance"
	}
	x.sh.m.txnAborts.WithLabelValues(x.sh.name, cause).Inc()
	if endErr == nil && !x.sh.killed.Load() {
		x.sh.log.Warn("transaction aborted; consumption rewound to the last commit", "cause", cause, "records", x.counts.in)
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
func (x *txn) endWithoutOffsets(ctx context.Context) (bool, error) {
	cl := x.sh.client()
	err := cl.EndTransaction(ctx, kgo.TryCommit)
	if errors.Is(err, kerr.OperationNotAttempted) || errors.Is(err, kerr.TransactionAbortable) {
		x.sh.log.Warn("commit of punctuation output not possible; aborting it", "error", err)
		return false, cl.EndTransaction(ctx, kgo.TryAbort)
	}
	return err == nil, err
}
