package streams

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Task is what a Processor and a punctuation see of the runtime for one
// owned input partition: its coordinates, the clock, Run's context, a
// logger, the partition's state and the emit side of the open transaction.
// The runtime's own tasks implement it over Kafka; rttest.Driver runs the
// same per-record contract in memory (Local), so processor behaviour tests
// need no broker.
type Task interface {
	// Topic is the input topic.
	Topic() string
	// Partition is the input partition this task owns (and its changelog
	// partition).
	Partition() int32
	// Now is the runtime clock's current time (see Config.Now).
	Now() time.Time
	// Context is Run's context: cancelled at shutdown. Use it to bound
	// calls a processor makes (e.g. a MySQL lookup); a call failing
	// because of it aborts the transaction, which is what shutdown does
	// anyway. In Process it also ends half the transaction timeout after
	// the transaction's first record: lookups that hang one after another
	// fail then (the record's partition stalls and retries it in a later
	// transaction) instead of keeping the transaction open until the
	// broker aborts it and fences the producer.
	Context() context.Context
	// Log is the runtime logger with processor, topic and partition fields.
	Log() *slog.Logger
	// Store is the task's keyed state. It panics when the runtime has no
	// Changelog: a stateless processor must not use state.
	Store() *Store
	// Emit adds r to the open transaction. r.Topic must be set;
	// r.Partition is ignored (keys are hashed like the Java client, so
	// equal keys land on the same partition). The record is produced when
	// the current record (or punctuation) succeeds, and is visible to
	// read_committed consumers once the transaction commits. The runtime
	// owns r after Emit.
	Emit(r *kgo.Record)

	// NewRecord returns a zeroed record whose memory the runtime reuses
	// after the open transaction ends. Use it for records passed to Emit:
	// it spares the garbage collector one allocation per record. Do not
	// keep the record (or use it in another transaction) after Process or
	// the punctuation returns.
	NewRecord() *kgo.Record
	// NewHeaders returns n zeroed headers (len n, cap n) with the lifetime
	// of NewRecord.
	NewHeaders(n int) []kgo.RecordHeader
	// Bytes returns the byte arena of the open transaction: its Append
	// builds keys, values and header values with the lifetime of NewRecord.
	Bytes() *ByteArena
	// StringBytes returns a copy of s in memory with the lifetime of
	// NewRecord (e.g. for a header value or key taken from a string).
	StringBytes(s string) []byte

	// MoreDue, called by a punctuation, reports that it stopped at its
	// bound (a batch size) with work still due at this tick. The runtime
	// then commits the open transaction at once and runs the punctuation
	// again, with the same now, in the next transaction (after checking
	// again that the task has consumed its input up to the tick's last
	// stable offset), and again while each run calls MoreDue; only a run
	// that does not call it is rescheduled one interval later. Input
	// records keep flowing between the runs. Called outside a punctuation,
	// it has no effect.
	MoreDue()
}

// task is the Task of one owned input partition. It lives from assignment
// (after restore) to revoke, or for the life of a Local. Its timers are
// the punctuator's (schedule), its backoff the stall tracker's.
type task struct {
	topic     string
	partition int32
	store     *Store
	log       *slog.Logger
	clock     func() time.Time
	ctx       context.Context
	// recCtx is Context during Process in the runtime (txn.context).
	recCtx context.Context
	arena  *txnArena

	// emits of the record (or punctuation) being processed; produced only
	// when it succeeds.
	emits []*kgo.Record

	// moreDue is set by MoreDue during the running punctuation.
	moreDue bool
}

func (t *task) Topic() string    { return t.topic }
func (t *task) Partition() int32 { return t.partition }
func (t *task) Now() time.Time   { return t.clock() }
func (t *task) Context() context.Context {
	if t.recCtx != nil {
		return t.recCtx
	}
	return t.ctx
}
func (t *task) Log() *slog.Logger { return t.log }

func (t *task) Store() *Store {
	if t.store == nil {
		panic("runtime: Task.Store used without a Config.Changelog")
	}
	return t.store
}

// MoreDue marks the running punctuation as having more work due (see
// Task.MoreDue); outside a punctuation it has no effect.
func (t *task) MoreDue() { t.moreDue = true }

func (t *task) Emit(r *kgo.Record) {
	if r.Topic == "" {
		panic("runtime: Emit of a record without Topic")
	}
	t.emits = append(t.emits, r)
}

func (t *task) NewRecord() *kgo.Record              { return &t.arena.recs.take(1)[0] }
func (t *task) NewHeaders(n int) []kgo.RecordHeader { return t.arena.hdrs.take(n) }
func (t *task) StringBytes(s string) []byte         { return t.arena.bytes.copyString(s) }

func (t *task) Bytes() *ByteArena { return &t.arena.bytes }

// step runs fn (a Process or a punctuation) as one unit of the open
// transaction: on success its emits are handed out (returned; the caller
// produces them) and its store writes kept; on error both are undone, so
// the transaction stays committable.
func (t *task) step(fn func() error) ([]*kgo.Record, error) {
	t.emits = t.emits[:0]
	if t.store != nil {
		t.store.beginRecord()
	}
	if err := fn(); err != nil {
		if t.store != nil {
			t.store.rejectRecord()
		}
		clear(t.emits)
		t.emits = t.emits[:0]
		return nil, err
	}
	if t.store != nil {
		t.store.endRecord()
	}
	return t.emits, nil
}

// punctuation runs fn at now as a step and reports whether it called
// MoreDue (never after an error: the step was undone).
func (t *task) punctuation(fn PunctuateFunc, now time.Time) ([]*kgo.Record, bool, error) {
	t.moreDue = false
	emits, err := t.step(func() error { return fn(t, now) })
	more := t.moreDue && err == nil
	t.moreDue = false
	return emits, more, err
}
