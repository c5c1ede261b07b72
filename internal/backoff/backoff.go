// Package backoff computes retry delays: exponential growth with "full
// jitter" (AWS Architecture Blog, "Exponential Backoff And Jitter"), or a
// narrower jitter under the ceiling (Config.JitterFraction). The
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
	// jitter as JitterFraction says.
	NoJitter bool
	// JitterFraction is how much of the ceiling the jitter may take off:
	// a delay is uniform in [ceiling·(1−JitterFraction), ceiling]. In
	// (0, 1]; default 0 means 1, full jitter. A retry loop that must keep
	// most of its wait (a restart that must not hammer, a loop whose
	// ceiling is also its floor) takes 0.5 ("equal jitter") or less.
	JitterFraction float64
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
	cfgerr.Default(&c.JitterFraction, 1)
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
	if c.JitterFraction < 0 || c.JitterFraction > 1 {
		ch.Bad("jitter_fraction", "must be in (0, 1], or 0 for full jitter (got %g)", c.JitterFraction)
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

// Delay is the delay before retry attempt (1 = the first retry):
// Jitter(Ceiling(attempt)).
func (b *Backoff) Delay(attempt int) time.Duration { return b.Jitter(b.Ceiling(attempt)) }

// Jitter draws a delay under ceiling, uniform in
// [ceiling·(1−JitterFraction), ceiling] (ceiling itself with NoJitter or a
// ceiling <= 0), for retry loops that compute their own ceilings (a
// doubling kept per partition, a fixed wait): the loops that fail together
// then do not retry together.
func (b *Backoff) Jitter(ceiling time.Duration) time.Duration {
	if b.cfg.NoJitter || ceiling <= 0 {
		return max(ceiling, 0)
	}
	span := int64(float64(ceiling) * b.cfg.JitterFraction)
	b.mu.Lock()
	defer b.mu.Unlock()
	return ceiling - time.Duration(span) + time.Duration(b.rnd.Int64N(span+1))
}

// MustNew is New for a Config fixed in the code: it panics when cfg does
// not validate, a programming error.
func MustNew(cfg Config) *Backoff {
	b, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return b
}
