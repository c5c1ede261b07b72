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
// limit. A grant is taken at the instant the call starts, never booked in
// the future: a caller held back by its own busy group never holds an app
// slot that other groups could use, and a caller delayed by the scheduler
// is accounted at its real start.
type Pacer struct {
	mu       sync.Mutex
	window   time.Duration
	appLimit int
	grpLimit int
	// appRate is the app limit in force in calls per second (SetAppRate;
	// initially appLimit), appWindow the window the app logs count in:
	// window, or longer for a rate under one call per window. 0: no grant.
	appRate   float64
	appWindow time.Duration
	// raiseTo, when raiseAt is set, is a higher rate SetAppRate asked for;
	// it takes effect at raiseAt, one window later (see SetAppRate).
	raiseTo float64
	raiseAt time.Time
	app     ring
	groups  map[string]*ring
	// sent logs the instants grants were actually used: a caller woken
	// late (scheduler, GC) must not push more calls into a window than the
	// limit, which booking alone cannot see.
	sent    ring
	grpSent map[string]*ring
	now     func() time.Time
	sweepAt time.Time
	// pausedUntil holds every grant back after Tencent asked us to slow
	// down (rate-limit codes) or locked the admin account (70050).
	pausedUntil time.Time
}

// Pause holds every grant back until now+d (extending, never shortening,
// a pause already in force). It reports whether no pause was in force.
func (p *Pacer) Pause(d time.Duration) (started bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	started = !now.Before(p.pausedUntil)
	if until := now.Add(d); until.After(p.pausedUntil) {
		p.pausedUntil = until
	}
	return started
}

type ring struct {
	at   []time.Time
	next int
}

func newRing(n int) ring { return ring{at: make([]time.Time, n)} }

// resize keeps the newest n grants (fewer: the rest are free slots).
func (r *ring) resize(n int) {
	old := len(r.at)
	ordered := make([]time.Time, 0, max(n, old)) // oldest first
	for i := range old {
		ordered = append(ordered, r.at[(r.next+i)%old])
	}
	if n < old {
		ordered = ordered[old-n:]
	} else {
		ordered = append(make([]time.Time, n-old, n), ordered...)
	}
	r.at, r.next = ordered, 0
}

// free is when one more grant fits: the oldest of the last N plus window.
func (r *ring) free(window time.Duration) time.Time { return r.at[r.next].Add(window) }

func (r *ring) newest() time.Time { return r.at[(r.next+len(r.at)-1)%len(r.at)] }

func (r *ring) take(t time.Time) {
	r.at[r.next] = t
	r.next = (r.next + 1) % len(r.at)
}

// NewPacer returns a pacer allowing appLimit calls and groupLimit calls per
// group in any window (one second plus a small guard against network
// jitter reordering arrivals at the server).
func NewPacer(appLimit, groupLimit int, window time.Duration) *Pacer {
	return &Pacer{window: window, appLimit: appLimit, grpLimit: groupLimit,
		appRate: float64(appLimit), appWindow: window,
		app: newRing(appLimit), groups: map[string]*ring{}, now: time.Now,
		sent: newRing(appLimit), grpSent: map[string]*ring{}}
}

// SetAppRate changes the app limit to rate calls per second (0 or less:
// no grant at all), so that replicas that split an app limit among
// themselves stay under it together while their split changes. A lower
// rate applies at once: the grants of the last window beyond it hold the
// next ones back. A higher rate applies one window after the last change,
// so a replica that gains capacity another gave up never uses it while
// the other's grants of the last window still count at Tencent: at every
// instant each replica's limit is at most what it held throughout the
// window before, and the replicas' shares at any one instant add up to at
// most the whole. A rate under one call per window grants one call per
// window/rate.
func (p *Pacer) SetAppRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rate = max(rate, 0)
	p.raiseAt = time.Time{}
	if rate <= p.appRate {
		p.setRate(rate)
		return
	}
	p.raiseTo, p.raiseAt = rate, p.now().Add(p.window)
}

// AppRate is the app limit in force, in calls per second.
func (p *Pacer) AppRate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.raise(p.now())
	return p.appRate
}

// raise applies a pending higher rate once it is due.
func (p *Pacer) raise(now time.Time) {
	if !p.raiseAt.IsZero() && !now.Before(p.raiseAt) {
		p.raiseAt = time.Time{}
		p.setRate(p.raiseTo)
	}
}

func (p *Pacer) setRate(rate float64) {
	p.appRate = rate
	if rate <= 0 {
		return // the logs stay; Reserve grants nothing
	}
	n := max(1, int(rate)) // floor(rate) calls per window
	p.appWindow = p.window
	if rate < 1 {
		p.appWindow = time.Duration(float64(p.window) / rate)
	}
	p.app.resize(n)
	p.sent.resize(n)
}

// Reserve books a grant for group. When the group has room now, it books
// the next free app slot (at or after now) for both logs and returns it
// with ok; the caller starts its call at that instant. When the group is
// full it books nothing and returns when to ask again: a caller held back
// by its own busy group never holds an app slot other groups could use,
// and app slots are handed out in order, so waiters wake one at a time.
func (p *Pacer) Reserve(group string) (at time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	g := p.groups[group]
	if g == nil {
		r := newRing(p.grpLimit)
		g = &r
		p.groups[group] = g
	}
	if p.pausedUntil.After(now) {
		return p.pausedUntil, false
	}
	p.raise(now)
	if p.appRate <= 0 {
		if !p.raiseAt.IsZero() {
			return p.raiseAt, false
		}
		return now.Add(p.window / 10), false // ask again: SetAppRate may raise it
	}
	if gf := g.free(p.window); gf.After(now) {
		return gf, false
	}
	t := now
	if a := p.app.free(p.appWindow); a.After(t) {
		t = a
	}
	if l := p.app.newest(); l.After(t) {
		t = l
	}
	g.take(t)
	p.app.take(t)
	if now.After(p.sweepAt) {
		// Forget groups idle for a whole window: their log no longer
		// constrains anything.
		for k, r := range p.groups {
			if now.Sub(r.newest()) > p.window {
				delete(p.groups, k)
			}
		}
		for k, r := range p.grpSent {
			if now.Sub(r.newest()) > p.window {
				delete(p.grpSent, k)
			}
		}
		p.sweepAt = now.Add(10 * time.Second)
	}
	return t, true
}

// confirm records that a booked grant for group is used now, or returns
// how long to wait when the calls actually started in the last window
// already reach a limit (the caller woke late and others went on time).
func (p *Pacer) confirm(group string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.raise(now)
	if p.appRate <= 0 {
		return p.window / 10 // the rate dropped to nothing since the booking
	}
	g := p.grpSent[group]
	if g == nil {
		r := newRing(p.grpLimit)
		g = &r
		p.grpSent[group] = g
	}
	t := g.free(p.window)
	if a := p.sent.free(p.appWindow); a.After(t) {
		t = a
	}
	if t.After(now) {
		return t.Sub(now)
	}
	g.take(now)
	p.sent.take(now)
	return 0
}

// Wait blocks until a grant for group starts, or ctx is done (a booked
// slot is then lost, which only ever errs on the slow side). It returns
// the time spent waiting.
func (p *Pacer) Wait(ctx context.Context, group string) (time.Duration, error) {
	start := time.Now()
	sleep := func(d time.Duration) error {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tm.C:
			return nil
		}
	}
	for {
		at, ok := p.Reserve(group)
		if d := time.Until(at); d > 0 {
			if err := sleep(d); err != nil {
				return time.Since(start), err
			}
		}
		if !ok {
			continue
		}
		for {
			d := p.confirm(group)
			if d <= 0 {
				return time.Since(start), nil
			}
			if err := sleep(d); err != nil {
				return time.Since(start), err
			}
		}
	}
}

// SetClock replaces the clock (tests).
func (p *Pacer) SetClock(now func() time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = now
}
