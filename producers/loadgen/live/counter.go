package live

import (
	"math"
	"sync/atomic"
	"time"
)

// Counter is what the writer reports while it runs: events committed, the
// events the run will write, the rate asked (it changes during a ramp)
// and the batches it committed behind their schedule. Safe for concurrent
// use; the zero value is ready.
type Counter struct {
	written, target, lateBatches, lateMax atomic.Int64
	rate                                  atomic.Uint64 // float64 bits
}

// Counts is a Counter read at one moment.
type Counts struct {
	Written int64 // events committed so far
	Target  int64 // events the run will write; 0: open-ended
	// TargetRate is the events/s asked now; 0: as fast as possible.
	TargetRate float64
	// LateBatches are transactions committed after their due time;
	// LateMax is the latest of them (the writers' lag behind schedule).
	LateBatches int64
	LateMax     time.Duration
}

// Add counts n events committed.
func (c *Counter) Add(n int) { c.written.Add(int64(n)) }

// SetTarget sets the events the run will write (0: unknown, no ETA).
func (c *Counter) SetTarget(n int64) { c.target.Store(n) }

// SetRate sets the events/s asked now (0: as fast as possible).
func (c *Counter) SetRate(perSecond float64) { c.rate.Store(math.Float64bits(perSecond)) }

// Late counts one transaction committed behind its due time by behind; a
// behind of 0 or less is on time and not counted.
func (c *Counter) Late(behind time.Duration) {
	if behind <= 0 {
		return
	}
	c.lateBatches.Add(1)
	for {
		cur := c.lateMax.Load()
		if int64(behind) <= cur || c.lateMax.CompareAndSwap(cur, int64(behind)) {
			return
		}
	}
}

// Counts reads the counter.
func (c *Counter) Counts() Counts {
	return Counts{Written: c.written.Load(), Target: c.target.Load(), TargetRate: math.Float64frombits(c.rate.Load()), LateBatches: c.lateBatches.Load(),
		LateMax: time.Duration(c.lateMax.Load())}
}
