package tencentim

import (
	"context"
	"sync"
	"time"
)

// Pacer spaces calls so that no window of Window length holds more than
// the app limit of calls overall or the group limit of calls to one group
// (Tencent: 200 send_group_msg calls/s per SDKAppID, 40 messages/s per
// group; over the group limit messages are silently dropped).
//
// It keeps the start times of the last N grants (a sliding-window log), so
// bursts up to the limit go out at once and latency stays low below the
// limit. Grants are reserved under one lock, so concurrent callers get
// distinct slots. A granted slot that the caller abandons (context done)
// is simply lost, which only ever errs on the slow side.
type Pacer struct {
	mu       sync.Mutex
	window   time.Duration
	appLimit int
	grpLimit int
	app      ring
	groups   map[string]*ring
	now      func() time.Time
	sweepAt  time.Time
}

type ring struct {
	at   []time.Time
	next int
	last time.Time
}

func newRing(n int) ring { return ring{at: make([]time.Time, n)} }

// earliest is the first instant >= t at which one more grant fits.
func (r *ring) earliest(t time.Time, window time.Duration) time.Time {
	if oldest := r.at[r.next].Add(window); oldest.After(t) {
		t = oldest
	}
	if r.last.After(t) {
		t = r.last
	}
	return t
}

func (r *ring) take(t time.Time) {
	r.at[r.next] = t
	r.next = (r.next + 1) % len(r.at)
	r.last = t
}

// NewPacer returns a pacer allowing appLimit calls and groupLimit calls per
// group in any window (one second plus a small guard against network
// jitter reordering arrivals at the server).
func NewPacer(appLimit, groupLimit int, window time.Duration) *Pacer {
	return &Pacer{window: window, appLimit: appLimit, grpLimit: groupLimit,
		app: newRing(appLimit), groups: map[string]*ring{}, now: time.Now}
}

// Reserve books the next slot for group and returns when it starts.
func (p *Pacer) Reserve(group string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	g := p.groups[group]
	if g == nil {
		r := newRing(p.grpLimit)
		g = &r
		p.groups[group] = g
	}
	t := g.earliest(now, p.window)
	t = p.app.earliest(t, p.window)
	g.take(t)
	p.app.take(t)
	if now.After(p.sweepAt) {
		// Forget groups idle for a whole window: their log no longer
		// constrains anything.
		for k, r := range p.groups {
			if now.Sub(r.last) > p.window {
				delete(p.groups, k)
			}
		}
		p.sweepAt = now.Add(10 * time.Second)
	}
	return t
}

// Wait blocks until a slot for group starts, or ctx is done.
func (p *Pacer) Wait(ctx context.Context, group string) (time.Duration, error) {
	t := p.Reserve(group)
	d := time.Until(t)
	if d <= 0 {
		return 0, ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return d, ctx.Err()
	case <-tm.C:
		return d, nil
	}
}
