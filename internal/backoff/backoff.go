// Package backoff computes retry delays: exponential growth with "full
// jitter" (AWS Architecture Blog, "Exponential Backoff And Jitter"). The
// ceiling of retry n is First·Multiplier^(n-1), capped at Max; the delay is
// drawn uniformly from [0, ceiling]. Full jitter spreads the retries of
// many rows that failed together (a wallet outage) over the whole window
// instead of sending them back in one wave.
//
// It is a few lines of our own rather than a library: the maintained ones
// (cenkalti/backoff) jitter around the ceiling instead of under it and draw
// from a global source, while roomflow wants full jitter and a seeded
// source, so tests and chaos runs repeat exactly.
package backoff

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// Defaults of Config (issue 16: first retry after 1 s, doubling, at most
// 5 min).
const (
	DefaultFirst      = time.Second
	DefaultMax        = 5 * time.Minute
	DefaultMultiplier = 2.0
)

// Config is a backoff policy. The zero value is the default policy: full
// jitter under 1s, 2s, 4s, ... 5m.
type Config struct {
	// First is the ceiling of the first retry's delay. Default 1s.
	First time.Duration
	// Max caps every ceiling. Default 5m; at least First.
	Max time.Duration
	// Multiplier is the ceiling's growth per retry. Default 2; >= 1.
	Multiplier float64
	// NoJitter makes every delay its ceiling (deterministic schedules:
	// operators' tools, tests of the schedule itself). Default false:
	// full jitter.
	NoJitter bool
	// Source draws the jitter. Default nil: a source seeded at random.
	// Tests pass a seeded one (rand.NewPCG(1, 2)) to repeat a run; the
	// Backoff serializes its use, so it need not be safe for concurrent
	// use.
	Source rand.Source
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.First, DefaultFirst)
	cfgerr.Default(&c.Max, DefaultMax)
	cfgerr.Default(&c.Multiplier, DefaultMultiplier)
}

// Validate reports every invalid field, keyed by its snake-case name.
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.PositiveDuration("first", c.First)
	ch.PositiveDuration("max", c.Max)
	if c.First > 0 && c.Max > 0 && c.Max < c.First {
		ch.Bad("max", "must be at least first (%s), got %s", c.First, c.Max)
	}
	if c.Multiplier < 1 {
		ch.Bad("multiplier", "must be >= 1 (got %g)", c.Multiplier)
	}
	return ch.Err()
}

// Backoff draws retry delays under a Config. It is safe for concurrent
// use.
type Backoff struct {
	cfg Config
	mu  sync.Mutex
	rnd *rand.Rand
}

// New returns a Backoff for cfg after filling its defaults; it fails with
// cfg's Validate errors.
func New(cfg Config) (*Backoff, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	src := cfg.Source
	if src == nil {
		src = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	return &Backoff{cfg: cfg, rnd: rand.New(src)}, nil
}

// Ceiling is the longest delay of retry attempt (1 = the first retry):
// First·Multiplier^(attempt-1), capped at Max. attempt < 1 counts as 1.
func (b *Backoff) Ceiling(attempt int) time.Duration {
	d := float64(b.cfg.First)
	for i := 1; i < attempt && d < float64(b.cfg.Max); i++ {
		d *= b.cfg.Multiplier
	}
	return time.Duration(min(d, float64(b.cfg.Max)))
}

// Delay is the delay before retry attempt (1 = the first retry): uniform in
// [0, Ceiling(attempt)] with full jitter, Ceiling(attempt) without.
func (b *Backoff) Delay(attempt int) time.Duration {
	c := b.Ceiling(attempt)
	if b.cfg.NoJitter {
		return c
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Duration(b.rnd.Int64N(int64(c) + 1))
}
