package runtime

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Task is the processing context of one owned input partition. It lives
// from assignment (after restore) to revoke; the runtime passes it to
// Process and to punctuations.
type Task struct {
	rt        *Runtime
	topic     string
	partition int32
	store     *Store
	log       *slog.Logger

	// emits of the record (or punctuation) being processed; produced only
	// when it succeeds.
	emits []*kgo.Record

	nextPunct []time.Time // per runtime punctuation
	nextSweep time.Time
	restored  time.Duration
	// round is the punctuation tick waiting for the task to catch up with
	// its input (see punctuate); nil when none is due.
	round *punctRound
	// stall is set while the partition backs off after a failure (see
	// stallRecord); nil when it runs normally.
	stall *stall
	// moreDue is set by MoreDue during the running punctuation.
	moreDue bool
}

// Topic is the input topic.
func (t *Task) Topic() string { return t.topic }

// Partition is the input partition this task owns (and its changelog
// partition).
func (t *Task) Partition() int32 { return t.partition }

// Now is the runtime clock's current time (see Clock).
func (t *Task) Now() time.Time { return t.rt.o.clock() }

// Context is Run's context: cancelled at shutdown. Use it to bound calls
// a processor makes (e.g. a MySQL lookup); a call failing because of it
// aborts the transaction, which is what shutdown does anyway.
func (t *Task) Context() context.Context { return t.rt.runCtx }

// Log is the runtime logger with processor, topic and partition fields.
func (t *Task) Log() *slog.Logger { return t.log }

// Store is the task's keyed state. It panics when the runtime has no
// Changelog: a stateless processor must not use state.
func (t *Task) Store() *Store {
	if t.store == nil {
		panic("runtime: Task.Store used without a Changelog option")
	}
	return t.store
}

// MoreDue, called by a punctuation, reports that it stopped at its bound
// (a batch size) with work still due at this tick. The runtime then
// commits the open transaction at once and runs the punctuation again, with
// the same now, in the next transaction (after checking again that the task
// has consumed its input up to the tick's last stable offset), and again
// while each run calls MoreDue; only a run that does not call it is
// rescheduled one interval later. Input records keep flowing between the runs. Called outside a
// punctuation, it has no effect.
func (t *Task) MoreDue() { t.moreDue = true }

// Emit adds r to the open transaction. r.Topic must be set; r.Partition is
// ignored (keys are hashed like the Java client, so equal keys land on the
// same partition). The record is produced when the current record (or
// punctuation) succeeds, and is visible to read_committed consumers once
// the transaction commits. The runtime owns r after Emit.
func (t *Task) Emit(r *kgo.Record) {
	if r.Topic == "" {
		panic("runtime: Emit of a record without Topic")
	}
	t.emits = append(t.emits, r)
}

// NewRecord returns a zeroed record whose memory the runtime reuses after
// the open transaction ends. Use it for records passed to Emit: it spares
// the garbage collector one allocation per record. Do not keep the record
// (or use it in another transaction) after Process or the punctuation
// returns.
func (t *Task) NewRecord() *kgo.Record { return &t.rt.arena.recs.take(1)[0] }

// NewHeaders returns n zeroed headers (len n, cap n) with the lifetime of
// NewRecord.
func (t *Task) NewHeaders(n int) []kgo.RecordHeader { return t.rt.arena.hdrs.take(n) }

// AppendBytes returns append(buf, ...) as computed by fn, where buf is an
// empty slice with room for about hint bytes in memory with the lifetime of
// NewRecord: use it for the keys, values and header values of emitted
// records. fn must only append to its argument and return the result (as
// the protobuf and strconv Append functions do); if it appends more than
// the room, the result is on the heap, which is correct. The result's
// capacity equals its length, so appending to it later never overwrites
// other arena bytes.
func (t *Task) AppendBytes(hint int, fn func(buf []byte) []byte) []byte {
	return t.rt.arena.bytes.appendTo(hint, fn)
}

// StringBytes returns a copy of s in memory with the lifetime of NewRecord
// (e.g. for a header value or key taken from a string).
func (t *Task) StringBytes(s string) []byte { return t.rt.arena.bytes.copyString(s) }
