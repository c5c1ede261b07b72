// Package rttest holds test helpers for processors built on the runtime:
// a controllable clock and read_committed topic readers. Only tests import
// it.
package rttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/processors/streams"
)

// Clock is a manually advanced clock, safe for concurrent use. Set
// streams.Config.Now to c.Now.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// ReadCommitted reads topic from the start with read_committed until it has
// at least want records and then no new record arrives for settle (so
// duplicates beyond want are caught), or until timeout. It returns what it
// read, in per-partition offset order.
func ReadCommitted(t testing.TB, brokers []string, topic string, want int, settle, timeout time.Duration) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	readSettled(t, brokers, topic, settle, timeout, func(r *kgo.Record) bool {
		if !r.Attrs.IsControl() {
			out = append(out, r)
		}
		return !r.Attrs.IsControl()
	}, func() bool { return len(out) >= want })
	return out
}

// ReadTransactions reads topic from the start with read_committed like
// ReadCommitted (until it has at least want data records and then none new
// for settle, or until timeout) and groups its data records by the
// transaction that wrote them, in offset order per partition: a group ends
// at its partition's next control record (the commit marker).
func ReadTransactions(t testing.TB, brokers []string, topic string, want int, settle, timeout time.Duration) [][]*kgo.Record {
	t.Helper()
	var txns [][]*kgo.Record
	open := map[int32][]*kgo.Record{}
	n := 0
	readSettled(t, brokers, topic, settle, timeout, func(r *kgo.Record) bool {
		if !r.Attrs.IsControl() {
			open[r.Partition] = append(open[r.Partition], r)
			n++
		} else if len(open[r.Partition]) > 0 {
			txns = append(txns, open[r.Partition])
			delete(open, r.Partition)
		}
		return true
	}, func() bool { return n >= want })
	return txns
}

// readSettled reads topic read_committed from the start, in rounds each up
// to the committed end of the moment, passing every record (markers
// included) to each, until enough says so and no round brought a record
// each counted as new for settle, or until timeout.
func readSettled(t testing.TB, brokers []string, topic string, settle, timeout time.Duration, each func(*kgo.Record) (isNew bool), enough func() bool) {
	t.Helper()
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) {
		return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.FetchMaxWait(100 * time.Millisecond)}, opts...)...)
	}
	next := kafkax.Offsets{}
	deadline := time.Now().Add(timeout)
	lastNew := time.Now()
	for time.Now().Before(deadline) && (!enough() || time.Since(lastNew) < settle) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		news := 0
		// A topic not created yet fails the round; the next one retries.
		_ = kafkax.ReadCommitted(ctx, newClient, next, time.Second, func(r *kgo.Record) (bool, error) {
			if next[r.Topic] == nil {
				next[r.Topic] = map[int32]int64{}
			}
			next[r.Topic][r.Partition] = r.Offset + 1
			if each(r) {
				news++
			}
			return false, nil
		}, topic)
		cancel()
		if news > 0 {
			lastNew = time.Now()
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Header returns the value of header key of r as a string ("" if absent).
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Produce writes recs synchronously (not transactionally) and fails the
// test on error.
func Produce(t testing.TB, cl *kgo.Client, recs []*kgo.Record) {
	t.Helper()
	const chunk = 5000
	for len(recs) > 0 {
		n := min(chunk, len(recs))
		if err := cl.ProduceSync(context.Background(), recs[:n]...).FirstErr(); err != nil {
			t.Fatalf("rttest: produce: %v", err)
		}
		recs = recs[n:]
	}
}

// Running is a runtime running in the background of a test.
type Running struct {
	RT     *streams.Runtime
	cancel context.CancelFunc
	// Done receives Run's result once.
	Done chan error
}

// Start runs rt until Stop or Kill.
func Start(rt *streams.Runtime) *Running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{RT: rt, cancel: cancel, Done: make(chan error, 1)}
	go func() { r.Done <- rt.Run(ctx) }()
	return r
}

// Stop cancels the runtime and fails the test unless Run returns nil
// within 30s.
func (r *Running) Stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.Done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// Cancel releases the run's context after Run has returned on its own.
func (r *Running) Cancel() { r.cancel() }

// Kill stops the runtime as a crash would (no commit, no abort) and waits
// for Run to return.
func (r *Running) Kill(t testing.TB) {
	t.Helper()
	r.RT.Kill()
	select {
	case <-r.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after Kill")
	}
	r.cancel()
}

// KillAfter wraps Proc and kills its runtime (Kill: the client closes
// without ending the open transaction, as in a crash) when it is handed its
// Nth record. Set RT to the runtime built over it before it runs.
type KillAfter struct {
	Proc streams.Processor
	N    int
	RT   *streams.Runtime
	// Seen counts the records handed to it.
	Seen int
}

// Process implements streams.Processor.
func (k *KillAfter) Process(t streams.Task, rec *kgo.Record) error {
	k.Seen++
	if k.Seen == k.N {
		k.RT.Kill()
	}
	return k.Proc.Process(t, rec)
}
