package rfproc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
)

// Tail records when each id first appears, committed (read_committed), on
// a topic: the moment a benchmark's event is visible downstream.
type Tail struct {
	cl     *kgo.Client
	mu     sync.Mutex
	seen   map[string]time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

// EventIDHeader is the id of a record by its event_id header (every
// roomflow topic carries it).
func EventIDHeader(r *kgo.Record) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == "event_id" {
			return string(h.Value), true
		}
	}
	return "", false
}

// StartTail tails topic on kcfg's cluster from its end offsets as listed
// before it returns (so nothing written after the call is missed); id
// names a record (EventIDHeader, or a decoded field). Stop ends it.
func StartTail(ctx context.Context, kcfg config.KafkaConfig, name, topic string, id func(*kgo.Record) (string, bool)) (*Tail, error) {
	cl, err := kcfg.Cluster(nil, nil).NewClient(name,
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(20*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("rfproc: end offsets of %s: %w", topic, err)
	}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { from[o.Partition] = kgo.NewOffset().At(o.Offset) })
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	ctx, cancel := context.WithCancel(ctx)
	t := &Tail{cl: cl, seen: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			t.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if k, ok := id(r); ok {
					if _, dup := t.seen[k]; !dup {
						t.seen[k] = now
					}
				}
			})
			t.mu.Unlock()
		}
	}()
	return t, nil
}

// Seen is when id first appeared.
func (t *Tail) Seen(id string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.seen[id]
	return at, ok
}

// Times are the first-seen instants of every id so far, in order.
func (t *Tail) Times() []time.Time {
	t.mu.Lock()
	out := make([]time.Time, 0, len(t.seen))
	for _, at := range t.seen {
		out = append(out, at)
	}
	t.mu.Unlock()
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// Count is how many of ids have appeared.
func (t *Tail) Count(ids []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, id := range ids {
		if _, ok := t.seen[id]; ok {
			n++
		}
	}
	return n
}

// ErrNotSeen is Await's error when ids did not all appear in time.
var ErrNotSeen = errors.New("rfproc: not every id appeared in time")

// Await waits until every id appeared, for at most timeout.
func (t *Tail) Await(ctx context.Context, ids []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for t.Count(ids) < len(ids) {
		if time.Now().After(deadline) {
			return ErrNotSeen
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Stop ends the tail.
func (t *Tail) Stop() {
	t.cancel()
	<-t.done
	t.cl.Close()
}
