package rttest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/processors/streams"
)

// Driver runs a processor on in-memory tasks (streams.Local), as Goka's
// tester does: records go in by Feed, punctuations run by Punctuate, and
// what the runtime would commit comes out by Output and DeadLetters, in
// milliseconds and without a broker. It is a harness of the runtime's
// per-record contract (steps, rejects, store transactions), not a model of
// Kafka: the transactional, restore, stall-retry and crash paths are the
// runtime's own and stay tested on kfake.
//
// A Driver is not safe for concurrent use.
type Driver struct {
	t        testing.TB
	input    string
	proc     streams.Processor
	stateful bool
	clock    *Clock
	log      *slog.Logger
	// partitions > 0: inputs are spread by key (see DriverConfig.Partitions)
	partitions  int
	partitioner kgo.TopicPartitioner
	tasks       map[int32]*streams.Local
	next        map[int32]int64 // next input offset per partition
	out         []*kgo.Record
	dead        []DeadLetter
}

// DeadLetter is an input record the processor rejected: the runtime writes
// it to the DLQ with Reason in its error_reason header.
type DeadLetter struct {
	Record *kgo.Record
	Reason string
	Err    error
}

// DriverConfig is what NewDriver needs besides the processor.
type DriverConfig struct {
	// Input is the input topic the fed records belong to (required).
	Input string
	// Stateful gives every task a Store (the runtime's Config.Changelog).
	// Default false: Task.Store panics, as on a stateless runtime.
	Stateful bool
	// Clock is the clock of Task.Now, store TTLs and Punctuate. Default a
	// Clock at the Unix epoch.
	Clock *Clock
	// Partitions > 0 spreads the fed records over that many input
	// partitions by key, as a producer with kgo's default partitioner
	// (murmur2, like the Java client) spreads them on the input topic; each
	// partition has its own task and store, as in the runtime. Default 0:
	// each record's Partition field.
	Partitions int
	// Logger is the tasks' logger. Default: discarded.
	Logger *slog.Logger
}

// NewDriver returns a driver of proc on cfg.
func NewDriver(t testing.TB, cfg DriverConfig, proc streams.Processor) *Driver {
	if cfg.Input == "" {
		t.Fatal("rttest: DriverConfig.Input is required")
	}
	d := &Driver{t: t, input: cfg.Input, proc: proc, stateful: cfg.Stateful, clock: cfg.Clock, log: cfg.Logger,
		partitions: cfg.Partitions, tasks: map[int32]*streams.Local{}, next: map[int32]int64{}}
	if d.log == nil {
		d.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.clock == nil {
		d.clock = NewClock(time.Unix(0, 0).UTC())
	}
	if d.partitions > 0 {
		d.partitioner = kgo.StickyKeyPartitioner(nil).ForTopic(d.input)
	}
	return d
}

func (d *Driver) task(p int32) *streams.Local {
	l, ok := d.tasks[p]
	if !ok {
		l = streams.NewLocal(context.Background(), d.input, p, d.stateful, d.clock.Now, d.log)
		d.tasks[p] = l
	}
	return l
}

// Feed processes recs in order, each on the task of its Partition, with
// the next offset of that partition, and commits them in one transaction.
// A reject is recorded as a DeadLetter. Any other error stops the feed at
// that record, as the runtime stalls its partition: the records before it
// commit, it and the rest do not, and Feed returns the error (feed them
// again to retry).
func (d *Driver) Feed(recs ...*kgo.Record) error {
	d.t.Helper()
	var err error
	for _, rec := range recs {
		if rec.Topic == "" {
			rec.Topic = d.input
		}
		if d.partitions > 0 {
			rec.Partition = int32(d.partitioner.Partition(rec, d.partitions))
		}
		rec.Offset = d.next[rec.Partition]
		emits, perr := d.task(rec.Partition).Process(d.proc, rec)
		if perr != nil {
			if rej, ok := streams.AsReject(perr); ok {
				d.dead = append(d.dead, DeadLetter{Record: rec, Reason: rej.Reason, Err: rej.Err})
			} else {
				err = perr
				break
			}
		}
		d.keep(emits)
		d.next[rec.Partition]++
	}
	d.commit()
	return err
}

// MustFeed is Feed failing the test on an error.
func (d *Driver) MustFeed(recs ...*kgo.Record) {
	d.t.Helper()
	if err := d.Feed(recs...); err != nil {
		d.t.Fatalf("rttest: feed: %v", err)
	}
}

// Punctuate runs fn on every task created so far (partitions in order) at
// the clock's time and commits, as one runtime tick does once every task
// has caught up with its input. A task whose run calls Task.MoreDue runs
// fn again at the same time after that commit, as the runtime's catch-up
// does, until a run does not call it; each round of runs commits on its
// own. An error undoes that task's step, ends its runs, and is returned
// after the other tasks ran.
func (d *Driver) Punctuate(fn streams.PunctuateFunc) error {
	d.t.Helper()
	now := d.clock.Now()
	var errs []error
	due := slices.Sorted(maps.Keys(d.tasks))
	for len(due) > 0 {
		var more []int32
		for _, p := range due {
			emits, again, err := d.tasks[p].Punctuate(fn, now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			d.keep(emits)
			if again {
				more = append(more, p)
			}
		}
		d.commit()
		due = more
	}
	return errors.Join(errs...)
}

// keep copies a step's output out of the transaction's arena.
func (d *Driver) keep(emits []*kgo.Record) {
	for _, r := range emits {
		c := &kgo.Record{Topic: r.Topic, Key: clone(r.Key), Value: clone(r.Value), Timestamp: r.Timestamp,
			Headers: make([]kgo.RecordHeader, len(r.Headers))}
		for i, h := range r.Headers {
			c.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: clone(h.Value)}
		}
		d.out = append(d.out, c)
	}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func (d *Driver) commit() {
	for _, l := range d.tasks {
		l.Commit()
	}
}

// Output returns the committed records emitted to topic, in emit order
// (all topics when topic is empty).
func (d *Driver) Output(topic string) []*kgo.Record {
	if topic == "" {
		return slices.Clone(d.out)
	}
	var out []*kgo.Record
	for _, r := range d.out {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

// DeadLetters returns the rejected input records, in order.
func (d *Driver) DeadLetters() []DeadLetter { return slices.Clone(d.dead) }

// Seed puts key=value in partition p's store as committed state, as a
// restore of a changelog record another writer committed would (a stateful
// driver only).
func (d *Driver) Seed(p int32, key string, value []byte) {
	d.t.Helper()
	if !d.stateful {
		d.t.Fatal("rttest: Seed needs a stateful driver")
	}
	l := d.task(p)
	l.Task().Store().Put(key, value)
	l.Commit()
}

// Store returns partition p's store (nil for a stateless driver or a
// partition never fed).
func (d *Driver) Store(p int32) *streams.Store {
	if l, ok := d.tasks[p]; ok && d.stateful {
		return l.Task().Store()
	}
	return nil
}

// Clock is the driver's clock.
func (d *Driver) Clock() *Clock { return d.clock }
