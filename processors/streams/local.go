package streams

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Local is one Task outside Kafka: the store, the emit side and the
// per-record contract of the runtime's own tasks (Process and punctuations
// run as steps whose emits and writes are undone on error; writes become
// committed state at Commit), without consumer group, producer or
// changelog topic. It is the engine of rttest.Driver, which tests use; a
// deployment runs Runtime.
type Local struct{ t *task }

// NewLocal returns the task of partition of topic, with a Store when
// stateful, reading time from clock (time.Now when nil).
func NewLocal(ctx context.Context, topic string, partition int32, stateful bool, clock func() time.Time, log *slog.Logger) *Local {
	if clock == nil {
		clock = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	t := &task{topic: topic, partition: partition, clock: clock, ctx: ctx, arena: newTxnArena(),
		log: log.With("topic", topic, "partition", partition)}
	if stateful {
		t.store = newStore(clock)
	}
	return &Local{t: t}
}

// Task is the Task handed to the processor.
func (l *Local) Task() Task { return l.t }

// Process runs p on rec as the runtime does. It returns what p emitted,
// valid until the next Commit or Abort (the records may live in the
// transaction's arena), or p's error with rec's emits and writes undone:
// a reject (AsReject) the runtime dead-letters, anything else one it
// stalls the partition on. Emits above MaxRecordBytes are a reject
// (ReasonOutputTooLarge), as in the runtime.
func (l *Local) Process(p Processor, rec *kgo.Record) ([]*kgo.Record, error) {
	emits, err := l.t.step(func() error { return p.Process(l.t, rec) })
	if err == nil {
		if err = tooLarge(emits); err != nil {
			clear(emits)
			return nil, err
		}
	}
	return l.hand(emits), err
}

// Punctuate runs fn at now as the runtime runs a due punctuation, with the
// results of Process, and reports whether fn called Task.MoreDue: the
// runtime then commits and runs it again at the same now.
func (l *Local) Punctuate(fn PunctuateFunc, now time.Time) ([]*kgo.Record, bool, error) {
	emits, more, err := l.t.punctuation(fn, now)
	return l.hand(emits), more, err
}

// hand returns a copy of the step's emits slice, which the task reuses.
func (l *Local) hand(emits []*kgo.Record) []*kgo.Record {
	out := append([]*kgo.Record(nil), emits...)
	clear(emits)
	return out
}

// Commit ends the transaction as a committed one: the store's writes
// become committed state, and the changelog it would have produced is
// returned (key, and the value in the changelog format; nil for a
// tombstone), one record per written key.
func (l *Local) Commit() []*kgo.Record {
	var cl []*kgo.Record
	if s := l.t.store; s != nil {
		s.eachDirty(func(k string, e entry, deleted bool) {
			r := &kgo.Record{Partition: l.t.partition, Key: []byte(k)}
			if !deleted {
				r.Value = encodeChangelogValue(e)
			}
			cl = append(cl, r)
		})
		s.commit()
	}
	l.t.arena.reset()
	return cl
}

// Abort ends the transaction as an aborted one: the store is as at the
// last Commit.
func (l *Local) Abort() {
	if l.t.store != nil {
		l.t.store.abort()
	}
	l.t.arena.reset()
}
