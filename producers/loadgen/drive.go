package loadgen

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Writer commits one transaction of a run's events.
type Writer interface {
	// Write commits evs as one transaction, in order; hold > 0 keeps the
	// transaction open that long before it commits (a late commit).
	Write(ctx context.Context, evs []Event, hold time.Duration) error
}

// OutboxWriter writes room_outbox rows, as the room service commits them.
type OutboxWriter struct{ DB *sql.DB }

// Write inserts evs in one transaction (one multi-row INSERT) and commits
// it after hold. An error leaves nothing of evs committed.
func (w OutboxWriter) Write(ctx context.Context, evs []Event, hold time.Duration) error {
	tx, err := w.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("loadgen: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if err := insertRows(ctx, tx, evs); err != nil {
		return err
	}
	if hold > 0 {
		if err := sleep(ctx, hold); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("loadgen: commit room_outbox: %w", err)
	}
	return nil
}

// TopicWriter produces the relay's records of events straight onto Topic,
// a Redelivered event's record twice.
type TopicWriter struct {
	Client *kgo.Client
	Topic  string
}

// Write produces evs and waits for every record's acknowledgement (hold
// is not supported: records have no transaction to hold). A redelivery
// follows its original at once, so it lands within the few events of its
// room the oracle's duplicate check remembers, however hot the room.
func (w TopicWriter) Write(ctx context.Context, evs []Event, _ time.Duration) error {
	once := Records(w.Topic, evs)
	recs := make([]*kgo.Record, 0, len(once))
	for i, e := range evs {
		recs = append(recs, once[i])
		if e.Redelivered {
			again := *once[i]
			recs = append(recs, &again)
		}
	}
	return w.Client.ProduceSync(ctx, recs...).FirstErr()
}

// Counts are what a run's writers did.
type Counts struct {
	Elapsed time.Duration
	// Due counts the events whose time has come; Written those committed
	// (a malformed row included, a redelivery once).
	Due, Written int64
	// MaxLag is the longest a transaction began behind the time of its
	// first event; LateBatches count those that began over LateAfter
	// behind. Nothing is dropped: a late writer only delays.
	MaxLag      time.Duration
	LateBatches int64
	Batches     int64
}

// LateAfter is how far behind its schedule a transaction counts as late.
const LateAfter = time.Second

// Summary is the outcome of a run.
type Summary struct {
	Counts
	ByType          map[string]int // events written by event_type (malformed rows apart)
	Malformed       int            // rows no stage can decode: dead-lettered
	Redelivered     int            // events produced twice
	LateCommits     int            // transactions held open before commit
	SkippedSessions int            // session arrivals that found every drawn user seated
	Rate            float64        // events written per second of the run
}

// DriveConfig is what Drive writes with.
type DriveConfig struct {
	Load   Load
	Writer Writer
	// Before, when set, sees each transaction's rows before Write (the
	// draws of lucky gifts); its time counts in the writer's lag.
	Before BeforeWrite
	// Oracle, when set, is fed every event written, in stream order.
	Oracle *OracleBuilder
	// Committed, when set, is called by a writer with each transaction it
	// committed (writers call it concurrently): a live view's counts, the
	// commit times the end-to-end latency is measured from.
	Committed func(Commit)
}

// Commit is one transaction a writer committed.
type Commit struct {
	Events []Event
	At     time.Time // when it committed
	// Behind is how long after the time of its first event it began (its
	// writer's lag behind the schedule; late over LateAfter).
	Behind time.Duration
}

// Drive writes s in wall-clock time: each event once the clock reaches its
// occurred_at, those due together in transactions of up to Load.Batch rows
// over Load.Writers concurrent writers. A room always goes to the same
// writer, which commits its transactions one after the other, so a room's
// rows are serial while rooms commit out of order. It returns when s ends,
// or with the first error of a writer (or ctx's), with the run's summary
// so far.
func Drive(ctx context.Context, s *Stream, cfg DriveConfig) (Summary, error) {
	ld := cfg.Load
	sum := Summary{ByType: map[string]int{}}
	var st driveState
	start := time.Now()
	if first := time.UnixMilli(s.startMs); first.After(start) {
		start = first // the run starts with its schedule
	}
	g, gctx := errgroup.WithContext(ctx)
	queues := make([]chan []Event, ld.Writers)
	for i := range queues {
		queues[i] = make(chan []Event, 1)
		r := rand.New(rand.NewPCG(s.sc.Seed, uint64(i)))
		g.Go(func() error {
			for evs := range queues[i] {
				hold := time.Duration(0)
				if ld.LateCommitShare > 0 && r.Float64() < ld.LateCommitShare {
					hold = ld.LateCommitHold
					st.lateCommits.Add(1)
				}
				if err := st.write(gctx, cfg, evs, hold); err != nil {
					return err
				}
			}
			return nil
		})
	}
	pending := make([][]Event, ld.Writers)
	send := func(w int) error {
		if len(pending[w]) == 0 {
			return nil
		}
		select {
		case queues[w] <- pending[w]:
			pending[w] = nil
			return nil
		case <-gctx.Done():
			return context.Cause(gctx)
		}
	}
	flush := func() error {
		for w := range pending {
			if err := send(w); err != nil {
				return err
			}
		}
		return nil
	}
	err := func() error {
		for e, ok := s.Next(); ok; e, ok = s.Next() {
			if wait := time.Until(time.UnixMilli(e.Envelope.OccurredAtMs)); wait > 0 {
				if err := flush(); err != nil {
					return err
				}
				if err := sleep(gctx, wait); err != nil {
					return err
				}
			}
			st.due.Add(1)
			switch {
			case e.Malformed:
				sum.Malformed++
			default:
				sum.ByType[e.Envelope.EventType]++
			}
			if e.Redelivered {
				sum.Redelivered++
			}
			if cfg.Oracle != nil {
				if st.due.Load()%4096 == 0 {
					cfg.Oracle.Expire(e.Envelope.OccurredAtMs)
				}
				cfg.Oracle.Add(e.Payload)
				if e.Redelivered {
					cfg.Oracle.Add(e.Payload) // as verify reads it: twice
				}
			}
			w := shard(e.Envelope.RoomId, ld.Writers)
			pending[w] = append(pending[w], e)
			if len(pending[w]) >= ld.Batch {
				if err := send(w); err != nil {
					return err
				}
			}
		}
		return flush()
	}()
	for _, q := range queues {
		close(q)
	}
	if werr := g.Wait(); werr != nil {
		err = werr // a writer's error is why the dispatcher stopped
	}
	sum.Counts = st.counts(start)
	sum.LateCommits = int(st.lateCommits.Load())
	sum.SkippedSessions = s.SkippedSessions
	sum.Rate = float64(sum.Written) / sum.Elapsed.Seconds()
	return sum, err
}

// shard is the writer of room: the same for every row of the room.
func shard(room string, writers int) int {
	h := fnv.New32a()
	h.Write([]byte(room))
	return int(h.Sum32() % uint32(writers))
}

// driveState is what the writers count.
type driveState struct {
	due, written, batches, late, lateCommits atomic.Int64
	mu                                       sync.Mutex
	maxLag                                   time.Duration
}

func (st *driveState) write(ctx context.Context, cfg DriveConfig, evs []Event, hold time.Duration) error {
	if cfg.Before != nil {
		if err := cfg.Before(ctx, evs); err != nil {
			return err
		}
	}
	lag := time.Since(time.UnixMilli(evs[0].Envelope.OccurredAtMs))
	if err := cfg.Writer.Write(ctx, evs, hold); err != nil {
		return err
	}
	if cfg.Committed != nil {
		cfg.Committed(Commit{Events: evs, At: time.Now(), Behind: lag})
	}
	st.written.Add(int64(len(evs)))
	st.batches.Add(1)
	if lag > LateAfter {
		st.late.Add(1)
	}
	st.mu.Lock()
	st.maxLag = max(st.maxLag, lag)
	st.mu.Unlock()
	return nil
}

func (st *driveState) counts(start time.Time) Counts {
	st.mu.Lock()
	defer st.mu.Unlock()
	return Counts{Elapsed: time.Since(start), Due: st.due.Load(), Written: st.written.Load(),
		MaxLag: st.maxLag, LateBatches: st.late.Load(), Batches: st.batches.Load()}
}

// sleep waits d or until ctx ends (its cause then).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
