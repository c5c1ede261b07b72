package backoff

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

func TestCeiling(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		attempt int
		want    time.Duration
	}{
		{"default first", Config{}, 1, time.Second},
		{"attempt 0 is the first", Config{}, 0, time.Second},
		{"negative attempt is the first", Config{}, -3, time.Second},
		{"doubles", Config{}, 2, 2 * time.Second},
		{"doubles again", Config{}, 4, 8 * time.Second},
		{"last below the cap", Config{}, 9, 256 * time.Second},
		{"capped at 5m", Config{}, 10, 5 * time.Minute},
		{"stays capped, no overflow", Config{}, 10_000, 5 * time.Minute},
		{"own first and max", Config{First: 100 * time.Millisecond, Max: time.Second}, 4, 800 * time.Millisecond},
		{"own cap reached", Config{First: 100 * time.Millisecond, Max: time.Second}, 5, time.Second},
		{"multiplier 3", Config{Multiplier: 3}, 3, 9 * time.Second},
		{"multiplier 1 is constant", Config{Multiplier: 1}, 50, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Ceiling(tc.attempt); got != tc.want {
				t.Fatalf("Ceiling(%d) = %s, want %s", tc.attempt, got, tc.want)
			}
		})
	}
}

func TestDelayFullJitterStaysUnderCeilingAndSpreads(t *testing.T) {
	b, err := New(Config{Source: rand.NewPCG(1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 12; attempt++ {
		c := b.Ceiling(attempt)
		var lowHalf, highHalf int
		for range 2000 {
			d := b.Delay(attempt)
			if d < 0 || d > c {
				t.Fatalf("Delay(%d) = %s outside [0, %s]", attempt, d, c)
			}
			if d < c/2 {
				lowHalf++
			} else {
				highHalf++
			}
		}
		// Uniform over [0, c]: both halves get about 1000 of 2000.
		if lowHalf < 850 || highHalf < 850 {
			t.Fatalf("attempt %d: %d delays below half the ceiling, %d above: not uniform", attempt, lowHalf, highHalf)
		}
	}
}

func TestDelaySeededSourceRepeats(t *testing.T) {
	draw := func(seed uint64) []time.Duration {
		b, err := New(Config{Source: rand.NewPCG(seed, 7)})
		if err != nil {
			t.Fatal(err)
		}
		var out []time.Duration
		for a := 1; a <= 20; a++ {
			out = append(out, b.Delay(a))
		}
		return out
	}
	if a, b := draw(42), draw(42); !slices.Equal(a, b) {
		t.Fatalf("same seed, different delays:\n%v\n%v", a, b)
	}
	if a, b := draw(42), draw(43); slices.Equal(a, b) {
		t.Fatalf("different seeds, same delays: %v", a)
	}
}

func TestDelayNoJitterIsTheCeiling(t *testing.T) {
	b, err := New(Config{NoJitter: true})
	if err != nil {
		t.Fatal(err)
	}
	for a := 1; a <= 12; a++ {
		if d, c := b.Delay(a), b.Ceiling(a); d != c {
			t.Fatalf("Delay(%d) = %s, want the ceiling %s", a, d, c)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		keys []string
	}{
		{"zero is the default", Config{}, nil},
		{"negative first", Config{First: -time.Second}, []string{"first"}},
		{"negative max", Config{Max: -time.Second}, []string{"max"}},
		{"max below first", Config{First: time.Minute, Max: time.Second}, []string{"max"}},
		{"max below default first", Config{Max: time.Millisecond}, []string{"max"}},
		{"multiplier below 1", Config{Multiplier: 0.5}, []string{"multiplier"}},
		{"all at once", Config{First: -1, Multiplier: -2}, []string{"first", "multiplier"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if got := cfgerr.Keys(err); !slices.Equal(got, tc.keys) {
				t.Fatalf("Validate keys = %v, want %v (err %v)", got, tc.keys, err)
			}
			if _, nerr := New(tc.cfg); (nerr != nil) != (len(tc.keys) > 0) {
				t.Fatalf("New error = %v, want error %v", nerr, len(tc.keys) > 0)
			}
		})
	}
}

// A JitterFraction keeps the delay in [ceiling·(1−f), ceiling] and still
// spreads it; Jitter applies it to a ceiling the caller computed.
func TestJitterFraction(t *testing.T) {
	b, err := New(Config{First: time.Second, Max: 8 * time.Second, JitterFraction: 0.5, Source: rand.NewPCG(3, 4)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []time.Duration{time.Second, 3 * time.Second, 8 * time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := b.Jitter(c)
			if d < c/2 || d > c {
				t.Fatalf("Jitter(%s) = %s outside [%s, %s]", c, d, c/2, c)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Fatalf("Jitter(%s): only %d distinct delays in 200", c, len(seen))
		}
	}
	for a := 1; a <= 5; a++ {
		if d, c := b.Delay(a), b.Ceiling(a); d < c/2 || d > c {
			t.Fatalf("Delay(%d) = %s outside [%s, %s]", a, d, c/2, c)
		}
	}
	if d := b.Jitter(0); d != 0 {
		t.Fatalf("Jitter(0) = %s", d)
	}
	nj := MustNew(Config{NoJitter: true, JitterFraction: 0.5})
	if d := nj.Jitter(3 * time.Second); d != 3*time.Second {
		t.Fatalf("NoJitter: Jitter = %s, want the ceiling", d)
	}
	for _, f := range []float64{-0.1, 1.5} {
		if _, err := New(Config{JitterFraction: f}); err == nil || !strings.Contains(err.Error(), "jitter_fraction") {
			t.Fatalf("JitterFraction %g: %v", f, err)
		}
	}
}

// Full jitter (the default) draws what it always drew from a seeded source:
// the lucky outbox's seeded schedules repeat across versions.
func TestFullJitterUnchanged(t *testing.T) {
	b, _ := New(Config{Source: rand.NewPCG(1, 2)})
	r := rand.New(rand.NewPCG(1, 2))
	for a := 1; a <= 10; a++ {
		c := b.Ceiling(a)
		if d, want := b.Delay(a), time.Duration(r.Int64N(int64(c)+1)); d != want {
			t.Fatalf("Delay(%d) = %s, want %s", a, d, want)
		}
	}
}
